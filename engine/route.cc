// engine/route.cc — routes: which engine owns a destination port, on this
// host (the registry) and on another (route queries), and the messages that
// wait for an answer.
//
// Members of Engine (engine/engine.h); engine.cc owns the thread and its state.
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
#include "engine/engine_internal.h"

namespace rds {

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
  if (it != c.routes.end() && pid != 0) NoteOwnerChange(c, port, it->second.pid, pid);
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
    if (owner == kParkedPid || (owner != 0 && !c.settling.empty() && PortSettling(c, port))) {
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
  if (c.kernel_peer) {
    // One node owns every port there; what still waits for a route goes first.
    if (auto waiting = c.unresolved.find(port);
        waiting == c.unresolved.end() || waiting->second.empty()) {
      // Its port's path, unless the number of paths is still being agreed.
      if (const uint32_t key = NodePathFor(c, m->header.sport); key != 0) return send_on(key);
    }
  } else if (port == 0) {
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
      // The moved messages stay first if they wait again.
      auto left = cp->unresolved.find(port);
      if (left == cp->unresolved.end() || left->second.empty()) cp->moved_front.erase(port);
    }
  });
}

void Engine::NoteOwnerChange(Connection& c, uint16_t port, uint32_t before, uint32_t now) {
  if (before != 0 && before != kParkedPid && before != now) c.settling.try_emplace(port, before);
}

bool Engine::PortSettling(Connection& c, uint16_t port) {
  auto it = c.settling.find(port);
  if (it == c.settling.end()) return false;
  if (auto p = c.paths.find(it->second); p != c.paths.end()) {
    auto for_port = [port](const MessagePtr& m) { return m->header.dport == port; };
    const Path& old = *p->second;
    if (std::any_of(old.unacked.begin(), old.unacked.end(), for_port) ||
        std::any_of(old.backlog.begin(), old.backlog.end(), for_port)) {
      return true;
    }
  }
  c.settling.erase(it);
  return false;
}

void Engine::Resolve(Connection& c, uint16_t port) {
  if (c.kernel_peer) {
    // Every port is the node's; SetNodePaths resolves what waits for its paths.
    if (NodePathsKnown(c)) OnRouteAnswer(c, port, kKernelNodePid);
    return;
  }
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
  if (FindNodeOwner(c)) return;  // a kernel node another engine of this host talks to
  // The host's rendezvous: whichever engine of it accepts answers.
  absl::StatusOr<std::shared_ptr<Link>> opened = transports_.For(c.local).Connect(
      LinkTarget{c.ns, c.key.laddr, c.key.faddr, 0},
      absl::StrFormat("query %s->%s:%d", c.key.laddr.ToString(), c.key.faddr.ToString(), port));
  const absl::Status s = opened.status();
  Connection* cp = &c;
  // Asks again after a back-off; `reached`: the host took the connection (and
  // closed it), so what closed sockets left waiting still has somewhere to go.
  auto retry = [this, cp](bool reached) {
    const conf::Settings& cfg = conf::Get();
    thread_local absl::BitGen gen;
    cp->query_backoff =
        std::clamp(cp->query_backoff * 2, FirstReconnectBackoff(),
                   absl::Milliseconds(cfg.reconnect_max_delay_ms));
    cp->query_unreachable = !reached;
    if (!reached) {
      for (auto& [port, q] : cp->unresolved) DropClosedSenders(q, nullptr);
    }
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
      retry(/*reached=*/false);
    }
    return;
  }
  std::shared_ptr<Link> link = *std::move(opened);
  log::Debug("route query to %s for port %d", c.key.faddr.ToString(), port);
  c.query_link = link;
  c.query_link_port = port;
  std::weak_ptr<Link> weak = link;
  Link::Callbacks cb;
  auto reached = std::make_shared<bool>(false);
  cb.on_connected = [this, cp, weak, port, reached] {
    auto l = weak.lock();
    if (!l) return;
    *reached = true;
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
    if (LooksLikeKernelNode(h)) {
      // Not an engine but a kernel node: this connection is its path.
      AdoptKernelLink(*cp, l, 0, std::move(h), std::move(payload));
      return;
    }
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
    cp->query_unreachable = false;
    OnRouteAnswer(*cp, port, hello->answer_pid);
    ResolvePending(*cp);
  };
  cb.on_closed = [this, cp, weak, retry, reached](const absl::Status& why) {
    auto l = weak.lock();
    if (cp->query_link != l) return;
    cp->query_link.reset();
    log::Debug("route query failed: %s", why.ToString());
    if (absl::IsNotFound(why)) {
      NoEngineAt(*cp);
    } else {
      retry(/*reached=*/*reached || absl::IsAborted(why));
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
  if (port != 0 && pid != 0 && pid != kKernelNodePid) {
    auto cached = c.routes.find(port);
    NoteOwnerChange(c, port, cached != c.routes.end() ? cached->second.pid : 0, pid);
    if (PortSettling(c, port)) {
      // Answered, but what the previous owner may hand back goes first.
      if (!waiting.empty()) c.unresolved[port] = std::move(waiting);
      RetryParkedLater(c);
      return;
    }
  }
  c.moved_front.erase(port);
  if (pid == 0) {
    // Nobody has the port bound there: the kernel drops such messages at the
    // destination; so do we, without caching the answer.
    for (MessagePtr& m : waiting) DropMessage(m, stats::kShimSendDropNoRoute);
    return;
  }
  if (pid == kKernelNodePid && c.kernel_peer) {
    for (MessagePtr& m : waiting) SendToNode(c, std::move(m));
    return;
  }
  if (port != 0) c.routes[port] = {pid, 0};
  if (port == 0 && waiting.empty()) {
    c.probes_left = 0;  // a probe (OnPoke) answered by an engine: nothing to send
    return;
  }
  Path& p = GetPath(c, pid, true);
  for (MessagePtr& m : waiting) PathSend(p, std::move(m));
}

// The connection's host refused a route query: no shim engine runs there, so
// nobody has any port bound. What waits for a route is dropped as a kernel
// host drops messages for a port nobody bound; the next message asks again.
void Engine::NoEngineAt(Connection& c) {
  c.query_backoff = absl::ZeroDuration();  // an answer, not a failure
  c.query_unreachable = false;
  c.probes_left = 0;
  std::vector<uint16_t> ports;
  for (auto& [port, q] : c.unresolved) ports.push_back(port);
  for (uint16_t port : ports) OnRouteAnswer(c, port, 0);
}

void Engine::ResolvePending(Connection& c) {
  if (c.kernel_peer) c.probes_left = 0;
  if (c.probes_left > 0 && !c.query_link && !c.query_timer && c.unresolved.empty()) {
    // A poke's question again (Engine::OnPoke): the last attempt failed.
    --c.probes_left;
    StartQueryLink(c, 0);
    return;
  }
  std::vector<uint16_t> ports;
  for (auto& [port, q] : c.unresolved) {
    if (!q.empty() && !c.querying.contains(port)) ports.push_back(port);
  }
  for (uint16_t port : ports) {
    if (port == 0 && !c.kernel_peer) {
      if (Path* p = c.AnyUpPath()) {
        OnRouteAnswer(c, 0, p->peer_pid);
        continue;
      }
    }
    Resolve(c, port);
  }
}

}  // namespace rds
