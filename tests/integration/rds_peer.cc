// rds_peer: one RDS socket, a deterministic traffic plan, and per-pair SHA-256 bookkeeping.
//
// Built WITHOUT the shim (plain libc socket API on AF_RDS) and run under LD_PRELOAD by the
// integration drivers. One process = one socket bound to --bind ADDR:PORT.
//
// Traffic. Each session sends --count messages to every destination (round-robin). Message
// number `seq` (0, 1, ...) from src to dst is a pure function of (--seed, src, dst, seq): its
// size follows the "0 B ... 1 MiB" distribution below and its bytes are the first `size` bytes of
//   [28-byte header: "RDSp", src ip, src port, dst ip, dst port, seq, size][pseudo-random filler]
// so the receiver regenerates the expected message and reports the first lost, duplicated,
// reordered, misdelivered or corrupted message of every (src, dst) stream precisely.
// Both sides keep a running SHA-256 per pair over  u64le(size) || payload  for every message in
// order, and print one line per pair:
//   pair <src> <dst> count <n> sha256 <hex> dir tx|rx
//
// Sizes (seq): 0 -> 0 B, 1 -> max, 2 -> 1 B, seq%1000==250 -> 0 B, seq%1000==500 -> max;
// otherwise 90% in [0, 4096], 9% in [4097, 65536], 1% in [65537, max]; all clamped to --max-size.
//
// I/O modes: --io poll (default): O_NONBLOCK socket, one thread, poll() on EAGAIN/ENOBUFS.
//            --io threads: blocking socket, a sender thread and a receiver thread.
//
// Control (--control): stdin is a command channel, stdout the replies (one line each):
//   startup    -> "bound <addr>:<port>" (or "ready" with --bind-on-go, then bind at first go)
//   go [DEST...]  start a session (DESTs are added to --dest; seq and tx hashes restart at 0)
//   status     -> "status sent <n> received <n> errors <n>"
//   counters   -> "counter <name> <value>"... "counters-end"  (getsockopt RDS_INFO_COUNTERS)
//   quit / EOF -> drain what is still queued (counted as "extra"), close, exit
// After a session has sent everything and --expect messages have arrived, the pair lines and
// "done" are printed. Without --control the plan starts at once and the program exits when done.
// SIGUSR1 prints the counters as well.
//
// Options for flow-control tests (off by default; without them nothing above changes):
//   --recv-delay-us D  sleep D microseconds after every received message (a slow receiver)
//   --send-stats       count what sendto returned and how long each call took; before "done":
//                        "sendstats calls <n> enobufs <n> eagain <n> slow_calls <n> max_ms <x>
//                         total_ms <x> bytes <n>"  (slow = one call took >= 5 ms, i.e. it
//                         blocked; bytes = payload bytes of the messages sent)
//   --rxqueue-stats    before every receive, sample the bytes queued on this socket: with
//                      getsockopt(SOL_RDS, RDS_INFO_RECV_MESSAGES) (the sum of h_len of this
//                      socket's entries) if the library answers it, otherwise with
//                      RDS_INFO_COUNTERS (recv_bytes_added_to_sock - recv_bytes_freed_fromsock;
//                      this process has one socket); before "done":
//                        "rxqueue method info|counters max_bytes <n> samples <n>"
//
// Exit status: 0 ok, 1 usage/setup, 2 preload not loaded, 3 timeout, 4 bind failed,
//              5 verification errors or extra messages, 6 send buffer cannot hold --max-size.
// Debugging: RDS_PEER_TRACE_DIR=dir logs every send and receive to dir/trace-<pid>.txt.

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <functional>
#include <memory>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "preload_check.h"

namespace {

constexpr int kAfRds = 21;
constexpr int kSolRds = 276;
constexpr int kRdsInfoCounters = 10000;
constexpr size_t kRdsMaxMsg = 1048576;
constexpr size_t kHdrSize = 28;

// ---------------------------------------------------------------------------------------------
// Small utilities

std::mutex out_mu;
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void say(const char *fmt, ...) {
  std::lock_guard<std::mutex> lock(out_mu);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  fputc('\n', stdout);
  fflush(stdout);
}

const char *errname(int e) {
  const char *n = strerrorname_np(e);
  return n ? n : "E?";
}

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Addr {
  uint32_t ip = 0;    // host order
  uint16_t port = 0;  // host order
  uint64_t key() const { return (uint64_t{ip} << 16) | port; }
  std::string str() const {
    char b[32];
    snprintf(b, sizeof b, "%u.%u.%u.%u:%u", ip >> 24, (ip >> 16) & 255, (ip >> 8) & 255, ip & 255,
             port);
    return b;
  }
  sockaddr_in sin() const {
    sockaddr_in s{};
    s.sin_family = AF_INET;
    s.sin_addr.s_addr = htonl(ip);
    s.sin_port = htons(port);
    return s;
  }
};

bool parse_addr(const std::string &text, Addr *out) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  in_addr a{};
  if (inet_pton(AF_INET, text.substr(0, colon).c_str(), &a) != 1) return false;
  char *end = nullptr;
  unsigned long port = strtoul(text.c_str() + colon + 1, &end, 10);
  if (*end || port > 65535) return false;
  out->ip = ntohl(a.s_addr);
  out->port = static_cast<uint16_t>(port);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Deterministic messages

uint64_t splitmix(uint64_t &x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t msg_key(uint64_t seed, Addr src, Addr dst, uint64_t seq) {
  uint64_t x = seed ^ 0x5250454552ull;
  uint64_t k = splitmix(x) ^ src.key();
  k = splitmix(k) ^ dst.key();
  k = splitmix(k) ^ seq;
  return splitmix(k);
}

size_t msg_size(uint64_t seed, Addr src, Addr dst, uint64_t seq, size_t max) {
  size_t s;
  if (seq == 0 || seq % 1000 == 250) {
    s = 0;
  } else if (seq == 1 || seq % 1000 == 500) {
    s = max;
  } else if (seq == 2) {
    s = 1;
  } else {
    uint64_t r = msg_key(seed ^ 0x5153, src, dst, seq);
    uint64_t bucket = r % 100, v = r >> 8;
    if (bucket < 90) s = v % 4097;
    else if (bucket < 99) s = 4097 + v % (65536 - 4097 + 1);
    else s = 65537 + v % (kRdsMaxMsg - 65537 + 1);
  }
  return s < max ? s : max;
}

void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

void fill_msg(uint8_t *buf, size_t size, uint64_t seed, Addr src, Addr dst, uint64_t seq) {
  uint8_t hdr[kHdrSize];
  memcpy(hdr, "RDSp", 4);
  put_le(hdr + 4, src.ip, 4);
  put_le(hdr + 8, src.port, 2);
  put_le(hdr + 10, dst.ip, 4);
  put_le(hdr + 14, dst.port, 2);
  put_le(hdr + 16, seq, 8);
  put_le(hdr + 24, size, 4);
  memcpy(buf, hdr, size < kHdrSize ? size : kHdrSize);
  uint64_t x = msg_key(seed, src, dst, seq);
  size_t off = kHdrSize;
  for (; off + 8 <= size; off += 8) {
    uint64_t r = splitmix(x);
    memcpy(buf + off, &r, 8);
  }
  if (off < size) {
    uint64_t r = splitmix(x);
    memcpy(buf + off, &r, size - off);
  }
}

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256(const Sha256 &) = delete;
  Sha256 &operator=(const Sha256 &) = delete;
  void add_message(const uint8_t *p, size_t n) {
    uint8_t len[8];
    put_le(len, n, 8);
    EVP_DigestUpdate(ctx_, len, 8);
    if (n) EVP_DigestUpdate(ctx_, p, n);
  }
  std::string hex() const {  // of the stream so far (the context is copied)
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    EVP_MD_CTX_copy_ex(c, ctx_);
    unsigned char md[32];
    unsigned int len = 0;
    EVP_DigestFinal_ex(c, md, &len);
    EVP_MD_CTX_free(c);
    std::string s;
    char b[3];
    for (unsigned i = 0; i < len; i++) {
      snprintf(b, sizeof b, "%02x", md[i]);
      s += b;
    }
    return s;
  }

 private:
  EVP_MD_CTX *ctx_;
};

// ---------------------------------------------------------------------------------------------
// Options and state

struct Options {
  Addr bind;
  std::vector<Addr> dests;
  uint64_t count = 0;
  uint64_t expect = 0;
  uint64_t seed = 1;
  size_t max_size = kRdsMaxMsg;
  int sndbuf = 0;  // 0: 2 * max(max_size, 64 KiB)
  int rcvbuf = 4 << 20;
  bool control = false;
  bool threads = false;
  bool bind_on_go = false;
  int bind_retry_ms = 0;
  double timeout = 300;
  long recv_delay_us = 0;
  bool send_stats = false;
  bool rxqueue_stats = false;
};

struct TxStream {
  Addr dst;
  uint64_t sent = 0;
  Sha256 sha;
  explicit TxStream(Addr d) : dst(d) {}
};

struct RxStream {
  Addr src;
  uint64_t count = 0;
  bool broken = false;
  Sha256 sha;
};

Options opt;
// RDS_PEER_TRACE_DIR=dir: every successful send and every receive is logged (line-buffered) to
// dir/trace-<pid>.txt -- for debugging a failure, not used by the drivers.
FILE *trace_file = nullptr;
std::mutex trace_mu;
void trace(const char *dir, Addr peer, uint64_t seq, size_t size, const uint8_t *data) {
  if (!trace_file) return;
  std::lock_guard<std::mutex> lock(trace_mu);
  long long hseq = size >= kHdrSize && memcmp(data, "RDSp", 4) == 0 ? (long long)get_le(data + 16, 8) : -1;
  fprintf(trace_file, "%s %s seq %llu size %zu payload-seq %lld\n", dir, peer.str().c_str(),
          (unsigned long long)seq, size, hseq);
}
int fd = -1;
Addr me;
double deadline;
std::vector<std::unique_ptr<TxStream>> tx;  // current session
std::map<uint64_t, std::unique_ptr<RxStream>> rx;
std::mutex rx_mu;  // the receiver (thread) vs. summaries printed on timeout
std::atomic<uint64_t> sent_total{0}, rx_total{0}, extra_total{0}, errors{0};
volatile sig_atomic_t usr1 = 0;
std::vector<uint8_t> rbuf, ebuf, sbuf;
bool session_active = false;

// --send-stats
std::atomic<uint64_t> st_calls{0}, st_enobufs{0}, st_eagain{0}, st_slow{0};
std::atomic<uint64_t> st_max_us{0}, st_total_us{0}, st_bytes{0};
// --rxqueue-stats
constexpr int kRdsInfoRecvMessages = 10005;
constexpr size_t kRdsInfoMessageSize = 26;  // struct rds_info_message (packed)
int rxq_method = 0;                         // 0 unknown, 1 info, 2 counters, -1 failed
uint64_t rxq_max = 0, rxq_samples = 0;

void fail_setup(const char *what) {
  say("fatal %s %s", what, errname(errno));
  exit(1);
}

// ---------------------------------------------------------------------------------------------
// Receive side

void on_message(Addr src, const uint8_t *data, size_t len, int flags, socklen_t namelen,
                int family) {
  if (namelen != sizeof(sockaddr_in) || family != AF_INET) {
    errors++;
    say("error rx bad-msg_name namelen %u family %d", namelen, family);
  }
  std::lock_guard<std::mutex> lock(rx_mu);
  rx_total++;
  auto &slot = rx[src.key()];
  if (!slot) {
    slot = std::make_unique<RxStream>();
    slot->src = src;
  }
  RxStream &s = *slot;
  uint64_t seq = s.count;
  if (rx_total > opt.expect) {
    extra_total++;
    if (extra_total == 1) say("error rx %s %s more messages than --expect %llu", src.str().c_str(),
                              me.str().c_str(), (unsigned long long)opt.expect);
  }
  if (!s.broken) {
    size_t esize = msg_size(opt.seed, src, me, seq, opt.max_size);
    fill_msg(ebuf.data(), esize, opt.seed, src, me, seq);
    std::string why;
    if (flags & MSG_TRUNC) {
      why = "MSG_TRUNC set (len " + std::to_string(len) + ")";
    } else if (len == esize && memcmp(data, ebuf.data(), len) == 0) {
      // fine
    } else if (len >= kHdrSize && memcmp(data, "RDSp", 4) == 0) {
      Addr hs{static_cast<uint32_t>(get_le(data + 4, 4)), static_cast<uint16_t>(get_le(data + 8, 2))};
      Addr hd{static_cast<uint32_t>(get_le(data + 10, 4)),
              static_cast<uint16_t>(get_le(data + 14, 2))};
      uint64_t gseq = get_le(data + 16, 8);
      char b[256];
      if (hs.key() != src.key())
        snprintf(b, sizeof b, "payload is from %s but msg_name says %s (payload seq %llu)",
                 hs.str().c_str(), src.str().c_str(), (unsigned long long)gseq);
      else if (hd.key() != me.key())
        snprintf(b, sizeof b, "misdelivered: payload is for %s (seq %llu)", hd.str().c_str(),
                 (unsigned long long)gseq);
      else if (gseq > seq)
        snprintf(b, sizeof b, "LOST seq %llu..%llu (got seq %llu)", (unsigned long long)seq,
                 (unsigned long long)gseq - 1, (unsigned long long)gseq);
      else if (gseq < seq)
        snprintf(b, sizeof b, "DUPLICATE or REORDERED: got seq %llu", (unsigned long long)gseq);
      else {
        size_t k = 0;
        while (k < len && k < esize && data[k] == ebuf[k]) k++;
        snprintf(b, sizeof b, "CORRUPT: len %zu expected %zu, first difference at byte %zu", len,
                 esize, k);
      }
      why = b;
    } else {
      // Too short to carry the header: look for the message among the neighbouring seqs.
      why = "unrecognised payload of " + std::to_string(len) + " bytes (expected " +
            std::to_string(esize) + ")";
      for (uint64_t d = 1; d <= 64; d++) {
        for (int sign : {1, -1}) {
          if (sign < 0 && d > seq) continue;
          uint64_t g = sign > 0 ? seq + d : seq - d;
          size_t gs = msg_size(opt.seed, src, me, g, opt.max_size);
          if (gs != len) continue;
          fill_msg(ebuf.data(), gs, opt.seed, src, me, g);
          if (memcmp(data, ebuf.data(), len) != 0) continue;
          char b[160];
          if (sign > 0)
            snprintf(b, sizeof b, "LOST seq %llu..%llu (got the %zu-byte message seq %llu)",
                     (unsigned long long)seq, (unsigned long long)g - 1, len, (unsigned long long)g);
          else
            snprintf(b, sizeof b, "DUPLICATE or REORDERED: got the %zu-byte message seq %llu", len,
                     (unsigned long long)g);
          why = b;
          d = 65;
          break;
        }
      }
    }
    if (!why.empty()) {
      s.broken = true;
      errors++;
      say("error rx %s %s expected-seq %llu: %s", src.str().c_str(), me.str().c_str(),
          (unsigned long long)seq, why.c_str());
    }
  }
  trace("rx", src, seq, len, data);
  s.sha.add_message(data, len);
  s.count++;
}

// One recvmsg. Returns 1 on a message, 0 on EAGAIN, -errno on a real error.
void sample_rxqueue();
int receive_one(int flags) {
  if (opt.rxqueue_stats) sample_rxqueue();
  sockaddr_in from{};
  iovec iov{rbuf.data(), rbuf.size()};
  msghdr mh{};
  mh.msg_name = &from;
  mh.msg_namelen = sizeof from;
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  ssize_t n = recvmsg(fd, &mh, flags);
  if (n < 0) {
    if (errno == EAGAIN) return 0;
    return -errno;
  }
  Addr src{ntohl(from.sin_addr.s_addr), ntohs(from.sin_port)};
  on_message(src, rbuf.data(), static_cast<size_t>(n), mh.msg_flags, mh.msg_namelen,
             from.sin_family);
  if (opt.recv_delay_us > 0) usleep(static_cast<useconds_t>(opt.recv_delay_us));
  return 1;
}

// ---------------------------------------------------------------------------------------------
// Send side

struct Prepared {
  size_t dest = SIZE_MAX;
  uint64_t seq = 0;
  size_t size = 0;
};
Prepared prepared;

// Returns 0 when sent, else the errno.
int send_next(size_t d) {
  TxStream &t = *tx[d];
  if (prepared.dest != d || prepared.seq != t.sent) {
    prepared.dest = d;
    prepared.seq = t.sent;
    prepared.size = msg_size(opt.seed, me, t.dst, t.sent, opt.max_size);
    fill_msg(sbuf.data(), prepared.size, opt.seed, me, t.dst, t.sent);
  }
  sockaddr_in to = t.dst.sin();
  double t0 = opt.send_stats ? now_s() : 0;
  ssize_t n = sendto(fd, sbuf.data(), prepared.size, 0, reinterpret_cast<sockaddr *>(&to), sizeof to);
  int send_errno = errno;
  if (opt.send_stats) {
    uint64_t us = static_cast<uint64_t>((now_s() - t0) * 1e6);
    st_calls++;
    st_total_us += us;
    if (us >= 5000) st_slow++;
    uint64_t m = st_max_us.load();
    while (us > m && !st_max_us.compare_exchange_weak(m, us)) {
    }
    if (n < 0 && send_errno == ENOBUFS) st_enobufs++;
    if (n < 0 && send_errno == EAGAIN) st_eagain++;
    if (n >= 0) st_bytes += static_cast<uint64_t>(n);
  }
  errno = send_errno;
  if (n < 0) return errno;
  if (static_cast<size_t>(n) != prepared.size) {
    say("fatal short-send %zd of %zu", n, prepared.size);
    exit(1);
  }
  trace("tx", t.dst, t.sent, prepared.size, sbuf.data());
  t.sha.add_message(sbuf.data(), prepared.size);
  t.sent++;
  sent_total++;
  return 0;
}

bool session_sent() {
  for (auto &t : tx)
    if (t->sent < opt.count) return false;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Counters, summary, commands

void print_counters() {
  std::vector<uint8_t> buf(64 * 40);
  for (int attempt = 0; attempt < 8; attempt++) {
    socklen_t len = static_cast<socklen_t>(buf.size());
    int r = getsockopt(fd, kSolRds, kRdsInfoCounters, buf.data(), &len);
    if (r < 0 && errno == ENOSPC && len > buf.size()) {
      buf.resize(len);
      continue;
    }
    if (r < 0) {
      say("counters-error %s", errname(errno));
      say("counters-end");
      return;
    }
    if (r != 40) say("counters-warning item-size %d", r);
    for (size_t off = 0; off + 40 <= len; off += 40) {
      char name[33];
      memcpy(name, buf.data() + off, 32);
      name[32] = '\0';
      uint64_t value;
      memcpy(&value, buf.data() + off + 32, 8);
      say("counter %s %llu", name, (unsigned long long)value);
    }
    say("counters-end");
    return;
  }
  say("counters-error ENOSPC-loop");
  say("counters-end");
}

// --rxqueue-stats: one sample of the bytes queued on this socket (see the header comment).
// Returns false if neither RDS_INFO_RECV_MESSAGES nor RDS_INFO_COUNTERS can be read.
bool rxqueue_by_info(uint64_t *out) {
  static std::vector<uint8_t> buf(64 * kRdsInfoMessageSize);
  for (int attempt = 0; attempt < 8; attempt++) {
    socklen_t len = static_cast<socklen_t>(buf.size());
    int r = getsockopt(fd, kSolRds, kRdsInfoRecvMessages, buf.data(), &len);
    if (r < 0 && errno == ENOSPC && len > buf.size()) {
      buf.resize(len + 64 * kRdsInfoMessageSize);
      continue;
    }
    if (r < 0) return false;
    uint64_t sum = 0;
    for (size_t off = 0; off + kRdsInfoMessageSize <= len; off += kRdsInfoMessageSize) {
      const uint8_t *m = buf.data() + off;
      uint32_t mlen, laddr;
      uint16_t lport;
      memcpy(&mlen, m + 8, 4);
      memcpy(&laddr, m + 12, 4);
      memcpy(&lport, m + 20, 2);
      if (ntohl(laddr) == me.ip && ntohs(lport) == me.port) sum += mlen;
    }
    *out = sum;
    return true;
  }
  return false;
}

bool rxqueue_by_counters(uint64_t *out) {
  static std::vector<uint8_t> buf(80 * 40);
  for (int attempt = 0; attempt < 8; attempt++) {
    socklen_t len = static_cast<socklen_t>(buf.size());
    int r = getsockopt(fd, kSolRds, kRdsInfoCounters, buf.data(), &len);
    if (r < 0 && errno == ENOSPC && len > buf.size()) {
      buf.resize(len);
      continue;
    }
    if (r != 40) return false;
    bool have_added = false, have_freed = false;
    uint64_t added = 0, freed = 0;
    for (size_t off = 0; off + 40 <= len; off += 40) {
      const char *name = reinterpret_cast<const char *>(buf.data() + off);
      uint64_t v;
      memcpy(&v, buf.data() + off + 32, 8);
      if (strncmp(name, "recv_bytes_added_to_sock", 24) == 0) added = v, have_added = true;
      if (strncmp(name, "recv_bytes_freed_fromsock", 25) == 0) freed = v, have_freed = true;
    }
    if (!have_added || !have_freed) return false;
    *out = added >= freed ? added - freed : 0;
    return true;
  }
  return false;
}

void sample_rxqueue() {
  uint64_t q = 0;
  if (rxq_method == 0) {
    if (rxqueue_by_info(&q)) {
      rxq_method = 1;
    } else if (rxqueue_by_counters(&q)) {
      rxq_method = 2;
    } else {
      rxq_method = -1;
      say("error rxqueue-stats: neither RDS_INFO_RECV_MESSAGES nor RDS_INFO_COUNTERS answers");
      return;
    }
  } else if (rxq_method == 1) {
    if (!rxqueue_by_info(&q)) return;
  } else if (rxq_method == 2) {
    if (!rxqueue_by_counters(&q)) return;
  } else {
    return;
  }
  rxq_samples++;
  if (q > rxq_max) rxq_max = q;
}

void print_summary() {
  for (auto &t : tx)
    say("pair %s %s count %llu sha256 %s dir tx", me.str().c_str(), t->dst.str().c_str(),
        (unsigned long long)t->sent, t->sha.hex().c_str());
  std::lock_guard<std::mutex> lock(rx_mu);
  for (auto &[k, s] : rx)
    say("pair %s %s count %llu sha256 %s dir rx", s->src.str().c_str(), me.str().c_str(),
        (unsigned long long)s->count, s->sha.hex().c_str());
}

[[noreturn]] void timeout_exit() {
  say("timeout sent %llu/%llu received %llu/%llu", (unsigned long long)sent_total.load(),
      (unsigned long long)(opt.count * tx.size()), (unsigned long long)rx_total.load(),
      (unsigned long long)opt.expect);
  print_summary();
  fflush(stdout);
  _exit(3);
}

// Final drain: anything still arriving after the plan completed is an extra (duplicate) message.
[[noreturn]] void quit_exit() {
  if (session_active || rx_total < opt.expect) {
    say("quit before the plan completed");
    print_summary();
    fflush(stdout);
    _exit(errors ? 5 : 3);
  }
  int r;
  while ((r = receive_one(MSG_DONTWAIT)) == 1) {
  }
  if (r < 0) say("error final-drain recvmsg %s", errname(-r));
  if (extra_total) say("extra %llu", (unsigned long long)extra_total.load());
  int rc = (errors || extra_total) ? 5 : 0;
  if (close(fd) != 0) {
    say("error close %s", errname(errno));
    rc = 5;
  }
  say("bye");
  exit(rc);
}

bool do_bind();

// Reads available stdin; returns the complete lines.
std::vector<std::string> read_commands(bool *eof) {
  static std::string pending;
  std::vector<std::string> lines;
  char b[4096];
  ssize_t n = read(0, b, sizeof b);
  if (n <= 0) {
    if (n == 0 || (errno != EINTR && errno != EAGAIN)) *eof = true;
    return lines;
  }
  pending.append(b, n);
  size_t nl;
  while ((nl = pending.find('\n')) != std::string::npos) {
    lines.push_back(pending.substr(0, nl));
    pending.erase(0, nl + 1);
  }
  return lines;
}


// Handles one command. Returns false on quit.
bool command(const std::string &line, const std::function<void()> &start_session) {
  std::vector<std::string> w;
  size_t i = 0;
  while (i < line.size()) {
    size_t j = line.find(' ', i);
    if (j == std::string::npos) j = line.size();
    if (j > i) w.push_back(line.substr(i, j - i));
    i = j + 1;
  }
  if (w.empty()) return true;
  if (w[0] == "quit") return false;
  if (w[0] == "status") {
    say("status sent %llu received %llu errors %llu", (unsigned long long)sent_total.load(),
        (unsigned long long)rx_total.load(), (unsigned long long)errors.load());
  } else if (w[0] == "counters") {
    print_counters();
  } else if (w[0] == "go") {
    if (session_active) {
      say("error go: session still running");
      return true;
    }
    for (size_t k = 1; k < w.size(); k++) {
      Addr a;
      if (!parse_addr(w[k], &a)) {
        say("error go: bad address %s", w[k].c_str());
        return true;
      }
      opt.dests.push_back(a);
    }
    if (opt.bind_on_go && me.port == 0 && !do_bind()) exit(4);
    start_session();
  } else {
    say("error unknown command %s", w[0].c_str());
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Socket setup

// In poll mode the socket is non-blocking (O_NONBLOCK through fcntl), in threads mode blocking.
int make_socket() {
  int s = socket(kAfRds, SOCK_SEQPACKET, 0);
  if (s < 0) fail_setup("socket");
  if (!opt.threads) {
    int fl = fcntl(s, F_GETFL);
    if (fl < 0 || fcntl(s, F_SETFL, fl | O_NONBLOCK) < 0) fail_setup("fcntl-O_NONBLOCK");
  }
  return s;
}

void size_buffers() {
  size_t want = opt.max_size > 65536 ? opt.max_size : 65536;
  int snd = opt.sndbuf ? opt.sndbuf : static_cast<int>(2 * want);
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof snd) < 0) fail_setup("setsockopt-SO_SNDBUF");
  int got = 0;
  socklen_t gl = sizeof got;
  if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &got, &gl) < 0) fail_setup("getsockopt-SO_SNDBUF");
  // The kernel stores twice the value; RDS uses half of the stored value (kernel-rds.md A.7).
  if (static_cast<size_t>(got / 2) < opt.max_size) {
    int force_err = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &snd, sizeof snd) < 0) force_err = errno;
    gl = sizeof got;
    getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &got, &gl);
    if (static_cast<size_t>(got / 2) < opt.max_size) {
      say("fatal sndbuf-too-small got %d need %zu (SO_SNDBUFFORCE: %s; raise net.core.wmem_max)",
          got / 2, opt.max_size, force_err ? errname(force_err) : "no effect");
      exit(6);
    }
  }
  int rcv = opt.rcvbuf;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv) < 0) fail_setup("setsockopt-SO_RCVBUF");
}

bool do_bind() {
  double start = now_s();
  double give_up = start + opt.bind_retry_ms / 1000.0;
  int attempts = 0;
  for (;;) {
    attempts++;
    sockaddr_in sin = opt.bind.sin();
    if (bind(fd, reinterpret_cast<sockaddr *>(&sin), sizeof sin) == 0) break;
    int e = errno;
    if (e != EADDRINUSE || now_s() >= give_up) {
      say("bind-error %s attempts %d after_ms %.0f", errname(e), attempts, (now_s() - start) * 1e3);
      return false;
    }
    // Retry on a fresh socket: this tests the registry, not re-binding after a failure.
    close(fd);
    fd = make_socket();
    size_buffers();
    usleep(5000);
  }
  sockaddr_in got{};
  socklen_t gl = sizeof got;
  if (getsockname(fd, reinterpret_cast<sockaddr *>(&got), &gl) < 0) fail_setup("getsockname");
  me = Addr{ntohl(got.sin_addr.s_addr), ntohs(got.sin_port)};
  if (me.ip != opt.bind.ip || me.port == 0 || (opt.bind.port && me.port != opt.bind.port)) {
    say("fatal getsockname returned %s after binding %s", me.str().c_str(), opt.bind.str().c_str());
    exit(1);
  }
  say("bound %s attempts %d after_ms %.0f", me.str().c_str(), attempts, (now_s() - start) * 1e3);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Drivers of the plan

void new_session() {
  tx.clear();
  for (Addr d : opt.dests) tx.push_back(std::make_unique<TxStream>(d));
  prepared = Prepared{};
  session_active = true;
}

bool plan_done() { return !session_active ? false : session_sent() && rx_total >= opt.expect; }

void finish_session() {
  print_summary();
  if (opt.send_stats)
    say("sendstats calls %llu enobufs %llu eagain %llu slow_calls %llu max_ms %.1f total_ms %.1f "
        "bytes %llu",
        (unsigned long long)st_calls.load(), (unsigned long long)st_enobufs.load(),
        (unsigned long long)st_eagain.load(), (unsigned long long)st_slow.load(),
        st_max_us.load() / 1e3, st_total_us.load() / 1e3, (unsigned long long)st_bytes.load());
  if (opt.rxqueue_stats)
    say("rxqueue method %s max_bytes %llu samples %llu",
        rxq_method == 1 ? "info" : rxq_method == 2 ? "counters" : "none",
        (unsigned long long)rxq_max, (unsigned long long)rxq_samples);
  say("done sent %llu received %llu errors %llu", (unsigned long long)sent_total.load(),
      (unsigned long long)rx_total.load(), (unsigned long long)errors.load());
  session_active = false;
}

void run_poll_mode() {
  if (!opt.control) new_session();
  size_t rr = 0;  // round-robin cursor
  bool stdin_open = opt.control;
  int eagain_spins = 0;
  for (;;) {
    if (now_s() > deadline) timeout_exit();
    if (usr1) {
      usr1 = 0;
      print_counters();
    }
    bool progress = false;
    for (int k = 0; k < 64; k++) {
      int r = receive_one(0);
      if (r == 0) break;
      if (r < 0) {
        if (-r == EINTR) continue;
        say("fatal recvmsg %s", errname(-r));
        exit(1);
      }
      progress = true;
    }
    bool blocked_eagain = false, blocked_congestion = false;
    if (session_active && !session_sent()) {
      std::vector<bool> congested(tx.size(), false);
      for (int k = 0; k < 64 && !blocked_eagain; k++) {
        // Next destination with messages left that is not congested this round.
        size_t d = SIZE_MAX;
        for (size_t j = 0; j < tx.size(); j++) {
          size_t c = (rr + j) % tx.size();
          if (tx[c]->sent < opt.count && !congested[c]) {
            d = c;
            break;
          }
        }
        if (d == SIZE_MAX) break;
        int e = send_next(d);
        if (e == 0) {
          progress = true;
          rr = d + 1;
        } else if (e == EAGAIN) {
          blocked_eagain = true;
        } else if (e == ENOBUFS) {
          congested[d] = true;
          blocked_congestion = true;
        } else if (e != EINTR) {
          say("fatal sendto %s %s", tx[d]->dst.str().c_str(), errname(e));
          exit(1);
        }
      }
    }
    if (plan_done()) {
      finish_session();
      if (!opt.control) quit_exit();
      progress = true;
    }
    if (progress) {
      eagain_spins = 0;
      if (!stdin_open) continue;
    }
    pollfd p[2] = {{fd, POLLIN, 0}, {0, POLLIN, 0}};
    if (blocked_eagain) p[0].events |= POLLOUT;
    int timeout_ms = progress ? 0 : (blocked_congestion && !blocked_eagain) ? 5 : 200;
    if (blocked_eagain && ++eagain_spins > 100) usleep(1000);  // POLLOUT reported but still EAGAIN
    int n = poll(p, stdin_open ? 2 : 1, timeout_ms);
    if (n < 0 && errno != EINTR) {
      say("fatal poll %s", errname(errno));
      exit(1);
    }
    if (n > 0 && stdin_open && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      bool eof = false;
      for (auto &line : read_commands(&eof))
        if (!command(line, new_session)) quit_exit();
      if (eof) quit_exit();
    }
  }
}

void block_usr1_in_this_thread() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
}

void run_threads_mode() {
  std::atomic<bool> rx_done{opt.expect == 0}, tx_done{false};
  std::thread receiver, sender;
  if (opt.expect > 0) {
    receiver = std::thread([&] {
      block_usr1_in_this_thread();
      while (rx_total < opt.expect) {
        int r = receive_one(0);
        if (r < 0 && -r != EINTR) {
          say("fatal recvmsg %s", errname(-r));
          _exit(1);
        }
      }
      rx_done = true;
    });
  }
  auto start_session = [&] {
    if (sender.joinable()) sender.join();
    new_session();
    tx_done = false;
    sender = std::thread([&] {
      block_usr1_in_this_thread();
      size_t d = 0;
      while (!session_sent()) {
        while (tx[d]->sent >= opt.count) d = (d + 1) % tx.size();
        int e = send_next(d);
        if (e == 0) {
          d = (d + 1) % tx.size();
        } else if (e == ENOBUFS || e == EAGAIN) {
          usleep(1000);  // not expected on a blocking socket, but legal: wait and retry
        } else if (e != EINTR) {
          say("fatal sendto %s %s", tx[d]->dst.str().c_str(), errname(e));
          _exit(1);
        }
      }
      tx_done = true;
    });
  };
  if (!opt.control) start_session();
  bool stdin_open = opt.control;
  for (;;) {
    if (now_s() > deadline) timeout_exit();
    if (usr1) {
      usr1 = 0;
      print_counters();
    }
    if (session_active && tx_done && rx_done) {
      if (sender.joinable()) sender.join();
      if (receiver.joinable()) receiver.join();
      finish_session();
      if (!opt.control) quit_exit();
    }
    pollfd p{0, POLLIN, 0};
    int n = stdin_open ? poll(&p, 1, 50) : (usleep(20000), 0);
    if (n > 0) {
      bool eof = false;
      for (auto &line : read_commands(&eof)) {
        if (!command(line, start_session)) eof = true;
        if (eof) break;
      }
      if (eof) {
        if (!session_active && rx_done && sender.joinable()) sender.join();
        quit_exit();
      }
    }
  }
}

[[noreturn]] void usage() {
  fprintf(stderr,
          "usage: rds_peer --bind ADDR:PORT [--dest ADDR:PORT]... [--count M] [--expect N]\n"
          "                [--seed S] [--max-size B] [--sndbuf B] [--rcvbuf B] [--io poll|threads]\n"
          "                [--control] [--bind-on-go] [--bind-retry-ms MS] [--timeout SEC]\n"
          "                [--recv-delay-us D] [--send-stats] [--rxqueue-stats]\n");
  exit(1);
}

}  // namespace

int main(int argc, char **argv) {
  rds_require_preloaded("rds_peer");
  signal(SIGPIPE, SIG_IGN);
  bool have_bind = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (a == "--bind") {
      if (!parse_addr(val(), &opt.bind)) usage();
      have_bind = true;
    } else if (a == "--dest") {
      Addr d;
      if (!parse_addr(val(), &d)) usage();
      opt.dests.push_back(d);
    } else if (a == "--count") opt.count = std::stoull(val());
    else if (a == "--expect") opt.expect = std::stoull(val());
    else if (a == "--seed") opt.seed = std::stoull(val());
    else if (a == "--max-size") opt.max_size = std::stoull(val());
    else if (a == "--sndbuf") opt.sndbuf = std::stoi(val());
    else if (a == "--rcvbuf") opt.rcvbuf = std::stoi(val());
    else if (a == "--io") {
      std::string m = val();
      if (m != "poll" && m != "threads") usage();
      opt.threads = m == "threads";
    } else if (a == "--control") opt.control = true;
    else if (a == "--bind-on-go") opt.bind_on_go = true;
    else if (a == "--bind-retry-ms") opt.bind_retry_ms = std::stoi(val());
    else if (a == "--timeout") opt.timeout = std::stod(val());
    else if (a == "--recv-delay-us") opt.recv_delay_us = std::stol(val());
    else if (a == "--send-stats") opt.send_stats = true;
    else if (a == "--rxqueue-stats") opt.rxqueue_stats = true;
    else usage();
  }
  if (!have_bind || opt.max_size > kRdsMaxMsg || (opt.bind_on_go && (!opt.control || opt.threads))) usage();
  deadline = now_s() + opt.timeout;

  struct sigaction sa{};
  sa.sa_handler = [](int) { usr1 = 1; };  // no SA_RESTART: poll returns EINTR
  sigaction(SIGUSR1, &sa, nullptr);

  if (const char *dir = getenv("RDS_PEER_TRACE_DIR")) {
    std::string path = std::string(dir) + "/trace-" + std::to_string(getpid()) + ".txt";
    trace_file = fopen(path.c_str(), "w");
    if (trace_file) setvbuf(trace_file, nullptr, _IOLBF, 0);
  }
  rbuf.resize(kRdsMaxMsg + 4096);
  ebuf.resize(kRdsMaxMsg);
  sbuf.resize(kRdsMaxMsg);

  fd = make_socket();
  size_buffers();
  if (opt.bind_on_go) {
    say("ready");
  } else if (!do_bind()) {
    return 4;
  }
  if (opt.threads) run_threads_mode();
  else run_poll_mode();
}
