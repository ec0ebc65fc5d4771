// engine/engine.cc — the engine thread: routing, links, hellos, delivery.
#include "engine/engine.h"
#include "engine/abandon.h"
#include "engine/waiter.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/sync.h"
#include "absl/time/clock.h"
#include "conf/settings.h"
#include "engine/bind.h"
#include "engine/cong.h"
#include "engine/direct_receive.h"
#include "engine/errors.h"
#include "engine/fault.h"
#include "engine/info.h"
#include "engine/fork.h"
#include "engine/log.h"
#include "engine/recv.h"
#include "engine/registry.h"
#include "engine/send.h"
#include "engine/share.h"
#include "engine/socket.h"
#include "engine/stats.h"
#include "engine/sys.h"
#include "transports/tcp/tcp.h"
#include "transports/unix/unix.h"

namespace rds {
namespace {

// Received bytes after which a path acknowledges at once (OnPathMessage).
constexpr uint64_t kStreamAckBytes = 512 * 1024;

// The back-off after a path's or a route query's first failure (at least
// 1 ms); it doubles with each failure after that.
absl::Duration FirstReconnectBackoff() {
  return absl::Milliseconds(std::max<int64_t>(conf::Get().reconnect_min_delay_ms, 1));
}

// A path that is down and whose reconnection has failed since (its back-off
// grew past the first step) has no reachable peer for now.
bool PathUnreachable(const Path& p) {
  return !p.link && !p.connecting && p.backoff > FirstReconnectBackoff();
}

// Route queries to the connection's host fail (its connection attempts do),
// and no path to it is up.
bool QueriesFail(Connection& c) {
  return !c.AnyUpPath() && !c.query_link && c.query_backoff >= FirstReconnectBackoff();
}

// The sending socket was closed (its last fd). Called on the engine thread.
bool SenderClosed(const Message& m) {
  if (m.sender == nullptr) return false;
  rds::MutexLock lock(&m.sender->mu);
  return m.sender->released;
}

// A retransmission of a message delivered before its link broke (kernel
// rds_recv_incoming drops it).
bool AlreadyDelivered(const Path& p, const wire::Header& h) {
  return (h.flags & wire::kFlagRetransmitted) && h.sequence < p.next_rx_seq;
}

rds::Mutex engine_mu(absl::kConstInit);
std::atomic<Engine*> engine_ptr{nullptr};

// GEN_NUM: differs between a process and its fork children's engines.
uint32_t RandomGen() {
  uint32_t g;
  do {
    g = static_cast<uint32_t>(sys::RandomU64());
  } while (g == 0);
  return g;
}

// Same-host links come only from our own user unless RDS_PRELOAD_LINK_UIDS
// names others (or "all").
bool LinkAllowedFrom(uid_t uid) {
  if (uid == getuid()) return true;
  const std::string& allowed = conf::Get().link_uids;
  if (allowed == "all") return true;
  for (absl::string_view item : absl::StrSplit(allowed, ',', absl::SkipWhitespace())) {
    uint32_t u;
    if (absl::SimpleAtoi(item, &u) && u == uid) return true;
  }
  return false;
}

bool Matches(const MessagePtr& m, const RdsSocket* rs, const std::optional<RdsEndpoint>& dest) {
  if (m->sender != rs) return false;
  if (!dest) return true;
  return m->daddr.bytes == dest->addr.bytes && m->header.dport == dest->port;
}

}  // namespace

rds::Mutex& EngineStartMutex() { return engine_mu; }

Engine& Engine::Get() {
  Engine* e = engine_ptr.load(std::memory_order_acquire);
  if (e != nullptr) return *e;
  rds::MutexLock lock(&engine_mu);
  e = engine_ptr.load(std::memory_order_relaxed);
  if (e == nullptr) {
    e = new Engine();
    e->Start();
    engine_ptr.store(e, std::memory_order_release);
  }
  return *e;
}

Engine* Engine::IfRunning() { return engine_ptr.load(std::memory_order_acquire); }

void Engine::ResetAfterFork() {
  // The parent's engine object is abandoned (leaked): its thread does not
  // exist here and its locks may be held by threads that do not exist here.
  Abandon(engine_ptr.exchange(nullptr, std::memory_order_acq_rel));
}

void Engine::AbandonAfterLostFds() {
  Engine* e = engine_ptr.exchange(nullptr, std::memory_order_acq_rel);
  if (e != nullptr) e->loop_.Abandon();
  Abandon(e);
}

bool Engine::RunOnLoopAndWait(std::function<void()> task) {
  // Shared with the task: should the wait give up, the task may still run.
  auto done = std::make_shared<rds::Notification>();
  loop_.Post([task = std::move(task), done] {
    task();
    done->Notify();
  });
  // An engine answers within microseconds; a wait this long means its thread
  // is gone or its fds are (a raw close_range system call): look, and go on
  // waiting only while they are intact.
  constexpr absl::Duration kLook = absl::Milliseconds(200);
  while (!done->WaitForNotificationWithDeadline(absl::Now() + kLook)) {
    if (loop_.abandoned()) return false;
    if (sys::InternalFdsLost()) {
      log::Warn("the engine's descriptors were closed behind its back; starting afresh");
      HandleLostFds();
      return false;
    }
  }
  return true;
}

Engine::Engine() : pid_(static_cast<uint32_t>(getpid())), gen_(RandomGen()) {}

void Engine::Start() {
  // The engine thread must never run the application's signal handlers.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  thread_ = std::thread([this] {
    loop_tid_.store(gettid());
    loop_.Run();
  });
  thread_.detach();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  log::Debug("engine started (pid %d, generation %08x)", pid_, gen_);
}

// ---------------------------------------------------------------------------
// Serving: listeners.

absl::Status Engine::Serve(const std::shared_ptr<NetNs>& ns) {
  rds::MutexLock lock(&serve_mu_);
  if (unix_listener_ < 0) {
    HostRegistry& reg = HostRegistry::Get();
    if (absl::Status s = HostRegistry::EnsureDir(reg.rundir()); !s.ok()) return s;
    absl::StatusOr<int> fd = unix_link::Listen(reg.EngineSocketPath(pid_));
    if (!fd.ok()) return fd.status();
    unix_listener_ = *fd;
    loop_.Post([this, fd = *fd] {
      loop_.Add(fd, EPOLLIN, [this](uint32_t) { OnUnixAccept(); });
      PruneStaleEngineSockets();
    });
  }
  served_.try_emplace(ns->key(), ns);
  if (tcp_listening_.contains(ns->key())) return absl::OkStatus();
  tcp_listening_.insert(ns->key());  // one attempt per namespace
  int fd = -1;
  absl::Status s = ns->RunIn([&]() -> absl::Status {
    absl::StatusOr<int> l = tcp::Listen(static_cast<uint16_t>(conf::Get().tcp_port));
    if (!l.ok()) return l.status();
    fd = *l;
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  loop_.Post([this, ns, fd] {
    loop_.Add(fd, EPOLLIN, [this, ns, fd](uint32_t) { OnTcpAccept(ns, fd); });
  });
  return absl::OkStatus();
}

std::shared_ptr<NetNs> Engine::ServedNetNs(const NetNsKey& key) {
  rds::MutexLock lock(&serve_mu_);
  auto it = served_.find(key);
  return it == served_.end() ? nullptr : it->second;
}

// ---------------------------------------------------------------------------
// Sending.

void Engine::Submit(MessagePtr m) {
  const std::shared_ptr<NetNs>& ns = m->sender->ns;  // the caller keeps it alive
  // Fast path: the engine is idle and the destination's route and link are
  // established, so this thread transmits (or delivers in-process) itself and
  // the engine thread is not woken (docs/perf/history.md). Not for a stream: a send
  // written alone costs a system call and a wake-up of the reader each, while
  // the engine thread writes all the messages queued meanwhile at once (§9.4).
  const conf::Settings& cfg = conf::Get();
  // Joining a batch that still waits for the engine thread needs no clock
  // (two clock reads were 8 % of a 64 B stream's sender, §9.7).
  const bool detect = cfg.inline_send_stream_us > 0;
  const bool joins_batch = detect && submit_pending_.load(std::memory_order_relaxed);
  const bool timed = detect && !joins_batch;
  bool stream = joins_batch;
  if (timed) {
    const int64_t last = std::max(last_submit_end_ns_.load(std::memory_order_relaxed),
                                  last_drain_ns_.load(std::memory_order_relaxed));
    stream = MonotonicNs() - last < cfg.inline_send_stream_us * 1000;
  }
  if (cfg.inline_send && !stream && loop_.TryRunInline([&] {
        return RouteAndQueue(ns, m, /*may_set_up=*/false);
      })) {
  } else {
    // Queued for the engine thread without a task (an allocation and a
    // queue node) per message: one task routes everything queued meanwhile.
    // A task is posted when the list becomes non-empty and empties it, so
    // exactly one is pending while the list holds messages, and work this
    // thread posts after this send (a cancel, a reset) runs after it.
    bool was_empty;
    {
      rds::MutexLock lock(&submit_mu_);
      was_empty = submitted_.empty();
      submitted_.push_back(std::move(m));
      submit_pending_.store(true, std::memory_order_relaxed);
    }
    if (was_empty) loop_.Post([this] { RouteSubmitted(); });
  }
  // From the end: the gap is the application's, not the cost of this send.
  if (timed) last_submit_end_ns_.store(MonotonicNs(), std::memory_order_relaxed);
}

void Engine::RouteSubmitted() {
  // The two vectors trade places so that neither is reallocated in a stream.
  std::vector<MessagePtr> batch;
  batch.swap(submitted_spare_);
  {
    rds::MutexLock lock(&submit_mu_);
    batch.swap(submitted_);
    submit_pending_.store(false, std::memory_order_relaxed);
  }
  if (conf::Get().inline_send_stream_us > 0) {
    last_drain_ns_.store(MonotonicNs(), std::memory_order_relaxed);
  }
  // The messages of a stream share their route: the path the previous one
  // took is reused while namespace, addresses, port and port generation are
  // the same (no connection, route and path look-ups per message). Paths
  // cannot go away during the batch: it runs with the run lock held.
  Path* last_path = nullptr;
  struct RouteKey {
    const NetNs* ns;
    RdsAddr saddr, daddr;
    uint16_t dport;
    std::optional<uint32_t> port_gen;
  } last;
  for (MessagePtr& mp : batch) {
    const Message& m = *mp;
    // Nothing releases a submitted message before it is routed here: its
    // sender, and the sender's namespace, are alive.
    const NetNs* ns = m.sender->ns.get();
    if (last_path != nullptr && last_path->link && ns == last.ns &&
        m.header.dport == last.dport && m.port_gen == last.port_gen && m.daddr == last.daddr &&
        m.saddr == last.saddr) {
      PathSend(*last_path, std::move(mp));
      continue;
    }
    last = {ns, m.saddr, m.daddr, m.header.dport, m.port_gen};
    last_path = nullptr;
    // A copy: routing may release the message, and with it the sender.
    std::shared_ptr<NetNs> owned_ns = m.sender->ns;
    RouteAndQueue(owned_ns, mp, /*may_set_up=*/true, &last_path);
  }
  batch.clear();
  submitted_spare_.swap(batch);
}

void Engine::DropMessage(const MessagePtr& m, int counter) {
  stats::Inc(static_cast<stats::Counter>(counter));
  ReleaseSendSpace(*m);
}

Connection& Engine::GetConnection(const std::shared_ptr<NetNs>& ns, const RdsAddr& laddr,
                                  const RdsAddr& faddr) {
  ConnKey key{ns->key(), laddr, faddr};
  auto it = connections_.find(key);
  if (it != connections_.end()) return *it->second;
  bool local = ns->IsLocalAddress(faddr);
  auto c = std::make_unique<Connection>(key, ns, local);
  Connection& ref = *c;
  connections_[key] = std::move(c);
  log::Debug("connection %s -> %s (%s)", laddr.ToString(), faddr.ToString(),
             local ? "same host" : "remote");
  return ref;
}

Path& Engine::GetPath(Connection& c, uint32_t pid, bool connect) {
  auto it = c.paths.find(pid);
  if (it == c.paths.end()) it = c.paths.emplace(pid, std::make_unique<Path>(c, pid)).first;
  Path& p = *it->second;
  if (connect && !p.link && !p.connecting && p.retry_timer == 0) ConnectPath(p);
  return p;
}

uint32_t Engine::LocalOwner(Connection& c, uint16_t port) {
  uint64_t gen = c.ns->ports().BindGeneration();
  auto it = c.routes.find(port);
  if (it != c.routes.end() && it->second.bindgen == gen) return it->second.pid;
  uint32_t pid = 0;
  if (IsBoundHere(c.ns->key(), {c.key.faddr, port})) {
    pid = pid_;
  } else {
    absl::StatusOr<pid_t> owner = c.ns->ports().Owner(c.key.faddr, port);
    if (owner.ok() && *owner == kParkedPortOwner) return kParkedPid;  // not cached: it changes
    if (owner.ok()) pid = static_cast<uint32_t>(*owner);
    else log::Warn("port owner lookup: %s", owner.status().ToString());
  }
  c.routes[port] = {pid, gen};
  return pid;
}

bool Engine::RouteAndQueue(const std::shared_ptr<NetNs>& ns, MessagePtr& m, bool may_set_up,
                           Path** via) {
  if (m->cancelled.load()) return true;
  Connection* cp;
  if (may_set_up) {
    cp = &GetConnection(ns, m->saddr, m->daddr);
  } else {
    auto it = connections_.find(ConnKey{ns->key(), m->saddr, m->daddr});
    if (it == connections_.end()) return false;
    cp = it->second.get();
  }
  Connection& c = *cp;
  // Transmits on the path to engine `pid`; without set-up, only on a path
  // whose link is already up.
  auto send_on = [&](uint32_t pid) {
    Path* p;
    if (may_set_up) {
      p = &GetPath(c, pid, true);
    } else {
      auto it = c.paths.find(pid);
      if (it == c.paths.end() || !it->second->link) return false;
      p = it->second.get();
    }
    if (via) *via = p;
    PathSend(*p, std::move(m));
    return true;
  };
  uint16_t port = m->header.dport;
  if (c.local) {
    if (port == 0) {
      DeliverLocally(c, std::move(m));
      return true;
    }
    if (m->port_gen) {
      absl::StatusOr<uint32_t> now = c.ns->ports().PortGeneration(c.key.faddr, port);
      if (now.ok() && *now != *m->port_gen) {
        // The port was closed or re-bound after this message was sent: it
        // was addressed to a socket that no longer exists.
        DropMessage(m, stats::kShimSendDropNoRoute);
        return true;
      }
    }
    if (auto waiting = c.unresolved.find(port);
        waiting != c.unresolved.end() && !waiting->second.empty()) {
      if (!may_set_up) return false;
      waiting->second.push_back(std::move(m));  // behind those waiting for the port's socket
      return true;
    }
    uint32_t owner = LocalOwner(c, port);
    if (owner == kParkedPid) {
      if (!may_set_up) return false;
      c.unresolved[port].push_back(std::move(m));
      RetryParkedLater(c);
    } else if (owner == pid_) {
      DeliverLocally(c, std::move(m));
    } else if (owner == 0) {
      DropMessage(m, stats::kShimSendDropNoRoute);
    } else {
      return send_on(owner);
    }
    return true;
  }
  if (port == 0) {
    if (Path* p = c.AnyUpPath()) {
      PathSend(*p, std::move(m));
      return true;
    }
  } else if (auto it = c.routes.find(port); it != c.routes.end()) {
    auto queued = c.unresolved.find(port);
    if (queued == c.unresolved.end() || queued->second.empty()) return send_on(it->second.pid);
  }
  if (!may_set_up) return false;
  c.unresolved[port].push_back(std::move(m));
  Resolve(c, port);
  return true;
}

// Same-process delivery: the kernel's loopback transport.
void Engine::DeliverLocally(Connection& c, MessagePtr m) {
  ReleaseSendSpace(*m);
  ++c.loop_delivered;
  const conf::Settings& cfg = conf::Get();
  if (m->header.dport == 0) {
    stats::Inc(stats::kRecvPing);
    if (!cfg.ping_enable || m->header.sport == 0) return;
    auto pong = NewMessage();
    pong->header.sport = 0;
    pong->header.dport = m->header.sport;
    pong->saddr = m->daddr;
    pong->daddr = m->saddr;
    stats::Inc(stats::kSendPong);
    if (auto rs = FindBound(c.ns->key(), {m->saddr, m->header.sport})) Deliver(*rs, pong);
    return;
  }
  if (auto rs = FindBound(c.ns->key(), {m->daddr, m->header.dport})) {
    Deliver(*rs, std::move(m));
  } else {
    stats::Inc(stats::kRecvDropNoSock);
  }
}

// A data message (or pong) takes the path's next sequence number and is
// kept until the peer acknowledges it.
void Engine::PathSend(Path& p, MessagePtr m) {
  if (m->cancelled.load()) return;
  m->header.sequence = p.next_tx_seq++;
  if (p.link) {
    Transmit(p, std::move(m));
  } else {
    p.backlog.push_back(std::move(m));
    if (!p.connecting && p.retry_timer == 0) ConnectPath(p);
  }
}

void Engine::Transmit(Path& p, MessagePtr m) {
  if (!p.link) {
    p.backlog.push_back(std::move(m));
    return;
  }
  const conf::Settings& cfg = conf::Get();
  // Piggyback our cumulative acknowledgement; ask for one every
  // max_unacked_packets / max_unacked_bytes (the kernel's ACK_REQUIRED rule),
  // and whenever the sender's send buffer is half full (Message::ack_soon).
  m->header.ack = p.rx_delivered;
  p.rx_acked = p.rx_delivered;
  p.rx_unacked_packets = 0;
  p.rx_unacked_bytes = 0;
  if (p.ack_timer) {
    // This message carries the acknowledgement: the delayed one would wake
    // the engine for nothing (a request/response exchange every 1 ms).
    loop_.Cancel(p.ack_timer);
    p.ack_timer = 0;
  }
  p.tx_since_ack_required++;
  p.tx_bytes_since_ack_required += m->payload.size();
  if (m->ack_soon || p.tx_since_ack_required >= static_cast<uint64_t>(cfg.max_unacked_packets) ||
      p.tx_bytes_since_ack_required >= static_cast<uint64_t>(cfg.max_unacked_bytes)) {
    m->header.flags |= wire::kFlagAckRequired;
    p.tx_since_ack_required = 0;
    p.tx_bytes_since_ack_required = 0;
  } else {
    m->header.flags &= static_cast<uint8_t>(~wire::kFlagAckRequired);
  }
  p.unacked.push_back(m);
  p.link->Send(std::move(m));
}

// Control traffic (route queries, acknowledgements, notices) has no sequence
// number and is not retransmitted: it is regenerated when a link comes up.
void Engine::SendControl(Path& p, MessagePtr m) {
  if (!p.link) return;
  m->header.ack = p.rx_delivered;
  p.rx_acked = p.rx_delivered;
  p.link->Send(std::move(m));
}

void Engine::OnAck(Path& p, uint64_t ack) {
  SendSpaceRelease release;  // one lock per socket, not per message
  // Acknowledged messages were last touched long ago (a send buffer of
  // small ones is larger than the cache): each is fetched a few ahead of
  // its turn (docs/perf/history.md §9.9).
  constexpr size_t kPrefetchAhead = 4;
  while (!p.unacked.empty() && p.unacked.front()->header.sequence <= ack) {
    if (p.unacked.size() > kPrefetchAhead) PrefetchMessage(*p.unacked[kPrefetchAhead]);
    // The peer has read it: its pages may be written again.
    p.unacked.front()->spliced.store(false, std::memory_order_relaxed);
    release.Add(*p.unacked.front());
    p.unacked.pop_front();
  }
}

void Engine::ScheduleAck(Path& p, bool urgent) {
  if (p.rx_acked == p.rx_delivered) return;
  Path* pp = &p;
  if (urgent) {
    // After the current batch of reads: one acknowledgement covers them all.
    if (p.ack_posted) return;
    p.ack_posted = true;
    loop_.Post([this, pp] {
      pp->ack_posted = false;
      SendAck(*pp);
    });
  } else if (!p.ack_timer) {
    // Soon, unless a message going the other way carries it first.
    p.ack_timer = loop_.After(absl::Milliseconds(1), [this, pp] {
      pp->ack_timer = 0;
      SendAck(*pp);
    });
  }
}

void Engine::SendAck(Path& p) {
  if (!p.link || p.rx_acked == p.rx_delivered) return;
  control::Control ack;
  ack.op = control::Op::kAck;
  stats::Inc(stats::kShimAcksSent);
  SendControl(p, control::EncodeControl(ack));
}

// Everything written but not acknowledged goes back to the front of the
// backlog, in order, marked RETRANSMITTED (kernel rds_send_path_reset).
void Engine::ReturnUnackedToBacklog(Path& p) {
  for (auto it = p.unacked.rbegin(); it != p.unacked.rend(); ++it) {
    if ((*it)->cancelled.load()) continue;
    (*it)->header.flags |= wire::kFlagRetransmitted;
    p.backlog.push_front(std::move(*it));
  }
  p.unacked.clear();
}

// ---------------------------------------------------------------------------
// Paths: connecting, hello, up and down.

void Engine::ConnectPath(Path& p) {
  Connection& c = p.conn;
  if (fault::Enabled()) {
    if (fault::FailConnect()) {
      stats::Inc(stats::kShimConnFailed);
      SchedulePathRetry(p);
      return;
    }
    absl::Duration delay = fault::ConnectDelay();
    if (delay > absl::ZeroDuration() && !p.connect_delayed) {
      p.connect_delayed = true;
      Path* pp = &p;
      p.retry_timer = loop_.After(delay, [this, pp] {
        pp->retry_timer = 0;
        if (!pp->link && !pp->connecting) ConnectPath(*pp);
      });
      return;
    }
    p.connect_delayed = false;
  }
  int fd = -1;
  std::string desc;
  if (c.local) {
    std::string path = HostRegistry::Get().EngineSocketPath(static_cast<pid_t>(p.peer_pid));
    absl::StatusOr<int> r = unix_link::Connect(path);
    if (!r.ok()) {
      if (absl::IsNotFound(r.status())) {
        DropPath(p, "peer engine is gone");
      } else {
        SchedulePathRetry(p);
      }
      return;
    }
    fd = *r;
    desc = absl::StrFormat("unix %s->%s pid %d", c.key.laddr.ToString(), c.key.faddr.ToString(),
                           p.peer_pid);
  } else {
    absl::Status s = c.ns->RunIn([&]() -> absl::Status {
      absl::StatusOr<int> r = tcp::Connect(c.key.laddr, c.key.faddr,
                                           static_cast<uint16_t>(conf::Get().tcp_port));
      if (!r.ok()) return r.status();
      fd = *r;
      return absl::OkStatus();
    });
    if (!s.ok()) {
      log::Debug("connect %s: %s", c.key.faddr.ToString(), s.ToString());
      if (absl::IsNotFound(s)) {
        DropPath(p, "no engine serves that host");
      } else {
        SchedulePathRetry(p);
      }
      return;
    }
    desc = absl::StrFormat("tcp %s->%s pid %d", c.key.laddr.ToString(), c.key.faddr.ToString(),
                           p.peer_pid);
  }
  auto link = StreamLink::Create(loop_, fd, /*connecting=*/true, /*accept_fds=*/false, desc);
  p.connecting = link;
  Path* pp = &p;
  std::weak_ptr<StreamLink> weak = link;
  Link::Callbacks cb;
  cb.on_connected = [this, pp, weak] {
    auto l = weak.lock();
    if (!l) return;
    control::Hello h;
    h.kind = control::HelloKind::kLink;
    h.pid = pid_;
    h.gen = gen_;
    h.uid = getuid();
    h.ns = pp->conn.key.ns;
    h.from_addr = pp->conn.key.laddr;
    h.to_addr = pp->conn.key.faddr;
    h.target_pid = pp->peer_pid;
    h.ack = pp->rx_delivered;
    l->Send(control::EncodeHello(h));
  };
  cb.on_message = [this, pp, weak](wire::Header&& h, Payload&& payload) {
    auto l = weak.lock();
    if (!l) return;
    absl::StatusOr<control::Hello> hello = control::DecodeHello(h, payload);
    if (!hello.ok() || hello->kind != control::HelloKind::kReply) {
      stats::Inc(stats::kShimConnDropBadInput);
      l->Close();
      pp->connecting.reset();
      SchedulePathRetry(*pp);
      return;
    }
    OnLinkReply(*pp, l, *hello);
  };
  cb.on_closed = [this, pp, weak](const absl::Status& why) {
    auto l = weak.lock();
    if (pp->connecting != l) return;
    pp->connecting.reset();
    log::Debug("connect attempt failed: %s", why.ToString());
    if (absl::IsNotFound(why)) {
      // Refused: no engine runs on that host any more (every engine listens
      // on the rendezvous port), so the peer engine is gone with its
      // sockets. Its messages are dropped as a kernel host drops messages
      // for a port nobody bound (DESIGN.md §3.3).
      DropPath(*pp, "no engine serves that host");
      return;
    }
    SchedulePathRetry(*pp);
  };
  link->SetCallbacks(std::move(cb));
}

void Engine::OnLinkReply(Path& p, const std::shared_ptr<StreamLink>& link, const control::Hello& h) {
  if (p.connecting != link) {
    link->Close();
    return;
  }
  p.connecting.reset();
  switch (h.result) {
    case control::HelloResult::kAccept:
      AttachLink(p, link, h.gen, h.ack);
      return;
    case control::HelloResult::kRejectCollision: {
      // The peer's own link to us wins (or it already has one): wait for it,
      // and only try again if it has not come up after a while.
      link->Close();
      Path* pp = &p;
      if (!p.retry_timer) {
        p.retry_timer = loop_.After(absl::Seconds(1), [this, pp] {
          pp->retry_timer = 0;
          if (!pp->link && !pp->connecting && !pp->backlog.empty()) ConnectPath(*pp);
        });
      }
      return;
    }
    case control::HelloResult::kNoEngine:
      link->Close();
      DropPath(p, "peer engine is gone");
      return;
    default:
      link->Close();
      DropPath(p, "peer refused the link");
      return;
  }
}

void Engine::AttachLink(Path& p, std::shared_ptr<StreamLink> link, uint32_t peer_gen,
                        uint64_t peer_ack) {
  if (p.link && p.link != link) {
    // The peer connected again before this side saw its old link fail (it cut
    // the link, or reset the connection): the old link is dropped here, and
    // that is a connection reset as much as a failure seen first is.
    log::Info("path to pid %d (%s): new link replaces the old one", p.peer_pid,
              p.conn.key.faddr.ToString());
    stats::Inc(stats::kConnReset);
    p.link->Close();
    p.link.reset();
    ReturnUnackedToBacklog(p);
  }
  if (p.peer_gen != 0 && peer_gen != p.peer_gen) {
    // A new incarnation of the peer engine: what was sent to the old one is
    // stale (its sockets are gone), and both sequence spaces start again
    // (kernel rds_conn_peer_gen_update).
    log::Info("peer pid %d restarted (generation %08x -> %08x)", p.peer_pid, p.peer_gen, peer_gen);
    stats::Inc(stats::kShimPeerRestarts);
    std::deque<MessagePtr> keep;
    for (MessagePtr& m : p.backlog) {
      if (m->header.flags & wire::kFlagRetransmitted) {
        DropMessage(m, stats::kShimSendDropNoRoute);
      } else {
        keep.push_back(std::move(m));
      }
    }
    p.backlog.swap(keep);
    p.next_rx_seq = 0;
    p.rx_delivered = p.rx_acked = 0;
  } else {
    // What the peer already delivered need not be sent again.
    std::deque<MessagePtr> keep;
    for (MessagePtr& m : p.backlog) {
      if ((m->header.flags & wire::kFlagRetransmitted) && m->header.sequence <= peer_ack) {
        ReleaseSendSpace(*m);
      } else {
        keep.push_back(std::move(m));
      }
    }
    p.backlog.swap(keep);
  }
  p.rx_messages = 0;
  if (p.retry_timer) {
    loop_.Cancel(p.retry_timer);
    p.retry_timer = 0;
  }
  p.link = link;
  p.peer_gen = peer_gen;
  p.backoff = absl::ZeroDuration();
  Path* pp = &p;
  std::weak_ptr<StreamLink> weak = link;
  Link::Callbacks cb;
  cb.on_message = [this, pp](wire::Header&& h, Payload&& payload) {
    OnPathMessage(*pp, std::move(h), std::move(payload));
  };
  cb.payload_storage = [this, pp](const wire::Header& h, Reassembler& filler) {
    return DirectStorage(*pp, h, filler);
  };
  cb.on_closed = [this, pp, weak](const absl::Status& why) {
    if (pp->link != weak.lock()) return;
    OnPathDown(*pp, why);
  };
  link->SetCallbacks(std::move(cb));
  log::Debug("path up: %s", link->Describe());
  SendCongestionMap(p);  // the first message on every new link (§B.3)
  std::deque<MessagePtr> backlog;
  backlog.swap(p.backlog);
  for (MessagePtr& m : backlog) {
    if (m->cancelled.load()) continue;
    if (m->header.flags & wire::kFlagRetransmitted) stats::Inc(stats::kShimRetransmitted);
    Transmit(p, std::move(m));
  }
  ResolvePending(p.conn);
}

void Engine::OnPathDown(Path& p, const absl::Status& why) {
  log::Info("path to pid %d (%s) down: %s", p.peer_pid, p.conn.key.faddr.ToString(),
            why.ToString());
  stats::Inc(stats::kConnReset);
  p.link.reset();
  p.last_destination = {};  // a closed socket's object is not kept for an idle path
  ReturnUnackedToBacklog(p);
  // Route queries in flight on the dead link are asked again on the next.
  p.conn.querying.clear();
  // Reconnect even with nothing to send: that is how a dead peer engine is
  // found out (and its congestion map, which may block senders, dropped).
  SchedulePathRetry(p);
}

void Engine::SchedulePathRetry(Path& p) {
  if (p.retry_timer || p.link || p.connecting) return;
  const conf::Settings& cfg = conf::Get();
  absl::Duration delay;
  if (p.backoff == absl::ZeroDuration()) {
    delay = absl::ZeroDuration();  // the first retry is immediate (rds_queue_reconnect)
    p.backoff = FirstReconnectBackoff();
  } else {
    thread_local absl::BitGen gen;
    delay = absl::Milliseconds(
        absl::Uniform<int64_t>(gen, 0, std::max<int64_t>(absl::ToInt64Milliseconds(p.backoff), 1)));
    p.backoff = std::min(p.backoff * 2, absl::Milliseconds(cfg.reconnect_max_delay_ms));
    // Unreachable now (PathUnreachable): what closed sockets left here would
    // wait for a peer that may never come back (close drops such messages).
    DropClosedSenders(p.backlog, nullptr);
  }
  Path* pp = &p;
  p.retry_timer = loop_.After(delay, [this, pp] {
    pp->retry_timer = 0;
    if (!pp->link && !pp->connecting) ConnectPath(*pp);
  });
}

void Engine::DropPath(Path& p, const char* why) {
  log::Info("dropping path to pid %d (%s): %s", p.peer_pid, p.conn.key.faddr.ToString(), why);
  Connection& c = p.conn;
  for (MessagePtr& m : p.backlog) DropMessage(m, stats::kShimSendDropNoRoute);
  for (MessagePtr& m : p.unacked) DropMessage(m, stats::kShimSendDropNoRoute);
  p.backlog.clear();
  p.unacked.clear();
  if (p.retry_timer) loop_.Cancel(p.retry_timer);
  if (p.ack_timer) loop_.Cancel(p.ack_timer);
  if (p.link) p.link->Close();
  if (p.connecting) p.connecting->Close();
  for (auto it = c.routes.begin(); it != c.routes.end();) {
    if (it->second.pid == p.peer_pid) {
      c.routes.erase(it++);
    } else {
      ++it;
    }
  }
  CongestionTable::Get().SetPeerMap(c.key.ns, c.key.faddr, p.peer_pid, nullptr);
  auto it = c.paths.find(p.peer_pid);
  if (it != c.paths.end()) Bury(std::move(it->second));
  c.paths.erase(p.peer_pid);
}

// A congestion map on the wire (§B.3): flags 0x01, sequence 0, ports 0,
// 8192 bytes, outside the path's sequence space and never retransmitted.
void Engine::SendCongestionMap(Path& p) {
  if (!p.link) return;
  CongBits bits = CongestionTable::Get().LocalMap(p.conn.key.ns, p.conn.key.laddr);
  auto m = NewMessage();
  m->header.flags = wire::kFlagCongBitmap;
  m->header.len = wire::kCongMapBytes;
  m->payload = Payload(bits.data(), bits.size());
  p.link->Send(std::move(m));
}

void Engine::ResetConnectionsHostWide(NetNsKey ns, RdsAddr src, RdsAddr dst) {
  ResetConnections(ns, src, dst);
  control::Hello h;
  h.kind = control::HelloKind::kReset;
  h.pid = pid_;
  h.gen = gen_;
  h.uid = getuid();
  h.ns = ns;
  h.from_addr = src;
  h.to_addr = dst;
  MessagePtr m = control::EncodeHello(h);
  for (const std::string& path : HostRegistry::Get().OtherEngineSockets()) {
    unix_link::SendOne(path, m).IgnoreError();  // an engine that is gone has nothing to reset
  }
}

void Engine::ResetConnections(NetNsKey ns, RdsAddr src, RdsAddr dst) {
  loop_.Post([this, ns, src, dst] {
    for (auto& [key, c] : connections_) {
      if (key.ns != ns || key.laddr.bytes != src.bytes || key.faddr.bytes != dst.bytes) continue;
      for (auto& [pid, p] : c->paths) {
        if (!p->link) continue;
        p->link->Close();
        OnPathDown(*p, absl::AbortedError("RDS_CONN_RESET"));
      }
    }
  });
}

void Engine::SendCongestionUpdates(std::shared_ptr<NetNs> ns, RdsAddr addr) {
  loop_.Post([this, ns = std::move(ns), addr] {
    for (auto& [key, c] : connections_) {
      if (key.ns != ns->key() || key.laddr != addr) continue;
      for (auto& [pid, p] : c->paths) SendCongestionMap(*p);
    }
  });
}

void Engine::Bury(std::unique_ptr<Path> p) {
  graveyard_.push_back(std::move(p));
  loop_.Post([this] { graveyard_.clear(); });
}

// ---------------------------------------------------------------------------
// Receiving on a path.

void Engine::OnPathMessage(Path& p, wire::Header&& h, Payload&& payload) {
  Connection& c = p.conn;
  if (fault::Enabled() && fault::ResetAfterMessage(++p.rx_messages)) {
    // Test-only: the link breaks before this message is processed.
    p.link->Close();
    OnPathDown(p, absl::AbortedError("fault injection"));
    return;
  }
  if (h.ack != 0) OnAck(p, h.ack);
  if (control::IsHello(h)) return;  // a stray hello on an open link is ignored
  if (wire::IsShimControl(h)) {
    absl::StatusOr<control::Control> ctl = control::DecodeControl(h, payload);
    if (ctl.ok()) OnPathControl(p, *ctl);
    return;
  }
  if (wire::IsCongMap(h)) {
    stats::Inc(stats::kCongUpdateReceived);
    // Any other length is ignored, as rds_tcp_cong_recv does.
    if (h.len == wire::kCongMapBytes) {
      CongestionTable::Get().SetPeerMap(c.key.ns, c.key.faddr, p.peer_pid, payload.data());
    }
    return;
  }
  if (wire::IsHandshakePing(h) || wire::IsHandshakePong(h)) return;
  if (AlreadyDelivered(p, h)) {
    // Already delivered before the link broke (kernel rds_recv_incoming).
    stats::Inc(stats::kRecvDropOldSeq);
    ScheduleAck(p, /*urgent=*/true);
    return;
  }
  p.next_rx_seq = h.sequence + 1;
  if (!AcceptData(p, h, payload)) return;
  p.rx_delivered = h.sequence;
  p.rx_unacked_packets++;
  p.rx_unacked_bytes += h.len;
  const conf::Settings& cfg = conf::Get();
  // Besides the kernel's rules: a bulk stream is acknowledged every
  // kStreamAckBytes, as TCP acknowledges the bytes under kernel rds_tcp (its
  // sender frees messages on TCP's acknowledgement): the sender's window of
  // sndbuf bytes keeps moving instead of draining and refilling.
  bool urgent =
      (h.flags & wire::kFlagAckRequired) ||
      p.rx_unacked_packets >= static_cast<uint64_t>(cfg.max_unacked_packets) ||
      p.rx_unacked_bytes >= std::min(static_cast<uint64_t>(cfg.max_unacked_bytes), kStreamAckBytes);
  ScheduleAck(p, urgent);
}

// Delivers a data message (ping, pong or to a socket). False if the message
// was refused and must not be acknowledged (the link was reset).
bool Engine::AcceptData(Path& p, const wire::Header& h, Payload& payload) {
  Connection& c = p.conn;
  if (h.dport == 0) {
    stats::Inc(stats::kRecvPing);
    if (!conf::Get().ping_enable || h.sport == 0) return true;
    auto pong = NewMessage();
    pong->header.sport = 0;
    pong->header.dport = h.sport;
    pong->saddr = c.key.laddr;
    pong->daddr = c.key.faddr;
    stats::Inc(stats::kSendPong);
    PathSend(p, std::move(pong));
    return true;
  }
  RdsSocket* rs = Destination(p, h.dport);
  if (!rs) {
    stats::Inc(stats::kRecvDropNoSock);
    control::Control notice;
    notice.op = control::Op::kPortUnreachable;
    notice.port = h.dport;
    SendControl(p, control::EncodeControl(notice));
    return true;
  }
  auto m = NewMessage();
  // Header seen and message complete: the read that brought its end.
  m->rx_trace[0] = m->rx_trace[1] = p.link ? p.link->last_read_ns() : MonotonicNs();
  m->header = h;
  m->payload = std::move(payload);
  m->saddr = c.key.faddr;
  m->daddr = c.key.laddr;
  if (DirectReceive* d = DirectReceive::LenderOf(m->payload)) {
    // Read into the buffer of the recvmsg waiting for it: handed to that call
    // alone. (Should that offer have gone meanwhile, the bytes move to a
    // buffer of their own and the message is queued as usual.)
    if (DeliverDirect(*rs, m, *d)) return true;
    m->payload = Payload(m->payload.data(), m->payload.size());
  }
  if (Deliver(*rs, std::move(m), /*refuse_over_hard_limit=*/true) == DeliverResult::kRefused) {
    // The peer ignores congestion and this socket's queue is far beyond its
    // rcvbuf: refuse the message (unacknowledged, so it is retransmitted
    // later) and reset the link. Memory stays bounded; nothing is lost.
    stats::Inc(stats::kShimConnDropOverload);
    log::Warn("%s: destination port %d is far over its receive buffer; resetting the link",
              p.link->Describe(), h.dport);
    p.next_rx_seq = h.sequence;  // the retransmission must be accepted
    p.link->Close();
    OnPathDown(p, absl::ResourceExhaustedError("receiver overloaded"));
    return false;
  }
  return true;
}

RdsSocket* Engine::Destination(Path& p, uint16_t dport) {
  auto& last = p.last_destination;
  const uint64_t epoch = BindTableEpoch();
  if (last.epoch != epoch || last.port != dport) {
    last.socket = FindBound(p.conn.ns->key(), {p.conn.key.laddr, dport});
    last.port = dport;
    last.epoch = epoch;
  }
  return last.socket.get();
}

std::optional<Payload> Engine::DirectStorage(Path& p, const wire::Header& h, Reassembler& filler) {
  // Data for a socket only (no pings, congestion maps, controls), and not a
  // retransmission that will be dropped as already delivered.
  if (h.dport == 0 || wire::HasExtHeaders(h) || wire::IsCongMap(h) || control::IsHello(h) ||
      wire::IsHandshakePing(h) || wire::IsHandshakePong(h)) {
    return std::nullopt;
  }
  if (AlreadyDelivered(p, h)) return std::nullopt;
  RdsSocket* rs = Destination(p, h.dport);
  if (!rs) return std::nullopt;
  rds::MutexLock lock(&rs->mu);
  // Messages already queued come first: they are the waiting call's.
  if (rs->direct == nullptr || rs->released || !rs->recv_queue.empty()) return std::nullopt;
  return rs->direct->Lend(h.len, filler);
}

void Engine::OnPathControl(Path& p, const control::Control& ctl) {
  Connection& c = p.conn;
  switch (ctl.op) {
    case control::Op::kRouteQuery: {
      control::Control reply;
      reply.op = control::Op::kRouteReply;
      reply.query_id = ctl.query_id;
      reply.port = ctl.port;
      reply.owner_pid = AnswerRouteQuery(c.ns, c.key.laddr, ctl.port);
      SendControl(p, control::EncodeControl(reply));
      return;
    }
    case control::Op::kRouteReply:
      OnRouteAnswer(c, ctl.port, ctl.owner_pid);
      return;
    case control::Op::kPortUnreachable:
      c.routes.erase(ctl.port);
      return;
    case control::Op::kAck:
      return;  // header.ack was applied on arrival
    case control::Op::kInfoData:
    case control::Op::kInfoDataPart:
      return;  // only on rdsctl/RDS_INFO query links, never on a path
    case control::Op::kArenaAnnounce:
    case control::Op::kArenaRelease:
      return;  // a same-host link consumes these itself; meaningless elsewhere
  }
}

// ---------------------------------------------------------------------------
// Route resolution for remote destinations.

uint32_t Engine::AnswerRouteQuery(const std::shared_ptr<NetNs>& ns, const RdsAddr& addr,
                                  uint16_t port) {
  stats::Inc(stats::kShimRouteQueries);
  if (port == 0 || IsBoundHere(ns->key(), {addr, port})) return pid_;
  absl::StatusOr<pid_t> owner = ns->ports().Owner(addr, port);
  if (owner.ok() && *owner == kParkedPortOwner) return kParkedPid;
  return owner.ok() ? static_cast<uint32_t>(*owner) : 0;
}

void Engine::RetryParkedLater(Connection& c) {
  if (c.query_timer) return;
  Connection* cp = &c;
  c.query_timer = loop_.After(kParkedRetry, [this, cp] {
    cp->query_timer = 0;
    if (!cp->local) {
      ResolvePending(*cp);
      return;
    }
    // Routed again in order: the first that still finds the socket parked
    // waits again, and the rest queue behind it.
    std::vector<std::pair<uint16_t, std::deque<MessagePtr>>> waiting;
    for (auto& [port, q] : cp->unresolved) waiting.emplace_back(port, std::move(q));
    cp->unresolved.clear();
    for (auto& [port, q] : waiting) {
      for (MessagePtr& m : q) RouteAndQueue(cp->ns, m, /*may_set_up=*/true, nullptr);
    }
  });
}

void Engine::Resolve(Connection& c, uint16_t port) {
  if (c.querying.contains(port)) return;
  if (Path* p = c.AnyUpPath()) {
    c.querying.insert(port);
    control::Control q;
    q.op = control::Op::kRouteQuery;
    q.query_id = next_query_id_++;
    q.port = port;
    SendControl(*p, control::EncodeControl(q));
    return;
  }
  if (c.query_link || c.query_timer) return;  // one discovery connection at a time
  StartQueryLink(c, port);
}

void Engine::StartQueryLink(Connection& c, uint16_t port) {
  int fd = -1;
  absl::Status s = c.ns->RunIn([&]() -> absl::Status {
    absl::StatusOr<int> r =
        tcp::Connect(c.key.laddr, c.key.faddr, static_cast<uint16_t>(conf::Get().tcp_port));
    if (!r.ok()) return r.status();
    fd = *r;
    return absl::OkStatus();
  });
  Connection* cp = &c;
  auto retry = [this, cp] {
    const conf::Settings& cfg = conf::Get();
    thread_local absl::BitGen gen;
    cp->query_backoff =
        std::clamp(cp->query_backoff * 2, FirstReconnectBackoff(),
                   absl::Milliseconds(cfg.reconnect_max_delay_ms));
    for (auto& [port, q] : cp->unresolved) DropClosedSenders(q, nullptr);
    absl::Duration delay = absl::Milliseconds(absl::Uniform<int64_t>(
        gen, 0, std::max<int64_t>(absl::ToInt64Milliseconds(cp->query_backoff), 1)));
    cp->query_timer = loop_.After(delay, [this, cp] {
      cp->query_timer = 0;
      ResolvePending(*cp);
    });
  };
  if (!s.ok()) {
    log::Debug("route query to %s: %s", c.key.faddr.ToString(), s.ToString());
    if (absl::IsNotFound(s)) {
      NoEngineAt(c);
    } else {
      retry();
    }
    return;
  }
  auto link = StreamLink::Create(
      loop_, fd, true, false,
      absl::StrFormat("query %s->%s:%d", c.key.laddr.ToString(), c.key.faddr.ToString(), port));
  c.query_link = link;
  c.query_link_port = port;
  std::weak_ptr<StreamLink> weak = link;
  Link::Callbacks cb;
  cb.on_connected = [this, cp, weak, port] {
    auto l = weak.lock();
    if (!l) return;
    control::Hello h;
    h.kind = control::HelloKind::kQuery;
    h.pid = pid_;
    h.gen = gen_;
    h.uid = getuid();
    h.from_addr = cp->key.laddr;
    h.to_addr = cp->key.faddr;
    h.query_port = port;
    l->Send(control::EncodeHello(h));
  };
  cb.on_message = [this, cp, weak, port](wire::Header&& h, Payload&& payload) {
    auto l = weak.lock();
    if (!l || cp->query_link != l) return;
    absl::StatusOr<control::Hello> hello = control::DecodeHello(h, payload);
    cp->query_link.reset();
    l->Close();
    if (!hello.ok() || hello->kind != control::HelloKind::kReply ||
        hello->result != control::HelloResult::kAnswer) {
      stats::Inc(stats::kShimConnDropBadInput);
      ResolvePending(*cp);
      return;
    }
    cp->query_backoff = absl::ZeroDuration();
    OnRouteAnswer(*cp, port, hello->answer_pid);
    ResolvePending(*cp);
  };
  cb.on_closed = [this, cp, weak, retry](const absl::Status& why) {
    auto l = weak.lock();
    if (cp->query_link != l) return;
    cp->query_link.reset();
    log::Debug("route query failed: %s", why.ToString());
    if (absl::IsNotFound(why)) {
      NoEngineAt(*cp);
    } else {
      retry();
    }
  };
  link->SetCallbacks(std::move(cb));
}

void Engine::OnRouteAnswer(Connection& c, uint16_t port, uint32_t pid) {
  c.querying.erase(port);
  auto it = c.unresolved.find(port);
  std::deque<MessagePtr> waiting;
  if (it != c.unresolved.end()) {
    waiting.swap(it->second);
    c.unresolved.erase(it);
  }
  if (pid == kParkedPid) {
    // The port's socket is between owners there (engine/share.h): ask again.
    if (!waiting.empty()) c.unresolved[port] = std::move(waiting);
    RetryParkedLater(c);
    return;
  }
  if (pid == 0) {
    // Nobody has the port bound there: the kernel drops such messages at the
    // destination; so do we, without caching the answer.
    for (MessagePtr& m : waiting) DropMessage(m, stats::kShimSendDropNoRoute);
    return;
  }
  if (port != 0) c.routes[port] = {pid, 0};
  Path& p = GetPath(c, pid, true);
  for (MessagePtr& m : waiting) PathSend(p, std::move(m));
}

// The connection's host refused a route query: no shim engine runs there, so
// nobody has any port bound. What waits for a route is dropped as a kernel
// host drops messages for a port nobody bound; the next message asks again.
void Engine::NoEngineAt(Connection& c) {
  c.query_backoff = absl::ZeroDuration();  // an answer, not a failure
  std::vector<uint16_t> ports;
  for (auto& [port, q] : c.unresolved) ports.push_back(port);
  for (uint16_t port : ports) OnRouteAnswer(c, port, 0);
}

void Engine::ResolvePending(Connection& c) {
  std::vector<uint16_t> ports;
  for (auto& [port, q] : c.unresolved) {
    if (!q.empty() && !c.querying.contains(port)) ports.push_back(port);
  }
  for (uint16_t port : ports) {
    if (port == 0) {
      if (Path* p = c.AnyUpPath()) {
        OnRouteAnswer(c, 0, p->peer_pid);
        continue;
      }
    }
    Resolve(c, port);
  }
}

// ---------------------------------------------------------------------------
// Accepting links.

void Engine::OnUnixAccept() {
  int listener;
  {
    rds::MutexLock lock(&serve_mu_);
    listener = unix_listener_;
  }
  for (;;) {
    int fd = unix_link::Accept(listener);
    if (fd < 0) return;
    absl::StatusOr<uid_t> uid = unix_link::PeerUid(fd);
    if (!uid.ok() || !LinkAllowedFrom(*uid)) {
      log::Warn("refusing a same-host link from uid %d (see RDS_PRELOAD_LINK_UIDS)",
                uid.ok() ? static_cast<int>(*uid) : -1);
      stats::Inc(stats::kShimLinkRefused);
      sys::CloseInternal(fd);
      continue;
    }
    stats::Inc(stats::kShimConnAccepted);
    WatchIncoming(StreamLink::Create(loop_, fd, false, /*accept_fds=*/true, "unix incoming"),
                  nullptr);
  }
}

void Engine::OnTcpAccept(const std::shared_ptr<NetNs>& ns, int listen_fd) {
  for (;;) {
    RdsEndpoint peer, local;
    int fd = tcp::Accept(listen_fd, &peer, &local);
    if (fd < 0) return;
    stats::Inc(stats::kShimConnAccepted);
    WatchIncoming(StreamLink::Create(loop_, fd, false, false,
                                     absl::StrFormat("tcp incoming from %s:%d",
                                                     peer.addr.ToString(), peer.port)),
                  ns);
  }
}

void Engine::WatchIncoming(std::shared_ptr<StreamLink> link, std::shared_ptr<NetNs> tcp_ns) {
  incoming_.insert(link);
  std::weak_ptr<StreamLink> weak = link;
  Link::Callbacks cb;
  cb.on_message = [this, weak, tcp_ns](wire::Header&& h, Payload&& payload) {
    auto l = weak.lock();
    if (!l) return;
    OnIncomingHello(l, tcp_ns, std::move(h), std::move(payload));
  };
  cb.on_closed = [this, weak](const absl::Status&) {
    if (auto l = weak.lock()) incoming_.erase(l);
  };
  link->SetCallbacks(std::move(cb));
}

void Engine::Reply(const std::shared_ptr<StreamLink>& link, control::HelloResult result,
                   uint32_t answer_pid, bool close_after, uint64_t ack) {
  control::Hello r;
  r.kind = control::HelloKind::kReply;
  r.result = result;
  r.pid = pid_;
  r.gen = gen_;
  r.uid = getuid();
  r.answer_pid = answer_pid;
  r.ack = ack;
  link->Send(control::EncodeHello(r));
  if (close_after) {
    incoming_.erase(link);
    link->CloseAfterFlush();
  }
}

void Engine::OnIncomingHello(const std::shared_ptr<StreamLink>& link,
                             const std::shared_ptr<NetNs>& tcp_ns, wire::Header&& h,
                             Payload&& payload) {
  if (!incoming_.contains(link)) return;  // already handled; more bytes before our reply
  absl::StatusOr<control::Hello> hello = control::DecodeHello(h, payload);
  if (!hello.ok()) {
    stats::Inc(stats::kShimConnDropBadInput);
    log::Info("%s: not a shim hello (%s); closing", link->Describe(), hello.status().message());
    incoming_.erase(link);
    link->Close();
    return;
  }
  switch (hello->kind) {
    case control::HelloKind::kHandoff: {
      int fd = link->TakeReceivedFd();
      incoming_.erase(link);
      link->Close();
      std::shared_ptr<NetNs> ns = tcp_ns ? nullptr : ServedNetNs(hello->ns);
      if (fd < 0 || !ns) {
        if (fd >= 0) sys::CloseInternal(fd);
        return;
      }
      stats::Inc(stats::kShimHandoffs);
      auto tcp_link = StreamLink::Create(loop_, fd, false, false, "tcp handed over");
      incoming_.insert(tcp_link);
      control::Hello as_link = *hello;
      as_link.kind = control::HelloKind::kLink;
      AcceptLink(tcp_link, ns, as_link);
      return;
    }
    case control::HelloKind::kShareClient: {
      // Same-host only: another process holds a descriptor of one of our
      // sockets; its calls come on the stream it passed (engine/share.h).
      int fd = link->TakeReceivedFd();
      incoming_.erase(link);
      link->Close();
      if (fd < 0) return;
      if (tcp_ns) {
        sys::CloseInternal(fd);
        return;
      }
      share::ServeClient(hello->socket_id, fd);
      return;
    }
    case control::HelloKind::kReset: {
      // Same-host only: RDS_CONN_RESET made by another process of the host
      // (the connection belongs to the namespace, not to one process).
      incoming_.erase(link);
      link->Close();
      if (!tcp_ns) ResetConnections(hello->ns, hello->from_addr, hello->to_addr);
      return;
    }
    case control::HelloKind::kInfo: {
      // Same-host only: this engine's share of an RDS_INFO answer, or (option
      // 0) its whole state as JSON for rdsctl, whatever the namespace.
      std::shared_ptr<NetNs> ns = tcp_ns ? nullptr : ServedNetNs(hello->ns);
      if (tcp_ns || (!ns && hello->info_option != 0)) {
        Reply(link, control::HelloResult::kRefused, 0, true);
        return;
      }
      absl::StatusOr<InfoItems> items =
          hello->info_option == 0
              ? absl::StatusOr<InfoItems>(InfoItems{1, {}})
              : LocalInfoItems(static_cast<int>(hello->info_option), ns);
      if (items.ok() && hello->info_option == 0) {
        std::string json = EngineDumpJson();
        items->bytes.assign(json.begin(), json.end());
      }
      if (!items.ok()) {
        Reply(link, control::HelloResult::kRefused, 0, true);
        return;
      }
      Reply(link, control::HelloResult::kAnswer, pid_, false);
      for (MessagePtr& part :
           control::EncodeInfoAnswer(static_cast<uint32_t>(items->each), std::move(items->bytes))) {
        link->Send(std::move(part));
      }
      incoming_.erase(link);
      link->CloseAfterFlush();
      return;
    }
    case control::HelloKind::kQuery: {
      if (!tcp_ns) {
        Reply(link, control::HelloResult::kRefused, 0, true);
        return;
      }
      Reply(link, control::HelloResult::kAnswer,
            AnswerRouteQuery(tcp_ns, hello->to_addr, hello->query_port), true);
      return;
    }
    case control::HelloKind::kLink: {
      std::shared_ptr<NetNs> ns = tcp_ns ? tcp_ns : ServedNetNs(hello->ns);
      if (!ns) {
        Reply(link, control::HelloResult::kRefused, 0, true);
        return;
      }
      if (hello->target_pid != pid_) {
        if (!tcp_ns) {
          Reply(link, control::HelloResult::kRefused, 0, true);
          return;
        }
        // Hand the connection to the engine it is for (same host).
        control::Hello handoff = *hello;
        handoff.kind = control::HelloKind::kHandoff;
        handoff.ns = ns->key();
        absl::Status s = unix_link::HandOff(
            HostRegistry::Get().EngineSocketPath(static_cast<pid_t>(hello->target_pid)),
            control::EncodeHello(handoff), link->fd());
        if (s.ok()) {
          incoming_.erase(link);
          link->Close();
        } else {
          Reply(link, control::HelloResult::kNoEngine, 0, true);
        }
        return;
      }
      AcceptLink(link, ns, *hello);
      return;
    }
    default:
      stats::Inc(stats::kShimConnDropBadInput);
      incoming_.erase(link);
      link->Close();
      return;
  }
}

void Engine::AcceptLink(const std::shared_ptr<StreamLink>& link, const std::shared_ptr<NetNs>& ns,
                        const control::Hello& h) {
  Connection& c = GetConnection(ns, h.to_addr, h.from_addr);
  Path& p = GetPath(c, h.pid, /*connect=*/false);
  // A new link for a path that is up replaces it (the peer saw the old one
  // fail first); AttachLink resends what the old one had not delivered.
  if (p.connecting) {
    // Both sides opened this path: the link opened by the smaller
    // (address, pid) survives; data has flowed on neither.
    bool ours_wins = std::tie(c.key.laddr, pid_) < std::tie(c.key.faddr, h.pid);
    if (ours_wins) {
      Reply(link, control::HelloResult::kRejectCollision, 0, true);
      return;
    }
    p.connecting->Close();
    p.connecting.reset();
  }
  incoming_.erase(link);
  // A restarted peer (new generation) gets a fresh sequence space: no ack.
  bool restarted = p.peer_gen != 0 && h.gen != p.peer_gen;
  Reply(link, control::HelloResult::kAccept, 0, false, restarted ? 0 : p.rx_delivered);
  AttachLink(p, link, h.gen, h.ack);
}

// ---------------------------------------------------------------------------
// Introspection.

// A thread running the loop (the engine thread, or one sending inline or
// driving) owns the loop's state just as the engine thread does.
bool Engine::OnEngineThread() const {
  return EventLoop::InLoop() || gettid() == loop_tid_.load();
}

absl::Status Engine::WaitDriving(Waiter& waiter, std::optional<absl::Time> deadline,
                                 RdsSocket* rs, DirectReceive* direct) {
  absl::Status result;
  if (direct == nullptr) {
    if (loop_.Drive(waiter, deadline, &result)) return result;
    return waiter.Sleep(deadline);
  }
  // The offer stands while this thread drives (so the run lock is held
  // whenever it changes), and only with nothing queued.
  auto offer = [rs, direct] {
    rds::MutexLock lock(&rs->mu);
    if (!rs->released && rs->direct == nullptr && rs->recv_queue.empty()) rs->direct = direct;
  };
  auto withdraw = [rs, direct] {
    {
      rds::MutexLock lock(&rs->mu);
      if (rs->direct == direct) rs->direct = nullptr;
    }
    direct->Withdraw();
  };
  if (loop_.Drive(waiter, deadline, &result, offer, withdraw)) return result;
  direct->Withdraw();
  return waiter.Sleep(deadline);
}

std::vector<PathInfo> Engine::Snapshot(std::optional<NetNsKey> ns) {
  auto collect = [this, ns] {
    std::vector<PathInfo> out;
    auto describe = [](const MessagePtr& m, const Connection& c) {
      MessageInfo mi;
      mi.seq = m->header.sequence;
      mi.len = m->header.len;
      mi.laddr = c.key.laddr;
      mi.faddr = c.key.faddr;
      mi.lport = m->header.sport;
      mi.fport = m->header.dport;
      mi.flags = m->header.flags;
      return mi;
    };
    for (auto& [key, c] : connections_) {
      if (ns && key.ns != *ns) continue;
      if (c->local && c->loop_delivered > 0) {
        PathInfo self;
        self.ns = key.ns;
        self.laddr = key.laddr;
        self.faddr = key.faddr;
        self.peer_pid = pid_;
        self.same_host = true;
        self.in_process = true;
        self.up = true;
        self.next_tx_seq = self.next_rx_seq = c->loop_delivered + 1;
        out.push_back(std::move(self));
      }
      for (auto& [pid, p] : c->paths) {
        PathInfo pi;
        pi.ns = key.ns;
        pi.laddr = key.laddr;
        pi.faddr = key.faddr;
        pi.peer_pid = pid;
        pi.same_host = c->local;
        pi.up = p->link != nullptr;
        pi.connecting = p->connecting != nullptr;
        pi.next_tx_seq = p->next_tx_seq;
        pi.next_rx_seq = p->next_rx_seq;
        for (const MessagePtr& m : p->backlog) pi.send.push_back(describe(m, *c));
        for (const MessagePtr& m : p->unacked) pi.retrans.push_back(describe(m, *c));
        if (p->link && !c->local) {
          sockaddr_storage ss;
          socklen_t len = sizeof(ss);
          if (sys::Getsockname(p->link->fd(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
            pi.tcp_local = FromKernelSockaddr(ss);
          }
          len = sizeof(ss);
          if (sys::Getpeername(p->link->fd(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
            pi.tcp_peer = FromKernelSockaddr(ss);
          }
        }
        out.push_back(std::move(pi));
      }
    }
    return out;
  };
  if (OnEngineThread()) return collect();
  auto result = std::make_shared<std::vector<PathInfo>>();
  RunOnLoopAndWait([result, collect] { *result = collect(); });
  return std::move(*result);
}

// ---------------------------------------------------------------------------
// Exit.

size_t Engine::PendingMessages() {
  // A path that is down and whose reconnection has failed since (its
  // back-off grew past the first step), or a route query whose connection
  // failed, has no reachable peer: nothing to wait for at exit, where kernel
  // RDS drops a closed socket's messages anyway (DESIGN.md §4.1).
  size_t n = 0;
  for (auto& [key, c] : connections_) {
    const bool queries_fail = QueriesFail(*c);
    for (auto& [port, q] : c->unresolved) n += queries_fail ? 0 : q.size();
    for (auto& [pid, p] : c->paths) {
      if (PathUnreachable(*p)) continue;
      n += p->backlog.size() + p->unacked.size();
    }
  }
  return n;
}

void Engine::PruneStaleEngineSockets() {
  const int dirs = HostRegistry::Get().PruneUnusedNamespaceDirs();
  if (dirs > 0) stats::Add(stats::kShimStaleNamespaceDirsPruned, static_cast<uint64_t>(dirs));
  for (const auto& [pid, path] : HostRegistry::Get().OtherEngines()) {
    absl::StatusOr<int> fd = unix_link::Connect(path);
    if (fd.ok()) {
      sys::CloseInternal(*fd);
      continue;  // an engine listens there
    }
    // Refused (or gone): nobody listens. The pid is checked after the connect,
    // so a new process with that pid would have bound a listening file first.
    if (absl::IsNotFound(fd.status()) && kill(pid, 0) != 0 && errno == ESRCH) {
      unlink(path.c_str());
      stats::Inc(stats::kShimStaleEnginesPruned);
    }
  }
}

void Engine::WithdrawAtExit() {
  Engine* e = IfRunning();
  if (e == nullptr) return;
  rds::MutexLock lock(&e->serve_mu_);
  if (e->unix_listener_ < 0) return;
  unlink(HostRegistry::Get().EngineSocketPath(static_cast<pid_t>(e->pid_)).c_str());
}

void Engine::DrainAtExit(absl::Duration limit) {
  Engine* e = IfRunning();
  if (e == nullptr) return;
  absl::Time deadline = absl::Now() + limit;
  for (;;) {
    auto pending = std::make_shared<std::atomic<size_t>>(~size_t{0});
    auto done = std::make_shared<rds::Notification>();
    e->loop_.Post([e, pending, done] {
      pending->store(e->PendingMessages());
      done->Notify();
    });
    if (!done->WaitForNotificationWithDeadline(deadline)) return;
    if (pending->load() == 0 || absl::Now() >= deadline) return;
    absl::SleepFor(absl::Milliseconds(1));
  }
}

// ---------------------------------------------------------------------------
// Cancellation.

void Engine::CancelSentTo(std::shared_ptr<RdsSocket> rs, std::optional<RdsEndpoint> dest) {
  RunOnLoopAndWait([this, rs, dest] {
    auto cancel = [&](std::deque<MessagePtr>& q) {
      for (MessagePtr& m : q) {
        if (Matches(m, rs.get(), dest) && !m->cancelled.exchange(true)) {
          DropMessage(m, stats::kShimSendDropCancelled);
        }
      }
    };
    for (auto& [key, c] : connections_) {
      for (auto& [port, q] : c->unresolved) cancel(q);
      for (auto& [pid, p] : c->paths) {
        cancel(p->backlog);
        cancel(p->unacked);
      }
    }
  });
}

void Engine::ReleaseSender(std::shared_ptr<RdsSocket> rs) {
  RunOnLoopAndWait([this, rs] {
    for (auto& [key, c] : connections_) {
      if (QueriesFail(*c)) {
        for (auto& [port, q] : c->unresolved) DropClosedSenders(q, rs.get());
      }
      for (auto& [pid, p] : c->paths) {
        if (PathUnreachable(*p)) DropClosedSenders(p->backlog, rs.get());
      }
    }
  });
}

// Drops the messages of `only` (of every closed socket if null) from `q`:
// their destination cannot be reached now, and their sender is gone.
void Engine::DropClosedSenders(std::deque<MessagePtr>& q, const RdsSocket* only) {
  for (MessagePtr& m : q) {
    if (m->cancelled.load()) continue;
    if (only != nullptr ? m->sender != only : !SenderClosed(*m)) continue;
    if (!m->cancelled.exchange(true)) DropMessage(m, stats::kShimSendDropCancelled);
  }
}

}  // namespace rds
