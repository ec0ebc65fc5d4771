// rds-bench — the shim's cost over the bare transport, measured side by side (issue 6).
//
//   rds-bench --preload build/preload/librds_preload.so [options]
//
// For each placement (same host over loopback; two network-namespace hosts over a veth pair)
// and each message size it runs, in one invocation and with the same process placement:
//   * latency: a ping-pong between two processes, p50/p99/mean round trip;
//   * latency-poll, latency-epoll: the same, each receive preceded by a poll() for POLLIN on the
//     socket, as rds-stress and rds-ping wait, or by an epoll_wait() on a set holding it, as
//     event loops such as Python's asyncio wait (--poll-lat-sizes, default 64 B only);
//   * rate: one sender process streams messages one way to one receiver process, one send call
//     per message; messages/s and payload MB/s at the receiver, and for messages of 64 KiB and
//     more the share of the time the receiver got nothing for 1 ms or more (stalls);
// once over AF_RDS through the preloaded shim, once over raw TCP carrying the same 48-byte
// RDS framing (one writev per message, buffered reads, TCP_NODELAY) and, on the same host, once
// over a Unix SOCK_SEQPACKET socket pair (the floor of any same-host IPC: issue 19), each with
// the CPU time both processes used (user + system) per message or round trip. Every
// measurement runs in each CPU placement (--cpus): server and client pinned to different CPUs
// (split), both pinned to one (same), and left to the scheduler (none). Then the idle cost: one
// process holding N bound sockets (user-space memory per socket, CPU while idle). Then scale, on
// the same host: one hub process binds N sockets (--scale-sockets, default 10,000) and echoes
// every message, P peer processes (--scale-peers, default 64) each send one message to every
// port of their share of the hub's and check each echo (content and source port), twice; the
// hub then counts its links to each peer engine (connected AF_UNIX stream sockets by
// SO_PEERCRED), which the target wants at most one of. The hub waits with epoll when the fd limit
// allows the shim's two fds per epoll-watched socket, else with poll (--scale-wait). It prints a
// table with the ratios against issue 6's targets, and writes a CSV and (with gnuplot) a PNG.
// With --trials N each latency and rate measurement runs N times, shim and TCP alternating; the
// table and plot then give medians and each ratio is the median of the per-trial ratios.
//
// The bench itself is a plain program; it re-executes itself as the worker processes
// (`--worker=...`), under LD_PRELOAD for the RDS runs only. Namespace hosts need root and
// `ip netns`; without them that placement is skipped with a message.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tools/tool_flags.h"

#ifndef AF_RDS
#define AF_RDS 21
#endif

namespace {

constexpr size_t kHeader = 48;            // struct rds_header
constexpr size_t kMaxSize = 1 << 20;      // RDS_MAX_MSG_SIZE
constexpr size_t kEndMarkerSize = 1;      // a stream ends with one 1-byte message
// The Unix baseline's largest message: a SOCK_SEQPACKET record must fit the send buffer, which
// only root can raise past net.core.wmem_max (208 KiB by default).
constexpr size_t kUnixMaxSize = 64 * 1024;
// A stream's sink counts gaps of this length or more between messages as stalls, for
// messages of kStallTimedMinSize bytes and more.
constexpr double kStallGapSec = 1e-3;
constexpr size_t kStallTimedMinSize = 64 * 1024;

[[noreturn]] void Die(const char* what) {
  fprintf(stderr, "rds-bench: %s: %s\n", what, strerror(errno));
  exit(1);
}

double NowSec() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

size_t ParseSize(const std::string& s) {
  char* end = nullptr;
  double v = strtod(s.c_str(), &end);
  std::string unit = end ? end : "";
  if (unit == "K" || unit == "k" || unit == "KiB") v *= 1024;
  else if (unit == "M" || unit == "MiB") v *= 1024 * 1024;
  else if (!unit.empty() && unit != "B") {
    fprintf(stderr, "rds-bench: bad size '%s'\n", s.c_str());
    exit(2);
  }
  return static_cast<size_t>(v);
}

std::string SizeName(size_t n) {
  if (n >= 1024 * 1024 && n % (1024 * 1024) == 0) return std::to_string(n >> 20) + " MiB";
  if (n >= 1024 && n % 1024 == 0) return std::to_string(n >> 10) + " KiB";
  return std::to_string(n) + " B";
}

// ---------------------------------------------------------------------------
// Workers (one process each). Options arrive as --key=value.

struct WorkerArgs {
  std::string role;          // rds-echo, rds-ping, rds-sink, rds-source, tcp-… likewise
  std::string addr;          // this side's address (servers bind it; clients bind it too)
  std::string peer;          // the server's address (clients)
  int port = 0;
  size_t size = 64;
  double seconds = 1.0;      // scale workers: their time bound instead
  int cpu = -1;
  size_t count = 0;          // scale: the hub's socket count (ports port … port+count-1)
  int peers = 0;             // scale: number of peer processes
  int index = 0;             // scale: this peer's number, 0 … peers-1
  std::string wait = "auto";  // scale hub: epoll, poll, or auto (epoll if the fd limit allows)
  std::string tcp_congestion;  // raw TCP workers: TCP_CONGESTION (empty: the host's default)
};

void PinTo(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) Die("sched_setaffinity");
}

sockaddr_in Addr(const std::string& ip, int port) {
  sockaddr_in sin = {};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, ip.c_str(), &sin.sin_addr) != 1) {
    fprintf(stderr, "rds-bench: bad IPv4 address '%s'\n", ip.c_str());
    exit(2);
  }
  return sin;
}

void Ready() {
  printf("ready\n");
  fflush(stdout);
}

int RdsSocket(const std::string& ip, int port, bool big_buffers = true) {
  int fd = socket(AF_RDS, SOCK_SEQPACKET, 0);
  if (fd < 0) Die("socket(AF_RDS) (is the shim preloaded?)");
  if (big_buffers) {
    // Room for several maximum-size messages in flight, as rds-stress sizes its buffers.
    int buf = 8 << 20;
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf)) != 0) Die("SO_SNDBUF");
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf)) != 0) Die("SO_RCVBUF");
  }
  sockaddr_in sin = Addr(ip, port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0) Die("bind");
  return fd;
}

// Raw TCP with the RDS framing: a 48-byte header (h_len big-endian at offset 16) per message.
class FramedTcp {
 public:
  explicit FramedTcp(int fd) : fd_(fd), buf_(4 << 20) {
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  void Send(const uint8_t* p, size_t n) {
    uint8_t h[kHeader] = {};
    uint32_t be = htonl(static_cast<uint32_t>(n));
    memcpy(h + 16, &be, 4);
    iovec iov[2] = {{h, kHeader}, {const_cast<uint8_t*>(p), n}};
    size_t total = kHeader + n, done = 0;
    while (done < total) {
      ssize_t w = writev(fd_, iov, 2);
      if (w < 0) {
        if (errno == EINTR) continue;
        Die("tcp writev");
      }
      done += static_cast<size_t>(w);
      // Advance the iovecs past what was written (a short write of a large message).
      size_t skip = static_cast<size_t>(w);
      for (iovec& v : iov) {
        size_t k = std::min(skip, v.iov_len);
        v.iov_base = static_cast<uint8_t*>(v.iov_base) + k;
        v.iov_len -= k;
        skip -= k;
      }
    }
  }
  // A whole message is already buffered (a Recv() would not read the socket).
  bool Buffered() const {
    size_t have = end_ - start_;
    if (have < kHeader) return false;
    uint32_t be;
    memcpy(&be, &buf_[start_ + 16], 4);
    return have >= kHeader + ntohl(be);
  }
  // The next message's payload (valid until the next call) and its length; false at EOF.
  bool Recv(const uint8_t** payload, size_t* len) {
    for (;;) {
      size_t have = end_ - start_;
      if (have >= kHeader) {
        uint32_t be;
        memcpy(&be, &buf_[start_ + 16], 4);
        size_t n = ntohl(be);
        if (n > kMaxSize) {
          fprintf(stderr, "rds-bench: bad frame length %zu\n", n);
          exit(1);
        }
        if (have >= kHeader + n) {
          *payload = &buf_[start_ + kHeader];
          *len = n;
          start_ += kHeader + n;
          return true;
        }
      }
      if (start_ > 0 && (buf_.size() - end_ < kHeader + kMaxSize)) {
        memmove(buf_.data(), &buf_[start_], end_ - start_);
        end_ -= start_;
        start_ = 0;
      }
      ssize_t r = read(fd_, &buf_[end_], buf_.size() - end_);
      if (r == 0) return false;
      if (r < 0) {
        if (errno == EINTR) continue;
        Die("tcp read");
      }
      end_ += static_cast<size_t>(r);
    }
  }

 private:
  int fd_;
  std::vector<uint8_t> buf_;
  size_t start_ = 0, end_ = 0;
};

// --tcp-congestion: set before connect/listen (an accepted socket inherits the listener's).
void SetCongestion(int fd, const WorkerArgs& a) {
  if (a.tcp_congestion.empty()) return;
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, a.tcp_congestion.data(),
                 static_cast<socklen_t>(a.tcp_congestion.size())) != 0) {
    Die("TCP_CONGESTION");
  }
}

int TcpListenAccept(const WorkerArgs& a) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0) Die("socket(tcp)");
  SetCongestion(l, a);
  int one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sin = Addr(a.addr, a.port);
  if (bind(l, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0) Die("tcp bind");
  if (listen(l, 1) != 0) Die("listen");
  Ready();
  int fd = accept(l, nullptr, nullptr);
  if (fd < 0) Die("accept");
  close(l);
  return fd;
}

// The Unix baseline's rendezvous: an abstract name per port (the run's ports are unique).
sockaddr_un UnixName(int port, socklen_t* len) {
  sockaddr_un un = {};
  un.sun_family = AF_UNIX;
  int n = snprintf(un.sun_path + 1, sizeof(un.sun_path) - 1, "rds-bench-%d-%d", getppid(), port);
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return un;
}

// Unix SOCK_SEQPACKET (the kernel keeps record boundaries: one send and one receive call per
// message, as over RDS) with buffers as large as the RDS runs' where allowed: root may exceed
// net.core.wmem_max/rmem_max (SO_*BUFFORCE), others get those limits.
void UnixBuffers(int fd) {
  int buf = 8 << 20;
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof(buf)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  }
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof(buf)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  }
}

int UnixListenAccept(const WorkerArgs& a) {
  int l = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  if (l < 0) Die("socket(unix)");
  socklen_t len;
  sockaddr_un un = UnixName(a.port, &len);
  if (bind(l, reinterpret_cast<sockaddr*>(&un), len) != 0) Die("unix bind");
  if (listen(l, 1) != 0) Die("unix listen");
  Ready();
  int fd = accept(l, nullptr, nullptr);
  if (fd < 0) Die("unix accept");
  close(l);
  UnixBuffers(fd);
  return fd;
}

int UnixConnect(const WorkerArgs& a) {
  int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  if (fd < 0) Die("socket(unix)");
  UnixBuffers(fd);
  socklen_t len;
  sockaddr_un un = UnixName(a.port, &len);
  if (connect(fd, reinterpret_cast<sockaddr*>(&un), len) != 0) Die("unix connect");
  return fd;
}

int TcpConnect(const WorkerArgs& a) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) Die("socket(tcp)");
  SetCongestion(fd, a);
  sockaddr_in sin = Addr(a.peer, a.port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0) Die("tcp connect");
  return fd;
}

// Ping-pong client: warm up, then time round trips for `seconds`. Prints the result line.
template <typename Exchange>
int PingLoop(const WorkerArgs& a, Exchange exchange) {
  const double warm_until = NowSec() + std::min(0.2, a.seconds / 4);
  uint64_t warm = 0;
  for (; NowSec() < warm_until; ++warm) exchange();
  std::vector<double> rtt;
  rtt.reserve(1 << 20);
  const double end = NowSec() + a.seconds;
  double t = NowSec();
  while (t < end) {
    exchange();
    double t1 = NowSec();
    rtt.push_back((t1 - t) * 1e6);
    t = t1;
  }
  std::sort(rtt.begin(), rtt.end());
  double sum = 0;
  for (double v : rtt) sum += v;
  printf("result count=%zu p50_us=%.3f p99_us=%.3f mean_us=%.3f warm_up=%lu\n", rtt.size(),
         rtt[rtt.size() / 2], rtt[std::min(rtt.size() - 1, rtt.size() * 99 / 100)],
         sum / static_cast<double>(rtt.size()), static_cast<unsigned long>(warm));
  return 0;
}

// Stream receiver: counts messages from the first until the end marker.
template <typename RecvOne>
int SinkLoop(const WorkerArgs& a, RecvOne recv_one) {
  uint64_t msgs = 0, bytes = 0;
  double first = 0;
  // Stalls: the time spent in gaps of kStallGapSec or more between two messages, where the
  // transport delivered nothing (docs/perf/history.md §9.12). Timed for large messages only: a clock read
  // per message would perturb the small-message rates.
  const bool time_stalls = a.size >= kStallTimedMinSize;
  double last = 0, stalled = 0;
  for (;;) {
    size_t n = recv_one();
    if (n == kEndMarkerSize) break;
    if (n != a.size) {
      fprintf(stderr, "rds-bench: received %zu bytes, expected %zu\n", n, a.size);
      return 1;
    }
    if (msgs == 0) {
      first = last = NowSec();
    } else if (time_stalls) {
      const double now = NowSec();
      if (now - last >= kStallGapSec) stalled += now - last;
      last = now;
    }
    ++msgs;
    bytes += n;
  }
  double secs = NowSec() - first;
  // The first message only starts the clock.
  double rate = msgs > 1 ? static_cast<double>(msgs - 1) / secs : 0;
  printf("result msgs=%lu msg_per_s=%.1f mb_per_s=%.3f", static_cast<unsigned long>(msgs), rate,
         rate * static_cast<double>(a.size) / 1e6);
  if (time_stalls && secs > 0) printf(" stalled_pct=%.1f", 100 * stalled / secs);
  printf("\n");
  return 0;
}

// This process's resident set, in KiB (VmRSS of /proc/self/status).
long VmRssKiB() {
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kib = -1;
  while (fgets(line, sizeof(line), f)) {
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  }
  fclose(f);
  return kib;
}

double CpuSeconds() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);  // every thread of the process, the engine's included
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

// Idle cost: `size` bound sockets, then `seconds` of doing nothing. The first socket (which
// starts the engine) is not counted in the per-socket memory.
int IdleWorker(const WorkerArgs& a) {
  rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = std::max<rlim_t>(rl.rlim_cur, std::min<rlim_t>(rl.rlim_max, a.size + 64));
  setrlimit(RLIMIT_NOFILE, &rl);
  std::vector<int> fds;
  fds.push_back(RdsSocket(a.addr, 0, false));
  long before = VmRssKiB();
  for (size_t i = 1; i < a.size; ++i) fds.push_back(RdsSocket(a.addr, 0, false));
  long after = VmRssKiB();
  double cpu0 = CpuSeconds(), t0 = NowSec();
  while (NowSec() - t0 < a.seconds) usleep(100 * 1000);
  double cpu = CpuSeconds() - cpu0, wall = NowSec() - t0;
  printf("result sockets=%zu rss_kib_per_socket=%.3f idle_cpu_pct=%.4f\n", a.size,
         a.size > 1 ? static_cast<double>(after - before) / static_cast<double>(a.size - 1) : 0.0,
         100.0 * cpu / wall);
  return 0;
}

// ---------------------------------------------------------------------------
// Scale (issue 6: "10,000 sockets in one process and 64 peer processes work; connections stay
// <= one per engine pair"). One hub process binds `count` sockets on ports port … port+count-1
// and echoes every message; `peers` peer processes, one socket each, send one message to each of
// their share of the hub's ports (port - base ≡ index mod peers) and check every echo. The
// orchestrator drives them through their stdin: "go" starts a sweep (peers), "count PID…" asks
// the hub for its counts, end of input ends a worker.

// The payload of sweep `round` to hub port `port`: says what it is, then a pattern of both.
void ScalePayload(int round, int port, size_t size, std::vector<uint8_t>* out) {
  out->assign(size, 0);
  for (size_t i = 0; i < size; ++i) out->at(i) = static_cast<uint8_t>(port * 31 + round * 7 + i);
  char head[48];
  int n = snprintf(head, sizeof(head), "rds-bench scale round %d port %d;", round, port);
  memcpy(out->data(), head, std::min(static_cast<size_t>(n), size));
}

int OpenFds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
    --n;  // the directory's own fd
  }
  return n;
}

// This process's same-host engine links by peer process: the connected AF_UNIX stream sockets
// among its fds (every same-host link between two engines is one, DESIGN.md §3.2), counted by
// the pid the kernel recorded for the other end (SO_PEERCRED). This is the kernel's count, not
// the engine's own view: a duplicate link the engine lost track of would show here too. The
// engine's listener (peer credentials: ourselves) and unconnected sockets (pid 0) are left out.
std::map<pid_t, int> UnixLinksByPeer() {
  std::map<pid_t, int> by_peer;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return by_peer;
  const pid_t self = getpid();
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    int fd = atoi(e->d_name);
    if (fd == dirfd(d)) continue;
    int domain = 0, type = 0;
    socklen_t len = sizeof(int);
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_UNIX) continue;
    len = sizeof(int);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    ucred cred = {};
    len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) continue;
    if (cred.pid <= 0 || cred.pid == self) continue;
    ++by_peer[cred.pid];
  }
  closedir(d);
  return by_peer;
}

int ScaleHub(const WorkerArgs& a) {
  // Each RDS socket is a kernel fd (its AF_UNIX datagram backing socket, DESIGN.md §2.1) and,
  // once in an epoll set, one more (its readiness-token sender, §2.3): with epoll the hub needs
  // two fds per socket, with poll one. --wait=auto takes epoll when the fd limit allows it.
  // The engine places its internal fds from 3/4 of the soft limit up when it starts, so the
  // limit is raised before the first RDS call.
  const rlim_t margin = 1024;
  const rlim_t need_epoll = 2 * static_cast<rlim_t>(a.count) + margin;
  const rlim_t need_poll = static_cast<rlim_t>(a.count) + margin;
  const rlim_t need = a.wait == "poll" ? need_poll : need_epoll;
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) Die("getrlimit");
  int raise_err = 0;
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
    rlimit up = {need, need};  // needs CAP_SYS_RESOURCE
    if (setrlimit(RLIMIT_NOFILE, &up) == 0) rl = up;
    else raise_err = errno;
  }
  auto fits = [&](rlim_t n) { return rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= n; };
  const bool use_epoll = a.wait == "epoll" || (a.wait == "auto" && fits(need_epoll));
  if (!fits(use_epoll ? need_epoll : need_poll)) {
    fprintf(stderr,
            "rds-bench: scale hub: %zu sockets waited on with %s need about %lu fds (%d per RDS "
            "socket) but the RLIMIT_NOFILE hard limit is %lu and could not be raised (%s); "
            "raise it (ulimit -Hn, limits.conf) or use fewer --scale-sockets\n",
            a.count, use_epoll ? "epoll" : "poll",
            static_cast<unsigned long>(use_epoll ? need_epoll : need_poll), use_epoll ? 2 : 1,
            static_cast<unsigned long>(rl.rlim_max), strerror(raise_err));
    return 1;
  }
  if (!use_epoll && a.wait == "auto") {
    fprintf(stderr,
            "rds-bench: scale hub: waiting with poll(): epoll would need about %lu fds (2 per "
            "RDS socket: the socket and its readiness-token sender) and the RLIMIT_NOFILE hard "
            "limit is %lu (raising it: %s)\n",
            static_cast<unsigned long>(need_epoll), static_cast<unsigned long>(rl.rlim_max),
            strerror(raise_err));
  }
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) Die("setrlimit(RLIMIT_NOFILE)");

  int ep = -1;
  if (use_epoll && (ep = epoll_create1(EPOLL_CLOEXEC)) < 0) Die("epoll_create1");
  std::vector<int> fds;
  fds.reserve(a.count);
  long rss_base = 0;
  const double t0 = NowSec();
  for (size_t i = 0; i < a.count; ++i) {
    int fd = socket(AF_RDS, SOCK_SEQPACKET, 0);
    int err = errno;
    const char* what = "socket(AF_RDS)";
    if (fd >= 0) {
      sockaddr_in sin = Addr(a.addr, a.port + static_cast<int>(i));
      what = "bind";
      if (bind(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) == 0) {
        epoll_event ev = {};
        ev.events = EPOLLIN;
        ev.data.u32 = static_cast<uint32_t>(i);
        what = "epoll_ctl(EPOLL_CTL_ADD)";
        if (!use_epoll || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0) what = nullptr;
      }
      err = errno;
    }
    if (what) {
      fprintf(stderr,
              "rds-bench: scale hub: socket %zu of %zu (port %d): %s failed: %s "
              "(%d fds open, RLIMIT_NOFILE %lu)\n",
              i + 1, a.count, a.port + static_cast<int>(i), what, strerror(err), OpenFds(),
              static_cast<unsigned long>(rl.rlim_cur));
      return 1;
    }
    fds.push_back(fd);
    if (i == 0) rss_base = VmRssKiB();  // the first socket starts the engine: not counted
  }
  const double bind_seconds = NowSec() - t0;
  const long rss_bound = VmRssKiB();
  const int fds_bound = OpenFds();

  std::vector<uint8_t> buf(kMaxSize + 64);
  std::string input;
  uint64_t echoed = 0, errors = 0;
  // Everything queued on socket i, echoed to its sender.
  auto serve = [&](size_t i) {
    const int fd = fds[i];
    for (;;) {
      sockaddr_in from;
      socklen_t fl = sizeof(from);
      ssize_t r = recvfrom(fd, buf.data(), buf.size(), MSG_DONTWAIT,
                           reinterpret_cast<sockaddr*>(&from), &fl);
      if (r < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errors++ < 5) {
          fprintf(stderr, "rds-bench: scale hub: recvfrom on port %d: %s\n",
                  a.port + static_cast<int>(i), strerror(errno));
        }
        return;
      }
      if (sendto(fd, buf.data(), static_cast<size_t>(r), 0, reinterpret_cast<sockaddr*>(&from),
                 fl) != r) {
        if (errors++ < 5) {
          fprintf(stderr, "rds-bench: scale hub: sendto (echo) from port %d to port %d: %s\n",
                  a.port + static_cast<int>(i), ntohs(from.sin_port), strerror(errno));
        }
        continue;
      }
      ++echoed;
    }
  };
  // The orchestrator's commands on stdin; false at end of input.
  auto command = [&]() {
    char cmd[4096];
    ssize_t r = read(0, cmd, sizeof(cmd));
    if (r < 0 && errno == EINTR) return true;
    if (r <= 0) return false;
    input.append(cmd, static_cast<size_t>(r));
    for (size_t nl; (nl = input.find('\n')) != std::string::npos; input.erase(0, nl + 1)) {
      std::vector<std::string> words = Split(input.substr(0, nl), ' ');
      if (words[0] != "count") continue;
      // "count PID…": links to each of those processes (the peers), and to anyone else.
      std::map<pid_t, int> links = UnixLinksByPeer();
      int linked = 0, max_links = 0, min_links = INT32_MAX, total = 0;
      for (size_t w = 1; w < words.size(); ++w) {
        auto it = links.find(static_cast<pid_t>(atoi(words[w].c_str())));
        int c = it == links.end() ? 0 : it->second;
        if (it != links.end()) links.erase(it);
        linked += c > 0;
        max_links = std::max(max_links, c);
        min_links = std::min(min_links, c);
        total += c;
      }
      int other = 0;
      for (const auto& [pid, c] : links) other += c;
      printf("result sockets=%zu epoll=%d bind_s=%.3f echoed=%lu errors=%lu peers_linked=%d "
             "links=%d max_links_per_peer=%d min_links_per_peer=%d other_links=%d hub_fds=%d "
             "hub_fds_bound=%d hub_rss_kib=%ld rss_kib_per_socket=%.3f\n",
             a.count, use_epoll, bind_seconds, static_cast<unsigned long>(echoed),
             static_cast<unsigned long>(errors), linked, total, max_links,
             words.size() > 1 ? min_links : 0, other, OpenFds(), fds_bound, VmRssKiB(),
             a.count > 1 ? static_cast<double>(rss_bound - rss_base) /
                               static_cast<double>(a.count - 1)
                         : 0.0);
      fflush(stdout);
    }
    return true;
  };

  if (use_epoll) {
    epoll_event in_ev = {};
    in_ev.events = EPOLLIN;
    in_ev.data.u32 = UINT32_MAX;  // stdin
    if (epoll_ctl(ep, EPOLL_CTL_ADD, 0, &in_ev) != 0) Die("epoll_ctl(stdin)");
  }
  std::vector<pollfd> pfds;  // poll: every socket, then stdin
  if (!use_epoll) {
    for (int fd : fds) pfds.push_back({fd, POLLIN, 0});
    pfds.push_back({0, POLLIN, 0});
  }
  Ready();
  std::vector<epoll_event> events(1024);
  for (;;) {
    if (use_epoll) {
      int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), -1);
      if (n < 0 && errno != EINTR) Die("epoll_wait");
      for (int k = 0; k < n; ++k) {
        uint32_t i = events[k].data.u32;
        if (i == UINT32_MAX) {
          if (!command()) return errors == 0 ? 0 : 1;
        } else if (i < fds.size()) {
          serve(i);
        }
      }
    } else {
      int n = poll(pfds.data(), pfds.size(), -1);
      if (n < 0 && errno != EINTR) Die("poll");
      for (size_t i = 0; n > 0 && i < fds.size(); ++i) {
        if (pfds[i].revents & (POLLIN | POLLERR | POLLHUP)) serve(i);
      }
      if (n > 0 && pfds.back().revents && !command()) return errors == 0 ? 0 : 1;
    }
  }
}

int ScalePeer(const WorkerArgs& a) {
  int fd = RdsSocket(a.addr, 0);  // 8 MiB buffers: a whole share in flight never blocks
  timeval tv = {static_cast<time_t>(a.seconds), 0};
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) Die("SO_RCVTIMEO");
  std::vector<int> ports;
  for (size_t i = static_cast<size_t>(a.index); i < a.count; i += static_cast<size_t>(a.peers)) {
    ports.push_back(a.port + static_cast<int>(i));
  }
  const size_t size = std::max<size_t>(a.size, 64);
  Ready();
  std::vector<uint8_t> msg, want, buf(kMaxSize + 64);
  std::vector<uint8_t> got(a.count);
  char line[64];
  int round = 0;
  while (fgets(line, sizeof(line), stdin)) {
    if (strcmp(line, "go\n") != 0) continue;
    ++round;
    size_t ok = 0, unexpected = 0, reported = 0;
    auto report = [&](const std::string& what) {
      if (reported++ >= 5) return;
      fprintf(stderr, "rds-bench: scale peer %d round %d: %s\n", a.index, round, what.c_str());
    };
    std::fill(got.begin(), got.end(), 0);
    const double t0 = NowSec();
    size_t sent = 0;
    for (int port : ports) {
      ScalePayload(round, port, size, &msg);
      sockaddr_in to = Addr(a.peer, port);
      if (sendto(fd, msg.data(), size, 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)) !=
          static_cast<ssize_t>(size)) {
        report("sendto port " + std::to_string(port) + ": " + strerror(errno));
        continue;
      }
      ++sent;
    }
    // One echo per message sent; anything else is counted and reported.
    for (size_t k = 0; k < sent;) {
      sockaddr_in from;
      socklen_t fl = sizeof(from);
      ssize_t r = recvfrom(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &fl);
      if (r < 0) {
        if (errno == EINTR) continue;
        report("recvfrom after " + std::to_string(k) + " of " + std::to_string(sent) +
               " echoes: " + strerror(errno));
        break;
      }
      ++k;
      int port = ntohs(from.sin_port);
      size_t i = static_cast<size_t>(port - a.port);
      if (from.sin_addr.s_addr != Addr(a.peer, 0).sin_addr.s_addr || port < a.port ||
          i >= a.count || i % static_cast<size_t>(a.peers) != static_cast<size_t>(a.index)) {
        report("echo from port " + std::to_string(port) + ", not one of ours");
        ++unexpected;
        continue;
      }
      if (got[i]++) {
        report("second echo from port " + std::to_string(port));
        ++unexpected;
        continue;
      }
      ScalePayload(round, port, size, &want);
      if (static_cast<size_t>(r) != size || memcmp(buf.data(), want.data(), size) != 0) {
        report("echo from port " + std::to_string(port) + " has the wrong content (" +
               std::to_string(r) + " bytes)");
        continue;
      }
      ++ok;
    }
    // Every port of our share not echoed intact is a failure, and so is every extra echo.
    const size_t bad = ports.size() - ok + unexpected;
    printf("result round=%d ok=%zu failed=%zu seconds=%.3f\n", round, ok, bad, NowSec() - t0);
    fflush(stdout);
  }
  close(fd);
  return 0;
}

// --wait=poll (latency-poll): a receiver sleeps in poll() until the socket is readable, then
// receives (rds-stress's loop); --wait=epoll (latency-epoll): in epoll_wait() on a set holding
// the socket, level-triggered (an event loop's); otherwise the receive call itself blocks.
void WaitReadable(const WorkerArgs& a, int fd) {
  if (a.wait == "poll") {
    pollfd p = {fd, POLLIN, 0};
    while (poll(&p, 1, -1) < 0) {
      if (errno != EINTR) Die("poll");
    }
  } else if (a.wait == "epoll") {
    static int epfd = -1, watched = -1;
    if (watched != fd) {
      if (epfd < 0 && (epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) Die("epoll_create1");
      epoll_event ev = {};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) Die("epoll_ctl");
      watched = fd;
    }
    epoll_event ev;
    while (epoll_wait(epfd, &ev, 1, -1) < 0) {
      if (errno != EINTR) Die("epoll_wait");
    }
  }
}

int RunWorker(const WorkerArgs& a) {
  PinTo(a.cpu);
  alarm(static_cast<unsigned>(a.seconds) + 60);  // never outlive a broken run
  if (a.role == "rds-idle") return IdleWorker(a);
  if (a.role == "rds-scale-hub") return ScaleHub(a);
  if (a.role == "rds-scale-peer") return ScalePeer(a);
  std::vector<uint8_t> buf(kMaxSize + 64, 0x5a);

  if (a.role == "rds-echo" || a.role == "rds-sink") {
    int fd = RdsSocket(a.addr, a.port);
    Ready();
    if (a.role == "rds-sink") {
      sockaddr_in from;
      socklen_t fl = sizeof(from);
      int rc = SinkLoop(a, [&] {
        fl = sizeof(from);
        ssize_t n = recvfrom(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &fl);
        if (n < 0) Die("rds recv");
        return static_cast<size_t>(n);
      });
      // Answer the end marker: the source may close now.
      if (sendto(fd, buf.data(), 1, 0, reinterpret_cast<sockaddr*>(&from), fl) != 1) {
        Die("rds sendto (end of stream answer)");
      }
      return rc;
    }
    for (;;) {
      sockaddr_in from;
      socklen_t fl = sizeof(from);
      WaitReadable(a, fd);
      ssize_t n = recvfrom(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &fl);
      if (n < 0) Die("rds recvfrom");
      if (sendto(fd, buf.data(), static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from),
                 fl) != n) {
        Die("rds sendto (echo)");
      }
    }
  }
  if (a.role == "rds-ping" || a.role == "rds-source") {
    int fd = RdsSocket(a.addr, 0);
    sockaddr_in peer = Addr(a.peer, a.port);
    if (connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof(peer)) != 0) Die("rds connect");
    if (a.role == "rds-ping") {
      return PingLoop(a, [&] {
        if (send(fd, buf.data(), a.size, 0) != static_cast<ssize_t>(a.size)) Die("rds send");
        WaitReadable(a, fd);
        if (recv(fd, buf.data(), buf.size(), 0) != static_cast<ssize_t>(a.size)) Die("rds recv");
      });
    }
    const double end = NowSec() + a.seconds;
    uint64_t i = 0;
    for (;;) {
      if ((++i & 63) == 0 && NowSec() >= end) break;
      if (send(fd, buf.data(), a.size, 0) != static_cast<ssize_t>(a.size)) Die("rds send");
    }
    if (send(fd, buf.data(), kEndMarkerSize, 0) != 1) Die("rds send (end marker)");
    // Closing an RDS socket cancels what it has not yet transmitted (kernel rds_release), so
    // wait for the sink's answer to the end marker first.
    if (recv(fd, buf.data(), buf.size(), 0) < 0) Die("rds recv (end of stream answer)");
    close(fd);
    return 0;
  }
  if (a.role == "unix-echo" || a.role == "unix-sink") {
    const int fd = UnixListenAccept(a);
    if (a.role == "unix-sink") {
      int rc = SinkLoop(a, [&] {
        ssize_t n = recv(fd, buf.data(), buf.size(), 0);
        if (n < 0) Die("unix recv");
        return static_cast<size_t>(n);
      });
      if (send(fd, buf.data(), 1, 0) != 1) Die("unix send (end of stream answer)");
      return rc;
    }
    for (;;) {
      WaitReadable(a, fd);
      ssize_t n = recv(fd, buf.data(), buf.size(), 0);
      if (n <= 0) return n == 0 ? 0 : 1;
      if (send(fd, buf.data(), static_cast<size_t>(n), 0) != n) Die("unix send (echo)");
    }
  }
  if (a.role == "unix-ping" || a.role == "unix-source") {
    const int fd = UnixConnect(a);
    if (a.role == "unix-ping") {
      return PingLoop(a, [&] {
        if (send(fd, buf.data(), a.size, 0) != static_cast<ssize_t>(a.size)) Die("unix send");
        WaitReadable(a, fd);
        if (recv(fd, buf.data(), buf.size(), 0) != static_cast<ssize_t>(a.size)) Die("unix recv");
      });
    }
    const double end = NowSec() + a.seconds;
    uint64_t i = 0;
    for (;;) {
      if ((++i & 63) == 0 && NowSec() >= end) break;
      if (send(fd, buf.data(), a.size, 0) != static_cast<ssize_t>(a.size)) Die("unix send");
    }
    if (send(fd, buf.data(), kEndMarkerSize, 0) != 1) Die("unix send (end marker)");
    if (recv(fd, buf.data(), buf.size(), 0) < 0) Die("unix recv (end of stream answer)");
    return 0;
  }
  if (a.role == "tcp-echo" || a.role == "tcp-sink") {
    const int fd = TcpListenAccept(a);
    FramedTcp t(fd);
    const uint8_t* p;
    size_t n;
    if (a.role == "tcp-sink") {
      return SinkLoop(a, [&] {
        if (!t.Recv(&p, &n)) {
          fprintf(stderr, "rds-bench: tcp stream ended before the end marker\n");
          exit(1);
        }
        return n;
      });
    }
    for (;;) {
      if (!t.Buffered()) WaitReadable(a, fd);
      if (!t.Recv(&p, &n)) return 0;
      t.Send(p, n);
    }
  }
  if (a.role == "tcp-ping" || a.role == "tcp-source") {
    int fd = TcpConnect(a);
    FramedTcp t(fd);
    if (a.role == "tcp-ping") {
      return PingLoop(a, [&] {
        const uint8_t* p;
        size_t n;
        t.Send(buf.data(), a.size);
        if (!t.Buffered()) WaitReadable(a, fd);
        if (!t.Recv(&p, &n) || n != a.size) {
          fprintf(stderr, "rds-bench: bad tcp echo\n");
          exit(1);
        }
      });
    }
    const double end = NowSec() + a.seconds;
    uint64_t i = 0;
    for (;;) {
      if ((++i & 63) == 0 && NowSec() >= end) break;
      t.Send(buf.data(), a.size);
    }
    t.Send(buf.data(), kEndMarkerSize);
    shutdown(fd, SHUT_WR);
    char c;
    while (read(fd, &c, 1) > 0) {
    }
    return 0;
  }
  fprintf(stderr, "rds-bench: unknown worker role '%s'\n", a.role.c_str());
  return 2;
}

// ---------------------------------------------------------------------------
// The orchestrator.

struct Options {
  std::string preload;
  std::vector<size_t> lat_sizes = {64, 1024, 8192, 65536, 1 << 20};
  std::vector<size_t> poll_lat_sizes = {64};
  std::vector<size_t> rate_sizes = {64, 1024, 8192, 65536, 1 << 20};
  double seconds = 1.0;
  // Each measurement is repeated this many times, shim and TCP alternating (the order flips
  // every trial); the summary reports medians and the range of the per-trial ratios.
  int trials = 1;
  std::vector<std::string> placements = {"host", "netns"};
  // CPU placements, each measured: split (server cpu0, client cpu1), same (both cpu0), none.
  std::vector<std::string> cpus = {"split", "same", "none"};
  std::string csv = "rds-bench.csv";
  std::string plot = "rds-bench.png";
  std::vector<std::string> transports = {"rds", "tcp", "unix"};  // unix: same host only
  size_t idle_sockets = 1000;  // 0: no idle measurement
  size_t scale_sockets = 10000;  // 0: no scale measurement
  int scale_peers = 64;
  std::string scale_wait = "auto";  // the hub's wait: epoll | poll | auto
  // Congestion control of every TCP connection measured: the raw TCP baseline's sockets and
  // the shim's links (RDS_PRELOAD_TCP_CONGESTION), so both use the same; empty: the host's.
  std::string tcp_congestion;
};

struct Host {
  std::string netns;  // empty: this namespace
  std::string addr;
};

struct Worker {
  pid_t pid = -1;
  FILE* out = nullptr;
  int in = -1;  // the worker's stdin, when it takes commands
  double cpu_seconds = 0;  // user + system of the whole process, once Finish() reaped it
};

std::string g_self;
std::string g_rundir;
std::vector<std::string> g_namespaces;
std::vector<pid_t> g_children;

void Cleanup() {
  for (pid_t p : g_children) kill(p, SIGKILL);
  for (pid_t p : g_children) waitpid(p, nullptr, 0);
  g_children.clear();
  for (const std::string& ns : g_namespaces) {
    std::string cmd = "ip netns del " + ns + " 2>/dev/null";
    if (system(cmd.c_str()) != 0) fprintf(stderr, "rds-bench: could not delete netns %s\n", ns.c_str());
  }
  g_namespaces.clear();
  if (!g_rundir.empty()) {
    std::string cmd = "rm -rf '" + g_rundir + "'";
    if (system(cmd.c_str()) != 0) fprintf(stderr, "rds-bench: could not remove %s\n", g_rundir.c_str());
  }
}

void OnSignal(int sig) {
  Cleanup();
  signal(sig, SIG_DFL);
  raise(sig);
}

// `with_stdin`: the worker reads commands from a pipe (Worker::in); otherwise it inherits ours.
Worker Spawn(const Options& o, const Host& h, bool rds, std::vector<std::string> args,
             bool with_stdin = false) {
  int pipefd[2];
  if (pipe(pipefd) != 0) Die("pipe");
  int infd[2] = {-1, -1};
  // Close-on-exec, so that workers started later do not hold this one's input open.
  if (with_stdin && pipe2(infd, O_CLOEXEC) != 0) Die("pipe2");
  pid_t pid = fork();
  if (pid < 0) Die("fork");
  if (pid == 0) {
    dup2(pipefd[1], 1);
    close(pipefd[0]);
    close(pipefd[1]);
    if (with_stdin) {
      dup2(infd[0], 0);
      close(infd[0]);
      close(infd[1]);
    }
    std::vector<std::string> argv;
    if (!h.netns.empty()) argv = {"ip", "netns", "exec", h.netns};
    argv.push_back("env");
    if (rds) {
      argv.push_back("LD_PRELOAD=" + o.preload);
      argv.push_back("RDS_PRELOAD_RUNDIR=" + g_rundir + (h.netns.empty() ? "" : "/" + h.netns));
      if (!o.tcp_congestion.empty()) {
        argv.push_back("RDS_PRELOAD_TCP_CONGESTION=" + o.tcp_congestion);
      }
    } else {
      argv.push_back("-u");
      argv.push_back("LD_PRELOAD");
    }
    argv.push_back(g_self);
    for (std::string& s : args) argv.push_back(std::move(s));
    std::vector<char*> c;
    for (std::string& s : argv) c.push_back(s.data());
    c.push_back(nullptr);
    execvp(c[0], c.data());
    _exit(127);
  }
  close(pipefd[1]);
  if (with_stdin) close(infd[0]);
  g_children.push_back(pid);
  return {pid, fdopen(pipefd[0], "r"), infd[1]};
}

// The next line of a worker's output, or "" if it exited or took longer than `timeout` s.
std::string ReadLine(Worker& w, double timeout) {
  pollfd pfd = {fileno(w.out), POLLIN, 0};
  if (poll(&pfd, 1, static_cast<int>(timeout * 1000)) <= 0) return "";
  char line[512];
  if (!fgets(line, sizeof(line), w.out)) return "";
  std::string s = line;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

bool Finish(Worker& w, bool kill_it) {
  if (w.in >= 0) close(w.in);  // end of input: a command-driven worker exits
  w.in = -1;
  if (kill_it) kill(w.pid, SIGKILL);
  int status = 0;
  rusage ru = {};
  wait4(w.pid, &status, 0, &ru);
  w.cpu_seconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                  static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  g_children.erase(std::remove(g_children.begin(), g_children.end(), w.pid), g_children.end());
  fclose(w.out);
  return kill_it || (WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

std::map<std::string, double> ParseResult(const std::string& line) {
  std::map<std::string, double> kv;
  if (line.rfind("result ", 0) != 0) return kv;
  for (const std::string& f : Split(line.substr(7), ' ')) {
    size_t eq = f.find('=');
    if (eq != std::string::npos) kv[f.substr(0, eq)] = strtod(f.c_str() + eq + 1, nullptr);
  }
  return kv;
}

struct Row {
  std::string test;       // latency | latency-poll | latency-epoll | rate | idle | scale
  std::string placement;  // host | netns, then the CPU placement: "host split", "netns none"
  std::string transport;  // rds | tcp | unix
  size_t size = 0;
  int trial = 0;  // 0 … --trials - 1
  std::map<std::string, double> v;
  // The same measurement (any trial).
  bool Is(const std::string& t, const std::string& pl, const std::string& tr, size_t sz) const {
    return test == t && placement == pl && transport == tr && size == sz;
  }
};

// "host split": where the processes run, then how they are placed on the CPUs.
std::string Where(const std::string& hosts, const std::string& cpus) { return hosts + " " + cpus; }
std::string CpusOf(const std::string& where) { return where.substr(where.find(' ') + 1); }

int g_port = 0;

// Runs one measurement: server on `srv`, client on `cli`. Returns false on failure.
bool Measure(const Options& o, const std::string& test, const std::string& transport,
             const Host& srv, const Host& cli, size_t size, Row* row) {
  int port = g_port++;
  bool rds = transport == "rds";
  const bool ping_pong = test != "rate";  // latency, latency-poll, latency-epoll
  std::string server_role = transport + (ping_pong ? "-echo" : "-sink");
  std::string client_role = transport + (ping_pong ? "-ping" : "-source");
  const std::string cpus = CpusOf(row->placement);
  int srv_cpu = cpus == "split" || cpus == "same" ? 0 : -1;
  int cli_cpu = cpus == "split" ? 1 : cpus == "same" ? 0 : -1;
  auto common = [&](const std::string& role, int cpu) {
    std::vector<std::string> args = {
        "--worker=" + role,        "--addr=" + (role == server_role ? srv.addr : cli.addr),
        "--peer=" + srv.addr,      "--port=" + std::to_string(port),
        "--size=" + std::to_string(size), "--seconds=" + std::to_string(o.seconds),
        "--cpu=" + std::to_string(cpu)};
    if (!o.tcp_congestion.empty()) args.push_back("--tcp-congestion=" + o.tcp_congestion);
    if (test == "latency-poll") args.push_back("--wait=poll");
    if (test == "latency-epoll") args.push_back("--wait=epoll");
    return args;
  };
  Worker server = Spawn(o, srv, rds, common(server_role, srv_cpu));
  if (ReadLine(server, 20) != "ready") {
    fprintf(stderr, "rds-bench: %s did not start\n", server_role.c_str());
    Finish(server, true);
    return false;
  }
  Worker client = Spawn(o, cli, rds, common(client_role, cli_cpu));
  std::string result;
  bool ok = true;
  double limit = o.seconds + 60;
  if (ping_pong) {
    result = ReadLine(client, limit);
    ok = Finish(client, false);
    Finish(server, true);
  } else {
    result = ReadLine(server, limit);
    ok = Finish(server, result.empty());
    ok = Finish(client, !ok) && ok;
  }
  row->test = test;
  row->transport = transport;
  row->size = size;
  row->v = ParseResult(result);
  if (!ok || row->v.empty()) {
    fprintf(stderr, "rds-bench: %s %s %s failed (%s)\n", test.c_str(), transport.c_str(),
            SizeName(size).c_str(), result.empty() ? "no result" : result.c_str());
    return false;
  }
  // Both processes' CPU time over their whole run (start-up and warm-up included: a few ms of
  // a measurement's seconds), per message of the stream or per round trip.
  const double cpu_us = (server.cpu_seconds + client.cpu_seconds) * 1e6;
  const double ops = ping_pong ? row->v["count"] + row->v["warm_up"] : row->v["msgs"];
  if (ops > 0) row->v[ping_pong ? "cpu_us_per_rtt" : "cpu_us_per_msg"] = cpu_us / ops;
  return true;
}

// Measure() with its progress line on stdout.
bool MeasureAndPrint(const Options& o, const std::string& test, const std::string& pl,
                     const std::string& tr, const Host& srv, const Host& cli, size_t size,
                     int trial, Row* row) {
  row->placement = pl;
  row->trial = trial;
  printf("%s %s %s %s", test.c_str(), pl.c_str(), tr.c_str(), SizeName(size).c_str());
  if (o.trials > 1) printf(" trial %d/%d", trial + 1, o.trials);
  printf(" ... ");
  fflush(stdout);
  if (!Measure(o, test, tr, srv, cli, size, row)) {
    printf("FAILED\n");
    return false;
  }
  if (test != "rate") {
    printf("p50 %.1f us, p99 %.1f us (%.0f round trips), %.1f us CPU per round trip\n",
           row->v["p50_us"], row->v["p99_us"], row->v["count"], row->v["cpu_us_per_rtt"]);
  } else {
    printf("%.0f msg/s, %.1f MB/s, %.2f us CPU per message", row->v["msg_per_s"],
           row->v["mb_per_s"], row->v["cpu_us_per_msg"]);
    if (row->v.count("stalled_pct")) {
      printf(", stalled %.0f%% of the time (gaps >= %.0f ms)", row->v["stalled_pct"],
             kStallGapSec * 1e3);
    }
    printf("\n");
  }
  return true;
}

// A command line to a command-driven worker; false if it is gone.
bool Tell(Worker& w, const std::string& line) {
  std::string s = line + "\n";
  return write(w.in, s.data(), s.size()) == static_cast<ssize_t>(s.size());
}

constexpr int kScaleBasePort = 10000;  // the hub binds kScaleBasePort … +scale_sockets-1
constexpr int kScaleRounds = 2;        // sweeps: the first sets up routes and links

// The scale measurement (ScaleHub, ScalePeer): one hub process with scale_sockets sockets,
// scale_peers peer processes started together, kScaleRounds sweeps over every hub port (each
// released to all peers at once and timed until the last peer has checked its last echo), then
// the hub's links per peer engine while every peer is still alive. False when a worker failed to
// start or to answer in time (everything is then killed); the row says whether the echoes and
// the link count were right.
bool MeasureScale(const Options& o, Row* row) {
  const Host host{"", "127.0.0.1"};
  const size_t n = o.scale_sockets;
  const int p = o.scale_peers;
  // Each step's bound, generous for 65 processes on 2 cores; also the workers' own time bound.
  const double limit = 60 + 0.02 * static_cast<double>(n) + 2.0 * p;
  const std::vector<std::string> common = {
      "--addr=127.0.0.1", "--peer=127.0.0.1", "--port=" + std::to_string(kScaleBasePort),
      "--count=" + std::to_string(n), "--peers=" + std::to_string(p),
      "--seconds=" + std::to_string(static_cast<int>(limit)), "--cpu=-1",
      "--wait=" + o.scale_wait};
  auto args = [&](const std::string& role, int index) {
    std::vector<std::string> v = {"--worker=" + role, "--index=" + std::to_string(index)};
    v.insert(v.end(), common.begin(), common.end());
    return v;
  };
  row->test = "scale";
  row->placement = "host";
  row->transport = "rds";
  row->size = n;
  Worker hub = Spawn(o, host, true, args("rds-scale-hub", 0), true);
  std::vector<Worker> peers;
  auto fail = [&](const std::string& why) {
    fprintf(stderr, "rds-bench: scale: %s\n", why.c_str());
    for (Worker& w : peers) Finish(w, true);
    Finish(hub, true);
    return false;
  };
  double deadline = NowSec() + limit;
  auto left = [&] { return std::max(0.1, deadline - NowSec()); };
  std::string line = ReadLine(hub, left());
  if (line != "ready") {
    return fail("the hub did not start" + (line.empty() ? "" : " (" + line + ")"));
  }
  const double start0 = NowSec();
  deadline = NowSec() + limit;
  for (int i = 0; i < p; ++i) {
    peers.push_back(Spawn(o, host, true, args("rds-scale-peer", i), true));
  }
  for (int i = 0; i < p; ++i) {
    if (ReadLine(peers[i], left()) != "ready") {
      return fail("peer " + std::to_string(i) + " did not start");
    }
  }
  const double start_s = NowSec() - start0;
  double ok = 0, failed = 0;
  std::vector<double> sweeps;
  for (int round = 1; round <= kScaleRounds; ++round) {
    deadline = NowSec() + limit;
    const double t0 = NowSec();
    for (Worker& w : peers) {
      if (!Tell(w, "go")) return fail("a peer exited before round " + std::to_string(round));
    }
    for (int i = 0; i < p; ++i) {
      std::map<std::string, double> v = ParseResult(ReadLine(peers[i], left()));
      if (v.empty()) {
        return fail("peer " + std::to_string(i) + " gave no result in round " +
                    std::to_string(round) + " (a " + std::to_string(static_cast<int>(limit)) +
                    " s bound)");
      }
      ok += v["ok"];
      failed += v["failed"];
    }
    sweeps.push_back(NowSec() - t0);
  }
  // The links are counted while every peer still has its socket and engine.
  std::string count = "count";
  for (const Worker& w : peers) count += " " + std::to_string(w.pid);
  deadline = NowSec() + limit;
  if (!Tell(hub, count)) return fail("the hub exited");
  line = ReadLine(hub, left());
  row->v = ParseResult(line);
  if (row->v.empty()) {
    return fail("the hub gave no counts" + (line.empty() ? "" : " (" + line + ")"));
  }
  // All peers end together (each waits at exit until its messages are acknowledged), then the hub.
  for (Worker& w : peers) {
    close(w.in);
    w.in = -1;
  }
  bool exits_ok = true;
  for (Worker& w : peers) exits_ok = Finish(w, false) && exits_ok;
  exits_ok = Finish(hub, false) && exits_ok;
  row->v["peers"] = p;
  row->v["ok"] = ok;
  row->v["failed"] = failed;
  row->v["start_s"] = start_s;
  row->v["first_sweep_s"] = sweeps.front();
  row->v["sweep_s"] = sweeps.back();
  row->v["msg_per_s"] = static_cast<double>(n) / sweeps.back();
  row->v["count"] = row->v["echoed"];
  row->v["exits_ok"] = exits_ok;
  return true;
}

// Whether a scale row shows every echo right and every worker ending cleanly.
bool ScaleWorked(const Row& r) {
  auto v = [&](const char* k) { return r.v.count(k) ? r.v.at(k) : NAN; };
  const double want = static_cast<double>(kScaleRounds * r.size);
  return v("failed") == 0 && v("ok") == want && v("echoed") == want && v("errors") == 0 &&
         v("exits_ok") == 1;
}

bool SetUpNetns(Host* a, Host* b) {
  if (geteuid() != 0 || system("ip netns list >/dev/null 2>&1") != 0) {
    fprintf(stderr, "rds-bench: skipping the netns placement: it needs root and `ip netns`\n");
    return false;
  }
  std::string tag = std::to_string(getpid());
  a->netns = "rdsbench-a-" + tag;
  b->netns = "rdsbench-b-" + tag;
  a->addr = "10.231.0.1";
  b->addr = "10.231.0.2";
  std::string va = "rbva" + tag, vb = "rbvb" + tag;
  va = va.substr(0, 15);
  vb = vb.substr(0, 15);
  std::vector<std::string> cmds = {
      "ip netns add " + a->netns,
      "ip netns add " + b->netns,
      "ip link add " + va + " netns " + a->netns + " type veth peer name " + vb + " netns " +
          b->netns,
      "ip -n " + a->netns + " addr add " + a->addr + "/24 dev " + va,
      "ip -n " + b->netns + " addr add " + b->addr + "/24 dev " + vb,
      "ip -n " + a->netns + " link set lo up",
      "ip -n " + b->netns + " link set lo up",
      "ip -n " + a->netns + " link set " + va + " up",
      "ip -n " + b->netns + " link set " + vb + " up",
  };
  for (size_t i = 0; i < cmds.size(); ++i) {
    if (i < 2) g_namespaces.push_back(i == 0 ? a->netns : b->netns);
    if (system((cmds[i] + " >/dev/null 2>&1").c_str()) != 0) {
      fprintf(stderr, "rds-bench: skipping the netns placement: `%s` failed\n", cmds[i].c_str());
      return false;
    }
  }
  return true;
}

// The rows of `t` for transport `tr`, by (placement, size).
const Row* Find(const std::vector<Row>& rows, const std::string& test, const std::string& pl,
                const std::string& tr, size_t size) {
  for (const Row& r : rows) {
    if (r.Is(test, pl, tr, size)) return &r;
  }
  return nullptr;
}

double Median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// One row per (test, placement, transport, size): every value the median over the trials.
std::vector<Row> Medians(const std::vector<Row>& rows) {
  std::vector<Row> out;
  for (const Row& r : rows) {
    if (Find(out, r.test, r.placement, r.transport, r.size)) continue;
    Row m = r;
    m.trial = -1;
    for (auto& [key, value] : m.v) {
      std::vector<double> all;
      for (const Row& x : rows) {
        if (x.Is(r.test, r.placement, r.transport, r.size) && x.v.count(key)) {
          all.push_back(x.v.at(key));
        }
      }
      value = Median(all);
    }
    out.push_back(std::move(m));
  }
  return out;
}

// The shim-to-`base` ratio of `key` (base: tcp or unix), one per trial in which both were
// measured (side by side).
struct Ratio {
  double median = NAN, min = NAN, max = NAN;
  size_t trials = 0;
};
Ratio RatioOf(const std::vector<Row>& rows, const std::string& test, const std::string& pl,
              size_t size, const char* key, const char* base = "tcp") {
  std::vector<double> per_trial;
  for (const Row& r : rows) {
    if (!r.Is(test, pl, "rds", size)) continue;
    for (const Row& t : rows) {
      if (t.Is(test, pl, base, size) && t.trial == r.trial && r.v.count(key) && t.v.count(key)) {
        per_trial.push_back(r.v.at(key) / t.v.at(key));
      }
    }
  }
  Ratio out;
  out.trials = per_trial.size();
  if (per_trial.empty()) return out;
  out.median = Median(per_trial);
  out.min = *std::min_element(per_trial.begin(), per_trial.end());
  out.max = *std::max_element(per_trial.begin(), per_trial.end());
  return out;
}

// "1.23x", with " (median of 3 trials, 1.10-1.31x)" when there were several.
std::string RatioText(const Ratio& r, double scale, const char* unit) {
  char buf[160];
  int n = snprintf(buf, sizeof(buf), "%.2f%s", r.median * scale, unit);
  if (r.trials > 1 && n > 0) {
    snprintf(buf + n, sizeof(buf) - static_cast<size_t>(n), " (median of %zu trials, %.2f-%.2f%s)",
             r.trials, r.min * scale, r.max * scale, unit);
  }
  return buf;
}

void WriteCsv(const Options& o, const std::vector<Row>& rows) {
  FILE* f = fopen(o.csv.c_str(), "w");
  if (!f) Die(o.csv.c_str());
  // Scale rows: size = hub sockets, count = messages echoed, msg_per_s = hub ports per second in
  // the second sweep, rss_kib_per_socket = the hub's; the columns from peers to hub_rss_kib
  // are theirs only. One row per trial (--trials), numbered from 0. stalled_pct: rate rows of
  // 64 KiB and more, the share of the time in gaps of 1 ms or more between two messages.
  // cpus: the CPU placement (split, same, none; scale and idle: none); cpu_us_per_msg (rate) and
  // cpu_us_per_rtt (latency tests): user + system time of both processes.
  fprintf(f, "test,placement,transport,size,p50_us,p99_us,mean_us,count,msg_per_s,mb_per_s,"
             "rss_kib_per_socket,idle_cpu_pct,peers,first_sweep_s,sweep_s,failed,"
             "max_links_per_peer,peers_linked,hub_fds,hub_rss_kib,trial,stalled_pct,cpus,"
             "cpu_us_per_msg,cpu_us_per_rtt\n");
  for (const Row& r : rows) {
    auto g = [&](const char* k) {
      auto it = r.v.find(k);
      return it == r.v.end() ? std::string() : std::to_string(it->second);
    };
    const size_t space = r.placement.find(' ');
    const std::string hosts = r.placement.substr(0, space);
    const std::string cpus = space == std::string::npos ? "none" : r.placement.substr(space + 1);
    fprintf(f, "%s,%s,%s,%zu,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%d,%s,%s,%s,%s\n",
            r.test.c_str(),
            hosts.c_str(), r.transport.c_str(), r.size, g("p50_us").c_str(),
            g("p99_us").c_str(), g("mean_us").c_str(), g("count").c_str(), g("msg_per_s").c_str(),
            g("mb_per_s").c_str(), g("rss_kib_per_socket").c_str(), g("idle_cpu_pct").c_str(),
            g("peers").c_str(), g("first_sweep_s").c_str(), g("sweep_s").c_str(),
            g("failed").c_str(), g("max_links_per_peer").c_str(), g("peers_linked").c_str(),
            g("hub_fds").c_str(), g("hub_rss_kib").c_str(), r.trial, g("stalled_pct").c_str(),
            cpus.c_str(), g("cpu_us_per_msg").c_str(), g("cpu_us_per_rtt").c_str());
  }
  fclose(f);
  printf("wrote %s\n", o.csv.c_str());
}

// A PNG with four panels: latency (p50) and throughput (MB/s) versus size, per placement,
// shim against TCP, the medians over the trials. Needs gnuplot (Debian: gnuplot-nox);
// otherwise says so and skips.
void WritePlot(const Options& o, const std::vector<Row>& all_trials,
               const std::vector<std::string>& placements) {
  if (o.plot.empty()) return;
  const std::vector<Row> rows = Medians(all_trials);
  if (std::none_of(rows.begin(), rows.end(),
                   [](const Row& r) { return r.test == "latency" || r.test == "rate"; })) {
    return;  // nothing to draw (e.g. --lat-sizes '' --rate-sizes '')
  }
  if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
    fprintf(stderr, "rds-bench: gnuplot not found (Debian package gnuplot-nox): no plot written\n");
    return;
  }
  std::string dat = o.plot + ".dat";
  FILE* d = fopen(dat.c_str(), "w");
  if (!d) Die(dat.c_str());
  // One gnuplot data block per (test, placement, transport): size value.
  std::vector<std::string> blocks;
  for (const std::string& test : {std::string("latency"), std::string("rate")}) {
    for (const std::string& pl : placements) {
      for (const std::string& tr : o.transports) {
        blocks.push_back(test + "/" + pl + "/" + tr);
        fprintf(d, "# %s\n", blocks.back().c_str());
        for (const Row& r : rows) {
          if (r.test != test || r.placement != pl || r.transport != tr) continue;
          double v = test == "latency" ? r.v.at("p50_us") : r.v.at("mb_per_s");
          fprintf(d, "%zu %g\n", r.size, v);
        }
        fprintf(d, "\n\n");
      }
    }
  }
  fclose(d);
  std::string script;
  const size_t width = std::max<size_t>(1400, 470 * placements.size());
  script += "set terminal pngcairo size " + std::to_string(width) + ",900 noenhanced font ',10'\n";
  script += "set output '" + o.plot + "'\n";
  script += "set multiplot layout 2," + std::to_string(placements.size()) +
            " title 'rds-bench: shim (AF_RDS) vs raw TCP with the same 48-byte framing and Unix "
            "SOCK_SEQPACKET'\n";
  script += "set logscale x 2\nset grid\nset key top left\nset xlabel 'message size'\n";
  script += "set xtics ('64' 64, '256' 256, '1K' 1024, '4K' 4096, '16K' 16384, '64K' 65536, "
            "'256K' 262144, '1M' 1048576)\n";
  size_t idx = 0;
  for (const std::string& test : {std::string("latency"), std::string("rate")}) {
    for (const std::string& pl : placements) {
      script += "set title '" + std::string(test == "latency" ? "round trip p50" : "one-way rate") +
                " (" + (pl.rfind("host ", 0) == 0 ? "same host" : "two netns hosts, veth") +
                ", cpus " + CpusOf(pl) + ")'\n";
      script += test == "latency" ? "set ylabel 'microseconds'\nset logscale y 10\n"
                                  : "set ylabel 'payload MB/s'\nunset logscale y\n";
      script += "plot ";
      for (size_t t = 0; t < o.transports.size(); ++t, ++idx) {
        if (t) script += ", ";
        script += "'" + dat + "' index " + std::to_string(idx) + " using 1:2 with linespoints lw 2 title '" +
                  (o.transports[t] == "rds"   ? "AF_RDS via rds-preload"
                   : o.transports[t] == "tcp" ? "raw TCP"
                                              : "Unix SOCK_SEQPACKET") +
                  "'";
      }
      script += "\n";
    }
  }
  script += "unset multiplot\n";
  FILE* g = popen("gnuplot", "w");
  if (!g) Die("gnuplot");
  fputs(script.c_str(), g);
  if (pclose(g) != 0) {
    fprintf(stderr, "rds-bench: gnuplot failed\n");
    return;
  }
  unlink(dat.c_str());
  printf("wrote %s\n", o.plot.c_str());
}

// The measured tests, in order, and the sizes each runs at.
const std::vector<std::string> kTests = {"latency", "latency-poll", "latency-epoll", "rate"};
const std::vector<size_t>& SizesOf(const Options& o, const std::string& test) {
  if (test == "latency") return o.lat_sizes;
  return test == "rate" ? o.rate_sizes : o.poll_lat_sizes;
}

void PrintSummary(const Options& o, const std::vector<Row>& all_trials,
                  const std::vector<std::string>& placements) {
  // Values are medians over the trials; a ratio is the median of the per-trial ratios.
  const std::vector<Row> rows = Medians(all_trials);
  const bool trials = o.trials > 1;
  if (trials) {
    printf("\nvalues: medians over %d trials; rds/tcp: the median of the per-trial ratios "
           "(shim and TCP side by side in each trial), which can differ from the ratio of the "
           "medians; range: the lowest and highest per-trial ratio\n", o.trials);
  }
  // Latency rows: p50 round trips and CPU per round trip; rate rows: messages/s and CPU per
  // message. rds/unix and rds/tcp: of p50 (latency) or msg/s (rate); the range is rds/tcp's.
  printf("\n%-13s %-11s %-8s %10s %10s %10s %10s %10s %10s %8s %8s%s\n", "test", "where", "size",
         "rds", "tcp", "unix", "rds cpu", "tcp cpu", "unix cpu", "rds/unix", "rds/tcp",
         trials ? "  trials range" : "");
  printf("%-13s %-11s %-8s %10s %10s %10s %10s\n", "", "", "", "(p50 us or", "", "", "(us per");
  printf("%-13s %-11s %-8s %10s %10s %10s %10s\n", "", "", "", "msg/s)", "", "", "rtt/msg)");
  for (const std::string& test : kTests) {
    for (const std::string& pl : placements) {
      for (size_t size : SizesOf(o, test)) {
        const Row* r = Find(rows, test, pl, "rds", size);
        const Row* t = Find(rows, test, pl, "tcp", size);
        const Row* u = Find(rows, test, pl, "unix", size);
        if (!r && !t && !u) continue;
        auto val = [](const Row* x, const char* k) {
          return x && x->v.count(k) ? x->v.at(k) : NAN;
        };
        const char* key = test != "rate" ? "p50_us" : "msg_per_s";
        const char* cpu = test != "rate" ? "cpu_us_per_rtt" : "cpu_us_per_msg";
        Ratio ratio = RatioOf(all_trials, test, pl, size, key);
        Ratio unix_ratio = RatioOf(all_trials, test, pl, size, key, "unix");
        printf("%-13s %-11s %-8s %10.*f %10.*f %10.*f %10.2f %10.2f %10.2f %8.2f %8.2f",
               test.c_str(), pl.c_str(), SizeName(size).c_str(), test != "rate" ? 1 : 0,
               val(r, key), test != "rate" ? 1 : 0, val(t, key), test != "rate" ? 1 : 0,
               val(u, key), val(r, cpu), val(t, cpu), val(u, cpu), unix_ratio.median,
               ratio.median);
        if (trials) printf("  %.2f-%.2f", ratio.min, ratio.max);
        printf("\n");
      }
    }
  }
  // Issue 6's targets, where this run measured them.
  printf("\nissue 6 targets%s:\n", trials ? " (medians over the trials)" : "");
  auto target = [&](const std::string& what, bool measured, bool met, const std::string& detail) {
    printf("  %-66s %-5s %s\n", what.c_str(), !measured ? "n/a" : met ? "MET" : "MISS",
           measured ? detail.c_str() : "");
  };
  char buf[256];
  // Issue 6 set its targets with the server and the client on CPUs of their own.
  for (const std::string& pl : placements) {
    if (CpusOf(pl) != "split") continue;
    Ratio ratio = RatioOf(all_trials, "latency", pl, 64, "p50_us");
    target("64 B RTT <= 1.2x raw TCP (" + pl + ")", ratio.trials > 0, ratio.median <= 1.2,
           RatioText(ratio, 1, "x"));
  }
  {
    const std::string pl = Where("host", "split");
    const Row* r = Find(rows, "rate", pl, "rds", 64);
    Ratio ratio = RatioOf(all_trials, "rate", pl, 64, "msg_per_s");
    double rate = r ? r->v.at("msg_per_s") : NAN;
    snprintf(buf, sizeof(buf), "%.0f msg/s, %s TCP", rate, RatioText(ratio, 1, "x").c_str());
    target("64 B one-way >= 3,000,000 msg/s and >= 3x TCP (" + pl + ")", ratio.trials > 0,
           rate >= 3e6 && ratio.median >= 3, buf);
  }
  for (const std::string& pl : placements) {
    if (CpusOf(pl) != "split") continue;
    Ratio ratio = RatioOf(all_trials, "rate", pl, 1 << 20, "mb_per_s");
    target("1 MiB one-way >= 90% of TCP bandwidth (" + pl + ")", ratio.trials > 0,
           ratio.median >= 0.9, RatioText(ratio, 100, "%") + " of TCP");
  }
  // Issue 19: on one host, in every CPU placement, against Unix SOCK_SEQPACKET and raw TCP.
  printf("\nissue 19 targets (same host, every CPU placement)%s:\n",
         trials ? " (medians over the trials)" : "");
  for (const std::string& pl : placements) {
    if (pl.rfind("host ", 0) != 0) continue;
    for (const char* test : {"latency", "latency-poll", "latency-epoll"}) {
      Ratio ratio = RatioOf(all_trials, test, pl, 64, "p50_us", "unix");
      target(std::string("64 B ") + test + " RTT <= 1.5x Unix SOCK_SEQPACKET (" + pl + ")",
             ratio.trials > 0, ratio.median <= 1.5, RatioText(ratio, 1, "x"));
    }
    Ratio rate = RatioOf(all_trials, "rate", pl, 64, "msg_per_s");
    target("64 B one-way >= 3x raw TCP's rate (" + pl + ")", rate.trials > 0, rate.median >= 3,
           RatioText(rate, 1, "x"));
    Ratio cpu = RatioOf(all_trials, "rate", pl, 64, "cpu_us_per_msg");
    target("64 B one-way CPU per message <= raw TCP's (" + pl + ")", cpu.trials > 0,
           cpu.median <= 1, RatioText(cpu, 1, "x"));
  }
  for (const Row& r : rows) {
    if (r.test != "idle") continue;
    double kib = r.v.at("rss_kib_per_socket"), cpu = r.v.at("idle_cpu_pct");
    snprintf(buf, sizeof(buf), "%zu sockets: %.2f KiB each (user space), %.3f%% CPU", r.size, kib,
             cpu);
    target("idle process: < 1% CPU and < 4 KiB per socket", true, kib < 4 && cpu < 1, buf);
  }
  for (const Row& r : rows) {
    if (r.test != "scale") continue;
    const bool worked = ScaleWorked(r);
    const double peers = r.v.at("peers"), max_links = r.v.at("max_links_per_peer");
    const bool met = worked && max_links <= 1;
    snprintf(buf, sizeof(buf), "%zu sockets, %.0f peers: %s, at most %.0f connection(s) per peer "
             "engine", r.size, peers, worked ? "all echoed" : "echoes FAILED", max_links);
    // A smaller run says nothing about the target unless it already fails it.
    target("scale: 10,000 sockets in one process and 64 peer processes work; <=1 connection per "
           "engine pair",
           (r.size >= 10000 && peers >= 64) || !met, met, buf);
  }
}

constexpr char kSynopsis[] =
    "usage: rds-bench --preload LIB [--seconds S] [--trials N] [--lat-sizes LIST]\n"
    "                 [--rate-sizes LIST]\n"
    "                 [--poll-lat-sizes LIST] [--placements host,netns]\n"
    "                 [--cpus split,same,none]\n"
    "                 [--transports rds,tcp,unix] [--idle-sockets N] [--scale-sockets N]\n"
    "                 [--scale-peers P] [--scale-wait auto|epoll|poll] [--csv FILE]\n"
    "                 [--plot FILE.png|''] [--tcp-congestion NAME]";
constexpr char kSizeList[] =
    "  LIST: comma-separated sizes such as 64,1K,64K,1M ('' skips that measurement).";

// What --help prints (rds::tools::HelpOrVersion).
rds::tools::ToolHelp Help() {
  return {
      "rds-bench",
      kSynopsis,
      "Measures the shim against raw TCP with the same framing and (one host) Unix\n"
      "SOCK_SEQPACKET: ping-pong latency (also waiting in poll() and epoll_wait()), one-way\n"
      "rate and the CPU time per message, on one host and across two network-namespace hosts\n"
      "(root), in three CPU placements, then the idle cost and a scale run; prints a summary\n"
      "against issues 6 and 19's targets and writes a CSV and (with gnuplot) a PNG.",
      {
          {"--preload LIB", "the rds-preload library (required)"},
          {"--seconds S", "seconds per measurement (default 1)"},
          {"--trials N", "run every measurement N times, shim and TCP alternating (default 1)"},
          {"--lat-sizes LIST", "ping-pong message sizes (default 64,1K,8K,64K,1M)"},
          {"--rate-sizes LIST", "one-way rate message sizes (default 64,1K,8K,64K,1M)"},
          {"--poll-lat-sizes LIST", "ping-pong sizes waiting in poll()/epoll_wait() (default 64)"},
          {"--placements host,netns", "where the processes run (default both; netns needs root)"},
          {"--cpus split,same,none", "CPU placements, each measured (default all three): split: "
                                     "server cpu0, client cpu1; same: both cpu0; none: unpinned"},
          {"--transports rds,tcp,unix", "what to measure (default all; unix: one host, <= 64 KiB)"},
          {"--idle-sockets N", "bound sockets of the idle measurement (default 1000; 0: none)"},
          {"--scale-sockets N", "sockets of the scale run's hub (default 10000; 0: no scale run)"},
          {"--scale-peers P", "peer processes of the scale run (default 64)"},
          {"--scale-wait auto|epoll|poll", "how the scale hub waits (auto: epoll if fds allow)"},
          {"--csv FILE", "the CSV of every measurement (default rds-bench.csv)"},
          {"--plot FILE.png|''", "the plot (default rds-bench.png; '': none)"},
          {"--tcp-congestion NAME", "congestion control of the TCP baseline and the shim's links"},
          // Internal: rds-bench runs itself with these as its worker processes.
          {"--worker ROLE", "internal: run as a worker (rds-echo, tcp-ping, rds-scale-hub, ...)"},
          {"--addr IP", "internal: the worker's own address"},
          {"--peer IP", "internal: the server's address"},
          {"--port N", "internal: the server's port (scale: the first of the hub's ports)"},
          {"--size N", "internal: the message size (idle worker: the socket count)"},
          {"--cpu N", "internal: the cpu to run on (-1: any)"},
          {"--count N", "internal: the scale hub's socket count"},
          {"--peers N", "internal: the scale run's number of peer processes"},
          {"--index N", "internal: this scale peer's number"},
          {"--wait auto|epoll|poll", "internal: how the worker waits before receiving"},
      },
      std::string(kSizeList) +
          "\n  Options take their value as --name VALUE or --name=VALUE; \"internal\" ones are\n"
          "  given by rds-bench to the worker processes it runs (itself, under LD_PRELOAD).",
  };
}

int Usage() {
  fprintf(stderr,
          "%s\n%s\n"
          "  Defaults: 64 B … 1 MiB, 1 s per measurement, both placements, each in three CPU\n"
          "  placements (server cpu0 and client cpu1; both cpu0; unpinned), the shim, raw TCP\n"
          "  and (one host, up to 64 KiB) Unix SOCK_SEQPACKET; the ping-pong again at 64 B with\n"
          "  every receive preceded by\n"
          "  poll() and by epoll_wait() (--poll-lat-sizes: rds-stress's and event loops'\n"
          "  waits), an idle process with 1000 bound sockets (--idle-sockets 0: none), and\n"
          "  the scale run: one process with 10000 sockets echoing to 64 peer processes,\n"
          "  same host (--scale-sockets 0: none), waiting with epoll if the fd limit allows\n"
          "  two fds per socket, else with poll (--scale-wait).\n"
          "  --trials N: every measurement N times, shim and TCP alternating; the summary\n"
          "  and plot give medians, the ratio is the median of the per-trial ratios and its\n"
          "  range is printed (the CSV keeps every trial).\n"
          "  --tcp-congestion: the congestion control of the raw TCP baseline and of the\n"
          "  shim's TCP links alike (default: the host's, net.ipv4.tcp_congestion_control).\n",
          kSynopsis, kSizeList);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  WorkerArgs w;
  Options o;
  bool worker = false;
  const rds::tools::ToolHelp help = Help();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (rds::tools::HelpOrVersion(a, help)) return 0;
    std::string key = a, val;
    size_t eq = a.find('=');
    if (eq != std::string::npos) {
      key = a.substr(0, eq);
      val = a.substr(eq + 1);
    } else if (i + 1 < argc && a.rfind("--", 0) == 0) {
      val = argv[++i];
    }
    if (key == "--worker") { worker = true; w.role = val; }
    else if (key == "--addr") w.addr = val;
    else if (key == "--peer") w.peer = val;
    else if (key == "--port") w.port = atoi(val.c_str());
    else if (key == "--size") w.size = ParseSize(val);
    else if (key == "--cpu") w.cpu = atoi(val.c_str());
    else if (key == "--seconds") o.seconds = w.seconds = strtod(val.c_str(), nullptr);
    else if (key == "--trials") o.trials = atoi(val.c_str());
    else if (key == "--preload") o.preload = val;
    else if (key == "--placements") o.placements = Split(val, ',');
    else if (key == "--transports") o.transports = Split(val, ',');
    else if (key == "--idle-sockets") o.idle_sockets = static_cast<size_t>(atol(val.c_str()));
    else if (key == "--scale-sockets") o.scale_sockets = static_cast<size_t>(atol(val.c_str()));
    else if (key == "--scale-peers") o.scale_peers = atoi(val.c_str());
    else if (key == "--count") w.count = static_cast<size_t>(atol(val.c_str()));
    else if (key == "--peers") w.peers = atoi(val.c_str());
    else if (key == "--index") w.index = atoi(val.c_str());
    else if (key == "--wait") w.wait = val;
    else if (key == "--scale-wait") o.scale_wait = val;
    else if (key == "--cpus") o.cpus = Split(val, ',');
    else if (key == "--tcp-congestion") o.tcp_congestion = w.tcp_congestion = val;
    else if (key == "--csv") o.csv = val;
    else if (key == "--plot") o.plot = val;
    else if (key == "--lat-sizes" || key == "--rate-sizes" || key == "--poll-lat-sizes") {
      std::vector<size_t> sizes;
      for (const std::string& s : Split(val, ',')) {
        if (!s.empty()) sizes.push_back(ParseSize(s));
      }
      for (size_t s : sizes) {
        if (s < 8 || s > kMaxSize) {
          fprintf(stderr, "rds-bench: sizes must be 8 B … 1 MiB\n");
          return 2;
        }
      }
      (key == "--lat-sizes" ? o.lat_sizes
       : key == "--rate-sizes" ? o.rate_sizes
                               : o.poll_lat_sizes) = sizes;
    } else {
      return Usage();
    }
  }
  if (worker) return RunWorker(w);
  if (o.preload.empty() || o.seconds <= 0 || o.trials < 1) return Usage();
  for (const std::string& c : o.cpus) {
    if (c != "split" && c != "same" && c != "none") return Usage();
  }
  for (const std::string& t : o.transports) {
    if (t != "rds" && t != "tcp" && t != "unix") return Usage();
  }
  if (o.scale_wait != "auto" && o.scale_wait != "epoll" && o.scale_wait != "poll") return Usage();
  if (o.scale_sockets > 0 &&
      (o.scale_peers < 1 || static_cast<size_t>(o.scale_peers) > o.scale_sockets ||
       o.scale_sockets > static_cast<size_t>(65535 - kScaleBasePort))) {
    fprintf(stderr, "rds-bench: --scale-peers must be 1 … --scale-sockets, and --scale-sockets "
                    "at most %d\n", 65535 - kScaleBasePort);
    return 2;
  }

  char resolved[4096];
  if (!realpath(o.preload.c_str(), resolved)) Die(o.preload.c_str());
  o.preload = resolved;
  if (!realpath("/proc/self/exe", resolved)) Die("/proc/self/exe");
  g_self = resolved;
  unsetenv("LD_PRELOAD");
  char tmpl[] = "/tmp/rds-bench.XXXXXX";
  if (!mkdtemp(tmpl)) Die("mkdtemp");
  g_rundir = tmpl;
  g_port = 30000 + getpid() % 20000;
  atexit(Cleanup);
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  signal(SIGPIPE, SIG_IGN);

  // The TCP connections' congestion control matters more than anything else across the
  // netns hosts (docs/perf/history.md §9.9): say which one was measured.
  std::string cc = o.tcp_congestion;
  if (cc.empty()) {
    std::ifstream f("/proc/sys/net/ipv4/tcp_congestion_control");
    std::getline(f, cc);
    cc = (cc.empty() ? "unknown" : cc) + " (the host's default)";
  }
  printf("tcp congestion control: %s\n", cc.c_str());

  std::vector<std::string> placements;
  std::vector<Row> rows;
  bool failed = false;
  for (const std::string& pl : o.placements) {
    Host srv{"", "127.0.0.1"}, cli{"", "127.0.0.1"};
    if (pl == "netns") {
      if (!SetUpNetns(&cli, &srv)) continue;
    } else if (pl != "host") {
      return Usage();
    }
    for (const std::string& cpus : o.cpus) {
      const std::string where = Where(pl, cpus);
      placements.push_back(where);
      for (const std::string& test : kTests) {
        for (size_t size : SizesOf(o, test)) {
          // The Unix baseline exists on one host only, and for records its buffers hold.
          std::vector<std::string> order;
          for (const std::string& tr : o.transports) {
            if (tr != "unix" || (pl == "host" && size <= kUnixMaxSize)) order.push_back(tr);
          }
          for (int trial = 0; trial < o.trials; ++trial) {
            for (const std::string& tr : order) {
              Row row;
              if (MeasureAndPrint(o, test, where, tr, srv, cli, size, trial, &row)) {
                rows.push_back(std::move(row));
              } else {
                failed = true;
              }
            }
            std::reverse(order.begin(), order.end());
          }
        }
      }
    }
  }
  if (o.idle_sockets > 0) {
    // Idle cost: one process holding idle_sockets bound sockets, idle for a few seconds.
    Host host{"", "127.0.0.1"};
    const double idle_seconds = std::max(2.0, 3 * o.seconds);
    printf("idle host rds %zu sockets for %.0f s ... ", o.idle_sockets, idle_seconds);
    fflush(stdout);
    Worker w = Spawn(o, host, true,
                     {"--worker=rds-idle", "--addr=127.0.0.1",
                      "--size=" + std::to_string(o.idle_sockets),
                      "--seconds=" + std::to_string(idle_seconds), "--cpu=-1"});
    std::string line = ReadLine(w, idle_seconds + 60);
    bool ok = Finish(w, line.empty());
    Row row;
    row.test = "idle";
    row.placement = "host";
    row.transport = "rds";
    row.size = o.idle_sockets;
    row.v = ParseResult(line);
    if (!ok || row.v.empty()) {
      printf("FAILED\n");
      failed = true;
    } else {
      printf("%.2f KiB per socket, %.3f%% CPU\n", row.v["rss_kib_per_socket"],
             row.v["idle_cpu_pct"]);
      rows.push_back(std::move(row));
    }
  }
  if (o.scale_sockets > 0) {
    // Scale: one process with scale_sockets sockets, scale_peers peer processes (same host).
    printf("scale host rds %zu sockets %d peers ... ", o.scale_sockets, o.scale_peers);
    fflush(stdout);
    Row row;
    if (!MeasureScale(o, &row)) {
      printf("FAILED\n");
      failed = true;
    } else {
      const std::map<std::string, double>& v = row.v;
      if (ScaleWorked(row)) {
        printf("all echoed in %.3f s (first sweep %.3f s, peers started in %.2f s)",
               v.at("sweep_s"), v.at("first_sweep_s"), v.at("start_s"));
      } else {
        failed = true;
        printf("FAILED: %.0f of %.0f echoes right, %.0f failed, hub errors %.0f%s",
               v.at("ok"), static_cast<double>(kScaleRounds * row.size), v.at("failed"),
               v.at("errors"), v.at("exits_ok") == 1 ? "" : ", a worker exited abnormally");
      }
      printf(", connections per peer engine: max %.0f (%.0f of %.0f peers linked, %.0f other "
             "links); hub (%s): sockets bound in %.2f s, %.0f fds, %.1f MiB RSS (%.2f KiB per "
             "socket)\n",
             v.at("max_links_per_peer"), v.at("peers_linked"), v.at("peers"), v.at("other_links"),
             v.at("epoll") == 1 ? "epoll" : "poll", v.at("bind_s"), v.at("hub_fds"),
             v.at("hub_rss_kib") / 1024,
             v.at("rss_kib_per_socket"));
      rows.push_back(std::move(row));
    }
  }
  PrintSummary(o, rows, placements);
  WriteCsv(o, rows);
  WritePlot(o, rows, placements);
  return failed || rows.empty() ? 1 : 0;
}
