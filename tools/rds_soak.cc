// rds-soak — a long-running correctness soak of RDS through the preloaded shim.
//
//   rds-soak --preload build/preload/librds_preload.so --local-pairs 2 --messages 500000
//   rds-soak --preload LIB --netns-pairs 2 --ns-a A --ip-a 10.1.0.1 --ns-b B --ip-b 10.1.0.2
//            --local-pairs 2 --messages 250000 --fault-reset-every 300
//
// A plain AF_RDS program (built without the shim). The launcher starts, for every pair, a
// receiver process and a sender process (this binary again, with --role; the shim goes into
// their LD_PRELOAD, so the launcher itself needs no shim):
//   * local pairs: both processes in the caller's network namespace, on --local-addr
//     (127.0.0.1), talking over the shim's same-host Unix links;
//   * netns pairs: the sender in namespace --ns-a on --ip-a, the receiver in --ns-b on --ip-b
//     (each namespace is a separate host with its own registry directory), talking over TCP.
//     Entering a namespace (setns on /run/netns/NAME, as `ip netns exec` does) needs root.
// Each sender sends --messages messages to its receiver. Message `seq` of pair `k` is a pure
// function of (--seed, k, seq): its size (see SizeOf: 0 B ... --max-size, seeded; 0 and the
// maximum included) and its bytes, [24-byte header "SOAK", pair, seq, size, seed][filler]
// truncated to the size. The receiver regenerates and checks every message and counts
//   lost       messages never received,
//   dup        messages received more than once,
//   reordered  messages received after a later one,
//   corrupt    messages whose bytes match no message of the pair,
// and both ends keep a SHA-256 over u64le(size) || payload of the stream in the order sent /
// received; the two must be equal. Senders keep their sockets open until the launcher, told by
// the receiver that every message arrived, confirms (closing a socket cancels its
// unacknowledged messages, kernel-rds.md §A.10).
//
// Fault injection: --fault-* options (or RDS_PRELOAD_FAULT_* in the environment) are passed to
// every worker. Reconnect counts come from the workers' getsockopt(SOL_RDS, RDS_INFO_COUNTERS):
// the shim answers RDS_INFO host-wide (summed over the engines of one registry directory, like
// the kernel's global counters), so the launcher asks one worker per host, while every worker
// is still alive, and sums over hosts. reconnects = conn_reset (counted by the engines at both
// ends of a broken link), retransmitted = shim_retransmitted, faults = shim_fault_injected.
//
// Output (stdout, one record per line, key=value fields; progress goes to stderr):
//   pair id=K kind=local|netns src=A:P dst=A:P sent=N received=N distinct=N lost=N dup=N
//        reordered=N corrupt=N sha=match|MISMATCH
//   host name=H rundir=DIR conn_reset=N shim_retransmitted=N shim_fault_injected=N ...
//   total pairs=N messages=N sent=N received=N lost=N dup=N reordered=N corrupt=N
//         sha_mismatch=N reconnects=N retransmitted=N faults=N old_seq_dropped=N bytes=N
//         seconds=X msgs_per_s=X mib_per_s=X
//   result=PASS | result=FAIL reason="..."
// Exit status: 0 pass; 1 loss, duplication, reordering, corruption or SHA mismatch;
//              2 usage; 3 setup failure, a worker failure, a stall or the time limit.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tools/tool_flags.h"

namespace {

constexpr int kAfRds = 21;
constexpr int kSolRds = 276;
constexpr int kRdsInfoCounters = 10000;
constexpr size_t kHdr = 24;
constexpr size_t kSeqReadable = 16;  // magic, pair, seq
constexpr uint32_t kMagic = 0x4b414f53;  // "SOAK" little-endian

// ---------------------------------------------------------------------------------------------
// Shared by every role.

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char* ErrName(int e) {
  const char* n = strerrorname_np(e);
  return n ? n : "E?";
}

// One line to fd 1 in one write() (pipes keep lines of < PIPE_BUF bytes whole).
std::mutex out_mu;
void Say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Say(const char* fmt, ...) {
  char buf[4000];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n > static_cast<int>(sizeof buf) - 2) n = sizeof buf - 2;
  buf[n++] = '\n';
  std::lock_guard<std::mutex> lock(out_mu);
  for (int off = 0; off < n;) {
    ssize_t w = write(1, buf + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    off += w;
  }
}

struct Addr {
  uint32_t ip = 0;    // host order
  uint16_t port = 0;  // host order
  std::string Str() const {
    char b[32];
    snprintf(b, sizeof b, "%u.%u.%u.%u:%u", ip >> 24, (ip >> 16) & 255, (ip >> 8) & 255, ip & 255,
             port);
    return b;
  }
  sockaddr_in Sin() const {
    sockaddr_in s{};
    s.sin_family = AF_INET;
    s.sin_addr.s_addr = htonl(ip);
    s.sin_port = htons(port);
    return s;
  }
};

bool ParseIp(const std::string& text, uint32_t* ip) {
  in_addr a{};
  if (inet_pton(AF_INET, text.c_str(), &a) != 1) return false;
  *ip = ntohl(a.s_addr);
  return true;
}

bool ParseAddr(const std::string& text, Addr* out) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || !ParseIp(text.substr(0, colon), &out->ip)) return false;
  char* end = nullptr;
  unsigned long port = strtoul(text.c_str() + colon + 1, &end, 10);
  if (*end || port > 65535) return false;
  out->port = static_cast<uint16_t>(port);
  return true;
}

uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Key(uint64_t seed, uint32_t pair, uint64_t seq, uint64_t salt) {
  uint64_t x = seed ^ salt;
  uint64_t k = SplitMix(x) ^ pair;
  k = SplitMix(k) ^ seq;
  return SplitMix(k);
}

struct Plan {
  uint64_t seed = 0;
  uint32_t pair = 0;
  uint64_t messages = 0;
  size_t max_size = 65536;
  bool uniform = false;
};

// Sizes, seeded: seq 0 and every seq % 1000 == 250 are empty, seq 1 and seq % 1000 == 500 have
// the maximum size; the rest are uniform in [0, max] with --sizes uniform, otherwise ("mixed",
// the default) 80% in [0, 1 KiB], 15% in (1 KiB, 16 KiB], 5% in (16 KiB, max] — about 3.7 KiB
// on average with the default 64 KiB maximum, so a million messages are a few GB.
size_t SizeOf(const Plan& p, uint64_t seq) {
  if (seq == 0 || seq % 1000 == 250) return 0;
  if (seq == 1 || seq % 1000 == 500) return p.max_size;
  uint64_t r = Key(p.seed, p.pair, seq, 0x53495a45);
  size_t s;
  if (p.uniform) {
    s = r % (p.max_size + 1);
  } else {
    uint64_t bucket = r % 100, v = r >> 8;
    if (bucket < 80) s = v % 1025;
    else if (bucket < 95) s = 1025 + v % (16384 - 1025 + 1);
    else s = 16385 + v % (65536 - 16385 + 1);
  }
  return std::min(s, p.max_size);
}

void PutLe(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t GetLe(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

// Writes message `seq` (SizeOf bytes) into buf; returns its size.
size_t Fill(const Plan& p, uint64_t seq, uint8_t* buf) {
  size_t size = SizeOf(p, seq);
  uint8_t hdr[kHdr];
  PutLe(hdr, kMagic, 4);
  PutLe(hdr + 4, p.pair, 4);
  PutLe(hdr + 8, seq, 8);
  PutLe(hdr + 16, size, 4);
  PutLe(hdr + 20, p.seed, 4);
  memcpy(buf, hdr, std::min(size, kHdr));
  uint64_t x = Key(p.seed, p.pair, seq, 0x46494c4c);
  size_t off = kHdr;
  for (; off + 8 <= size; off += 8) {
    uint64_t r = SplitMix(x);
    memcpy(buf + off, &r, 8);
  }
  if (off < size) {
    uint64_t r = SplitMix(x);
    memcpy(buf + off, &r, size - off);
  }
  return size;
}

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void AddMessage(const uint8_t* p, size_t n) {
    uint8_t len[8];
    PutLe(len, n, 8);
    EVP_DigestUpdate(ctx_, len, 8);
    if (n) EVP_DigestUpdate(ctx_, p, n);
  }
  std::string Hex() const {
    EVP_MD_CTX* c = EVP_MD_CTX_new();
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
  EVP_MD_CTX* ctx_;
};

// The process's view of RDS_INFO_COUNTERS (host-wide in the shim), "name=value" for every
// non-zero counter; "counters-error ERRNO" if it cannot be read.
std::string CountersLine(int fd) {
  std::vector<uint8_t> buf(128 * 40);
  for (int attempt = 0; attempt < 8; attempt++) {
    socklen_t len = static_cast<socklen_t>(buf.size());
    int r = getsockopt(fd, kSolRds, kRdsInfoCounters, buf.data(), &len);
    if (r < 0 && errno == ENOSPC && len > buf.size()) {
      buf.resize(len);
      continue;
    }
    if (r < 0) return std::string("counters-error ") + ErrName(errno);
    if (r != 40) return "counters-error item-size-" + std::to_string(r);
    std::string line = "counters";
    for (size_t off = 0; off + 40 <= len; off += 40) {
      char name[33];
      memcpy(name, buf.data() + off, 32);
      name[32] = '\0';
      uint64_t value;
      memcpy(&value, buf.data() + off + 32, 8);
      if (value) line += std::string(" ") + name + "=" + std::to_string(value);
    }
    return line;
  }
  return "counters-error ENOSPC-loop";
}

// ld.so only warns when a preload library cannot be loaded; a worker that silently ran without
// the shim (on a host with the kernel module) would soak the kernel instead. Every LD_PRELOAD
// entry must be mapped.
bool PreloadMapped() {
  const char* env = getenv("LD_PRELOAD");
  if (!env || !*env) return false;
  std::string maps;
  if (FILE* f = fopen("/proc/self/maps", "r")) {
    char line[4096];
    while (fgets(line, sizeof line, f)) maps += line;
    fclose(f);
  } else {
    return true;  // cannot tell
  }
  std::string list = env;
  for (size_t i = 0; i < list.size();) {
    size_t j = list.find_first_of(": ", i);
    if (j == std::string::npos) j = list.size();
    std::string item = list.substr(i, j - i);
    i = j + 1;
    if (item.empty()) continue;
    char real[4096];
    std::string want = realpath(item.c_str(), real) ? std::string(real) : item;
    if (maps.find(want) == std::string::npos) return false;
  }
  return true;
}

int MakeSocket(bool nonblocking) {
  int fd = socket(kAfRds, SOCK_SEQPACKET | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) {
    Say("fatal socket(AF_RDS) %s", ErrName(errno));
    exit(3);
  }
  return fd;
}

void BindOrDie(int fd, Addr a) {
  sockaddr_in sin = a.Sin();
  if (bind(fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0) {
    Say("fatal bind %s %s", a.Str().c_str(), ErrName(errno));
    exit(3);
  }
  Say("bound %s", a.Str().c_str());
}

// Reads stdin (the launcher's commands) without blocking; returns complete lines; *eof on EOF.
std::vector<std::string> ReadCommands(int in, bool* eof) {
  static std::string pending;
  std::vector<std::string> lines;
  char b[1024];
  ssize_t n = read(in, b, sizeof b);
  if (n == 0) *eof = true;
  if (n <= 0) return lines;
  pending.append(b, n);
  size_t nl;
  while ((nl = pending.find('\n')) != std::string::npos) {
    lines.push_back(pending.substr(0, nl));
    pending.erase(0, nl + 1);
  }
  return lines;
}

// ---------------------------------------------------------------------------------------------
// Receiver worker.

struct RxState {
  const Plan& plan;
  std::vector<bool> seen;
  uint64_t next = 0;  // highest seq seen + 1
  uint64_t received = 0, distinct = 0, dup = 0, reordered = 0, corrupt = 0, bytes = 0;
  uint64_t reported_errors = 0;
  Sha256 sha;
  std::vector<uint8_t> expect;
  explicit RxState(const Plan& p) : plan(p), seen(p.messages, false), expect(p.max_size + kHdr) {}

  bool Matches(uint64_t seq, const uint8_t* data, size_t len) {
    if (seq >= plan.messages || SizeOf(plan, seq) != len) return false;
    Fill(plan, seq, expect.data());
    return memcmp(expect.data(), data, len) == 0;
  }

  // Which message is this? -1 if none.
  int64_t Identify(const uint8_t* data, size_t len) {
    if (len >= kSeqReadable && GetLe(data, 4) == kMagic) {
      uint64_t seq = GetLe(data + 8, 8);
      return Matches(seq, data, len) ? static_cast<int64_t>(seq) : -1;
    }
    // Too short to name itself: the expected one, else a neighbour of the same size and bytes
    // (later ones first: a gap is more likely than a duplicate).
    if (Matches(next, data, len)) return static_cast<int64_t>(next);
    for (uint64_t d = 1; d <= 64; d++) {
      if (Matches(next + d, data, len)) return static_cast<int64_t>(next + d);
    }
    for (uint64_t d = 1; d <= 64 && d <= next; d++) {
      if (Matches(next - d, data, len)) return static_cast<int64_t>(next - d);
    }
    return -1;
  }

  void OnMessage(const uint8_t* data, size_t len, int msg_flags) {
    received++;
    bytes += len;
    sha.AddMessage(data, len);
    int64_t id = (msg_flags & MSG_TRUNC) ? -1 : Identify(data, len);
    if (id < 0) {
      corrupt++;
      if (reported_errors++ < 5)
        Say("error corrupt message of %zu bytes (expected seq %" PRIu64 "%s)", len, next,
            (msg_flags & MSG_TRUNC) ? ", MSG_TRUNC" : "");
      return;
    }
    uint64_t seq = static_cast<uint64_t>(id);
    if (seen[seq]) {
      dup++;
      if (reported_errors++ < 5) Say("error duplicate seq %" PRIu64 " (next %" PRIu64 ")", seq, next);
      return;
    }
    seen[seq] = true;
    distinct++;
    if (seq < next) {
      reordered++;
      if (reported_errors++ < 5) Say("error reordered seq %" PRIu64 " after %" PRIu64, seq, next - 1);
    } else {
      next = seq + 1;
    }
  }
};

// `blocking`: see Options::blocking_receive.
int RunReceiver(const Plan& plan, Addr bind_addr, Addr peer, bool blocking) {
  int fd = MakeSocket(/*nonblocking=*/!blocking);
  int rcv = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
  if (blocking) {
    timeval tv{0, 50 * 1000};  // a blocked call returns EAGAIN after 50 ms: commands are read
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  BindOrDie(fd, bind_addr);
  RxState st(plan);
  std::vector<uint8_t> buf(plan.max_size + 4096);
  bool complete = false, stdin_open = true;
  double last_progress = 0, last_cmd_check = 0;
  uint64_t wrong_source = 0;
  auto final_report = [&] {
    Say("final received=%" PRIu64 " distinct=%" PRIu64 " lost=%" PRIu64 " dup=%" PRIu64
        " reordered=%" PRIu64 " corrupt=%" PRIu64 " bytes=%" PRIu64 " sha=%s",
        st.received, st.distinct, plan.messages - st.distinct, st.dup, st.reordered,
        st.corrupt + wrong_source, st.bytes, st.sha.Hex().c_str());
  };
  auto receive_batch = [&](int limit) {
    int got = 0;
    while (got < limit) {
      sockaddr_in from{};
      iovec iov{buf.data(), buf.size()};
      msghdr mh{};
      mh.msg_name = &from;
      mh.msg_namelen = sizeof from;
      mh.msg_iov = &iov;
      mh.msg_iovlen = 1;
      ssize_t n = recvmsg(fd, &mh, 0);
      if (n < 0) {
        // (A blocked RDS recvmsg whose SO_RCVTIMEO expires fails with ETIMEDOUT.)
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT) break;
        if (errno == EINTR) continue;
        Say("fatal recvmsg %s", ErrName(errno));
        exit(3);
      }
      got++;
      if (ntohl(from.sin_addr.s_addr) != peer.ip || ntohs(from.sin_port) != peer.port) {
        // Counted as corrupt: nobody else sends to this port.
        if (wrong_source++ < 5) {
          Addr a{ntohl(from.sin_addr.s_addr), ntohs(from.sin_port)};
          Say("error message from %s, expected only %s", a.Str().c_str(), peer.Str().c_str());
        }
        st.received++;
        continue;
      }
      st.OnMessage(buf.data(), static_cast<size_t>(n), mh.msg_flags);
    }
    return got;
  };
  for (;;) {
    int got = receive_batch(256);
    double now = Now();
    if (!complete && st.distinct == plan.messages) {
      complete = true;
      Say("complete distinct=%" PRIu64, st.distinct);
    }
    if (now - last_progress >= 0.25) {
      last_progress = now;
      Say("progress %" PRIu64 " %" PRIu64, st.distinct, st.received);
    }
    bool check_cmds = got == 0 || now - last_cmd_check >= 0.1;
    if (!check_cmds) continue;
    last_cmd_check = now;
    pollfd p[2] = {{fd, POLLIN, 0}, {0, POLLIN, 0}};
    // (A blocking receiver has just waited in recvmsg.)
    int n = poll(p, stdin_open ? 2 : 1, got == 0 && !blocking ? 100 : 0);
    if (n < 0 && errno != EINTR) {
      Say("fatal poll %s", ErrName(errno));
      exit(3);
    }
    if (n > 0 && stdin_open && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      bool eof = false;
      for (const std::string& cmd : ReadCommands(0, &eof)) {
        if (cmd == "counters") {
          Say("%s", CountersLine(fd).c_str());
        } else if (cmd == "quit") {
          // Whatever is still queued (late duplicates) counts.
          usleep(100 * 1000);
          while (receive_batch(1 << 30) > 0) {
          }
          final_report();
          close(fd);
          Say("bye");
          return 0;
        } else {
          Say("error unknown command '%s'", cmd.c_str());
        }
      }
      if (eof) {
        stdin_open = false;
        final_report();
        return 3;  // the launcher is gone
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Sender worker.

int RunSender(const Plan& plan, Addr bind_addr, Addr dest) {
  int fd = MakeSocket(/*nonblocking=*/false);
  int snd = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof snd);
  int got = 0;
  socklen_t gl = sizeof got;
  getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &got, &gl);
  if (static_cast<size_t>(got / 2) < plan.max_size) {  // RDS uses half the stored value
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &snd, sizeof snd);
    gl = sizeof got;
    getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &got, &gl);
    if (static_cast<size_t>(got / 2) < plan.max_size) {
      Say("fatal send buffer %d bytes cannot hold a %zu-byte message (raise net.core.wmem_max)",
          got / 2, plan.max_size);
      exit(3);
    }
  }
  BindOrDie(fd, bind_addr);

  // Commands arrive on stdin while the main thread is busy (or blocked) sending.
  std::atomic<bool> go{false}, confirmed{false};
  std::thread commands([&] {
    std::string pending;
    char b[256];
    for (;;) {
      ssize_t n = read(0, b, sizeof b);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) _exit(3);  // the launcher is gone
      pending.append(b, n);
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        std::string cmd = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        if (cmd == "go") go = true;
        else if (cmd == "counters") Say("%s", CountersLine(fd).c_str());
        else if (cmd == "confirmed") confirmed = true;
        else if (cmd == "quit") _exit(3);
        else Say("error unknown command '%s'", cmd.c_str());
      }
      if (confirmed) return;
    }
  });
  while (!go) usleep(1000);

  std::vector<uint8_t> buf(plan.max_size + kHdr);
  Sha256 sha;
  uint64_t bytes = 0, retries = 0;
  sockaddr_in to = dest.Sin();
  double start = Now();
  for (uint64_t seq = 0; seq < plan.messages; seq++) {
    size_t size = Fill(plan, seq, buf.data());
    for (;;) {
      ssize_t n = sendto(fd, buf.data(), size, 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
      if (n == static_cast<ssize_t>(size)) break;
      if (n >= 0) {
        Say("fatal short send %zd of %zu (seq %" PRIu64 ")", n, size, seq);
        exit(3);
      }
      if (errno == EINTR) continue;
      if (errno == ENOBUFS || errno == EAGAIN) {  // legal on a blocking socket: wait, retry
        retries++;
        usleep(1000);
        continue;
      }
      Say("fatal sendto %s seq %" PRIu64 " %s", dest.Str().c_str(), seq, ErrName(errno));
      exit(3);
    }
    sha.AddMessage(buf.data(), size);
    bytes += size;
  }
  Say("sent count=%" PRIu64 " bytes=%" PRIu64 " sha=%s seconds=%.3f retries=%" PRIu64,
      plan.messages, bytes, sha.Hex().c_str(), Now() - start, retries);
  commands.join();  // returns once "confirmed" arrived
  close(fd);
  Say("bye");
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Launcher.

struct Options {
  std::string preload;
  int local_pairs = 0, netns_pairs = 0;
  std::string local_ip = "127.0.0.1";
  std::string ns_a, ns_b, ip_a, ip_b;
  uint64_t messages = 10000;
  size_t max_size = 65536;
  bool uniform = false;
  uint64_t seed = 0;
  bool seed_set = false;
  int base_port = 5000;
  std::string rundir;
  bool keep_rundir = false;
  double timeout = 3600, stall = 60;
  std::vector<std::pair<std::string, std::string>> env;
  bool quiet = false;
  // Receivers block in recvmsg (with a short SO_RCVTIMEO, to read their commands) instead of
  // polling a non-blocking socket: large messages then go straight into the waiting call's
  // buffer (direct receive, docs/perf/history.md §9.8).
  bool blocking_receive = false;
};

struct Host {
  std::string name, netns, rundir;
};

struct Worker {
  std::string name;
  int pair = -1, host = -1;
  bool sender = false;
  pid_t pid = -1;
  int to = -1, from = -1;
  std::string buf, log_path;
  bool eof = false, reaped = false;
  int status = 0;
  std::vector<std::string> tail;
  std::string error;
  bool bound = false, sent = false, complete = false, final = false, bye = false;
  bool have_counters = false;
  uint64_t progress = 0;
  std::map<std::string, std::string> kv;  // fields of the "sent" / "final" line
  std::map<std::string, uint64_t> counters;
  std::string counters_error;
};

struct Pair {
  int id;
  bool netns;
  Addr src, dst;
  int sender = -1, receiver = -1;
};

Options opt;
std::vector<Host> hosts;
std::vector<Worker> workers;
std::vector<Pair> pairs;
std::string self_exe;
bool made_rundir = false;
volatile sig_atomic_t interrupted = 0;
double last_progress_time = 0;

void Log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Log(const char* fmt, ...) {
  if (opt.quiet) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("rds-soak: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

std::map<std::string, std::string> Fields(const std::string& line) {
  std::map<std::string, std::string> kv;
  size_t i = 0;
  while (i < line.size()) {
    size_t j = line.find(' ', i);
    if (j == std::string::npos) j = line.size();
    std::string tok = line.substr(i, j - i);
    size_t eq = tok.find('=');
    if (eq != std::string::npos) kv[tok.substr(0, eq)] = tok.substr(eq + 1);
    i = j + 1;
  }
  return kv;
}

uint64_t U64(const std::map<std::string, std::string>& kv, const char* key) {
  auto it = kv.find(key);
  return it == kv.end() ? 0 : strtoull(it->second.c_str(), nullptr, 10);
}

void KillAll() {
  for (Worker& w : workers) {
    if (w.pid > 0 && !w.reaped) kill(w.pid, SIGKILL);
  }
  for (Worker& w : workers) {
    if (w.pid > 0 && !w.reaped) {
      waitpid(w.pid, &w.status, 0);
      w.reaped = true;
    }
  }
}

void RemoveRundir() {
  if (!made_rundir || opt.keep_rundir) return;
  std::string cmd = "rm -rf '" + opt.rundir + "'";
  if (system(cmd.c_str()) != 0) fprintf(stderr, "rds-soak: could not remove %s\n", opt.rundir.c_str());
}

void HandleLine(Worker& w, const std::string& line) {
  w.tail.push_back(line);
  if (w.tail.size() > 12) w.tail.erase(w.tail.begin());
  if (line.rfind("bound ", 0) == 0) {
    w.bound = true;
  } else if (line.rfind("progress ", 0) == 0) {
    uint64_t p = strtoull(line.c_str() + 9, nullptr, 10);
    if (p > w.progress) last_progress_time = Now();
    w.progress = p;
  } else if (line.rfind("complete", 0) == 0) {
    w.complete = true;
    last_progress_time = Now();
  } else if (line.rfind("sent ", 0) == 0) {
    w.sent = true;
    w.kv = Fields(line);
    last_progress_time = Now();
  } else if (line.rfind("final ", 0) == 0) {
    w.final = true;
    w.kv = Fields(line);
  } else if (line.rfind("counters-error", 0) == 0) {
    w.have_counters = true;
    w.counters_error = line;
  } else if (line.rfind("counters", 0) == 0) {
    w.have_counters = true;
    w.counters.clear();
    for (auto& [k, v] : Fields(line)) w.counters[k] = strtoull(v.c_str(), nullptr, 10);
  } else if (line == "bye") {
    w.bye = true;
  } else if (line.rfind("fatal", 0) == 0 || line.rfind("error", 0) == 0) {
    if (w.error.empty()) w.error = line;
    Log("%s: %s", w.name.c_str(), line.c_str());
  }
}

void Reap(Worker& w) {
  if (w.reaped || w.pid <= 0) return;
  for (int i = 0; i < 500; i++) {
    if (waitpid(w.pid, &w.status, WNOHANG) == w.pid) {
      w.reaped = true;
      return;
    }
    usleep(10000);
  }
  kill(w.pid, SIGKILL);
  waitpid(w.pid, &w.status, 0);
  w.reaped = true;
}

// Reads whatever the workers printed, for at most timeout_ms.
void Pump(int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<Worker*> who;
  for (Worker& w : workers) {
    if (w.from >= 0 && !w.eof) {
      fds.push_back({w.from, POLLIN, 0});
      who.push_back(&w);
    }
  }
  if (fds.empty()) {
    usleep(timeout_ms * 1000);
    return;
  }
  int n = poll(fds.data(), fds.size(), timeout_ms);
  if (n <= 0) return;
  for (size_t i = 0; i < fds.size(); i++) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    Worker& w = *who[i];
    char b[65536];
    ssize_t r = read(w.from, b, sizeof b);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) {
      w.eof = true;
      if (!w.buf.empty()) HandleLine(w, w.buf);
      w.buf.clear();
      close(w.from);
      w.from = -1;
      Reap(w);
      continue;
    }
    w.buf.append(b, r);
    size_t nl;
    while ((nl = w.buf.find('\n')) != std::string::npos) {
      std::string line = w.buf.substr(0, nl);
      w.buf.erase(0, nl + 1);
      HandleLine(w, line);
    }
  }
}

void Command(Worker& w, const char* cmd) {
  if (w.to < 0 || w.eof) return;
  std::string line = std::string(cmd) + "\n";
  if (write(w.to, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    // The worker is gone; its EOF will tell.
  }
}

std::string Describe(const Worker& w) {
  std::string s = w.name + " (pid " + std::to_string(w.pid);
  if (w.reaped) {
    if (WIFEXITED(w.status)) s += ", exit " + std::to_string(WEXITSTATUS(w.status));
    else if (WIFSIGNALED(w.status)) s += std::string(", killed by ") + strsignal(WTERMSIG(w.status));
  }
  s += ")";
  return s;
}

void ShowWorker(const Worker& w) {
  fprintf(stderr, "rds-soak: --- %s\n", Describe(w).c_str());
  for (const std::string& l : w.tail) fprintf(stderr, "    out: %s\n", l.c_str());
  if (FILE* f = fopen(w.log_path.c_str(), "r")) {
    std::string text;
    char b[4096];
    size_t n;
    while ((n = fread(b, 1, sizeof b, f)) > 0) text.append(b, n);
    fclose(f);
    if (text.size() > 3000) text = "..." + text.substr(text.size() - 3000);
    size_t i = 0;
    while (i < text.size()) {
      size_t j = text.find('\n', i);
      if (j == std::string::npos) j = text.size();
      fprintf(stderr, "    err: %s\n", text.substr(i, j - i).c_str());
      i = j + 1;
    }
  }
}

// Waits until pred() holds; false on timeout, interruption, or when fail() says so.
template <typename P, typename F>
bool WaitFor(double seconds, P pred, F fail, std::string* why) {
  double end = Now() + seconds;
  while (!pred()) {
    if (interrupted) {
      *why = "interrupted";
      return false;
    }
    if (fail(why)) return false;
    if (Now() > end) return false;
    Pump(100);
  }
  return true;
}

bool Spawn(Worker& w, const Host& h, const std::vector<std::string>& args) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return false;
  w.log_path = opt.rundir + "/" + w.name + ".log";
  int logfd = open(w.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (logfd < 0) return false;
  pid_t parent = getpid();
  std::vector<std::string> argv_s = {self_exe};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(3);
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(logfd, 2);
    if (!h.netns.empty()) {
      std::string path = h.netns.find('/') == std::string::npos ? "/run/netns/" + h.netns : h.netns;
      int nsfd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) != 0) {
        dprintf(1, "fatal cannot enter network namespace %s: %s\n", path.c_str(), strerror(errno));
        _exit(3);
      }
      close(nsfd);
    }
    setenv("LD_PRELOAD", opt.preload.c_str(), 1);
    setenv("RDS_PRELOAD_RUNDIR", h.rundir.c_str(), 1);
    for (auto& [k, v] : opt.env) setenv(k.c_str(), v.c_str(), 1);
    execv(self_exe.c_str(), argv.data());
    dprintf(1, "fatal exec %s: %s\n", self_exe.c_str(), strerror(errno));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(logfd);
  w.pid = pid;
  w.to = in[1];
  w.from = out[0];
  return true;
}

std::vector<std::string> PlanArgs(const Pair& p) {
  return {"--pair",  std::to_string(p.id),        "--messages", std::to_string(opt.messages),
          "--seed",  std::to_string(opt.seed),     "--max-size", std::to_string(opt.max_size),
          "--sizes", opt.uniform ? "uniform" : "mixed"};
}

constexpr char kSynopsis[] =
    "usage: rds-soak [--preload LIB[:LIB...]] [--local-pairs P] [--netns-pairs P\n"
    "                 --ns-a NAME --ip-a IP --ns-b NAME --ip-b IP] [--local-addr IP]\n"
    "                [--messages M] [--max-size B] [--sizes mixed|uniform] [--seed S]\n"
    "                [--base-port N] [--rundir DIR] [--keep-rundir] [--timeout SEC]\n"
    "                [--stall SEC] [--fault-reset-every N] [--fault-reset-permille N]\n"
    "                [--fault-cut-permille N] [--fault-connect-fail-permille N]\n"
    "                [--fault-connect-delay-ms N] [--env NAME=VALUE]... [--quiet]\n"
    "                [--blocking-receive]";
constexpr char kPreloadNote[] =
    "Without --preload, the LD_PRELOAD this program runs under is given to the workers.";

// What --help prints (rds::tools::HelpOrVersion).
rds::tools::ToolHelp Help() {
  return {
      "rds-soak",
      kSynopsis,
      "A long-running correctness soak of RDS through the shim: sender/receiver process pairs\n"
      "(same host, or across two network namespaces) check every message for loss,\n"
      "duplication, reordering and corruption and compare SHA-256 digests of the streams,\n"
      "optionally with injected faults. Prints one key=value record per pair and a total.",
      {
          {"--preload LIB[:LIB...]", "the rds-preload library (and others) the workers preload"},
          {"--local-pairs P", "pairs on this host, on --local-addr (default 0)"},
          {"--netns-pairs P", "pairs from namespace --ns-a to --ns-b, over TCP (root; default 0)"},
          {"--ns-a NAME", "the senders' network namespace (/run/netns/NAME)"},
          {"--ip-a IP", "the senders' address in --ns-a"},
          {"--ns-b NAME", "the receivers' network namespace"},
          {"--ip-b IP", "the receivers' address in --ns-b"},
          {"--local-addr IP", "the local pairs' address (default 127.0.0.1)"},
          {"--messages M", "messages per pair (default 10000)"},
          {"--max-size B", "largest message, at most 1048576 (default 65536)"},
          {"--sizes mixed|uniform", "message size distribution (default mixed)"},
          {"--seed S", "seed of the message sizes and bytes (default: from the time and pid)"},
          {"--base-port N", "first RDS port; pair K uses N+2K and N+2K+1 (default 5000)"},
          {"--rundir DIR", "registry and log directory (default: a new /tmp/rds-soak.XXXXXX)"},
          {"--keep-rundir", "keep the directory rds-soak made (kept anyway on failure)"},
          {"--timeout SEC", "fail after this many seconds (default 3600)"},
          {"--stall SEC", "fail after this many seconds without progress (default 60)"},
          {"--fault-reset-every N", "workers' RDS_PRELOAD_FAULT_RESET_EVERY"},
          {"--fault-reset-permille N", "workers' RDS_PRELOAD_FAULT_RESET_PERMILLE"},
          {"--fault-cut-permille N", "workers' RDS_PRELOAD_FAULT_CUT_PERMILLE"},
          {"--fault-connect-fail-permille N", "workers' RDS_PRELOAD_FAULT_CONNECT_FAIL_PERMILLE"},
          {"--fault-connect-delay-ms N", "workers' RDS_PRELOAD_FAULT_CONNECT_DELAY_MS"},
          {"--env NAME=VALUE", "set NAME=VALUE in the workers' environment (repeatable)"},
          {"--quiet", "no progress messages on stderr"},
          {"--blocking-receive", "receivers block in recvmsg instead of polling"},
          // Internal: rds-soak runs itself with these as its worker processes.
          {"--role receiver|sender", "internal: run as a worker"},
          {"--bind IP:PORT", "internal: the worker's own address"},
          {"--peer IP:PORT, --dest IP:PORT", "internal: the other end of the pair"},
          {"--pair K", "internal: the pair's number"},
      },
      std::string(kPreloadNote) +
          "\n\"internal\" options are given by rds-soak to the worker processes it runs (itself).\n"
          "exit status: 0 pass; 1 loss, duplication, reordering, corruption or SHA mismatch;\n"
          "2 usage; 3 setup failure, a worker failure, a stall or the time limit.",
  };
}

int Usage() {
  fprintf(stderr, "%s\n%s\n", kSynopsis, kPreloadNote);
  return 2;
}

void OnSignal(int) { interrupted = 1; }

int Launch() {
  if (opt.preload.empty()) {
    const char* env = getenv("LD_PRELOAD");
    if (!env || !*env) {
      fprintf(stderr, "rds-soak: no --preload and no LD_PRELOAD: the workers need the shim\n");
      return 2;
    }
    opt.preload = env;
  }
  // Absolute paths (the workers may start elsewhere).
  std::string resolved;
  for (size_t i = 0; i < opt.preload.size();) {
    size_t j = opt.preload.find_first_of(": ", i);
    if (j == std::string::npos) j = opt.preload.size();
    std::string item = opt.preload.substr(i, j - i);
    i = j + 1;
    if (item.empty()) continue;
    char real[4096];
    if (!realpath(item.c_str(), real)) {
      fprintf(stderr, "rds-soak: %s: %s\n", item.c_str(), strerror(errno));
      return 2;
    }
    resolved += (resolved.empty() ? "" : ":") + std::string(real);
  }
  opt.preload = resolved;
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    perror("rds-soak: /proc/self/exe");
    return 3;
  }
  self_exe.assign(exe, n);
  if (!opt.seed_set) {
    opt.seed = static_cast<uint64_t>(time(nullptr)) ^ (static_cast<uint64_t>(getpid()) << 32);
    opt.seed &= 0xffffffffffffull;
  }
  if (opt.rundir.empty()) {
    char tmpl[] = "/tmp/rds-soak.XXXXXX";
    if (!mkdtemp(tmpl)) {
      perror("rds-soak: mkdtemp");
      return 3;
    }
    opt.rundir = tmpl;
    made_rundir = true;
  } else if (mkdir(opt.rundir.c_str(), 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "rds-soak: mkdir %s: %s\n", opt.rundir.c_str(), strerror(errno));
    return 3;
  }
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa{};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  // Hosts: each has its own registry directory, as separate machines would.
  int local_host = -1, host_a = -1, host_b = -1;
  auto add_host = [](const std::string& name, const std::string& ns) {
    hosts.push_back({name, ns, opt.rundir + "/" + name});
    mkdir(hosts.back().rundir.c_str(), 0755);
    return static_cast<int>(hosts.size()) - 1;
  };
  if (opt.local_pairs > 0) local_host = add_host("local", "");
  if (opt.netns_pairs > 0) {
    host_a = add_host("hostA", opt.ns_a);
    host_b = add_host("hostB", opt.ns_b);
  }
  uint32_t lip = 0, ipa = 0, ipb = 0;
  ParseIp(opt.local_ip, &lip);
  ParseIp(opt.ip_a, &ipa);
  ParseIp(opt.ip_b, &ipb);
  int total_pairs = opt.local_pairs + opt.netns_pairs;
  for (int k = 0; k < total_pairs; k++) {
    Pair p;
    p.id = k;
    p.netns = k >= opt.local_pairs;
    uint16_t port = static_cast<uint16_t>(opt.base_port + 2 * k);
    p.dst = {p.netns ? ipb : lip, port};
    p.src = {p.netns ? ipa : lip, static_cast<uint16_t>(port + 1)};
    Worker r, s;
    r.name = "pair" + std::to_string(k) + "-receiver";
    s.name = "pair" + std::to_string(k) + "-sender";
    r.pair = s.pair = k;
    r.host = p.netns ? host_b : local_host;
    s.host = p.netns ? host_a : local_host;
    s.sender = true;
    p.receiver = static_cast<int>(workers.size());
    workers.push_back(r);
    p.sender = static_cast<int>(workers.size());
    workers.push_back(s);
    pairs.push_back(p);
  }
  Log("%d pairs (%d local, %d across namespaces), %" PRIu64 " messages each, sizes %s 0..%zu, "
      "seed %" PRIu64 ", rundir %s",
      total_pairs, opt.local_pairs, opt.netns_pairs, opt.messages,
      opt.uniform ? "uniform" : "mixed", opt.max_size, opt.seed, opt.rundir.c_str());
  for (auto& [k, v] : opt.env) Log("worker environment: %s=%s", k.c_str(), v.c_str());

  std::string failure;
  // A worker that exits or reports an error before the end fails the run.
  auto broken = [&](std::string* why) {
    for (const Worker& w : workers) {
      if (w.pid < 0) continue;
      if (!w.error.empty() && w.error.rfind("fatal", 0) == 0) {
        *why = w.name + ": " + w.error;
        return true;
      }
      if (w.eof && !w.bye) {
        *why = Describe(w) + " exited early";
        return true;
      }
    }
    return false;
  };

  // 1. Receivers bind first, then senders; then everybody starts at once.
  for (Pair& p : pairs) {
    Worker& r = workers[p.receiver];
    std::vector<std::string> a = {"--role", "receiver", "--bind", p.dst.Str(), "--peer", p.src.Str()};
    for (auto& x : PlanArgs(p)) a.push_back(x);
    if (opt.blocking_receive) a.push_back("--blocking-receive");
    if (!Spawn(r, hosts[r.host], a)) failure = "cannot start " + r.name;
  }
  std::string why;
  auto all = [&](bool sender, bool Worker::*flag) {
    return [&, sender, flag] {
      for (const Worker& w : workers)
        if (w.sender == sender && w.pid > 0 && !(w.*flag)) return false;
      return true;
    };
  };
  if (failure.empty() && !WaitFor(30, all(false, &Worker::bound), broken, &why))
    failure = why.empty() ? "receivers did not bind within 30 s" : why;
  if (failure.empty()) {
    for (Pair& p : pairs) {
      Worker& s = workers[p.sender];
      std::vector<std::string> a = {"--role", "sender", "--bind", p.src.Str(), "--dest", p.dst.Str()};
      for (auto& x : PlanArgs(p)) a.push_back(x);
      if (!Spawn(s, hosts[s.host], a)) failure = "cannot start " + s.name;
    }
  }
  if (failure.empty() && !WaitFor(30, all(true, &Worker::bound), broken, &why))
    failure = why.empty() ? "senders did not bind within 30 s" : why;

  // 2. Traffic, until every receiver has every message and every sender is done.
  double t0 = Now(), t_end = t0;
  last_progress_time = t0;
  if (failure.empty()) {
    for (Pair& p : pairs) Command(workers[p.sender], "go");
    double last_report = t0;
    auto done = [&] {
      for (Pair& p : pairs)
        if (!workers[p.receiver].complete || !workers[p.sender].sent) return false;
      return true;
    };
    while (!done()) {
      if (interrupted) {
        failure = "interrupted";
        break;
      }
      if (broken(&why)) {
        failure = why;
        break;
      }
      double now = Now();
      if (now - t0 > opt.timeout) {
        failure = "time limit (--timeout " + std::to_string(static_cast<int>(opt.timeout)) + " s) reached";
        break;
      }
      if (now - last_progress_time > opt.stall) {
        failure = "no progress for " + std::to_string(static_cast<int>(opt.stall)) + " s (stalled)";
        break;
      }
      if (now - last_report >= 5) {
        last_report = now;
        uint64_t got = 0;
        for (Pair& p : pairs) got += workers[p.receiver].progress;
        Log("%.0f s: %" PRIu64 " of %" PRIu64 " messages received", now - t0, got,
            opt.messages * pairs.size());
      }
      Pump(200);
    }
    t_end = Now();
  }

  Log("traffic %s after %.2f s", failure.empty() ? "complete" : "stopped", t_end - t0);
  // 3. Counters, while every engine is still alive: one worker per host (RDS_INFO is
  //    host-wide). Receivers first: a sender may be blocked in sendto after a failure (its
  //    command thread still answers).
  std::map<int, int> asked;  // host -> worker
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < workers.size(); i++) {
      Worker& w = workers[i];
      if (w.pid < 0 || w.eof || asked.count(w.host) || w.sender != (pass == 1)) continue;
      asked[w.host] = static_cast<int>(i);
      w.have_counters = false;
      Command(w, "counters");
    }
  }
  auto have_all_counters = [&] {
    for (auto& [h, i] : asked)
      if (!workers[i].have_counters && !workers[i].eof) return false;
    return true;
  };
  auto never = [](std::string*) { return false; };
  if (!WaitFor(15, have_all_counters, never, &why)) Log("counters: not every host answered");

  // 4. Confirm to the senders (they close and exit), then let the receivers drain and report.
  for (Pair& p : pairs) Command(workers[p.sender], "confirmed");
  auto senders_gone = [&] {
    for (Pair& p : pairs)
      if (!workers[p.sender].eof && workers[p.sender].pid > 0) return false;
    return true;
  };
  if (!WaitFor(failure.empty() ? 30 : 5, senders_gone, never, &why) && failure.empty())
    failure = "a sender did not exit within 30 s of its confirmation";
  for (Pair& p : pairs) Command(workers[p.receiver], "quit");
  auto receivers_gone = [&] {
    for (Pair& p : pairs)
      if (!workers[p.receiver].eof && workers[p.receiver].pid > 0) return false;
    return true;
  };
  if (!WaitFor(30, receivers_gone, never, &why) && failure.empty())
    failure = "a receiver did not exit within 30 s of quit";
  KillAll();
  Log("workers finished %.2f s after the traffic", Now() - t_end);
  for (Worker& w : workers) {
    if (w.pid > 0 && failure.empty() && (!WIFEXITED(w.status) || WEXITSTATUS(w.status) != 0)) {
      failure = Describe(w) + " failed";
    }
  }

  // 5. Summary.
  uint64_t t_sent = 0, t_recv = 0, t_lost = 0, t_dup = 0, t_reord = 0, t_corrupt = 0,
           t_mismatch = 0, t_bytes = 0;
  bool verify_failed = false;
  for (Pair& p : pairs) {
    Worker& s = workers[p.sender];
    Worker& r = workers[p.receiver];
    uint64_t sent = s.sent ? U64(s.kv, "count") : 0;
    uint64_t received = U64(r.kv, "received"), distinct = U64(r.kv, "distinct");
    uint64_t lost = r.final ? U64(r.kv, "lost") : opt.messages - r.progress;
    uint64_t dup = U64(r.kv, "dup"), reord = U64(r.kv, "reordered"), corrupt = U64(r.kv, "corrupt");
    bool sha_ok = s.sent && r.final && s.kv["sha"] == r.kv["sha"];
    t_sent += sent;
    t_recv += received;
    t_lost += lost;
    t_dup += dup;
    t_reord += reord;
    t_corrupt += corrupt;
    t_mismatch += sha_ok ? 0 : 1;
    t_bytes += U64(s.kv, "bytes");
    if (lost || dup || reord || corrupt || !sha_ok || sent != opt.messages ||
        received != opt.messages)
      verify_failed = true;
    printf("pair id=%d kind=%s src=%s dst=%s sent=%" PRIu64 " received=%" PRIu64
           " distinct=%" PRIu64 " lost=%" PRIu64 " dup=%" PRIu64 " reordered=%" PRIu64
           " corrupt=%" PRIu64 " sha=%s tx_sha=%.16s rx_sha=%.16s\n",
           p.id, p.netns ? "netns" : "local", p.src.Str().c_str(), p.dst.Str().c_str(), sent,
           received, distinct, lost, dup, reord, corrupt, sha_ok ? "match" : "MISMATCH",
           s.kv["sha"].c_str(), r.kv["sha"].c_str());
  }
  static const char* kShown[] = {"conn_reset", "shim_retransmitted", "shim_fault_injected",
                                 "recv_drop_old_seq", "shim_peer_restarts",
                                 "shim_send_drop_no_route", "shim_send_drop_cancelled",
                                 "shim_conn_drop_overload", "shim_conn_connected",
                                 "shim_conn_accepted", "shim_acks_sent",
                                 "shim_shm_payloads_sent", "shim_shm_payloads_received",
                                 "shim_shm_arena_full", "shim_tcp_payloads_spliced",
                                 "shim_recv_direct"};
  std::map<std::string, uint64_t> total_counters;
  bool counters_known = true;
  for (size_t h = 0; h < hosts.size(); h++) {
    std::string line = "host name=" + hosts[h].name + " rundir=" + hosts[h].rundir;
    auto it = asked.find(static_cast<int>(h));
    const Worker* w = it == asked.end() ? nullptr : &workers[it->second];
    if (!w || !w->have_counters || !w->counters_error.empty()) {
      counters_known = false;
      line += " counters=unknown";
      if (w && !w->counters_error.empty()) line += " (" + w->counters_error + ")";
    } else {
      for (const char* name : kShown) {
        auto c = w->counters.find(name);
        uint64_t v = c == w->counters.end() ? 0 : c->second;
        total_counters[name] += v;
        line += std::string(" ") + name + "=" + std::to_string(v);
      }
    }
    printf("%s\n", line.c_str());
  }
  double secs = std::max(t_end - t0, 1e-6);
  printf("total pairs=%zu messages=%" PRIu64 " sent=%" PRIu64 " received=%" PRIu64 " lost=%" PRIu64
         " dup=%" PRIu64 " reordered=%" PRIu64 " corrupt=%" PRIu64 " sha_mismatch=%" PRIu64
         " reconnects=%s retransmitted=%s faults=%s old_seq_dropped=%s bytes=%" PRIu64
         " seconds=%.2f msgs_per_s=%.0f mib_per_s=%.1f seed=%" PRIu64 "\n",
         pairs.size(), opt.messages * pairs.size(), t_sent, t_recv, t_lost, t_dup, t_reord,
         t_corrupt, t_mismatch,
         counters_known ? std::to_string(total_counters["conn_reset"]).c_str() : "unknown",
         counters_known ? std::to_string(total_counters["shim_retransmitted"]).c_str() : "unknown",
         counters_known ? std::to_string(total_counters["shim_fault_injected"]).c_str() : "unknown",
         counters_known ? std::to_string(total_counters["recv_drop_old_seq"]).c_str() : "unknown",
         t_bytes, secs, t_recv / secs, t_bytes / secs / 1048576.0, opt.seed);
  int rc = 0;
  if (!failure.empty()) {
    printf("result=FAIL reason=\"%s\"\n", failure.c_str());
    rc = 3;
  } else if (verify_failed) {
    printf("result=FAIL reason=\"lost, duplicated, reordered or corrupted messages, or a SHA-256 "
           "mismatch\"\n");
    rc = 1;
  } else {
    printf("result=PASS\n");
  }
  fflush(stdout);
  if (rc != 0) {
    for (const Worker& w : workers) {
      if (w.pid >= 0) ShowWorker(w);
    }
    if (made_rundir && !opt.keep_rundir) {
      opt.keep_rundir = true;
      fprintf(stderr, "rds-soak: kept %s (worker logs)\n", opt.rundir.c_str());
    }
  }
  RemoveRundir();
  if (interrupted) return 130;
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  std::string role;
  Addr bind_addr, peer;
  Plan plan;
  plan.messages = 0;
  bool have_bind = false, have_peer = false;
  const rds::tools::ToolHelp help = Help();
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (rds::tools::HelpOrVersion(a, help)) return 0;
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) exit(Usage());
      return argv[++i];
    };
    auto num = [&]() -> long long {
      std::string v = val();
      char* end = nullptr;
      long long x = strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end || x < 0) exit(Usage());
      return x;
    };
    if (a == "--role") role = val();
    else if (a == "--bind") have_bind = ParseAddr(val(), &bind_addr) || (exit(Usage()), false);
    else if (a == "--peer" || a == "--dest") have_peer = ParseAddr(val(), &peer) || (exit(Usage()), false);
    else if (a == "--pair") plan.pair = static_cast<uint32_t>(num());
    else if (a == "--messages") opt.messages = plan.messages = num();
    else if (a == "--seed") opt.seed = plan.seed = num(), opt.seed_set = true;
    else if (a == "--max-size") opt.max_size = plan.max_size = num();
    else if (a == "--sizes") {
      std::string s = val();
      if (s != "mixed" && s != "uniform") return Usage();
      opt.uniform = plan.uniform = s == "uniform";
    } else if (a == "--preload") opt.preload = val();
    else if (a == "--local-pairs") opt.local_pairs = num();
    else if (a == "--netns-pairs") opt.netns_pairs = num();
    else if (a == "--local-addr") opt.local_ip = val();
    else if (a == "--ns-a") opt.ns_a = val();
    else if (a == "--ns-b") opt.ns_b = val();
    else if (a == "--ip-a") opt.ip_a = val();
    else if (a == "--ip-b") opt.ip_b = val();
    else if (a == "--base-port") opt.base_port = num();
    else if (a == "--rundir") opt.rundir = val();
    else if (a == "--keep-rundir") opt.keep_rundir = true;
    else if (a == "--timeout") opt.timeout = num();
    else if (a == "--stall") opt.stall = num();
    else if (a == "--fault-reset-every") opt.env.push_back({"RDS_PRELOAD_FAULT_RESET_EVERY", val()});
    else if (a == "--fault-reset-permille") opt.env.push_back({"RDS_PRELOAD_FAULT_RESET_PERMILLE", val()});
    else if (a == "--fault-cut-permille") opt.env.push_back({"RDS_PRELOAD_FAULT_CUT_PERMILLE", val()});
    else if (a == "--fault-connect-fail-permille")
      opt.env.push_back({"RDS_PRELOAD_FAULT_CONNECT_FAIL_PERMILLE", val()});
    else if (a == "--fault-connect-delay-ms")
      opt.env.push_back({"RDS_PRELOAD_FAULT_CONNECT_DELAY_MS", val()});
    else if (a == "--env") {
      std::string kv = val();
      size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) return Usage();
      opt.env.push_back({kv.substr(0, eq), kv.substr(eq + 1)});
    } else if (a == "--quiet") opt.quiet = true;
    else if (a == "--blocking-receive") opt.blocking_receive = true;
    else return Usage();
  }
  if (opt.max_size > 1048576) return Usage();

  if (role == "receiver" || role == "sender") {
    if (!have_bind || !have_peer || plan.messages == 0) return Usage();
    if (!PreloadMapped()) {
      Say("fatal the shim is not preloaded in this worker (LD_PRELOAD=%s)",
          getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "");
      return 3;
    }
    signal(SIGPIPE, SIG_IGN);
    return role == "receiver" ? RunReceiver(plan, bind_addr, peer, opt.blocking_receive)
                              : RunSender(plan, bind_addr, peer);
  }
  if (!role.empty()) return Usage();
  if (opt.local_pairs + opt.netns_pairs <= 0 || opt.messages == 0) return Usage();
  if (opt.netns_pairs > 0 &&
      (opt.ns_a.empty() || opt.ns_b.empty() || opt.ip_a.empty() || opt.ip_b.empty())) {
    fprintf(stderr, "rds-soak: --netns-pairs needs --ns-a, --ip-a, --ns-b and --ip-b\n");
    return 2;
  }
  uint32_t ip;
  if (!ParseIp(opt.local_ip, &ip) || (opt.netns_pairs > 0 && (!ParseIp(opt.ip_a, &ip) ||
                                                               !ParseIp(opt.ip_b, &ip)))) {
    fprintf(stderr, "rds-soak: bad IPv4 address\n");
    return 2;
  }
  if (opt.base_port < 2 || opt.base_port + 2 * (opt.local_pairs + opt.netns_pairs) > 65535) {
    fprintf(stderr, "rds-soak: --base-port out of range\n");
    return 2;
  }
  return Launch();
}
