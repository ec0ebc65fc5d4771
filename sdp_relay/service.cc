// sdp_relay/service.cc — see service.h.
#include "sdp_relay/service.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/errors.h"
#include "engine/log.h"
#include "engine/sys.h"
#include "sdp/conversation.h"
#include "sdp/no_sdp_cache.h"
#include "sdp/wire.h"
#include "sdp_relay/relay.h"
#include "sdp_relay/relay_loop.h"
#include "sdp_relay/tcp_proxy.h"
#include "sdp_relay/verbs_channel.h"
#include "transports/verbs/internal_fds.h"
#include "transports/verbs/verbs_api.h"

namespace rds::sdp {
namespace {

constexpr int kResolveTimeoutMs = 5000;
// What the RDMA CM leaves of a request's private data in the TCP port space
// (its own header takes the rest): the Hello goes truncated (sdp/wire.h).
constexpr size_t kRequestPrivateData = 56;
constexpr int kGateBacklog = 4;
constexpr size_t kMaxParked = 4;
// A gated connection's buffers once open (capped by net.core.[rw]mem_max).
constexpr int kRaisedBuffer = 4 << 20;

absl::Status Errno(int err, const std::string& what) {
  return absl::Status(absl::StatusCode::kUnavailable,
                      absl::StrFormat("%s (errno %d: %s)", what, err, strerror(err)));
}

// An address and port as a map key.
std::string Key(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
    return absl::StrCat("4:", std::string(reinterpret_cast<const char*>(&a.sin_addr), 4), ":",
                        ntohs(a.sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
    return absl::StrCat("6:", std::string(reinterpret_cast<const char*>(&a.sin6_addr), 16), ":",
                        ntohs(a.sin6_port));
  }
  return "?";
}

std::string Show(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
    inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
    return absl::StrFormat("%s:%d", buf, ntohs(a.sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
    inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof buf);
    return absl::StrFormat("[%s]:%d", buf, ntohs(a.sin6_port));
  }
  return "?";
}

socklen_t LengthOf(const sockaddr_storage& ss) {
  return ss.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

uint16_t PortOf(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
  return 0;
}

bool IsAny(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in&>(ss).sin_addr.s_addr == htonl(INADDR_ANY);
  }
  if (ss.ss_family == AF_INET6) {
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr);
  }
  return true;
}

sockaddr_storage Loopback(int family, uint16_t port) {
  sockaddr_storage ss{};
  if (family == AF_INET6) {
    auto& a = reinterpret_cast<sockaddr_in6&>(ss);
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    a.sin6_port = htons(port);
  } else {
    auto& a = reinterpret_cast<sockaddr_in&>(ss);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
  }
  return ss;
}

sockaddr_storage Copy(const sockaddr* sa) {
  sockaddr_storage ss{};
  if (sa == nullptr) return ss;
  std::memcpy(&ss, sa, sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
  return ss;
}

// The Hello's 16-byte address field: IPv4 in its last 4 bytes.
wire::IpField IpFieldOf(const sockaddr_storage& ss) {
  wire::IpField f{};
  if (ss.ss_family == AF_INET) {
    std::memcpy(&f[12], &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, 4);
  } else if (ss.ss_family == AF_INET6) {
    std::memcpy(f.data(), &reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr, 16);
  }
  return f;
}

// An event of the CM, copied before it is acknowledged.
struct CmEvent {
  rdma_cm_event_type type;
  rdma_cm_id* id;
  rdma_cm_id* listen_id;
  int status;
  std::vector<uint8_t> private_data;
};

struct ConnectWait {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  absl::Status status;
  Service::Outgoing out;
};

class VerbsService final : public Service {
 public:
  VerbsService(const verbs::VerbsApi* api, RelayLoop* loop) : api_(api), loop_(loop) {}

  absl::Status Init() {
    return OnLoop([this]() -> absl::Status {
      absl::StatusOr<rdma_event_channel*> cm = verbs::CreateEventChannel(*api_);
      if (!cm.ok()) return cm.status();
      cm_ = *cm;
      return loop_->Add(cm_->fd, EPOLLIN, [this](uint32_t) { OnCmEvents(); });
    });
  }

  bool OnRdmaDevice(const sockaddr_storage& addr) override {
    if (IsAny(addr)) return true;  // some device exists (Get checked)
    const std::string key = Key(addr);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = device_of_.find(key); it != device_of_.end()) return it->second;
    }
    bool on = false;
    rdma_cm_id* id = nullptr;
    if (api_->cm.create_id(nullptr, &id, nullptr, RDMA_PS_TCP) == 0) {
      sockaddr_storage a = addr;
      if (a.ss_family == AF_INET) reinterpret_cast<sockaddr_in&>(a).sin_port = 0;
      if (a.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6&>(a).sin6_port = 0;
      on = api_->cm.bind_addr(id, reinterpret_cast<sockaddr*>(&a)) == 0 && id->verbs != nullptr;
      api_->cm.destroy_id(id);
    }
    std::lock_guard<std::mutex> lock(mu_);
    device_of_[key] = on;
    return on;
  }

  absl::StatusOr<Outgoing> Connect(const sockaddr_storage& local, const sockaddr_storage& peer,
                                   absl::Duration timeout) override {
    auto wait = std::make_shared<ConnectWait>();
    const uint64_t token = next_token_.fetch_add(1);
    loop_->Post([this, token, local, peer, wait] {
      StartConnect(token, local, peer, wait, nullptr);
    });
    std::unique_lock<std::mutex> lock(wait->mu);
    if (!wait->cv.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] { return wait->done; })) {
      lock.unlock();
      Abandon(token);
      log::Info("SDP to %s: no connection within %s", Show(peer), absl::FormatDuration(timeout));
      return RdsError(ETIMEDOUT);
    }
    if (!wait->status.ok()) return wait->status;
    return wait->out;
  }

  void Expect(uint64_t token, const sockaddr_storage& app_local) override {
    loop_->Post([this, token, app_local] {
      auto it = conns_.find(token);
      if (it == conns_.end()) return;
      Conn& c = *it->second;
      c.expected = Key(app_local);
      MatchParked(c);
    });
  }

  void Abandon(uint64_t token) override {
    loop_->Post([this, token] { Destroy(token); });
  }

  absl::StatusOr<Begun> Begin(const sockaddr_storage& local, const sockaddr_storage& peer,
                              bool tcp_fallback) override {
    Begun begun;
    begun.token = next_token_.fetch_add(1);
    begun.state = std::make_shared<ConnectState>();
    absl::Status s = OnLoop([&]() -> absl::Status {
      StartConnect(begun.token, local, peer, nullptr, begun.state, tcp_fallback);
      Conn* c = Token(begun.token);
      if (c == nullptr || c->gate < 0) return RdsError(ENOBUFS);  // (logged)
      begun.gate = c->gate_addr;
      begun.gate_len = LengthOf(c->gate_addr);
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    return begun;
  }

  void Join(uint64_t token, const sockaddr_storage& app_local, size_t filler,
            int app_dup) override {
    loop_->Post([this, token, app_local, filler, app_dup] {
      Conn* c = Token(token);
      if (c == nullptr) {  // failed meanwhile: the socket was reset
        sys::CloseInternal(app_dup);
        return;
      }
      c->filler_left = filler;
      c->app_dup = app_dup;
      c->expected = Key(app_local);
      MatchParked(*c);
    });
  }

  absl::Status Listen(const sockaddr_storage& bound, int backlog) override {
    return OnLoop([this, bound, backlog]() -> absl::Status {
      const std::string key = Key(bound);
      if (listen_ids_.contains(key)) return absl::OkStatus();
      rdma_cm_id* id = nullptr;
      if (api_->cm.create_id(cm_, &id, nullptr, RDMA_PS_TCP) != 0) {
        return Errno(errno, "rdma_create_id");
      }
      sockaddr_storage a = bound;
      if (api_->cm.bind_addr(id, reinterpret_cast<sockaddr*>(&a)) != 0 ||
          api_->cm.listen(id, std::max(backlog, 1)) != 0) {
        const int err = errno;
        api_->cm.destroy_id(id);
        return Errno(err, absl::StrCat("RDMA CM listen on ", Show(bound)));
      }
      listen_ids_[key] = id;
      listeners_[id] = bound;
      log::Info("SDP: serving %s over RDMA verbs", Show(bound));
      return absl::OkStatus();
    });
  }

  void FlushBeforeExit(absl::Duration stall) override {
    absl::Time moved_at = absl::Now();
    uint64_t last = 0;
    bool first = true;
    for (;;) {
      bool flushed = true;
      uint64_t progress = 0;
      OnLoop([&]() -> absl::Status {
        for (const auto& [token, c] : conns_) {
          if (c->relay) {
            flushed = flushed && c->relay->Flushed();
            progress += c->relay->conversation().messages_sent();
          }
          if (c->proxy) {
            flushed = flushed && c->proxy->Flushed(0);  // (side 0: the application's)
            progress += c->proxy->bytes_moved();
          }
        }
        return absl::OkStatus();
      }).IgnoreError();
      if (flushed) return;
      if (first || progress != last) moved_at = absl::Now();
      first = false;
      last = progress;
      if (absl::Now() - moved_at >= stall) {
        log::Info("SDP: the process ends with data its peers have not taken (nothing moved "
                  "for %s): those connections are reset", absl::FormatDuration(stall));
        return;
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
  }

  void Unlisten(const sockaddr_storage& bound) override {
    loop_->Post([this, bound] { StopServing(bound); });
  }

  bool NoSdpAt(const sockaddr_storage& peer) override {
    std::lock_guard<std::mutex> lock(mu_);
    return no_sdp_.Known(Key(peer), absl::Now());
  }

  void NoteSdpAt(const sockaddr_storage& peer, bool serves_sdp) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (serves_sdp) {
      no_sdp_.Forget(Key(peer));
    } else {
      no_sdp_.Remember(Key(peer), absl::Now());
    }
  }

  std::optional<Names> Accepted(const sockaddr_storage& loopback_peer) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = accepted_.find(Key(loopback_peer));
    if (it == accepted_.end()) return std::nullopt;
    return it->second;
  }

 private:
  struct Conn {
    uint64_t token = 0;
    bool outgoing = false;
    rdma_cm_id* id = nullptr;  // the channel's, once it exists
    std::unique_ptr<VerbsChannel> ch;
    std::optional<Conversation> conv;
    std::unique_ptr<Relay> relay;
    int local_fd = -1;  // the relay's socket, while registered with the loop
    // Messages that came before the relay existed (their buffers held).
    std::vector<std::pair<uint64_t, absl::Span<const uint8_t>>> early;
    std::optional<absl::Status> early_closed;
    sockaddr_storage local{}, peer{};
    std::string name;
    // Connecting side.
    std::shared_ptr<ConnectWait> wait;
    int app_family = AF_INET;
    sockaddr_storage app_bound{};  // the application socket's address before connect
    int gate = -1;
    sockaddr_storage gate_addr{};
    std::optional<std::string> expected;
    // Connections the gate accepted, with their peers' addresses as accept
    // gave them (getpeername fails once the application has reset its end).
    std::vector<std::pair<int, std::string>> parked;
    // A non-blocking connect's (Begin / Join).
    std::shared_ptr<ConnectState> state;
    int joined = -1;         // the application's connection, its filler not yet read
    size_t filler_left = 0;
    int app_dup = -1;
    // "both": TCP to the peer where no SDP came, relayed as bytes.
    bool tcp_fallback = false;
    int fallback = -1;       // that TCP connection, while it connects or is relayed
    bool fallback_up = false;
    std::unique_ptr<TcpProxy> proxy;
    // Accepting side.
    sockaddr_storage listener{};
    std::string loopback_key;
    int app_conn = -1;  // into the application's listener, until the relay has it
  };

  template <typename F>
  absl::Status OnLoop(F f) {
    if (loop_->InLoop()) return f();
    std::promise<absl::Status> done;
    std::future<absl::Status> result = done.get_future();
    loop_->Post([&] { done.set_value(f()); });
    return result.get();
  }

  Conn* Find(rdma_cm_id* id) {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : it->second;
  }

  // --- the connecting side ---

  void StartConnect(uint64_t token, const sockaddr_storage& local, const sockaddr_storage& peer,
                    const std::shared_ptr<ConnectWait>& wait,
                    const std::shared_ptr<ConnectState>& state, bool tcp_fallback = false) {
    auto owned = std::make_unique<Conn>();
    Conn& c = *owned;
    c.token = token;
    c.outgoing = true;
    c.wait = wait;
    c.state = state;
    c.tcp_fallback = tcp_fallback;
    c.peer = peer;
    c.local = local;
    c.app_family = local.ss_family == AF_INET6 ? AF_INET6 : AF_INET;
    c.app_bound = local;
    c.name = absl::StrFormat("SDP to %s", Show(peer));
    conns_[token] = std::move(owned);
    if (c.state && !MakeGate(c, /*hold=*/true)) return;
    if (api_->cm.create_id(cm_, &c.id, nullptr, RDMA_PS_TCP) != 0) {
      FailConnect(c, Errno(errno, "rdma_create_id"), ENOBUFS);
      return;
    }
    by_id_[c.id] = &c;
    sockaddr_storage src = local, dst = peer;
    const bool any_source = IsAny(local) && PortOf(local) == 0;
    if (api_->cm.resolve_addr(c.id, any_source ? nullptr : reinterpret_cast<sockaddr*>(&src),
                              reinterpret_cast<sockaddr*>(&dst), kResolveTimeoutMs) != 0) {
      const int err = errno;
      FailConnect(c, Errno(err, "rdma_resolve_addr"), err == EADDRINUSE ? EADDRINUSE : ENETUNREACH);
    }
  }

  void OnRouteResolved(Conn& c) {
    absl::StatusOr<std::unique_ptr<VerbsChannel>> ch =
        VerbsChannel::Create(*api_, *loop_, c.id, sizes_);
    if (!ch.ok()) {
      FailConnect(c, ch.status(), ENOBUFS);
      return;
    }
    AttachChannel(c, *std::move(ch));
    c.local = Copy(&c.id->route.addr.src_addr);
    wire::Hello h;
    h.bsdh.mid = wire::kHello;
    h.bsdh.bufs = static_cast<uint16_t>(sizes_.recv_bufs);
    h.bsdh.len = wire::kHelloSize;
    h.ip_version = c.peer.ss_family == AF_INET6 ? 6 : 4;
    h.max_adverts = 1;
    h.desired_remote_rcv_size = sizes_.buf_size;
    h.local_rcv_size = sizes_.buf_size;
    h.src_port = PortOf(c.local);
    h.src_ip = IpFieldOf(c.local);
    h.dst_ip = IpFieldOf(c.peer);
    const auto hello = wire::EncodeHello(h);
    rdma_conn_param cp{};
    cp.private_data = hello.data();
    cp.private_data_len = static_cast<uint8_t>(kRequestPrivateData);
    cp.retry_count = 7;
    cp.rnr_retry_count = 7;
    if (api_->cm.connect(c.id, &cp) != 0) {
      FailConnect(c, Errno(errno, "rdma_connect"), ECONNREFUSED);
    }
  }

  void OnConnected(Conn& c, const CmEvent& e) {
    absl::StatusOr<wire::HelloAck> hah = wire::DecodeHelloAck(e.private_data);
    if (!hah.ok()) {
      FailConnect(c, absl::InvalidArgumentError(absl::StrCat("the peer's HelloAck: ",
                                                             hah.status().message())),
                  ECONNREFUSED);
      return;
    }
    absl::StatusOr<Conversation> conv = MakeConversation(hah->bsdh.bufs, hah->actual_rcv_size);
    if (!conv.ok()) {
      FailConnect(c, conv.status(), ECONNREFUSED);
      return;
    }
    c.conv.emplace(*std::move(conv));
    c.ch->OnEstablished();
    log::Info("%s: connected over RDMA verbs from %s", c.name, Show(c.local));
    if (c.tcp_fallback) NoteSdpAt(c.peer, true);
    if (c.state) {  // non-blocking: the gate exists; open it
      std::function<void()> tell;
      {
        std::lock_guard<std::mutex> lock(c.state->mu);
        c.state->phase = ConnectState::Phase::kUp;
        c.state->local = c.local;
        tell = c.state->on_change;
      }
      OpenGate(c);
      if (tell) tell();
      return;
    }
    if (!MakeGate(c, /*hold=*/false)) return;
    std::lock_guard<std::mutex> lock(c.wait->mu);
    c.wait->out.token = c.token;
    c.wait->out.gate = c.gate_addr;
    c.wait->out.gate_len = LengthOf(c.gate_addr);
    c.wait->out.local = c.local;
    c.wait->out.peer = c.peer;
    c.wait->done = true;
    c.wait->cv.notify_all();
  }

  // The gate: a listener the application's socket connects to (on that
  // socket's own address when it is bound to one — a socket bound to an
  // address connects from it — else on loopback). `hold`: its receive
  // buffer the smallest, which holds a non-blocking connect's POLLOUT back.
  bool MakeGate(Conn& c, bool hold) {
    c.gate = sys::MakeInternal(
        sys::Socket(c.app_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    sockaddr_storage g = c.app_bound;
    if (IsAny(g)) {
      g = Loopback(c.app_family, 0);
    } else if (g.ss_family == AF_INET) {
      reinterpret_cast<sockaddr_in&>(g).sin_port = 0;
    } else {
      reinterpret_cast<sockaddr_in6&>(g).sin6_port = 0;
    }
    socklen_t glen = LengthOf(g);
    const int smallest = 1;
    if (c.gate < 0 ||
        (hold && sys::Setsockopt(c.gate, SOL_SOCKET, SO_RCVBUF, &smallest, sizeof smallest) != 0) ||
        sys::Bind(c.gate, reinterpret_cast<sockaddr*>(&g), glen) != 0 ||
        sys::Listen(c.gate, kGateBacklog) != 0 ||
        sys::Getsockname(c.gate, reinterpret_cast<sockaddr*>(&g), &glen) != 0) {
      FailConnect(c, Errno(errno, "the loopback gate"), ENOBUFS);
      return false;
    }
    c.gate_addr = g;
    const uint64_t token = c.token;
    if (absl::Status s = loop_->Add(c.gate, EPOLLIN, [this, token](uint32_t) { OnGate(token); });
        !s.ok()) {
      FailConnect(c, s, ENOBUFS);
      return false;
    }
    return true;
  }

  // A non-blocking connect's last step: once the SDP connection is up and
  // the application's socket has joined, its filler is read and dropped
  // (its POLLOUT), the buffers raised, and the relay starts.
  void OpenGate(Conn& c) {
    if ((!c.conv && !c.fallback_up) || c.joined < 0) return;
    char sink[16384];
    while (c.filler_left > 0) {
      const ssize_t n = sys::Recv(c.joined, sink, std::min(sizeof sink, c.filler_left),
                                  MSG_DONTWAIT);
      if (n > 0) {
        c.filler_left -= static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;  // more comes as the window opens
      break;  // closed or reset already: the relay finds out
    }
    const int big = kRaisedBuffer;
    sys::Setsockopt(c.joined, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    sys::Setsockopt(c.joined, IPPROTO_TCP, TCP_WINDOW_CLAMP, &big, sizeof big);
    if (c.app_dup >= 0) {
      sys::Setsockopt(c.app_dup, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
      sys::CloseInternal(c.app_dup);
      c.app_dup = -1;
    }
    const int fd = c.joined;
    c.joined = -1;
    loop_->Remove(fd);
    if (c.fallback_up) {
      StartProxy(c, fd);
      return;
    }
    StartRelay(c, fd);
  }

  // "both", non-blocking, and no SDP: TCP to the peer from this thread (from
  // the application socket's address if it is bound to one), relayed once up.
  bool StartFallback(Conn& c) {
    NoteSdpAt(c.peer, false);
    // The CM side is done with.
    if (c.id != nullptr) by_id_.erase(c.id);
    if (c.ch) {
      c.ch.reset();
    } else if (c.id != nullptr) {
      api_->cm.destroy_id(c.id);
    }
    c.id = nullptr;
    c.conv.reset();
    c.fallback =
        sys::MakeInternal(sys::Socket(c.peer.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (c.fallback < 0) return false;
    if (!IsAny(c.app_bound) && c.app_bound.ss_family == c.peer.ss_family) {
      sockaddr_storage from = c.app_bound;
      if (from.ss_family == AF_INET) {
        reinterpret_cast<sockaddr_in&>(from).sin_port = 0;
      } else {
        reinterpret_cast<sockaddr_in6&>(from).sin6_port = 0;
      }
      sys::Bind(c.fallback, reinterpret_cast<sockaddr*>(&from), LengthOf(from));
    }
    if (sys::Connect(c.fallback, reinterpret_cast<const sockaddr*>(&c.peer), LengthOf(c.peer)) !=
            0 &&
        errno != EINPROGRESS) {
      const int err = errno;
      sys::CloseInternal(c.fallback);
      c.fallback = -1;
      log::Info("%s: no SDP there, and TCP: %s", c.name, strerror(err));
      c.tcp_fallback = false;  // FailConnect reports this error
      FailConnect(c, Errno(err, "TCP connect"), err);
      return true;
    }
    log::Info("%s: no SDP there: over TCP (both), relayed", c.name);
    const uint64_t token = c.token;
    loop_->Add(c.fallback, EPOLLOUT | EPOLLET, [this, token](uint32_t) { OnFallback(token); })
        .IgnoreError();
    return true;
  }

  void OnFallback(uint64_t token) {
    Conn* c = Token(token);
    if (c == nullptr || c->fallback_up) return;
    int err = 0;
    socklen_t len = sizeof err;
    sys::Getsockopt(c->fallback, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == EINPROGRESS || err == EALREADY) return;
    if (err != 0) {
      c->tcp_fallback = false;
      FailConnect(*c, Errno(err, "TCP connect"), err);
      return;
    }
    c->fallback_up = true;
    sockaddr_storage mine{};
    socklen_t mlen = sizeof mine;
    sys::Getsockname(c->fallback, reinterpret_cast<sockaddr*>(&mine), &mlen);
    std::function<void()> tell;
    {
      std::lock_guard<std::mutex> lock(c->state->mu);
      c->state->phase = ConnectState::Phase::kUp;
      c->state->local = mine;
      c->state->over_tcp = true;
      tell = c->state->on_change;
    }
    OpenGate(*c);
    if (tell) tell();
  }

  void StartProxy(Conn& c, int app_side) {
    loop_->Remove(c.fallback);
    c.proxy = std::make_unique<TcpProxy>(app_side, c.fallback, c.name + " (TCP)");
    c.fallback = -1;  // the proxy's now
    const uint64_t token = c.token;
    for (int side : {0, 1}) {
      loop_->Add(c.proxy->fd(side), EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                 [this, token](uint32_t) {
                   Conn* c = Token(token);
                   if (c == nullptr || !c->proxy) return;
                   c->proxy->OnEvent();
                   if (c->proxy->done()) loop_->Post([this, token] { Destroy(token); });
                 })
          .IgnoreError();
    }
    c.proxy->OnEvent();
    if (c.proxy->done()) loop_->Post([this, token] { Destroy(token); });
  }

  void FailConnect(Conn& c, const absl::Status& why, int err) {
    log::Info("%s: %s", c.name, why.message());
    if (c.tcp_fallback && c.state && c.fallback < 0 && !c.fallback_up && StartFallback(c)) {
      return;
    }
    if (c.state) {
      std::function<void()> tell;
      {
        std::lock_guard<std::mutex> lock(c.state->mu);
        if (c.state->phase == ConnectState::Phase::kPending) {
          c.state->phase = ConnectState::Phase::kFailed;
          c.state->error = err;
          tell = c.state->on_change;
        }
      }
      if (tell) tell();
    }
    if (c.wait) {
      std::lock_guard<std::mutex> lock(c.wait->mu);
      if (!c.wait->done) {
        c.wait->status = RdsError(err);  // (why is logged above)
        c.wait->done = true;
        c.wait->cv.notify_all();
      }
    }
    const uint64_t token = c.token;
    loop_->Post([this, token] { Destroy(token); });
  }

  void OnGate(uint64_t token) {
    auto it = conns_.find(token);
    if (it == conns_.end()) return;
    Conn& c = *it->second;
    for (;;) {
      sockaddr_storage peer{};
      socklen_t len = sizeof peer;
      const int fd = sys::MakeInternal(sys::Accept4(c.gate, reinterpret_cast<sockaddr*>(&peer),
                                                    &len, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (fd < 0) break;
      if (c.parked.size() >= kMaxParked) {
        Reset(fd);
        continue;
      }
      c.parked.emplace_back(fd, Key(peer));
    }
    MatchParked(c);
  }

  void MatchParked(Conn& c) {
    if (!c.expected || c.relay || c.joined >= 0) return;
    for (size_t i = 0; i < c.parked.size(); ++i) {
      if (c.parked[i].second == *c.expected) {
        const int fd = c.parked[i].first;
        c.parked.erase(c.parked.begin() + static_cast<long>(i));
        for (const auto& other : c.parked) Reset(other.first);
        c.parked.clear();
        loop_->Remove(c.gate);
        sys::CloseInternal(c.gate);
        c.gate = -1;
        if (c.state) {
          c.joined = fd;
          const uint64_t token = c.token;
          loop_->Add(fd, EPOLLIN | EPOLLET, [this, token](uint32_t) {
            if (Conn* c = Token(token)) OpenGate(*c);
          }).IgnoreError();
          OpenGate(c);
          return;
        }
        StartRelay(c, fd);
        return;
      }
    }
  }

  static void Reset(int fd) {
    const struct linger abortive = {1, 0};
    sys::Setsockopt(fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive);
    sys::CloseInternal(fd);
  }

  // --- the accepting side ---

  void OnRequest(const CmEvent& e) {
    auto lit = listeners_.find(e.listen_id);
    absl::StatusOr<wire::Hello> hello = wire::DecodeHello(e.private_data);
    if (lit == listeners_.end() || !hello.ok()) {
      log::Info("SDP: refusing a connection request: %s",
                lit == listeners_.end() ? "no listener" : hello.status().message());
      api_->cm.reject(e.id, nullptr, 0);
      api_->cm.destroy_id(e.id);
      return;
    }
    absl::StatusOr<Conversation> conv = MakeConversation(hello->bsdh.bufs, hello->local_rcv_size);
    absl::StatusOr<std::unique_ptr<VerbsChannel>> ch =
        conv.ok() ? VerbsChannel::Create(*api_, *loop_, e.id, sizes_)
                  : absl::StatusOr<std::unique_ptr<VerbsChannel>>(conv.status());
    if (!ch.ok()) {
      log::Info("SDP: refusing a connection request: %s", ch.status().message());
      api_->cm.reject(e.id, nullptr, 0);
      api_->cm.destroy_id(e.id);
      return;
    }
    auto owned = std::make_unique<Conn>();
    Conn& c = *owned;
    c.token = next_token_.fetch_add(1);
    c.id = e.id;
    c.listener = lit->second;
    c.conv.emplace(*std::move(conv));
    c.local = Copy(&e.id->route.addr.src_addr);
    c.peer = Copy(&e.id->route.addr.dst_addr);
    c.name = absl::StrFormat("SDP from %s", Show(c.peer));
    conns_[c.token] = std::move(owned);
    by_id_[c.id] = &c;
    AttachChannel(c, *std::move(ch));
    c.app_conn = ConnectToListener(c);
    if (c.app_conn < 0) {
      const int err = errno;
      log::Info("%s: refused: the application's listener %s: %s", c.name, Show(c.listener),
                strerror(err));
      api_->cm.reject(c.id, nullptr, 0);
      // Nobody holds that listener any more: its CM port goes too (a new
      // listener on the address serves it again).
      if (err == ECONNREFUSED) StopServing(c.listener);
      const uint64_t token = c.token;
      loop_->Post([this, token] { Destroy(token); });
      return;
    }
    wire::HelloAck ack;
    ack.bsdh.mid = wire::kHelloAck;
    ack.bsdh.bufs = static_cast<uint16_t>(sizes_.recv_bufs);
    ack.bsdh.len = wire::kHelloAckSize;
    ack.ip_version = hello->ip_version;
    ack.max_adverts = 1;
    ack.actual_rcv_size = sizes_.buf_size;
    const auto bytes = wire::EncodeHelloAck(ack);
    rdma_conn_param cp{};
    cp.private_data = bytes.data();
    cp.private_data_len = static_cast<uint8_t>(bytes.size());
    cp.retry_count = 7;
    cp.rnr_retry_count = 7;
    if (api_->cm.accept(c.id, &cp) != 0) {
      log::Info("%s: rdma_accept: %s", c.name, strerror(errno));
      const uint64_t token = c.token;
      loop_->Post([this, token] { Destroy(token); });
    }
  }

  // Connects into the application's listener for `c`, as a local client
  // (its accept() returns it, named as the SDP peer), before the CM request
  // is answered: a listener closed everywhere (in every process that held
  // it) refuses the loopback connect at once, and the SDP peer is then
  // refused as a TCP client would be. The fd (connecting or connected), or
  // -1 with errno.
  int ConnectToListener(Conn& c) {
    sockaddr_storage target = c.listener;
    if (IsAny(target)) target = Loopback(target.ss_family, PortOf(target));
    const int fd = sys::MakeInternal(
        sys::Socket(target.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (fd < 0) return -1;
    // Its names are known before it connects: the application's accept()
    // may run (and ask) before this thread is back from connect().
    sockaddr_storage mine = target;
    if (mine.ss_family == AF_INET) {
      reinterpret_cast<sockaddr_in&>(mine).sin_port = 0;
    } else {
      reinterpret_cast<sockaddr_in6&>(mine).sin6_port = 0;
    }
    socklen_t len = LengthOf(mine);
    if (sys::Bind(fd, reinterpret_cast<sockaddr*>(&mine), len) != 0 ||
        sys::Getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &len) != 0) {
      const int err = errno;
      sys::CloseInternal(fd);
      errno = err;
      return -1;
    }
    c.loopback_key = Key(mine);
    {
      std::lock_guard<std::mutex> lock(mu_);
      accepted_[c.loopback_key] = Names{c.local, c.peer};
    }
    int err = 0;
    if (sys::Connect(fd, reinterpret_cast<sockaddr*>(&target), LengthOf(target)) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        // Loopback answers within the call: a refusal is there already.
        pollfd p = {fd, POLLOUT, 0};
        socklen_t elen = sizeof err;
        err = 0;
        if (sys::Poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP))) {
          sys::Getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen);
          if (err == 0) err = ECONNREFUSED;
        }
      }
    }
    if (err != 0) {
      sys::CloseInternal(fd);
      errno = err;
      return -1;
    }
    return fd;
  }

  void OnAccepted(Conn& c) {
    c.ch->OnEstablished();
    const int fd = c.app_conn;
    c.app_conn = -1;
    log::Info("%s: accepted over RDMA verbs for %s", c.name, Show(c.listener));
    StartRelay(c, fd);
  }

  // The CM's listener for `bound` goes (the loop's thread; its pending
  // requests were each answered when they came).
  void StopServing(const sockaddr_storage& bound) {
    auto it = listen_ids_.find(Key(bound));
    if (it == listen_ids_.end()) return;
    log::Info("SDP: no longer serving %s over RDMA verbs (its listener is closed)", Show(bound));
    listeners_.erase(it->second);
    api_->cm.destroy_id(it->second);
    listen_ids_.erase(it);
  }

  // --- both sides ---

  absl::StatusOr<Conversation> MakeConversation(uint32_t peer_bufs, uint32_t peer_buf_size) {
    Conversation::Setup s;
    s.our_bufs = sizes_.recv_bufs;
    s.our_buf_size = sizes_.buf_size;
    s.peer_bufs = peer_bufs;
    s.peer_buf_size = std::min(peer_buf_size, sizes_.send_slot_size);
    return Conversation::Create(s);
  }

  void AttachChannel(Conn& c, std::unique_ptr<VerbsChannel> ch) {
    c.ch = std::move(ch);
    const uint64_t token = c.token;
    VerbsChannel::Callbacks cb;
    cb.on_message = [this, token](uint64_t id, absl::Span<const uint8_t> m) {
      Conn* c = Token(token);
      if (c == nullptr) return;
      if (!c->relay) {
        c->early.emplace_back(id, m);
        return;
      }
      c->relay->OnMessage(id, m);
      MaybeFinish(*c);
    };
    cb.on_send_space = [this, token] {
      Conn* c = Token(token);
      if (c == nullptr || !c->relay) return;
      c->relay->OnSendSpace();
      MaybeFinish(*c);
    };
    cb.on_closed = [this, token](const absl::Status& why) {
      Conn* c = Token(token);
      if (c == nullptr) return;
      if (!c->relay) {
        c->early_closed = why;
        if (c->outgoing && c->wait) FailConnect(*c, why, ECONNREFUSED);
        return;
      }
      c->relay->OnClosed(why);
      MaybeFinish(*c);
    };
    c.ch->SetCallbacks(std::move(cb));
  }

  void StartRelay(Conn& c, int fd) {
    c.relay = std::make_unique<Relay>(fd, std::move(*c.conv), c.ch.get(), c.name);
    c.conv.reset();
    c.local_fd = fd;
    const uint64_t token = c.token;
    loop_->Add(fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, [this, token](uint32_t) {
      Conn* c = Token(token);
      if (c == nullptr || !c->relay) return;
      c->relay->OnLocalReadable();
      MaybeFinish(*c);
    }).IgnoreError();
    for (const auto& [id, m] : c.early) c.relay->OnMessage(id, m);
    c.early.clear();
    if (c.early_closed) c.relay->OnClosed(*c.early_closed);
    c.relay->OnLocalReadable();
    MaybeFinish(c);
  }

  void MaybeFinish(Conn& c) {
    if (c.relay && c.relay->local_fd() < 0 && c.local_fd >= 0) {
      loop_->Remove(c.local_fd);  // (closed by the relay)
      c.local_fd = -1;
    }
    // Once the channel has delivered what the relay sent (its disconnect
    // waits for that; the CM's DISCONNECTED calls here again).
    if (c.relay && c.relay->done() && (!c.ch || c.ch->finished())) {
      const uint64_t token = c.token;
      loop_->Post([this, token] { Destroy(token); });
    }
  }

  Conn* Token(uint64_t token) {
    auto it = conns_.find(token);
    return it == conns_.end() ? nullptr : it->second.get();
  }

  void Destroy(uint64_t token) {
    auto it = conns_.find(token);
    if (it == conns_.end()) return;
    std::unique_ptr<Conn> c = std::move(it->second);
    conns_.erase(it);
    if (c->id != nullptr) by_id_.erase(c->id);
    if (!c->loopback_key.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      accepted_.erase(c->loopback_key);
    }
    if (c->gate >= 0) {
      loop_->Remove(c->gate);
      sys::CloseInternal(c->gate);
    }
    for (const auto& [fd, peer] : c->parked) Reset(fd);
    if (c->joined >= 0) {  // the application's socket sees a reset: its SO_ERROR says why
      loop_->Remove(c->joined);
      Reset(c->joined);
    }
    if (c->app_dup >= 0) sys::CloseInternal(c->app_dup);
    if (c->app_conn >= 0) Reset(c->app_conn);  // (the application may have accepted it)
    if (c->fallback >= 0) {
      loop_->Remove(c->fallback);
      sys::CloseInternal(c->fallback);
    }
    if (c->proxy) {
      for (int side : {0, 1}) {
        if (c->proxy->fd(side) >= 0) loop_->Remove(c->proxy->fd(side));
      }
      c->proxy.reset();  // resets both sides if they had not ended
    }
    if (c->local_fd >= 0) loop_->Remove(c->local_fd);
    c->relay.reset();  // resets the application's connection if it had not ended
    if (c->ch) {
      c->ch.reset();  // the queue pair, and the id with it
    } else if (c->id != nullptr) {
      api_->cm.destroy_id(c->id);
    }
  }

  void OnCmEvents() {
    for (;;) {
      rdma_cm_event* ev = nullptr;
      if (api_->cm.get_cm_event(cm_, &ev) != 0) return;  // drained
      CmEvent e{ev->event, ev->id, ev->listen_id, ev->status, {}};
      const rdma_conn_param& cp = ev->param.conn;
      if (cp.private_data != nullptr && cp.private_data_len > 0) {
        const auto* p = static_cast<const uint8_t*>(cp.private_data);
        e.private_data.assign(p, p + cp.private_data_len);
      }
      api_->cm.ack_cm_event(ev);
      Dispatch(e);
    }
  }

  void Dispatch(const CmEvent& e) {
    if (e.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
      OnRequest(e);
      return;
    }
    Conn* c = Find(e.id);
    if (c == nullptr) return;
    switch (e.type) {
      case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (api_->cm.resolve_route(e.id, kResolveTimeoutMs) != 0) {
          FailConnect(*c, Errno(errno, "rdma_resolve_route"), ENETUNREACH);
        }
        return;
      case RDMA_CM_EVENT_ROUTE_RESOLVED:
        OnRouteResolved(*c);
        return;
      case RDMA_CM_EVENT_ESTABLISHED:
        if (c->outgoing) {
          OnConnected(*c, e);
        } else {
          OnAccepted(*c);
        }
        return;
      case RDMA_CM_EVENT_REJECTED:
        FailConnect(*c, absl::UnavailableError(absl::StrFormat(
                            "refused (no SDP listener there; reject reason %d)", e.status)),
                    ECONNREFUSED);
        return;
      case RDMA_CM_EVENT_ADDR_ERROR:
        FailConnect(*c, absl::UnavailableError(absl::StrFormat("address resolution failed (%d)",
                                                               e.status)),
                    e.status == -ETIMEDOUT ? EHOSTUNREACH : ENETUNREACH);
        return;
      case RDMA_CM_EVENT_ROUTE_ERROR:
        FailConnect(*c, absl::UnavailableError("route resolution failed"), ENETUNREACH);
        return;
      case RDMA_CM_EVENT_UNREACHABLE:
      case RDMA_CM_EVENT_CONNECT_ERROR:
        if (c->relay || !c->outgoing) {
          if (c->ch) c->ch->OnDisconnected(absl::UnavailableError(api_->cm.event_str(e.type)));
          MaybeFinish(*c);
          return;
        }
        FailConnect(*c, absl::UnavailableError(api_->cm.event_str(e.type)), ETIMEDOUT);
        return;
      case RDMA_CM_EVENT_DISCONNECTED:
      case RDMA_CM_EVENT_DEVICE_REMOVAL:
        if (c->ch) c->ch->OnDisconnected(absl::UnavailableError(api_->cm.event_str(e.type)));
        if (c) MaybeFinish(*c);
        return;
      default:
        return;
    }
  }

  const verbs::VerbsApi* const api_;
  RelayLoop* const loop_;
  const VerbsChannel::Sizes sizes_{32, 32 * 1024 + 16, 32, 32 * 1024 + 16};
  std::atomic<uint64_t> next_token_{1};
  // The loop's.
  rdma_event_channel* cm_ = nullptr;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Conn>> conns_;
  absl::flat_hash_map<rdma_cm_id*, Conn*> by_id_;
  absl::flat_hash_map<rdma_cm_id*, sockaddr_storage> listeners_;
  absl::flat_hash_map<std::string, rdma_cm_id*> listen_ids_;
  // Any thread's.
  std::mutex mu_;
  absl::flat_hash_map<std::string, bool> device_of_;               // guarded by mu_
  absl::flat_hash_map<std::string, Names> accepted_;              // guarded by mu_
  NoSdpCache no_sdp_{absl::Minutes(1), 1024};                       // guarded by mu_
};

}  // namespace

namespace {
std::atomic<Service*> running{nullptr};
std::atomic<pid_t> running_pid{0};
}  // namespace

Service* Service::IfRunning() {
  return running_pid.load(std::memory_order_acquire) == sys::GetPid()
             ? running.load(std::memory_order_acquire)
             : nullptr;
}

absl::StatusOr<Service*> Service::Get() {
  // The process that first asked owns the service: its thread, its RDMA
  // contexts and memory registrations are not a fork child's to use.
  static const pid_t owner = sys::GetPid();
  if (sys::GetPid() != owner) {
    return absl::FailedPreconditionError(
        "a fork child of the process that opened RDMA verbs (its relay thread is the parent's)");
  }
  static const absl::StatusOr<Service*>* result = [] {
    absl::StatusOr<Service*> r;
    absl::StatusOr<const verbs::VerbsApi*> api = verbs::UsableVerbs();
    absl::StatusOr<RelayLoop*> loop;
    if (!api.ok()) {
      r = api.status();
    } else if (loop = RelayLoop::Get(); !loop.ok()) {
      r = loop.status();
    } else {
      auto* s = new VerbsService(*api, *loop);  // lives as long as the process
      if (absl::Status init = s->Init(); !init.ok()) {
        r = init;
      } else {
        r = s;
        running.store(s, std::memory_order_release);
        running_pid.store(sys::GetPid(), std::memory_order_release);
      }
    }
    if (!r.ok()) log::Info("SDP over RDMA verbs unavailable: %s", r.status().message());
    return new absl::StatusOr<Service*>(std::move(r));
  }();
  return *result;
}

}  // namespace rds::sdp
