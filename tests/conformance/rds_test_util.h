// Shared helpers for the kernel-RDS conformance tests.
//
// Every test binary runs in its own process with librds_preload.so in LD_PRELOAD (see
// conformance_main.cc); nothing here links against the engine. The rules being checked come
// from shared/reference/kernel-rds.md (cited as §A.x, §B.x, §E.14) and docs/DESIGN.md.
//
// Conventions:
//  * Every wait is bounded. Blocking calls run on an AsyncCall thread and are waited for with a
//    timeout; a per-test watchdog in conformance_main.cc turns any remaining hang into a failure.
//  * Helpers that can fail report with ADD_FAILURE() and return an invalid value; callers
//    ASSERT on the result (gtest cannot ASSERT inside a function returning a value).
#ifndef RDS_PRELOAD_TESTS_CONFORMANCE_RDS_TEST_UTIL_H_
#define RDS_PRELOAD_TESTS_CONFORMANCE_RDS_TEST_UTIL_H_

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/rds.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#ifndef AF_RDS
#define AF_RDS 21
#endif
#ifndef SOL_RDS
#define SOL_RDS 276
#endif

namespace rdstest {

// RDS_TRANS_LOOP is kernel-internal (net/rds/rds.h); getsockopt(SO_RDS_TRANSPORT) reports it
// for a socket bound to a loopback address (§A.7).
inline constexpr int kRdsTransLoop = 3;
// RDS_MAX_MSG_SIZE (§A.4 step 5).
inline constexpr size_t kRdsMaxMsgSize = 1u << 20;
// Per-call bound for anything that is expected to complete "promptly".
inline constexpr int kPromptMs = 3000;
// Time given to the implementation to finish asynchronous delivery before a state is checked.
inline constexpr int kSettleMs = 200;

using Clock = std::chrono::steady_clock;

inline std::string ErrnoName(int e) {
  if (e == 0) return "0";
  const char* n = strerrorname_np(e);
  return std::string(n ? n : "E?") + " (" + std::to_string(e) + ")";
}

// Checks that `call` failed with -1 and the given errno. errno is captured immediately.
#define RDS_EXPECT_ERRNO(call, expected_errno)                                              \
  do {                                                                                      \
    errno = 0;                                                                              \
    long rds_rc_ = static_cast<long>(call);                                                 \
    int rds_e_ = errno;                                                                     \
    EXPECT_EQ(rds_rc_, -1) << #call;                                                        \
    EXPECT_EQ(rds_e_, (expected_errno))                                                     \
        << #call << ": got " << ::rdstest::ErrnoName(rds_e_) << ", want "                  \
        << ::rdstest::ErrnoName(expected_errno);                                            \
  } while (0)

// Checks that `call` returned `expected` (a non-error value); prints errno otherwise.
#define RDS_EXPECT_RC(call, expected)                                                       \
  do {                                                                                      \
    errno = 0;                                                                              \
    long rds_rc_ = static_cast<long>(call);                                                 \
    int rds_e_ = errno;                                                                     \
    EXPECT_EQ(rds_rc_, static_cast<long>(expected))                                         \
        << #call << " (errno " << ::rdstest::ErrnoName(rds_e_) << ")";                      \
  } while (0)

#define RDS_ASSERT_RC(call, expected)                                                       \
  do {                                                                                      \
    errno = 0;                                                                              \
    long rds_rc_ = static_cast<long>(call);                                                 \
    int rds_e_ = errno;                                                                     \
    ASSERT_EQ(rds_rc_, static_cast<long>(expected))                                         \
        << #call << " (errno " << ::rdstest::ErrnoName(rds_e_) << ")";                      \
  } while (0)

// ---------------------------------------------------------------------------------------------
// File descriptors and addresses

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

inline sockaddr_in Sin(const char* ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) ADD_FAILURE() << "bad IPv4 literal " << ip;
  return a;
}

inline sockaddr_in6 Sin6(const char* ip, uint16_t port, uint32_t scope_id = 0) {
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(port);
  a.sin6_scope_id = scope_id;
  if (inet_pton(AF_INET6, ip, &a.sin6_addr) != 1) ADD_FAILURE() << "bad IPv6 literal " << ip;
  return a;
}

inline sockaddr_in Lo4(uint16_t port) { return Sin("127.0.0.1", port); }
inline sockaddr_in6 Lo6(uint16_t port) { return Sin6("::1", port); }

template <class T>
inline sockaddr* SA(T* a) {
  return reinterpret_cast<sockaddr*>(a);
}
template <class T>
inline const sockaddr* SA(const T* a) {
  return reinterpret_cast<const sockaddr*>(a);
}

inline std::string AddrToString(const sockaddr_storage& ss, socklen_t len) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(ntohs(a->sin_port)) + " len " +
           std::to_string(len);
  }
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    return "[" + std::string(buf) + "]:" + std::to_string(ntohs(a->sin6_port)) + " len " +
           std::to_string(len);
  }
  return "family " + std::to_string(ss.ss_family) + " len " + std::to_string(len);
}

// socket(AF_RDS, SOCK_SEQPACKET | type_flags, 0).
inline Fd RdsSocket(int type_flags = 0) {
  int fd = ::socket(AF_RDS, SOCK_SEQPACKET | type_flags, 0);
  if (fd < 0) ADD_FAILURE() << "socket(AF_RDS): " << ErrnoName(errno);
  return Fd(fd);
}

inline bool SetInt(int fd, int level, int name, int value) {
  if (::setsockopt(fd, level, name, &value, sizeof value) != 0) {
    ADD_FAILURE() << "setsockopt(" << level << ", " << name << ", " << value
                  << "): " << ErrnoName(errno);
    return false;
  }
  return true;
}

inline int GetInt(int fd, int level, int name) {
  int v = -12345;
  socklen_t len = sizeof v;
  if (::getsockopt(fd, level, name, &v, &len) != 0) {
    ADD_FAILURE() << "getsockopt(" << level << ", " << name << "): " << ErrnoName(errno);
    return -12345;
  }
  return v;
}

inline bool SetTimeoutMs(int fd, int optname, int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  if (::setsockopt(fd, SOL_SOCKET, optname, &tv, sizeof tv) != 0) {
    ADD_FAILURE() << "setsockopt(SOL_SOCKET, " << optname << "): " << ErrnoName(errno);
    return false;
  }
  return true;
}

// Options applied between socket() and bind().
struct BindOpts {
  int transport = -1;  // SO_RDS_TRANSPORT value, or -1 to leave the default selection
  int sndbuf = -1;     // SO_SNDBUF value as passed to setsockopt (the kernel stores 2x)
  int rcvbuf = -1;     // SO_RCVBUF value as passed to setsockopt
  int type_flags = 0;  // SOCK_NONBLOCK / SOCK_CLOEXEC
};

inline Fd BoundSocket(const sockaddr* addr, socklen_t len, const BindOpts& o = {}) {
  Fd fd = RdsSocket(o.type_flags);
  if (!fd.ok()) return fd;
  if (o.transport >= 0 && !SetInt(fd.get(), SOL_RDS, SO_RDS_TRANSPORT, o.transport)) return Fd();
  if (o.sndbuf >= 0 && !SetInt(fd.get(), SOL_SOCKET, SO_SNDBUF, o.sndbuf)) return Fd();
  if (o.rcvbuf >= 0 && !SetInt(fd.get(), SOL_SOCKET, SO_RCVBUF, o.rcvbuf)) return Fd();
  if (::bind(fd.get(), addr, len) != 0) {
    ADD_FAILURE() << "bind(AF_RDS): " << ErrnoName(errno);
    return Fd();
  }
  return fd;
}

// A socket bound to ip:port (IPv4; port 0 = random).
inline Fd Bound4(const char* ip = "127.0.0.1", uint16_t port = 0, const BindOpts& o = {}) {
  sockaddr_in a = Sin(ip, port);
  return BoundSocket(SA(&a), sizeof a, o);
}

// A socket bound to [ip]:port (IPv6; port 0 = random).
inline Fd Bound6(const char* ip = "::1", uint16_t port = 0, const BindOpts& o = {}) {
  sockaddr_in6 a = Sin6(ip, port);
  return BoundSocket(SA(&a), sizeof a, o);
}

inline sockaddr_storage LocalName(int fd, socklen_t* len_out = nullptr) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, SA(&ss), &len) != 0) ADD_FAILURE() << "getsockname: " << ErrnoName(errno);
  if (len_out) *len_out = len;
  return ss;
}

// The bound port of an RDS socket (host order), or 0 on failure.
inline uint16_t LocalPort(int fd) {
  sockaddr_storage ss = LocalName(fd);
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  ADD_FAILURE() << "getsockname gave family " << ss.ss_family;
  return 0;
}

// The address to send to in order to reach `fd` (its bound IPv4 name).
inline sockaddr_in Name4(int fd) {
  sockaddr_storage ss = LocalName(fd);
  sockaddr_in a{};
  if (ss.ss_family != AF_INET) {
    ADD_FAILURE() << "expected an IPv4-bound socket, family " << ss.ss_family;
    return a;
  }
  memcpy(&a, &ss, sizeof a);
  return a;
}

inline sockaddr_in6 Name6(int fd) {
  sockaddr_storage ss = LocalName(fd);
  sockaddr_in6 a{};
  if (ss.ss_family != AF_INET6) {
    ADD_FAILURE() << "expected an IPv6-bound socket, family " << ss.ss_family;
    return a;
  }
  memcpy(&a, &ss, sizeof a);
  return a;
}

// A port on 127.0.0.1 that nobody has bound in this process right now (bind, read, close).
inline uint16_t UnusedPort4() {
  Fd s = Bound4();
  return s.ok() ? LocalPort(s.get()) : 0;
}

// ---------------------------------------------------------------------------------------------
// Data path

// Two sockets bound to 127.0.0.1 with random ports: s sends to r (at address `to`). Not
// connected.
struct Pair {
  Fd s;
  Fd r;
  sockaddr_in to{};
  bool ok() const { return s.ok() && r.ok(); }
};

inline Pair MakePair(const BindOpts& so = {}, const BindOpts& ro = {}) {
  Pair p;
  p.s = Bound4("127.0.0.1", 0, so);
  p.r = Bound4("127.0.0.1", 0, ro);
  if (p.r.ok()) p.to = Name4(p.r.get());
  return p;
}


inline ssize_t SendTo(int fd, const void* buf, size_t len, const sockaddr* to, socklen_t tolen,
                      int flags = 0) {
  return ::sendto(fd, buf, len, flags, to, tolen);
}
inline ssize_t SendTo(int fd, const std::string& s, const sockaddr_in& to, int flags = 0) {
  return ::sendto(fd, s.data(), s.size(), flags, SA(&to), sizeof to);
}
inline ssize_t SendTo(int fd, const std::string& s, const sockaddr_in6& to, int flags = 0) {
  return ::sendto(fd, s.data(), s.size(), flags, SA(&to), sizeof to);
}

// sendmsg with one iovec and optional control data.
inline ssize_t SendMsg(int fd, const void* buf, size_t len, const void* name, socklen_t namelen,
                       int flags = 0, void* control = nullptr, size_t controllen = 0) {
  iovec iov{const_cast<void*>(buf), len};
  msghdr m{};
  m.msg_name = const_cast<void*>(name);
  m.msg_namelen = namelen;
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = controllen;
  return ::sendmsg(fd, &m, flags);
}

struct Received {
  ssize_t n = -1;  // recvmsg return value
  int err = 0;     // errno when n < 0
  std::string data;
  sockaddr_storage from{};
  socklen_t fromlen = 0;
  int msg_flags = 0;
  std::vector<char> control;  // the control bytes actually returned (msg_controllen)

  const sockaddr_in& from4() const { return *reinterpret_cast<const sockaddr_in*>(&from); }
  const sockaddr_in6& from6() const { return *reinterpret_cast<const sockaddr_in6*>(&from); }
  uint16_t from_port() const {
    return from.ss_family == AF_INET6 ? ntohs(from6().sin6_port) : ntohs(from4().sin_port);
  }
};

// One recvmsg call with a buffer of `bufsize`, a name buffer and `controlsize` control bytes.
inline Received RecvOnce(int fd, size_t bufsize, int flags, size_t controlsize = 0) {
  Received r;
  std::vector<char> buf(bufsize + 1, '\x5a');
  r.control.assign(controlsize, 0);
  iovec iov{buf.data(), bufsize};
  msghdr m{};
  m.msg_name = &r.from;
  m.msg_namelen = sizeof r.from;
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = controlsize ? r.control.data() : nullptr;
  m.msg_controllen = controlsize;
  m.msg_flags = -1;  // the kernel overwrites it; must not leak through
  errno = 0;
  r.n = ::recvmsg(fd, &m, flags);
  r.err = r.n < 0 ? errno : 0;
  r.fromlen = m.msg_namelen;
  r.msg_flags = m.msg_flags;
  if (r.n >= 0) {
    size_t copied = std::min(static_cast<size_t>(r.n), bufsize);
    r.data.assign(buf.data(), copied);
    r.control.resize(std::min(static_cast<size_t>(m.msg_controllen), controlsize));
  } else {
    r.control.clear();
  }
  return r;
}

// Bounded receive that does not depend on the socket's blocking mode, SO_RCVTIMEO or poll():
// retries recvmsg(MSG_DONTWAIT | flags) until it stops failing with EAGAIN or timeout_ms
// passes. On timeout returns n = -1, err = EAGAIN.
inline Received RecvWithin(int fd, size_t bufsize = 65536, int timeout_ms = kPromptMs,
                           int flags = 0, size_t controlsize = 0) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    Received r = RecvOnce(fd, bufsize, flags | MSG_DONTWAIT, controlsize);
    if (!(r.n < 0 && r.err == EAGAIN)) return r;
    if (Clock::now() >= deadline) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// The first control message of (level, type) that a receive returned, or null.
inline const cmsghdr* FindCmsg(const Received& r, int level, int type) {
  msghdr m{};
  m.msg_control = const_cast<char*>(r.control.data());
  m.msg_controllen = r.control.size();
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
    if (c->cmsg_level == level && c->cmsg_type == type) return c;
  return nullptr;
}

// Asserts that nothing arrives on fd within `ms`.
inline void ExpectNothingWithin(int fd, int ms) {
  Received r = RecvWithin(fd, 65536, ms);
  EXPECT_EQ(r.n, -1) << "unexpected message of " << r.n << " bytes from "
                     << AddrToString(r.from, r.fromlen);
  EXPECT_EQ(r.err, EAGAIN) << ErrnoName(r.err);
}

// A signal set holding exactly `sigs` (none: the empty set, ppoll's "block nothing").
inline sigset_t SignalSet(std::initializer_list<int> sigs = {}) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : sigs) sigaddset(&set, sig);
  return set;
}

inline void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

inline long ElapsedMs(Clock::time_point since) {
  return static_cast<long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count());
}

// A distinctive payload of `n` bytes (byte i depends on seed and i).
inline std::string Payload(size_t n, unsigned seed = 1) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131u + seed * 7u + (i >> 8)) & 0xff);
  return s;
}

// Reads /proc/sys/... as an integer, -1 if unreadable.
inline long ReadProcLong(const char* path) {
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  long v = -1;
  if (fscanf(f, "%ld", &v) != 1) v = -1;
  fclose(f);
  return v;
}

// The stored SO_SNDBUF/SO_RCVBUF floors (SOCK_MIN_SNDBUF/SOCK_MIN_RCVBUF) as this kernel
// applies them to any socket, measured on a UDP socket (the value depends on sizeof(sk_buff)).
inline int KernelMinBuf(int optname) {
  int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return -1;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, optname, &one, sizeof one);
  int v = -1;
  socklen_t len = sizeof v;
  ::getsockopt(fd, SOL_SOCKET, optname, &v, &len);
  ::close(fd);
  return v;
}

// RDS's own send-buffer size: half of the stored SO_SNDBUF (rds_sk_sndbuf, §A.7/§A.10).
inline int RdsSndbuf(int fd) { return GetInt(fd, SOL_SOCKET, SO_SNDBUF) / 2; }
inline int RdsRcvbuf(int fd) { return GetInt(fd, SOL_SOCKET, SO_RCVBUF) / 2; }

// poll() on one fd; returns revents, or -1 on error, 0 on timeout.
inline int PollOne(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  int n = ::poll(&p, 1, timeout_ms);
  if (n < 0) return -1;
  return n == 0 ? 0 : p.revents;
}

// §A.6: with RDS_CONG_MONITOR off, the first poll after *any* congestion-map update anywhere
// on the host reports POLLIN|POLLRDNORM|POLLWRBAND once, and that poll consumes the event.
// Tests that check for the absence of POLLIN call this first so that such an event (e.g. from
// a connection set up earlier in this process) cannot be mistaken for a queued message.
inline void ConsumeCongestionPollEvent(int fd) { (void)PollOne(fd, POLLIN | POLLOUT, 0); }

// Sends one message and waits until `to` has it queued (it is then consumed). Used to make
// sure a loopback connection exists and its initial congestion-map exchange is over before a
// test looks at exact poll masks.
inline void WarmUpLoopback() {
  Fd a = Bound4();
  Fd b = Bound4();
  if (!a.ok() || !b.ok()) return;
  sockaddr_in to = Name4(b.get());
  if (SendTo(a.get(), "warm-up", to) != 7) ADD_FAILURE() << "warm-up send: " << ErrnoName(errno);
  Received r = RecvWithin(b.get());
  if (r.n != 7) ADD_FAILURE() << "warm-up message did not arrive: " << ErrnoName(r.err);
  SleepMs(50);
}

// ---------------------------------------------------------------------------------------------
// Threads and signals

// Runs `fn` (a blocking call returning a syscall-style long) on its own thread and records its
// result and errno. The destructor joins; callers must make sure the call ends (every test
// that blocks provides a way out, and the watchdog kills the process otherwise).
class AsyncCall {
 public:
  explicit AsyncCall(std::function<long()> fn) {
    thread_ = std::thread([this, fn = std::move(fn)] {
      entered_.store(true);
      long rc = fn();
      int e = errno;
      {
        std::lock_guard<std::mutex> l(mu_);
        rc_ = rc;
        err_ = rc < 0 ? e : 0;
        done_ = true;
      }
      cv_.notify_all();
    });
    while (!entered_.load()) std::this_thread::yield();
  }
  AsyncCall(const AsyncCall&) = delete;
  AsyncCall& operator=(const AsyncCall&) = delete;
  ~AsyncCall() {
    if (thread_.joinable()) thread_.join();
  }

  // True if the call finished within `ms`.
  bool WaitFor(int ms) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::milliseconds(ms), [this] { return done_; });
  }
  bool done() {
    std::lock_guard<std::mutex> l(mu_);
    return done_;
  }
  long rc() {
    std::lock_guard<std::mutex> l(mu_);
    return rc_;
  }
  int err() {
    std::lock_guard<std::mutex> l(mu_);
    return err_;
  }
  pthread_t handle() { return thread_.native_handle(); }

 private:
  std::thread thread_;
  std::atomic<bool> entered_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  long rc_ = 0;
  int err_ = 0;
};

// ThreadSanitizer builds (scripts/test-sanitizers.sh) skip the tests TSan cannot run: it does
// not support fork() of a multi-threaded process (the child starts its own engine thread), and
// it delivers asynchronous signals at its own interception points, which changes whether a
// blocking call is interrupted or restarted.
#if defined(__SANITIZE_THREAD__)
#define RDS_SKIP_UNDER_TSAN(why) GTEST_SKIP() << "not under ThreadSanitizer: " why
#else
#define RDS_SKIP_UNDER_TSAN(why) \
  do {                           \
  } while (0)
#endif

// Installs a counting handler for `sig` with or without SA_RESTART; restores the old one.
class ScopedSignalHandler {
 public:
  ScopedSignalHandler(int sig, bool restart) : sig_(sig) {
    count().store(0);
    struct sigaction sa {};
    sa.sa_handler = &ScopedSignalHandler::Handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = restart ? SA_RESTART : 0;
    if (sigaction(sig, &sa, &old_) != 0) ADD_FAILURE() << "sigaction: " << ErrnoName(errno);
  }
  ~ScopedSignalHandler() { sigaction(sig_, &old_, nullptr); }
  ScopedSignalHandler(const ScopedSignalHandler&) = delete;
  ScopedSignalHandler& operator=(const ScopedSignalHandler&) = delete;

  static std::atomic<int>& count() {
    static std::atomic<int> c{0};
    return c;
  }

 private:
  static void Handler(int) { count().fetch_add(1); }
  int sig_;
  struct sigaction old_ {};
};

// Gives a thread that has just entered a blocking call time to actually block in it.
inline void LetItBlock() { SleepMs(300); }

// The value of one RDS_INFO_COUNTERS counter of this process.
inline uint64_t ReadCounter(const char* name) {
  Fd s = RdsSocket();
  if (!s.ok()) return 0;
  std::vector<rds_info_counter> buf(512);
  socklen_t len = static_cast<socklen_t>(buf.size() * sizeof(rds_info_counter));
  if (::getsockopt(s.get(), SOL_RDS, RDS_INFO_COUNTERS, buf.data(), &len) < 0) return 0;
  for (size_t i = 0; i < len / sizeof(rds_info_counter); ++i) {
    if (strncmp(reinterpret_cast<const char*>(buf[i].name), name, sizeof(buf[i].name)) == 0) {
      return buf[i].value;
    }
  }
  ADD_FAILURE() << "no counter " << name;
  return 0;
}

// Gives the harness's SIGALRM watchdog handler SA_RESTART or not, for the test's duration.
class ScopedAlarmRestartFlag {
 public:
  explicit ScopedAlarmRestartFlag(bool restart) {
    sigaction(SIGALRM, nullptr, &old_);
    struct sigaction sa = old_;
    sa.sa_flags = restart ? (old_.sa_flags | SA_RESTART) : (old_.sa_flags & ~SA_RESTART);
    sigaction(SIGALRM, &sa, nullptr);
  }
  ~ScopedAlarmRestartFlag() { sigaction(SIGALRM, &old_, nullptr); }
  ScopedAlarmRestartFlag(const ScopedAlarmRestartFlag&) = delete;
  ScopedAlarmRestartFlag& operator=(const ScopedAlarmRestartFlag&) = delete;

 private:
  struct sigaction old_ {};
};

// How a blocked recvmsg waits (DESIGN.md §2.2): sleeping on its timerfd (the kernel
// decides restart or EINTR) or driving the engine's event loop in epoll_pwait (the shim decides,
// from the process's signal dispositions). Signal tests run both, chosen through the
// dispositions: the test's SIGUSR1 handler and the harness's SIGALRM watchdog get the same
// SA_RESTART flag (uniform: the thread drives) or opposite ones (mixed: it sleeps).
enum class WaitPath { kSleeping, kDriving };

inline std::string WaitPathName(const testing::TestParamInfo<WaitPath>& info) {
  return info.param == WaitPath::kDriving ? "Driving" : "Sleeping";
}

// Installs a counting SIGUSR1 handler (SA_RESTART per `restart`) and the dispositions that
// select `path`; `counter` (shim_recv_waits_driven) proves afterwards which path the blocked
// call took.
class SignalWaitPath {
 public:
  SignalWaitPath(WaitPath path, bool restart, const char* counter)
      : path_(path),
        counter_(counter),
        handler_(SIGUSR1, restart),
        alarm_flag_(path == WaitPath::kDriving ? restart : !restart),
        before_(ReadCounter(counter)) {}

  void ExpectTaken(const char* call) {
    uint64_t driven = ReadCounter(counter_) - before_;
    if (path_ == WaitPath::kDriving) {
      EXPECT_GT(driven, 0u) << "the blocked " << call << " did not drive the event loop";
    } else {
      EXPECT_EQ(driven, 0u) << "the blocked " << call << " drove the event loop with mixed "
                            << "handlers";
    }
  }

 private:
  WaitPath path_;
  const char* counter_;
  ScopedSignalHandler handler_;
  ScopedAlarmRestartFlag alarm_flag_;
  uint64_t before_;
};

// Uses up every fd this process may open (RLIMIT_NOFILE lowered to just above the fds open
// now, the rest filled with /dev/null) until destroyed; Free() gives `n` back.
class FdsExhausted {
 public:
  FdsExhausted() {
    getrlimit(RLIMIT_NOFILE, &old_);
    int top = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    struct rlimit lim = old_;
    lim.rlim_cur = static_cast<rlim_t>(top) + 8;
    setrlimit(RLIMIT_NOFILE, &lim);
    fill_.push_back(top);
    for (;;) {
      int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (fd < 0) break;
      fill_.push_back(fd);
    }
  }
  ~FdsExhausted() {
    for (int fd : fill_) ::close(fd);
    setrlimit(RLIMIT_NOFILE, &old_);
  }
  FdsExhausted(const FdsExhausted&) = delete;
  FdsExhausted& operator=(const FdsExhausted&) = delete;
  void Free(size_t n) {
    for (; n > 0 && !fill_.empty(); --n) {
      ::close(fill_.back());
      fill_.pop_back();
    }
  }

 private:
  struct rlimit old_ {};
  std::vector<int> fill_;
};

// ---------------------------------------------------------------------------------------------
// A stopped peer in another process: the only way to make a send buffer fill up.
//
// Kernel RDS on one host always uses the loopback transport, which acknowledges (and so frees
// the send buffer of) every message as soon as it is transmitted (§C.6), so a full send buffer
// cannot be produced from one process. The shim frees send-buffer bytes when a message has been
// written to its transport (DESIGN.md §7, "Send-buffer release"), so a message to a port owned
// by another, SIGSTOPped process stays accounted once that link stops draining. StoppedPeer
// forks a child that binds 127.0.0.1:<random>, reports the port and stops itself. Tests that
// need a full send buffer call FillSendBuffer() and GTEST_SKIP() when it never fills (which is
// what kernel RDS itself would do).
class StoppedPeer {
 public:
  StoppedPeer() = default;
  StoppedPeer(const StoppedPeer&) = delete;
  StoppedPeer& operator=(const StoppedPeer&) = delete;
  ~StoppedPeer() { Kill(); }

  // Forks and waits until the child is bound and stopped. False on failure (already reported).
  bool Start() {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe2: " << ErrnoName(errno);
      return false;
    }
    fflush(stdout);
    fflush(stderr);
    pid_ = fork();
    if (pid_ < 0) {
      ADD_FAILURE() << "fork: " << ErrnoName(errno);
      return false;
    }
    if (pid_ == 0) ChildMain(p[1]);  // never returns
    ::close(p[1]);
    pipe_.reset(p[0]);
    uint16_t port = 0;
    if (!ReadExactly(&port, sizeof port, 10000) || port == 0) {
      ADD_FAILURE() << "stopped peer did not report a bound port";
      return false;
    }
    port_ = port;
    // Wait (bounded) until the child has stopped itself.
    auto deadline = Clock::now() + std::chrono::seconds(10);
    for (;;) {
      int st = 0;
      pid_t w = waitpid(pid_, &st, WNOHANG | WUNTRACED);
      if (w == pid_ && WIFSTOPPED(st)) break;
      if (w == pid_) {
        ADD_FAILURE() << "stopped peer exited early, status " << st;
        pid_ = -1;
        return false;
      }
      if (Clock::now() > deadline) {
        ADD_FAILURE() << "stopped peer did not stop";
        return false;
      }
      SleepMs(2);
    }
    return true;
  }

  uint16_t port() const { return port_; }
  sockaddr_in addr() const { return Lo4(port_); }

  // Continues the child; it then receives until 1 s passes without a message and reports the
  // number of messages it got. Returns that count, or -1.
  long ResumeAndCount() {
    if (pid_ <= 0) return -1;
    if (kill(pid_, SIGCONT) != 0) return -1;
    uint32_t count = 0;
    if (!ReadExactly(&count, sizeof count, 20000)) {
      ADD_FAILURE() << "resumed peer did not report its count";
      return -1;
    }
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = -1;
    return count;
  }

  void Kill() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int st = 0;
      waitpid(pid_, &st, 0);
      pid_ = -1;
    }
  }

 private:
  [[noreturn]] static void ChildMain(int wfd) {
    // Plain libc only: no gtest in the child.
    int s = ::socket(AF_RDS, SOCK_SEQPACKET, 0);
    if (s < 0) _exit(10);
    sockaddr_in a = Lo4(0);
    if (::bind(s, SA(&a), sizeof a) != 0) _exit(11);
    sockaddr_in me{};
    socklen_t len = sizeof me;
    if (::getsockname(s, SA(&me), &len) != 0) _exit(12);
    uint16_t port = ntohs(me.sin_port);
    // Make sure this process's RDS machinery is fully up (a message to itself goes through)
    // before it stops, so the stop freezes a working peer rather than a half-started one.
    timeval tv{5, 0};
    ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    static char buf[1 << 20];
    if (::sendto(s, "up", 2, 0, SA(&me), sizeof me) != 2) _exit(14);
    if (::recv(s, buf, sizeof buf, 0) != 2) _exit(15);
    if (::write(wfd, &port, sizeof port) != static_cast<ssize_t>(sizeof port)) _exit(13);
    raise(SIGSTOP);
    tv = timeval{1, 0};
    ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    uint32_t count = 0;
    for (;;) {
      ssize_t r = ::recv(s, buf, sizeof buf, 0);
      if (r >= 0) {
        ++count;
      } else if (errno != EINTR) {
        break;  // ETIMEDOUT: one second without a message
      }
    }
    if (::write(wfd, &count, sizeof count) != static_cast<ssize_t>(sizeof count)) _exit(16);
    _exit(0);
  }

  bool ReadExactly(void* out, size_t n, int timeout_ms) {
    char* p = static_cast<char*>(out);
    size_t got = 0;
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (got < n) {
      long left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())
                      .count();
      if (left <= 0) return false;
      pollfd pf{pipe_.get(), POLLIN, 0};
      int pr = ::poll(&pf, 1, static_cast<int>(left));
      if (pr < 0 && errno == EINTR) continue;
      if (pr <= 0) return false;
      ssize_t r = ::read(pipe_.get(), p + got, n - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  }

  pid_t pid_ = -1;
  Fd pipe_;
  uint16_t port_ = 0;
};

enum class FillResult { kFilled, kNeverFilled, kError };

// Sends `msg_size`-byte messages from `fd` to `to` with MSG_DONTWAIT until the send buffer is
// full and stays full: EAGAIN, then again EAGAIN after a 200 ms pause. Deliberately does not use
// poll() (which is under test). Gives up (kNeverFilled) after 16 MiB or 4 s. `*sent` counts the
// messages accepted.
inline FillResult FillSendBuffer(int fd, const sockaddr_in& to, size_t msg_size,
                                 long* sent = nullptr) {
  std::string payload = Payload(msg_size, 9);
  size_t total = 0;
  long count = 0;
  auto deadline = Clock::now() + std::chrono::seconds(4);
  bool paused_once = false;
  for (;;) {
    ssize_t r = SendTo(fd, payload, to, MSG_DONTWAIT);
    if (r >= 0) {
      total += static_cast<size_t>(r);
      ++count;
      paused_once = false;
      if (total > (16u << 20) || Clock::now() > deadline) {
        if (sent) *sent = count;
        return FillResult::kNeverFilled;
      }
      continue;
    }
    if (errno != EAGAIN) {
      ADD_FAILURE() << "filling the send buffer: sendto gave " << ErrnoName(errno);
      if (sent) *sent = count;
      return FillResult::kError;
    }
    if (paused_once) {
      if (sent) *sent = count;
      return FillResult::kFilled;
    }
    paused_once = true;
    SleepMs(kSettleMs);
  }
}

// Skips the current test (with the reason) unless the send buffer of `fd` could be filled.
#define RDS_FILL_OR_SKIP(fd, to, msg_size, sent_ptr)                                           \
  do {                                                                                         \
    ::rdstest::FillResult rds_fr_ = ::rdstest::FillSendBuffer((fd), (to), (msg_size), (sent_ptr)); \
    ASSERT_NE(rds_fr_, ::rdstest::FillResult::kError);                                         \
    if (rds_fr_ == ::rdstest::FillResult::kNeverFilled)                                        \
      GTEST_SKIP() << "the send buffer never filled towards a stopped peer process (kernel "   \
                      "loopback semantics: messages are acknowledged at once, §C.6)";          \
  } while (0)

// RDS_CANCEL_SENT_TO for an IPv4 destination (§A.7).
inline int CancelSentTo(int fd, const sockaddr_in& to) {
  return ::setsockopt(fd, SOL_RDS, RDS_CANCEL_SENT_TO, &to, sizeof to);
}

// ---------------------------------------------------------------------------------------------
// Congestion (§B.2): only sockets on a non-loopback transport mark congestion, so these use
// SO_RDS_TRANSPORT = RDS_TRANS_TCP on 127.0.0.1 (tcp's laddr_check accepts any local address;
// the connection itself is still a loopback one, §A.4 step 8).

// A TCP-transport receiver whose RDS rcvbuf is `rds_rcvbuf` bytes (SO_RCVBUF set to that value,
// the kernel stores twice it and RDS uses half of what is stored).
inline Fd TcpTransportReceiver(int rds_rcvbuf) {
  BindOpts o;
  o.transport = RDS_TRANS_TCP;
  o.rcvbuf = rds_rcvbuf;
  Fd r = Bound4("127.0.0.1", 0, o);
  if (r.ok() && RdsRcvbuf(r.get()) != rds_rcvbuf) {
    ADD_FAILURE() << "RDS rcvbuf is " << RdsRcvbuf(r.get()) << ", wanted " << rds_rcvbuf;
    return Fd();
  }
  return r;
}

inline Fd TcpTransportSender() {
  BindOpts o;
  o.transport = RDS_TRANS_TCP;
  return Bound4("127.0.0.1", 0, o);
}

// Congests `receiver` (a TcpTransportReceiver with RDS rcvbuf `rds_rcvbuf`, a multiple of
// 1024): queues exactly rds_rcvbuf bytes in 1024-byte messages, then one 1-byte message —
// §B.2: a port becomes congested when its queued bytes go strictly above rcvbuf. Waits for
// delivery after each step. The sends use MSG_DONTWAIT so a wrong ENOBUFS cannot block.
inline bool Congest(int sender, int receiver, int rds_rcvbuf) {
  sockaddr_in to = Name4(receiver);
  std::string k = Payload(1024, 3);
  for (int i = 0; i < rds_rcvbuf / 1024; ++i) {
    if (SendTo(sender, k, to, MSG_DONTWAIT) != 1024) {
      ADD_FAILURE() << "filling the receiver, message " << i << ": " << ErrnoName(errno);
      return false;
    }
  }
  SleepMs(kSettleMs);
  if (SendTo(sender, std::string("x"), to, MSG_DONTWAIT) != 1) {
    ADD_FAILURE() << "the byte that goes over rcvbuf: " << ErrnoName(errno);
    return false;
  }
  SleepMs(kSettleMs);
  return true;
}

// §B.5: s (TCP transport, RDS_CONG_MONITOR on) gets ENOBUFS towards r's congested port, then r
// is drained below half its rcvbuf; the resulting map update turns s's monitor mask into a
// pending notification for r's port. Use with ASSERT_NO_FATAL_FAILURE.
inline void MakeCongNotificationPending(Fd* s_out, Fd* r_out, uint16_t* port_out) {
  Fd s = TcpTransportSender();
  Fd r = TcpTransportReceiver(4096);
  ASSERT_TRUE(s.ok() && r.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_CONG_MONITOR, 1));
  ASSERT_TRUE(Congest(s.get(), r.get(), 4096));
  sockaddr_in to = Name4(r.get());
  errno = 0;
  ssize_t rc = SendTo(s.get(), std::string("y"), to, MSG_DONTWAIT);
  int e = errno;
  ASSERT_EQ(rc, -1);
  ASSERT_EQ(e, ENOBUFS) << ErrnoName(e);
  // Nothing pending yet: the mask only turns into a notification on the next map update.
  Received none = RecvOnce(s.get(), 16, MSG_DONTWAIT, 64);
  ASSERT_EQ(none.n, -1) << "notification before uncongestion";
  ASSERT_EQ(none.err, EAGAIN);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(RecvWithin(r.get()).n, 1024);  // below half: update
  SleepMs(kSettleMs);
  *port_out = LocalPort(r.get());
  *s_out = std::move(s);
  *r_out = std::move(r);
}

// A control buffer built from cmsgs.
class Cmsgs {
 public:
  void AddRaw(int level, int type, const void* data, size_t len) {
    size_t off = buf_.size();
    buf_.resize(off + CMSG_SPACE(len), 0);
    auto* c = reinterpret_cast<cmsghdr*>(buf_.data() + off);
    c->cmsg_level = level;
    c->cmsg_type = type;
    c->cmsg_len = CMSG_LEN(len);
    if (len) memcpy(CMSG_DATA(c), data, len);
  }
  template <class T>
  void Add(int level, int type, const T& v) {
    AddRaw(level, type, &v, sizeof v);
  }
  void* data() { return buf_.empty() ? nullptr : buf_.data(); }
  size_t size() const { return buf_.size(); }

 private:
  std::vector<char> buf_;
};

// §A.4 step 7 / §A.5: a zerocopy send (SO_ZEROCOPY + MSG_ZEROCOPY + RDS_CMSG_ZCOPY_COOKIE) from a
// TCP-transport socket s to r. Once r has consumed (and so released) the message, the
// completion cookie is queued on s. Use with ASSERT_NO_FATAL_FAILURE.
inline void MakeZerocopyCompletionPending(Fd* s_out, Fd* r_out, uint32_t cookie) {
  Fd s = TcpTransportSender();
  Fd r = TcpTransportReceiver(65536);
  ASSERT_TRUE(s.ok() && r.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_SOCKET, SO_ZEROCOPY, 1));
  alignas(4096) static char page[4096];
  memset(page, 'z', sizeof page);
  Cmsgs c;
  c.Add(SOL_RDS, RDS_CMSG_ZCOPY_COOKIE, cookie);
  sockaddr_in to = Name4(r.get());
  errno = 0;
  ssize_t n = SendMsg(s.get(), page, sizeof page, &to, sizeof to, MSG_ZEROCOPY, c.data(), c.size());
  int e = errno;
  ASSERT_EQ(n, static_cast<ssize_t>(sizeof page)) << "zerocopy send: " << ErrnoName(e);
  Received m = RecvWithin(r.get());
  ASSERT_EQ(m.n, static_cast<ssize_t>(sizeof page)) << ErrnoName(m.err);
  EXPECT_EQ(m.data, std::string(sizeof page, 'z'));
  *s_out = std::move(s);
  *r_out = std::move(r);
}

}  // namespace rdstest

#endif  // RDS_PRELOAD_TESTS_CONFORMANCE_RDS_TEST_UTIL_H_
