// preload/sdp_calls.cc — SDP sockets over kernel TCP.
#include "preload/sdp_calls.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>

#include "absl/strings/str_format.h"
#include "engine/addr.h"
#include "engine/errors.h"
#include "engine/log.h"
#include "engine/sys.h"
#include "engine/usercopy.h"
#include "preload/errno_policy.h"
#include "preload/lifecycle.h"
#include "preload/real.h"
#include "conf/settings.h"
#include "sdp/rules.h"
#include "sdp/sockaddr.h"
#include "sdp/sockopt.h"
#include "sdp_relay/service.h"

namespace rds::preload::sdp_calls {
namespace {

// How long a connect waits for the SDP connection (address and route
// resolution, the CM's request and its answer); under libsdp's "both", where
// TCP is there to fall back on, a short while (a peer with no SDP listener
// refuses within a round trip; one that answers nothing would hold every
// connect for the CM's retries).
constexpr absl::Duration kConnectTimeout = absl::Seconds(20);
constexpr absl::Duration kBothConnectTimeout = absl::Seconds(3);

// The process's SDP over verbs, or null and why not (sdp_relay/service.h).
sdp::Service* Verbs(std::string* why_not = nullptr) {
  absl::StatusOr<sdp::Service*> s = sdp::Service::Get();
  if (s.ok()) return *s;
  if (why_not != nullptr) *why_not = std::string(s.status().message());
  return nullptr;
}

bool IsLoopback(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in&>(ss).sin_addr.s_addr) >> 24) == 127;
  }
  if (ss.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return false;
}

socklen_t LengthOf(const sockaddr_storage& ss) {
  return ss.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

std::string Describe(const sockaddr_storage& ss) {
  if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6) {
    return absl::StrFormat("(family %d)", ss.ss_family);
  }
  const RdsEndpoint e = FromKernelSockaddr(ss);
  return absl::StrFormat("%s:%d", e.addr.ToString(), e.port);
}

std::string LocalName(int fd) {
  sockaddr_storage ss = {};
  socklen_t len = sizeof(ss);
  if (real::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return Describe(ss);
}

// The address as the kernel must see it, or an errno (the kernel's own for a
// bad length or pointer). `*use` is `addr` itself unless it was rewritten.
int KernelAddress(const sockaddr* addr, socklen_t len, sockaddr_storage* copy,
                  const sockaddr** use) {
  *use = addr;
  if (addr == nullptr || len < static_cast<socklen_t>(sizeof(sa_family_t))) return 0;
  absl::Status s = usercopy::SockaddrFromUser(addr, len, copy);
  if (!s.ok()) return ErrnoOf(s);
  if (!sdp::HasSdpFamily(copy->ss_family)) return 0;
  sdp::ToKernelFamily(copy);
  *use = reinterpret_cast<const sockaddr*>(copy);
  return 0;
}

// RDS_PRELOAD_SDP_CONFIG's rules, read once (null: no file set).
const sdp::RuleSet* Rules() {
  static const sdp::RuleSet* rules = [] () -> const sdp::RuleSet* {
    const std::string& path = conf::Get().sdp_config;
    if (path.empty()) return nullptr;
    std::ifstream in(path);
    if (!in) {
      log::Warn("RDS_PRELOAD_SDP_CONFIG=%s: cannot be read; no TCP socket is converted to SDP",
                path);
      return nullptr;
    }
    std::stringstream text;
    text << in.rdbuf();
    std::vector<std::string> errors;
    auto* set = new sdp::RuleSet(sdp::ParseRules(text.str(), &errors));
    for (const std::string& e : errors) log::Warn("RDS_PRELOAD_SDP_CONFIG=%s, %s: skipped", path, e);
    return set;
  }();
  return rules;
}

// A kernel TCP socket (AF_INET / AF_INET6, SOCK_STREAM, IPPROTO_TCP): its family, else 0.
int TcpFamily(int fd) {
  int v = 0;
  socklen_t len = sizeof(v);
  if (real::getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &len) != 0 || v != IPPROTO_TCP) return 0;
  len = sizeof(v);
  if (real::getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len) != 0 || v != SOCK_STREAM) return 0;
  len = sizeof(v);
  if (real::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len) != 0) return 0;
  return v == AF_INET || v == AF_INET6 ? v : 0;
}

}  // namespace

std::shared_ptr<sdp_fds::SdpFd> ConvertByRules(int fd, const sockaddr* addr, socklen_t len) {
  const sdp::RuleSet* rules = Rules();
  if (rules == nullptr || InVforkChild()) return nullptr;  // (the table is the parent's memory)
  const int family = TcpFamily(fd);
  if (family == 0) return nullptr;
  const int saved = errno;
  sockaddr_storage where = {};
  if (addr != nullptr) {
    // An address the kernel will refuse (bad length or pointer) decides nothing.
    if (!usercopy::SockaddrFromUser(addr, len, &where).ok()) return nullptr;
    sdp::ToKernelFamily(&where);
  } else {
    socklen_t wlen = sizeof(where);
    if (real::getsockname(fd, reinterpret_cast<sockaddr*>(&where), &wlen) != 0) return nullptr;
  }
  errno = saved;
  const sdp::Side side = addr != nullptr ? sdp::Side::kClient : sdp::Side::kServer;
  const sdp::Decision d = sdp::Decide(*rules, side, program_invocation_short_name, where);
  const std::string rule = d.rule != nullptr
      ? absl::StrFormat("line %d, \"%s\"", d.rule->line, d.rule->text)
      : std::string(rules->has_use_lines ? "no rule matched: both" : "no rules: sdp");
  const char* call = side == sdp::Side::kClient ? "connect to" : "listen on";
  if (d.use == sdp::Use::kTcp) {
    log::Info("fd %d: %s %s: TCP (%s)", fd, call, Describe(where), rule);
    return nullptr;
  }
  auto s = std::make_shared<sdp_fds::SdpFd>(family, d.use == sdp::Use::kBoth);
  sdp_fds::Mark(fd, s);
  log::Info("fd %d: %s %s: SDP, %s (%s)", fd, call, Describe(where), sdp::UseName(d.use), rule);
  return s;
}

int Socket(const sdp::SocketForm& form) {
  if (form.error != 0) return Fail<int>(form.error);
  const int fd = real::socket(form.family, form.type, IPPROTO_TCP);
  if (fd < 0) return fd;
  sdp_fds::Mark(fd, std::make_shared<sdp_fds::SdpFd>(form.family));
  log::Debug("socket(SDP, %s) = %d", form.family == AF_INET6 ? "IPv6" : "IPv4", fd);
  return fd;
}

namespace {

using sdp::status::State;
using sdp::status::Transport;

// What rdsctl shows for `fd` from now on (sdp_fds.h, SdpFd::shown).
void Show(int fd, sdp_fds::SdpFd& s, State state, Transport transport, std::string note = "") {
  {
    rds::MutexLock lock(&s.mu);
    s.shown = {state, transport, std::move(note)};
  }
  sdp_fds::Publish(fd, &s);
}

// The state a TCP connect's result leaves the socket in.
State AfterTcpConnect(int r, int err) {
  if (r == 0 || err == EISCONN) return State::kConnected;
  if (err == EINPROGRESS || err == EALREADY || err == EINTR) return State::kConnecting;
  return State::kFailed;
}

// A connect made by the kernel on the fd itself, shown with why.
int TcpConnect(sdp_fds::SdpFd& s, int fd, const sockaddr* use, socklen_t len, std::string why) {
  const int r = real::connect(fd, use, len);
  const int err = r == 0 ? 0 : errno;
  Show(fd, s, AfterTcpConnect(r, err), Transport::kTcp, std::move(why));
  if (r != 0) errno = err;
  return r;
}

}  // namespace

int Bind(sdp_fds::SdpFd& s, int fd, const sockaddr* addr, socklen_t len) {
  sockaddr_storage copy;
  const sockaddr* use = nullptr;
  if (int err = KernelAddress(addr, len, &copy, &use)) return Fail<int>(err);
  const int r = real::bind(fd, use, len);
  const int err = r == 0 ? 0 : errno;
  {
    rds::MutexLock lock(&s.mu);
    s.opts.last_bind_err = -err;  // SDP_LAST_BIND_ERR
  }
  if (r != 0) errno = err;
  return r;
}

namespace {

// A non-blocking connect over verbs: the SDP connection is begun; the fd
// joins its gate at once and fills its smallest send buffer, so that it
// shows no POLLOUT until the relay, the connection up, drops the filler
// (sdp_relay/service.h, Begin).
int ConnectNonBlocking(sdp_fds::SdpFd& s, int fd, sdp::Service& verbs,
                       const sockaddr_storage& local, const sockaddr_storage& dst,
                       bool tcp_fallback) {
  absl::StatusOr<sdp::Service::Begun> begun = verbs.Begin(local, dst, tcp_fallback);
  if (!begun.ok()) return Fail<int>(ErrnoOf(begun.status()));
  const int smallest = 1;
  real::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &smallest, sizeof smallest);
  if (real::connect(fd, reinterpret_cast<const sockaddr*>(&begun->gate), begun->gate_len) != 0 &&
      errno != EINPROGRESS) {
    const int err = errno;
    verbs.Abandon(begun->token);
    return Fail<int>(err);
  }
  // Loopback: the handshake is done within microseconds.
  pollfd p = {fd, POLLOUT, 0};
  sys::Poll(&p, 1, 1000);
  static const char kFiller[16384] = {};
  size_t filler = 0;
  for (;;) {
    const ssize_t n = real::send(fd, kFiller, sizeof kFiller, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) break;
    filler += static_cast<size_t>(n);
  }
  sockaddr_storage joined = {};
  socklen_t jlen = sizeof(joined);
  real::getsockname(fd, reinterpret_cast<sockaddr*>(&joined), &jlen);
  const int dup = sys::MakeInternal(real::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  {
    rds::MutexLock lock(&s.mu);
    s.connecting = begun->state;
    s.error_reported = false;
    s.local = local;
    s.peer = dst;
  }
  s.verbs.store(true);
  {
    // rdsctl follows the connect's outcome as the relay thread learns it.
    std::lock_guard<std::mutex> state_lock(begun->state->mu);
    begun->state->on_change = [fd, entry = &s] { sdp_fds::Publish(fd, entry); };
  }
  Show(fd, s, State::kConnecting, Transport::kVerbs,
       tcp_fallback ? "both: TCP if no SDP there" : "");
  verbs.Join(begun->token, joined, filler, dup);
  log::Info("SDP fd %d: connecting to %s over RDMA verbs (non-blocking; %zu bytes hold it%s)", fd,
            Describe(dst), filler, tcp_fallback ? "; TCP if no SDP there" : "");
  return Fail<int>(EINPROGRESS);
}

// For a connect() on an fd whose non-blocking connect over verbs is under
// way or done: what the kernel's TCP would answer (EALREADY, EISCONN, the
// error once), or -1 when it is a new connect.
int ConnectUnderWay(sdp_fds::SdpFd& s) {
  rds::MutexLock lock(&s.mu);
  if (!s.connecting) return -1;
  std::lock_guard<std::mutex> state_lock(s.connecting->mu);
  switch (s.connecting->phase) {
    case sdp::Service::ConnectState::Phase::kPending:
      return EALREADY;
    case sdp::Service::ConnectState::Phase::kUp:
      return EISCONN;
    case sdp::Service::ConnectState::Phase::kFailed:
      break;
  }
  const int err = s.connecting->error;
  const bool reported = s.error_reported;
  s.connecting.reset();  // (a new connect may follow)
  s.shown.state = State::kFailed;  // what the dropped connect state said
  s.verbs.store(false);
  return reported ? -1 : err;
}

}  // namespace

int Connect(sdp_fds::SdpFd& s, int fd, const sockaddr* addr, socklen_t len) {
  if (int err = ConnectUnderWay(s); err >= 0) return err == 0 ? 0 : Fail<int>(err);
  sockaddr_storage copy;
  const sockaddr* use = nullptr;
  if (int err = KernelAddress(addr, len, &copy, &use)) return Fail<int>(err);
  sockaddr_storage dst = {};
  if (use == nullptr || !usercopy::SockaddrFromUser(use, len, &dst).ok() ||
      (dst.ss_family != AF_INET && dst.ss_family != AF_INET6) || InVforkChild()) {
    return real::connect(fd, use, len);  // the kernel's answer (EAFNOSUPPORT, EFAULT…)
  }
  std::string why_not;
  sdp::Service* verbs = Verbs(&why_not);
  sockaddr_storage local = {};
  socklen_t llen = sizeof(local);
  const char* why_tcp = nullptr;
  if (verbs == nullptr) {
    why_tcp = why_not.c_str();
  } else if (IsLoopback(dst)) {
    why_tcp = "a loopback destination";
  } else if (real::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0) {
    why_tcp = "its address is unknown";
  } else if (!verbs->OnRdmaDevice(local)) {
    why_tcp = "bound to an address on no RDMA device";
  } else if (s.tcp_fallback && verbs->NoSdpAt(dst)) {
    why_tcp = "both, and no SDP was found there within the last minute";
  }
  if (why_tcp != nullptr) {
    log::Info("SDP fd %d: connect to %s over TCP (%s)", fd, Describe(dst), why_tcp);
    return TcpConnect(s, fd, use, len, why_tcp);
  }
  if (real::fcntl(fd, F_GETFL, 0) & O_NONBLOCK) {
    return ConnectNonBlocking(s, fd, *verbs, local, dst, s.tcp_fallback);
  }
  absl::StatusOr<sdp::Service::Outgoing> out =
      verbs->Connect(local, dst, s.tcp_fallback ? kBothConnectTimeout : kConnectTimeout);
  if (s.tcp_fallback) verbs->NoteSdpAt(dst, out.ok());
  if (!out.ok()) {
    if (s.tcp_fallback) {
      log::Info("SDP fd %d: no SDP connection to %s (errno %d): over TCP (both)", fd,
                Describe(dst), ErrnoOf(out.status()));
      return TcpConnect(s, fd, use, len, "both: no SDP there");
    }
    Show(fd, s, State::kFailed, Transport::kVerbs, strerror(ErrnoOf(out.status())));
    return Fail<int>(ErrnoOf(out.status()));
  }
  // The application's socket joins the relay through the gate (loopback:
  // a blocking socket's connect completes at once).
  if (real::connect(fd, reinterpret_cast<const sockaddr*>(&out->gate), out->gate_len) != 0) {
    const int err = errno;
    verbs->Abandon(out->token);
    log::Warn("SDP fd %d: connected to %s over RDMA verbs, but not to the relay: %s", fd,
              Describe(dst), strerror(err));
    return Fail<int>(ECONNABORTED);
  }
  sockaddr_storage joined = {};
  llen = sizeof(joined);
  real::getsockname(fd, reinterpret_cast<sockaddr*>(&joined), &llen);
  verbs->Expect(out->token, joined);
  {
    rds::MutexLock lock(&s.mu);
    s.local = out->local;
    s.peer = out->peer;
  }
  s.verbs.store(true);
  Show(fd, s, State::kConnected, Transport::kVerbs);
  log::Info("SDP fd %d: connected to %s over RDMA verbs", fd, Describe(dst));
  return 0;
}

int Listen(sdp_fds::SdpFd& s, int fd, int backlog) {
  const int r = real::listen(fd, backlog);
  if (r != 0) return r;
  std::string why_not;
  sdp::Service* verbs = Verbs(&why_not);
  sockaddr_storage bound = {};
  socklen_t blen = sizeof(bound);
  if (verbs == nullptr || InVforkChild() ||
      real::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen) != 0 ||
      IsLoopback(bound) || !verbs->OnRdmaDevice(bound)) {
    log::Info("SDP fd %d: listening on %s over TCP", fd, LocalName(fd));
    const char* why = verbs == nullptr    ? why_not.c_str()
                      : InVforkChild()    ? "a vfork child"
                      : IsLoopback(bound) ? "a loopback address"
                                          : "bound to an address on no RDMA device";
    Show(fd, s, State::kListening, Transport::kTcp, why);
    return r;
  }
  if (absl::Status v = verbs->Listen(bound, backlog); !v.ok()) {
    log::Info("SDP fd %d: listening on %s over TCP only (RDMA verbs: %s)", fd, Describe(bound),
              v.message());
    Show(fd, s, State::kListening, Transport::kTcp, std::string(v.message()));
    return r;
  }
  Show(fd, s, State::kListening, Transport::kVerbsAndTcp);
  log::Info("SDP fd %d: listening on %s over RDMA verbs and TCP", fd, Describe(bound));
  return r;
}

int Accept(sdp_fds::SdpFd& s, int fd, sockaddr* addr, socklen_t* len, int flags, bool four) {
  sockaddr_storage peer = {};
  socklen_t plen = sizeof(peer);
  const int r = four ? real::accept4(fd, reinterpret_cast<sockaddr*>(&peer), &plen, flags)
                     : real::accept(fd, reinterpret_cast<sockaddr*>(&peer), &plen);
  if (r < 0) return r;
  auto entry = std::make_shared<sdp_fds::SdpFd>(s.family, s.tcp_fallback);
  {
    rds::MutexLock lock(&entry->mu);
    entry->shown = {State::kConnected, Transport::kTcp, "a TCP client"};
  }
  if (sdp::Service* verbs = Verbs(); verbs != nullptr) {
    // A connection the relay made for an SDP peer: its names are that peer's.
    if (std::optional<sdp::Service::Names> names = verbs->Accepted(peer)) {
      {
        rds::MutexLock lock(&entry->mu);
        entry->local = names->local;
        entry->peer = names->peer;
        entry->shown = {State::kConnected, Transport::kVerbs, ""};
      }
      entry->verbs.store(true);
      peer = names->peer;
      plen = LengthOf(peer);
    }
  }
  if (addr != nullptr) {
    if (absl::Status c = usercopy::SockaddrToUser(peer, plen, addr, len); !c.ok()) {
      real::close(r);  // as the kernel: the connection is lost with the bad pointer
      return Fail<int>(ErrnoOf(c));
    }
  }
  sdp_fds::Mark(r, std::move(entry));
  return r;
}

int GetName(sdp_fds::SdpFd& s, int fd, sockaddr* addr, socklen_t* len, bool peer) {
  if (!s.verbs.load()) {
    return peer ? real::getpeername(fd, addr, len) : real::getsockname(fd, addr, len);
  }
  sockaddr_storage ss;
  {
    rds::MutexLock lock(&s.mu);
    ss = peer ? s.peer : s.local;
    if (s.connecting) {
      std::lock_guard<std::mutex> state_lock(s.connecting->mu);
      switch (s.connecting->phase) {
        case sdp::Service::ConnectState::Phase::kPending:
          if (peer) return Fail<int>(ENOTCONN);  // as TCP's, before the handshake is done
          break;
        case sdp::Service::ConnectState::Phase::kUp:
          if (!peer) ss = s.connecting->local;
          break;
        case sdp::Service::ConnectState::Phase::kFailed:  // reset: as a failed TCP connect
          return peer ? Fail<int>(ENOTCONN) : real::getsockname(fd, addr, len);
      }
    }
  }
  if (absl::Status c = usercopy::SockaddrToUser(ss, LengthOf(ss), addr, len); !c.ok()) {
    return Fail<int>(ErrnoOf(c));
  }
  return 0;
}

int SetSockOpt(sdp_fds::SdpFd& s, int fd, int level, int name, const void* val, socklen_t len) {
  int value = 0;
  const bool stored = (level == IPPROTO_TCP && name == sdp::kSdpZcopyThresh);
  if (stored && len >= static_cast<socklen_t>(sizeof(value))) {
    if (absl::Status c = usercopy::FromUser(&value, val, sizeof(value)); !c.ok()) {
      return Fail<int>(ErrnoOf(c));
    }
  }
  sdp::OptionCall call;
  {
    rds::MutexLock lock(&s.mu);
    call = sdp::SetOption(s.opts, level, name, &value, len);
  }
  switch (call.kind) {
    case sdp::OptionCall::Kind::kKernel:
      return real::setsockopt(fd, level, name, val, len);
    case sdp::OptionCall::Kind::kKernelAs:
      return real::setsockopt(fd, call.level, call.name, val, len);
    case sdp::OptionCall::Kind::kAnswered:
      break;
  }
  return call.error != 0 ? Fail<int>(call.error) : 0;
}

namespace {

// A non-blocking TCP connect on the fd itself, shown as under way: once the
// program asks for its outcome (SO_ERROR), rdsctl shows that too.
void ShowTcpConnectOutcome(int fd, sdp_fds::SdpFd& s) {
  {
    rds::MutexLock lock(&s.mu);
    if (s.shown.state != State::kConnecting || s.shown.transport != Transport::kTcp) return;
  }
  sockaddr_storage peer;
  socklen_t plen = sizeof(peer);
  pollfd p = {fd, POLLOUT, 0};
  State now = State::kConnecting;
  if (real::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) == 0) {
    now = State::kConnected;
  } else if (sys::Poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP))) {
    now = State::kFailed;
  }
  if (now == State::kConnecting) return;
  {
    rds::MutexLock lock(&s.mu);
    s.shown.state = now;
  }
  sdp_fds::Publish(fd, &s);
}

// An int option's value to the caller as the kernel gives it: the length is
// read (EINVAL if negative), at most an int written, the length written back.
int CopyOutInt(int value, void* val, socklen_t* len) {
  socklen_t have = 0;
  if (absl::Status c = usercopy::FromUser(&have, len, sizeof(have)); !c.ok()) {
    return Fail<int>(ErrnoOf(c));
  }
  if (static_cast<int>(have) < 0) return Fail<int>(EINVAL);
  const socklen_t n = std::min<socklen_t>(have, sizeof(value));
  if (absl::Status c = usercopy::ToUser(val, &value, n); !c.ok()) return Fail<int>(ErrnoOf(c));
  if (absl::Status c = usercopy::ToUser(len, &n, sizeof(n)); !c.ok()) return Fail<int>(ErrnoOf(c));
  return 0;
}

}  // namespace

int GetSockOpt(sdp_fds::SdpFd& s, int fd, int level, int name, void* val, socklen_t* len) {
  if (level == SOL_SOCKET && name == SO_ERROR) {
    // A non-blocking connect over verbs that failed: its error, once (the
    // kernel's own, ECONNRESET from the gate's reset, is consumed with it).
    int err = 0;
    {
      rds::MutexLock lock(&s.mu);
      if (s.connecting && !s.error_reported) {
        std::lock_guard<std::mutex> state_lock(s.connecting->mu);
        if (s.connecting->phase == sdp::Service::ConnectState::Phase::kFailed) {
          err = s.connecting->error;
          s.error_reported = true;
        }
      }
    }
    if (err != 0) {
      int kernel = 0;
      socklen_t klen = sizeof(kernel);
      real::getsockopt(fd, SOL_SOCKET, SO_ERROR, &kernel, &klen);
      return CopyOutInt(err, val, len);
    }
    const int r = real::getsockopt(fd, level, name, val, len);
    if (r == 0) ShowTcpConnectOutcome(fd, s);
    return r;
  }
  int value = 0;
  sdp::OptionCall call;
  {
    rds::MutexLock lock(&s.mu);
    call = sdp::GetOption(s.opts, level, name, &value);
  }
  switch (call.kind) {
    case sdp::OptionCall::Kind::kKernel:
      return real::getsockopt(fd, level, name, val, len);
    case sdp::OptionCall::Kind::kKernelAs:
      return real::getsockopt(fd, call.level, call.name, val, len);
    case sdp::OptionCall::Kind::kAnswered:
      break;
  }
  if (call.error != 0) return Fail<int>(call.error);
  return CopyOutInt(value, val, len);
}

void FlushBeforeImageEnds() {
  if (!sdp_fds::Any()) return;
  sdp::Service* verbs = sdp::Service::IfRunning();
  if (verbs == nullptr) return;
  sdp_fds::ForEach([](int fd, sdp_fds::SdpFd& s) {
    if (!s.verbs.load()) return;
    {
      rds::MutexLock lock(&s.mu);
      if (s.connecting) {
        std::lock_guard<std::mutex> state_lock(s.connecting->mu);
        if (s.connecting->phase != sdp::Service::ConnectState::Phase::kUp) return;
      }
    }
    real::shutdown(fd, SHUT_WR);  // (several fds of one socket: the first does it)
  });
  verbs->FlushBeforeExit(absl::Milliseconds(conf::Get().exit_flush_ms));
}

}  // namespace rds::preload::sdp_calls
