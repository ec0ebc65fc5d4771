// rds-bench — the shim's cost over the bare transport, measured side by side (issue 6).
//
//   rds-bench --preload build/preload/librds_preload.so [options]
//
// For each placement (same host over loopback; two network-namespace hosts over a veth pair)
// and each message size it runs, in one invocation and with the same process placement:
//   * latency: a ping-pong between two processes, p50/p99/mean round trip;
//   * rate: one sender process streams messages one way to one receiver process, one send call
//     per message; messages/s and payload MB/s at the receiver;
// once over AF_RDS through the preloaded shim and once over raw TCP carrying the same 48-byte
// RDS framing (one writev per message, buffered reads, TCP_NODELAY). Then the idle cost: one
// process holding N bound sockets (user-space memory per socket, CPU while idle). It prints a
// table with the ratios against issue 6's targets, and writes a CSV and (with gnuplot) a PNG.
//
// The bench itself is a plain program; it re-executes itself as the worker processes
// (`--worker=...`), under LD_PRELOAD for the RDS runs only. Namespace hosts need root and
// `ip netns`; without them that placement is skipped with a message.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
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
#include <map>
#include <string>
#include <vector>

#ifndef AF_RDS
#define AF_RDS 21
#endif

namespace {

constexpr size_t kHeader = 48;            // struct rds_header
constexpr size_t kMaxSize = 1 << 20;      // RDS_MAX_MSG_SIZE
constexpr size_t kEndMarkerSize = 1;      // a stream ends with one 1-byte message

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
  double seconds = 1.0;
  int cpu = -1;
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

int TcpListenAccept(const WorkerArgs& a) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0) Die("socket(tcp)");
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

int TcpConnect(const WorkerArgs& a) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) Die("socket(tcp)");
  sockaddr_in sin = Addr(a.peer, a.port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0) Die("tcp connect");
  return fd;
}

// Ping-pong client: warm up, then time round trips for `seconds`. Prints the result line.
template <typename Exchange>
int PingLoop(const WorkerArgs& a, Exchange exchange) {
  const double warm_until = NowSec() + std::min(0.2, a.seconds / 4);
  while (NowSec() < warm_until) exchange();
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
  printf("result count=%zu p50_us=%.3f p99_us=%.3f mean_us=%.3f\n", rtt.size(),
         rtt[rtt.size() / 2], rtt[std::min(rtt.size() - 1, rtt.size() * 99 / 100)],
         sum / static_cast<double>(rtt.size()));
  return 0;
}

// Stream receiver: counts messages from the first until the end marker.
template <typename RecvOne>
int SinkLoop(const WorkerArgs& a, RecvOne recv_one) {
  uint64_t msgs = 0, bytes = 0;
  double first = 0;
  for (;;) {
    size_t n = recv_one();
    if (n == kEndMarkerSize) break;
    if (n != a.size) {
      fprintf(stderr, "rds-bench: received %zu bytes, expected %zu\n", n, a.size);
      return 1;
    }
    if (msgs == 0) first = NowSec();
    ++msgs;
    bytes += n;
  }
  double secs = NowSec() - first;
  // The first message only starts the clock.
  double rate = msgs > 1 ? static_cast<double>(msgs - 1) / secs : 0;
  printf("result msgs=%lu msg_per_s=%.1f mb_per_s=%.3f\n", static_cast<unsigned long>(msgs), rate,
         rate * static_cast<double>(a.size) / 1e6);
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

int RunWorker(const WorkerArgs& a) {
  PinTo(a.cpu);
  alarm(static_cast<unsigned>(a.seconds) + 60);  // never outlive a broken run
  if (a.role == "rds-idle") return IdleWorker(a);
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
  if (a.role == "tcp-echo" || a.role == "tcp-sink") {
    FramedTcp t(TcpListenAccept(a));
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
    while (t.Recv(&p, &n)) t.Send(p, n);
    return 0;
  }
  if (a.role == "tcp-ping" || a.role == "tcp-source") {
    int fd = TcpConnect(a);
    FramedTcp t(fd);
    if (a.role == "tcp-ping") {
      return PingLoop(a, [&] {
        const uint8_t* p;
        size_t n;
        t.Send(buf.data(), a.size);
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
  std::vector<size_t> rate_sizes = {64, 1024, 8192, 65536, 1 << 20};
  double seconds = 1.0;
  std::vector<std::string> placements = {"host", "netns"};
  std::string cpus = "split";  // split: server cpu0, client cpu1; same: both cpu0; none
  std::string csv = "rds-bench.csv";
  std::string plot = "rds-bench.png";
  std::vector<std::string> transports = {"rds", "tcp"};
  size_t idle_sockets = 1000;  // 0: no idle measurement
};

struct Host {
  std::string netns;  // empty: this namespace
  std::string addr;
};

struct Worker {
  pid_t pid = -1;
  FILE* out = nullptr;
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

Worker Spawn(const Options& o, const Host& h, bool rds, std::vector<std::string> args) {
  int pipefd[2];
  if (pipe(pipefd) != 0) Die("pipe");
  pid_t pid = fork();
  if (pid < 0) Die("fork");
  if (pid == 0) {
    dup2(pipefd[1], 1);
    close(pipefd[0]);
    close(pipefd[1]);
    std::vector<std::string> argv;
    if (!h.netns.empty()) argv = {"ip", "netns", "exec", h.netns};
    argv.push_back("env");
    if (rds) {
      argv.push_back("LD_PRELOAD=" + o.preload);
      argv.push_back("RDS_PRELOAD_RUNDIR=" + g_rundir + (h.netns.empty() ? "" : "/" + h.netns));
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
  g_children.push_back(pid);
  return {pid, fdopen(pipefd[0], "r")};
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
  if (kill_it) kill(w.pid, SIGKILL);
  int status = 0;
  waitpid(w.pid, &status, 0);
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
  std::string test;       // latency | rate
  std::string placement;  // host | netns
  std::string transport;  // rds | tcp
  size_t size = 0;
  std::map<std::string, double> v;
};

int g_port = 0;

// Runs one measurement: server on `srv`, client on `cli`. Returns false on failure.
bool Measure(const Options& o, const std::string& test, const std::string& transport,
             const Host& srv, const Host& cli, size_t size, Row* row) {
  int port = g_port++;
  bool rds = transport == "rds";
  std::string server_role = transport + (test == "latency" ? "-echo" : "-sink");
  std::string client_role = transport + (test == "latency" ? "-ping" : "-source");
  int srv_cpu = o.cpus == "split" || o.cpus == "same" ? 0 : -1;
  int cli_cpu = o.cpus == "split" ? 1 : o.cpus == "same" ? 0 : -1;
  auto common = [&](const std::string& role, int cpu) {
    return std::vector<std::string>{
        "--worker=" + role,        "--addr=" + (role == server_role ? srv.addr : cli.addr),
        "--peer=" + srv.addr,      "--port=" + std::to_string(port),
        "--size=" + std::to_string(size), "--seconds=" + std::to_string(o.seconds),
        "--cpu=" + std::to_string(cpu)};
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
  if (test == "latency") {
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
  return true;
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
    if (r.test == test && r.placement == pl && r.transport == tr && r.size == size) return &r;
  }
  return nullptr;
}

void WriteCsv(const Options& o, const std::vector<Row>& rows) {
  FILE* f = fopen(o.csv.c_str(), "w");
  if (!f) Die(o.csv.c_str());
  fprintf(f, "test,placement,transport,size,p50_us,p99_us,mean_us,count,msg_per_s,mb_per_s,"
             "rss_kib_per_socket,idle_cpu_pct\n");
  for (const Row& r : rows) {
    auto g = [&](const char* k) {
      auto it = r.v.find(k);
      return it == r.v.end() ? std::string() : std::to_string(it->second);
    };
    fprintf(f, "%s,%s,%s,%zu,%s,%s,%s,%s,%s,%s,%s,%s\n", r.test.c_str(), r.placement.c_str(),
            r.transport.c_str(), r.size, g("p50_us").c_str(), g("p99_us").c_str(),
            g("mean_us").c_str(), g("count").c_str(), g("msg_per_s").c_str(),
            g("mb_per_s").c_str(), g("rss_kib_per_socket").c_str(), g("idle_cpu_pct").c_str());
  }
  fclose(f);
  printf("wrote %s\n", o.csv.c_str());
}

// A PNG with four panels: latency (p50) and throughput (MB/s) versus size, per placement,
// shim against TCP. Needs gnuplot (Debian: gnuplot-nox); otherwise says so and skips.
void WritePlot(const Options& o, const std::vector<Row>& rows,
               const std::vector<std::string>& placements) {
  if (o.plot.empty()) return;
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
  script += "set terminal pngcairo size 1400,900 noenhanced font ',10'\n";
  script += "set output '" + o.plot + "'\n";
  script += "set multiplot layout 2," + std::to_string(placements.size()) +
            " title 'rds-bench: shim (AF_RDS) vs raw TCP with the same 48-byte framing'\n";
  script += "set logscale x 2\nset grid\nset key top left\nset xlabel 'message size'\n";
  script += "set xtics ('64' 64, '256' 256, '1K' 1024, '4K' 4096, '16K' 16384, '64K' 65536, "
            "'256K' 262144, '1M' 1048576)\n";
  size_t idx = 0;
  for (const std::string& test : {std::string("latency"), std::string("rate")}) {
    for (const std::string& pl : placements) {
      script += "set title '" + std::string(test == "latency" ? "round trip p50" : "one-way rate") +
                " (" + (pl == "host" ? "same host, loopback" : "two netns hosts, veth") + ")'\n";
      script += test == "latency" ? "set ylabel 'microseconds'\nset logscale y 10\n"
                                  : "set ylabel 'payload MB/s'\nunset logscale y\n";
      script += "plot ";
      for (size_t t = 0; t < o.transports.size(); ++t, ++idx) {
        if (t) script += ", ";
        script += "'" + dat + "' index " + std::to_string(idx) + " using 1:2 with linespoints lw 2 title '" +
                  (o.transports[t] == "rds" ? "AF_RDS via rds-preload" : "raw TCP") + "'";
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

void PrintSummary(const Options& o, const std::vector<Row>& rows,
                  const std::vector<std::string>& placements) {
  printf("\n%-8s %-6s %-8s %12s %12s %12s %12s %12s %8s\n", "test", "where", "size", "rds p50us",
         "tcp p50us", "rds msg/s", "tcp msg/s", "rds MB/s", "rds/tcp");
  for (const std::string& test : {std::string("latency"), std::string("rate")}) {
    for (const std::string& pl : placements) {
      for (size_t size : test == "latency" ? o.lat_sizes : o.rate_sizes) {
        const Row* r = Find(rows, test, pl, "rds", size);
        const Row* t = Find(rows, test, pl, "tcp", size);
        if (!r && !t) continue;
        auto val = [](const Row* x, const char* k) {
          return x && x->v.count(k) ? x->v.at(k) : NAN;
        };
        double ratio = test == "latency" ? val(r, "p50_us") / val(t, "p50_us")
                                         : val(r, "msg_per_s") / val(t, "msg_per_s");
        printf("%-8s %-6s %-8s %12.1f %12.1f %12.0f %12.0f %12.1f %8.2f\n", test.c_str(),
               pl.c_str(), SizeName(size).c_str(), val(r, "p50_us"), val(t, "p50_us"),
               val(r, "msg_per_s"), val(t, "msg_per_s"), val(r, "mb_per_s"), ratio);
      }
    }
  }
  // Issue 6's targets, where this run measured them.
  printf("\nissue 6 targets:\n");
  auto target = [&](const char* what, bool measured, bool met, const std::string& detail) {
    printf("  %-58s %-5s %s\n", what, !measured ? "n/a" : met ? "MET" : "MISS", detail.c_str());
  };
  char buf[256];
  for (const std::string& pl : placements) {
    const Row* r = Find(rows, "latency", pl, "rds", 64);
    const Row* t = Find(rows, "latency", pl, "tcp", 64);
    double ratio = r && t ? r->v.at("p50_us") / t->v.at("p50_us") : NAN;
    snprintf(buf, sizeof(buf), "%.2fx", ratio);
    target((std::string("64 B RTT <= 1.2x raw TCP (") + pl + ")").c_str(), r && t,
           ratio <= 1.2, buf);
  }
  {
    const Row* r = Find(rows, "rate", "host", "rds", 64);
    const Row* t = Find(rows, "rate", "host", "tcp", 64);
    double rate = r ? r->v.at("msg_per_s") : NAN;
    double ratio = r && t ? rate / t->v.at("msg_per_s") : NAN;
    snprintf(buf, sizeof(buf), "%.0f msg/s, %.2fx TCP", rate, ratio);
    target("64 B one-way >= 3,000,000 msg/s and >= 3x TCP (host)", r && t,
           rate >= 3e6 && ratio >= 3, buf);
  }
  for (const std::string& pl : placements) {
    const Row* r = Find(rows, "rate", pl, "rds", 1 << 20);
    const Row* t = Find(rows, "rate", pl, "tcp", 1 << 20);
    double ratio = r && t ? r->v.at("mb_per_s") / t->v.at("mb_per_s") : NAN;
    snprintf(buf, sizeof(buf), "%.0f%% of TCP", ratio * 100);
    target((std::string("1 MiB one-way >= 90% of TCP bandwidth (") + pl + ")").c_str(), r && t,
           ratio >= 0.9, buf);
  }
  for (const Row& r : rows) {
    if (r.test != "idle") continue;
    double kib = r.v.at("rss_kib_per_socket"), cpu = r.v.at("idle_cpu_pct");
    snprintf(buf, sizeof(buf), "%zu sockets: %.2f KiB each (user space), %.3f%% CPU", r.size, kib,
             cpu);
    target("idle process: < 1% CPU and < 4 KiB per socket", true, kib < 4 && cpu < 1, buf);
  }
}

int Usage() {
  fprintf(stderr,
          "usage: rds-bench --preload LIB [--seconds S] [--lat-sizes LIST] [--rate-sizes LIST]\n"
          "                 [--placements host,netns] [--cpus split|same|none]\n"
          "                 [--transports rds,tcp] [--idle-sockets N] [--csv FILE]\n"
          "                 [--plot FILE.png|'']\n"
          "  LIST: comma-separated sizes such as 64,1K,64K,1M. Defaults: 64 B … 1 MiB,\n"
          "  1 s per measurement, both placements, server on cpu0 and client on cpu1,\n"
          "  and an idle process with 1000 bound sockets (--idle-sockets 0: none).\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  WorkerArgs w;
  Options o;
  bool worker = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
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
    else if (key == "--preload") o.preload = val;
    else if (key == "--placements") o.placements = Split(val, ',');
    else if (key == "--transports") o.transports = Split(val, ',');
    else if (key == "--idle-sockets") o.idle_sockets = static_cast<size_t>(atol(val.c_str()));
    else if (key == "--cpus") o.cpus = val;
    else if (key == "--csv") o.csv = val;
    else if (key == "--plot") o.plot = val;
    else if (key == "--lat-sizes" || key == "--rate-sizes") {
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
      (key == "--lat-sizes" ? o.lat_sizes : o.rate_sizes) = sizes;
    } else {
      return Usage();
    }
  }
  if (worker) return RunWorker(w);
  if (o.preload.empty() || o.seconds <= 0) return Usage();
  if (o.cpus != "split" && o.cpus != "same" && o.cpus != "none") return Usage();

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
    placements.push_back(pl);
    for (const std::string& test : {std::string("latency"), std::string("rate")}) {
      for (size_t size : test == "latency" ? o.lat_sizes : o.rate_sizes) {
        for (const std::string& tr : o.transports) {
          Row row;
          row.placement = pl;
          printf("%s %s %s %s ... ", test.c_str(), pl.c_str(), tr.c_str(), SizeName(size).c_str());
          fflush(stdout);
          if (!Measure(o, test, tr, srv, cli, size, &row)) {
            printf("FAILED\n");
            failed = true;
            continue;
          }
          if (test == "latency") {
            printf("p50 %.1f us, p99 %.1f us (%.0f round trips)\n", row.v["p50_us"],
                   row.v["p99_us"], row.v["count"]);
          } else {
            printf("%.0f msg/s, %.1f MB/s\n", row.v["msg_per_s"], row.v["mb_per_s"]);
          }
          rows.push_back(std::move(row));
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
  PrintSummary(o, rows, placements);
  WriteCsv(o, rows);
  WritePlot(o, rows, placements);
  return failed || rows.empty() ? 1 : 0;
}
