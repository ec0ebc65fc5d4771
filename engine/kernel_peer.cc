// engine/kernel_peer.cc — kernel RDS nodes as peers (rds_tcp): telling one
// from a shim engine, its one path per address pair, the handshake it
// expects, who connects, and acknowledgement by TCP (kernel-rds.md §C.6–§C.9,
// §E; DESIGN.md §3.5).
//
// Members of Engine (engine/engine.h); engine.cc owns the thread and its state.
#include "engine/engine.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "conf/settings.h"
#include "engine/cong.h"
#include "engine/log.h"
#include "engine/registry.h"
#include "engine/stats.h"

namespace rds {

bool Engine::LooksLikeKernelNode(const wire::Header& h) {
  // A shim engine speaks first with a hello; a kernel node's first message on
  // every connection, whichever side opened it, is its congestion map
  // (rds_connect_path_complete queues it before anything else, §B.3): flags
  // exactly 0x01, 8 KiB, sequence and ports 0.
  return wire::IsCongMap(h) && h.len == wire::kCongMapBytes && h.sequence == 0 && h.sport == 0 &&
         h.dport == 0;
}

namespace {
// How long a connection of ours may wait for the node's congestion map.
constexpr absl::Duration kNodeMapWait = absl::Seconds(5);
// With several paths: how long a connection of ours that the node neither
// reset nor sent anything on waits before it counts as taken.
constexpr absl::Duration kNodeQuietAccept = absl::Milliseconds(250);
// A poke this long after our path 0 came up is no late echo of the node's
// poking before it took our connection: it has dropped that connection.
constexpr absl::Duration kPokeAfterUp = absl::Seconds(3);
// A poke while our own connect to the node has had no answer for this long:
// our SYN was lost (or waits in the kernel's SYN back-off) while the node's
// path is free now; a fresh connect gets in, the old one might not for seconds.
constexpr absl::Duration kPokeReplacesConnect = absl::Milliseconds(300);
}  // namespace

Path* Engine::AdoptKernelLink(Connection& c, std::shared_ptr<Link> link, int index) {
  if (!c.kernel_peer) {
    log::Info("%s -> %s is a kernel RDS node (%s)", c.key.laddr.ToString(),
              c.key.faddr.ToString(), link->Describe());
    c.kernel_peer = true;
  }
  // What waited for a shim engine's answer is routed to the node now.
  if (c.query_link) {
    if (c.query_link != link) c.query_link->Close();
    c.query_link.reset();
  }
  if (c.query_timer) {
    loop_.Cancel(c.query_timer);
    c.query_timer = 0;
  }
  c.querying.clear();
  if (!ClaimKernelNode(c)) {
    // Another engine of this host holds the node's connection: this one goes
    // (the node reconnects, to the owner in the end) and ours relays.
    log::Info("%s: another engine of this host holds the node's connection; closing this one",
              link->Describe());
    link->Close();
    return nullptr;
  }
  if (!link->ReportTransportAcks()) {
    // Nothing would ever free what is sent to the node: refuse loudly.
    log::Error("%s: a kernel RDS node on a link that cannot report acknowledgements; closing",
               link->Describe());
    link->Close();
    return nullptr;
  }
  Path& p = GetPath(c, NodePathKey(index), /*connect=*/false);
  if (p.connecting && p.connecting != link) p.connecting->Close();
  p.connecting.reset();
  // Survivors may still be sending what a dead owner had not confirmed
  // (Engine::StartTakeover): the node's messages are read meanwhile (its TCP
  // acknowledges them as they arrive), ours wait.
  if (NodePathHeld(c)) p.tx_held = true;
  AttachLink(p, link, p.peer_gen, 0);
  return &p;
}

void Engine::AdoptRdmaLink(const std::shared_ptr<Link>& link, const std::shared_ptr<NetNs>& ns) {
  // Over RDMA both sides open with their congestion maps, whoever connected:
  // nothing to wait for (a shim engine that connected waits for ours).
  std::optional<Link::Endpoints> e = link->endpoints();
  Connection* c = e ? &GetConnection(ns, e->local.addr, e->peer.addr) : nullptr;
  if (c == nullptr || !c->rdma) {
    log::Warn("%s: an RDMA connection to an address this engine does not use RDMA from; closing",
              link->Describe());
    link->Close();
    return;
  }
  AdoptKernelLink(*c, link, 0);
}

void Engine::AdoptKernelLink(Connection& c, std::shared_ptr<Link> link, int index,
                             wire::Header&& first, Payload&& payload) {
  if (Path* p = AdoptKernelLink(c, std::move(link), index)) {
    OnPathMessage(*p, std::move(first), std::move(payload));
  }
}

namespace {
// A port's bucket among a node's 8 possible paths: fixed for the port (its
// messages keep their order) and the same in every engine (a new owner after
// a takeover puts a port where the old one did).
int PortBucket(uint16_t port) {
  return static_cast<int>((uint32_t{port} * 0x9e3779b1u) >> 29);
}
}  // namespace

bool Engine::NodePathsKnown(const Connection& c) {
  return c.relaying() || c.node_npaths > 0 || conf::Get().kernel_paths == 1;
}

uint32_t Engine::NodePathFor(const Connection& c, uint16_t sport) {
  if (c.relaying()) return kKernelNodePid;  // the owner chooses
  const int bucket = PortBucket(sport);
  if (c.node_npaths > 0) return NodePathKey(bucket % c.node_npaths);
  // Not agreed yet: path 0 is the port's path whatever the number turns out
  // to be; any other waits for the handshake (as a 6.12 kernel's blocking
  // sender does), or the port's first messages could overtake each other.
  return bucket == 0 || NodePathsKnown(c) ? kKernelNodePid : 0;
}

int Engine::NpathsToAdvertise(const Connection& c) {
  const int64_t setting = conf::Get().kernel_paths;
  if (setting != 0) return static_cast<int>(setting);
  // Automatic: several paths only with a node that numbers connections'
  // paths by their source port (SPORT_IDX), so that each of our paths meets
  // the same one of its after any reconnect. A node that takes them in order
  // of arrival (6.x: "first free slot") may pair a reconnected path with
  // another path's sequence numbers, and its duplicate filter then drops new
  // messages or lets old ones through (DESIGN.md §3.5). Once agreed, kept.
  if (c.node_npaths > 0) return c.npaths_advertised;
  return c.node_sport_idx ? kNodePathsMax : 1;
}

void Engine::SetNodePaths(Connection& c, int n) {
  if (c.handshake_timer) {
    loop_.Cancel(c.handshake_timer);
    c.handshake_timer = 0;
  }
  if (n == c.node_npaths) return;
  if (c.node_npaths > n) {
    // Only a node that restarted with another setting does this; what its
    // vanished paths hold waits for them.
    log::Warn("%s -> %s: the kernel node now uses %d paths instead of %d", c.key.laddr.ToString(),
              c.key.faddr.ToString(), n, c.node_npaths);
  } else {
    log::Info("%s -> %s: %d path%s to the kernel node%s", c.key.laddr.ToString(),
              c.key.faddr.ToString(), n, n == 1 ? "" : "s",
              n > 1 ? (c.node_sport_idx ? " (mapped by source port)" : " (mapped in order)") : "");
  }
  if (n > 1 && !c.node_sport_idx) {
    log::Warn("%s -> %s: %d paths (RDS_PRELOAD_KERNEL_PATHS) with a kernel node that numbers them "
              "by arrival (Linux 6.x): across reconnects messages can be lost or duplicated, as "
              "between 6.x kernels; the automatic setting uses one path with such a node",
              c.key.laddr.ToString(), c.key.faddr.ToString(), n);
  }
  c.node_npaths = n;
  if (c.node_record && c.node_record->owned()) {
    c.node_record->state().npaths.store(static_cast<uint32_t>(n), std::memory_order_relaxed);
    c.node_record->state().node_sport_idx.store(c.node_sport_idx, std::memory_order_relaxed);
  }
  Connection* cp = &c;
  loop_.Defer([this, cp] { ResolvePending(*cp); });
  ConnectNodePaths(c);
  // The node's connections that came before and are still silent.
  std::vector<std::weak_ptr<Link>> unclaimed;
  unclaimed.swap(c.unclaimed);
  if (n <= 1) return;  // not further paths after all: their first message decides
  for (const std::weak_ptr<Link>& weak : unclaimed) {
    std::shared_ptr<Link> link = weak.lock();
    if (!link || !incoming_.contains(link)) continue;  // gone, or its first message placed it
    std::optional<Link::Endpoints> e = link->endpoints();
    if (!e) continue;
    incoming_.erase(link);
    const int index = NodePathForAccepted(c, e->peer.port, /*map_first=*/false);
    if (index < 0) {
      link->Close();
      continue;
    }
    AdoptKernelLink(c, link, index);
  }
}

int Engine::NodePathForAccepted(Connection& c, uint16_t peer_port, bool map_first) {
  auto free_from = [&c](int from, int to) {
    for (int i = from; i < to; ++i) {
      const Path* p = c.NodePath(i);
      if (p == nullptr || !p->link) return i;
    }
    return -1;
  };
  const int n = c.node_npaths;
  if (n == 1) return 0;  // its one path again: the new connection replaces ours
  if (n == 0) {
    // Not agreed yet (a new process): a connection that opens with the
    // node's congestion map, or while we have no path, is its first path;
    // another one, with data first, is a further path of a node that still
    // counts several from our previous incarnation.
    Path* first = NodePathOf(c);
    if (map_first || first == nullptr || !first->link) return 0;
    return free_from(1, kNodePathsMax);
  }
  // A 7.0+ node says which path a connection is in its source port.
  if (c.node_sport_idx) return peer_port % n;
  // A 6.x node takes paths in order; so do we (rds_tcp_accept_one_path).
  return free_from(0, n);
}

bool Engine::MayConnectNodePath(const Path& p) {
  const Connection& c = p.conn;
  if (c.handed_on) return false;  // the connection went on in another process
  if (p.node_index == 0) return true;
  // Only the smaller address connects paths beyond the first, once the
  // number is agreed (rds_connect_worker) — and one at a time, in order, so
  // that a node numbering them by arrival (6.x) numbers them as we do.
  if (!(c.key.laddr < c.key.faddr) || p.node_index >= c.node_npaths) return false;
  for (int i = 0; i < c.node_npaths; ++i) {
    const Path* q = c.NodePath(i);
    if (i == 0 && (q == nullptr || !q->link)) return false;
    if (i != p.node_index && q != nullptr && q->connecting) return false;
  }
  return true;
}

bool Engine::DelayNodeReopen(Path& p) {
  Connection& c = p.conn;
  if (p.node_index != 0 || c.node_npaths <= 1 || c.node_sport_idx || !(c.key.laddr < c.key.faddr)) {
    return false;
  }
  for (int i = 0; i < c.node_npaths; ++i) {
    if (const Path* q = c.NodePath(i); q != nullptr && q->link) return false;
  }
  if (p.reopen_waited) {
    p.reopen_waited = false;
    return false;
  }
  // Every path is down, and the node numbers paths by arrival: it frees
  // each slot through a worker (ERROR, DISCONNECTING, DOWN) and skips one
  // still being freed, so paths reopened at once could meet other paths'
  // sequence numbers. Not before its workers ran.
  p.reopen_waited = true;
  Path* pp = &p;
  p.retry_timer = loop_.After(kOrderedReopenDelay, [this, pp] {
    pp->retry_timer = 0;
    if (!pp->link && !pp->connecting) ConnectPath(*pp);
  });
  return true;
}

void Engine::ConnectNodePaths(Connection& c) {
  if (c.relaying() || !(c.key.laddr < c.key.faddr)) return;
  for (int i = 1; i < c.node_npaths; ++i) {
    Path& p = GetPath(c, NodePathKey(i), /*connect=*/false);
    if (p.link) continue;
    if (!p.connecting && !p.retry_timer) ConnectPath(p);
    return;
  }
}

void Engine::SendHandshake(Path& p, bool pong) {
  Connection& c = p.conn;
  auto m = NewMessage();
  m->header.sport = pong ? 0 : wire::kProbePort;
  m->header.dport = pong ? wire::kProbePort : 0;
  const int npaths = NpathsToAdvertise(c);
  wire::ExtWriter ext(&m->header);
  ext.Npaths(static_cast<uint16_t>(npaths));
  ext.GenNum(NodeGeneration(c));
  // Our connections to the node put the path's index in their source port.
  if (conf::Get().kernel_paths != 1) ext.SportIdx();
  m->saddr = c.key.laddr;
  m->daddr = c.key.faddr;
  c.npaths_advertised = npaths;
  if (!pong) {
    c.pings_unanswered.push_back(npaths);
    if (c.node_npaths == 0 && !c.handshake_timer) {
      // A node with ping_enable 0 never answers (nor reads our NPATHS): one path.
      Connection* cp = &c;
      c.handshake_timer = loop_.After(kHandshakeWait, [this, cp] {
        cp->handshake_timer = 0;
        if (cp->node_npaths != 0) return;
        log::Warn("%s -> %s: the kernel node did not answer our handshake within %lld ms "
                  "(net.rds.ping_enable 0?); using one path",
                  cp->key.laddr.ToString(), cp->key.faddr.ToString(),
                  static_cast<long long>(absl::ToInt64Milliseconds(kHandshakeWait)));
        SetNodePaths(*cp, 1);
      });
    }
  }
  PathSend(p, std::move(m));  // takes a sequence number, as the kernel's do
}

void Engine::OnKernelHandshake(Path& p, const wire::Header& h) {
  Connection& c = p.conn;
  const wire::ExtHeaders ext = wire::ParseExtHeaders(h);
  if (ext.gen_num && *ext.gen_num != 0) {
    if (p.peer_gen != 0 && *ext.gen_num != p.peer_gen) {
      // The node restarted (its module was reloaded): what it was sent is
      // stale and every path's sequence spaces begin again
      // (rds_conn_peer_gen_update).
      log::Info("kernel node %s restarted (generation %08x -> %08x)", c.key.faddr.ToString(),
                p.peer_gen, *ext.gen_num);
      stats::Inc(stats::kShimPeerRestarts);
      for (int i = 0; i < kNodePathsMax; ++i) {
        Path* qp = c.NodePath(i);
        if (qp == nullptr) continue;
        Path& q = *qp;
        for (MessagePtr& m : q.unacked) DropNodeMessage(q, m);
        q.unacked.clear();
        q.next_tx_seq = 1;
        q.next_rx_seq = 0;
        SyncNodeRecord(q);
      }
    }
    for (int i = 0; i < kNodePathsMax; ++i) {
      if (Path* q = c.NodePath(i)) q->peer_gen = *ext.gen_num;
    }
    SyncNodeRecord(p);
  }
  if (ext.sport_idx) c.node_sport_idx = true;
  // The node takes our NPATHS as its number of paths (at most 8; 1 if absent).
  const int theirs = ext.npaths ? std::clamp<int>(*ext.npaths, 1, kNodePathsMax) : 1;
  if (wire::IsHandshakePong(h)) {
    p.stale_until_pong = false;  // it has our generation now
    int advertised = c.npaths_advertised;
    if (!c.pings_unanswered.empty()) {
      advertised = c.pings_unanswered.front();
      c.pings_unanswered.pop_front();
    }
    if (!c.pings_unanswered.empty()) return;  // the answer to our latest is still coming
    if (NpathsToAdvertise(c) != c.npaths_advertised) {
      // It maps paths by source port (SPORT_IDX): tell it ours; the paths
      // are agreed on its answer.
      SendHandshake(p, /*pong=*/false);
      return;
    }
    SetNodePaths(c, std::min(advertised, theirs));
    return;
  }
  if (wire::IsHandshakePing(h)) {
    SendHandshake(p, /*pong=*/true);
    // Unless our own question is pending (its answer decides), the node
    // counts with what our pong says.
    if (c.pings_unanswered.empty()) SetNodePaths(c, std::min(c.npaths_advertised, theirs));
  }
}

void Engine::ConnectKernelPath(Path& p, const std::shared_ptr<Link>& link) {
  Path* pp = &p;
  std::weak_ptr<Link> weak = link;
  Link::Callbacks cb;
  cb.on_connected = [this, pp, weak] {
    auto l = weak.lock();
    if (!l || pp->connecting != l) return;
    if (!pp->conn.rdma && !(pp->conn.key.laddr < pp->conn.key.faddr)) {
      // Over TCP, the larger address: a connection from us only makes the node connect
      // back (the "poke"); it resets ours. Nothing is sent on it.
      pp->connecting.reset();
      l->Close();
      SchedulePathRetry(*pp);
      return;
    }
    // The smaller address is the client of every connection (§C.7). Nothing
    // is written until the node shows that it took this connection as a
    // path: a node that still holds an old connection resets a new one —
    // after its TCP acknowledged what we wrote, which would then count as
    // delivered (lost; seen when our side of a connection died silently).
    // With one path its congestion map shows it; with several the map goes
    // out on whichever path sends first (c_map_queued is the connection's),
    // so any message shows it, and so does a connection it has not reset
    // after a while (its accept worker runs within milliseconds).
    Path* p2 = pp;
    const bool multipath = pp->conn.node_npaths > 1;
    loop_.After(multipath ? kNodeQuietAccept : kNodeMapWait, [this, p2, weak, multipath] {
      auto l2 = weak.lock();
      if (!l2 || p2->connecting != l2) return;
      p2->connecting.reset();
      if (multipath) {
        AdoptKernelLink(p2->conn, l2, p2->node_index);
        return;
      }
      log::Warn("%s: connected, but no congestion map came from the node within %lld ms; "
                "trying again",
                l2->Describe(), static_cast<long long>(absl::ToInt64Milliseconds(kNodeMapWait)));
      l2->Close();
      SchedulePathRetry(*p2);
    });
  };
  cb.on_message = [this, pp, weak](wire::Header&& h, Payload&& payload) {
    auto l = weak.lock();
    if (!l || pp->connecting != l) return;
    pp->connecting.reset();
    if (pp->conn.node_npaths <= 1 && !LooksLikeKernelNode(h)) {
      log::Warn("%s: the first message is no kernel node's congestion map; closing", l->Describe());
      stats::Inc(stats::kShimConnDropBadInput);
      l->Close();
      SchedulePathRetry(*pp);
      return;
    }
    AdoptKernelLink(pp->conn, l, pp->node_index, std::move(h), std::move(payload));
  };
  cb.on_closed = [this, pp, weak](const absl::Status& why) {
    Connection& c = pp->conn;
    OnConnectFailed(*pp, weak.lock(), why);
    ConnectNodePaths(c);  // the next path, if this one waits for a retry
  };
  link->SetCallbacks(std::move(cb));
}

void Engine::NoteKernelPathDown(Path& p) {
  if (absl::Now() - p.up_since > absl::Seconds(1)) {
    p.quick_resets = 0;
    return;
  }
  if (++p.quick_resets != 3) return;
  // A node keeps one connection per address pair, and replaces the one it
  // has by a new one: the engines of this host share it through one owner
  // (engine/kernel_relay.cc), so another process that does not share our
  // run directory (RDS_PRELOAD_RUNDIR) most likely talks to the same node.
  log::Warn("the kernel RDS node %s resets every connection from %s right after it opens: "
            "another process of this host that does not share this run directory (%s) "
            "probably talks to it from the same address; this process's messages to it wait",
            p.conn.key.faddr.ToString(), p.conn.key.laddr.ToString(),
            HostRegistry::Get().rundir());
}

void Engine::OnPoke(const std::shared_ptr<NetNs>& ns, const Link::Endpoints& e) {
  // Only a node with the larger address pokes; a shim engine always says hello.
  if (!(e.local.addr < e.peer.addr)) return;
  Connection& c = GetConnection(ns, e.local.addr, e.peer.addr);
  if (c.local) return;
  log::Debug("poke from %s:%d (node %s, query %s)", e.peer.addr.ToString(), e.peer.port,
             c.kernel_peer ? "known" : "unknown", c.query_link ? "in flight" : "none");
  // A poke's close is the one moment the node's path is sure to be free: it
  // tore the poke down (DISCONNECTING, then DOWN) and the next send of its
  // application makes it poke again (CONNECTING), and then it resets any
  // connection of ours (§C.7). A node whose application sends all the time
  // frees the path for a millisecond or so per poke: a connection (or a
  // question) sent at once gets in; one sent on a back-off timer almost
  // never does (seen: reconnects locked out for minutes).
  if (c.kernel_peer || FindNodeOwner(c)) {
    Path& p = GetPath(c, kKernelNodePid, /*connect=*/false);  // path 0; the others follow it
    if (p.link && IsKernelPath(p) && absl::Now() - p.up_since > kPokeAfterUp) {
      // A node pokes only while its path 0 is down: it has given up the
      // connection we hold (its reset lost on the way, or our side of it
      // stuck retransmitting). Waiting for our TCP to notice can take
      // minutes; the node's path is free now.
      log::Info("%s -> %s: the kernel node connected while our connection to it was up: "
                "it has closed that connection; connecting again",
                c.key.laddr.ToString(), c.key.faddr.ToString());
      stats::Inc(stats::kShimNodeConnGivenUp);
      p.link->Close();
      OnPathDown(p, absl::UnavailableError("the node gave up the connection (it poked)"));
      return;  // OnPathDown retries at once: the first retry after a path was up has no delay
    }
    if (p.connecting && p.connecting->AwaitingConnect() &&
        absl::Now() - p.connecting_since > kPokeReplacesConnect) {
      log::Debug("%s: our connect to the node had no answer for %lld ms; connecting again",
                 p.connecting->Describe(),
                 static_cast<long long>(absl::ToInt64Milliseconds(absl::Now() - p.connecting_since)));
      std::shared_ptr<Link> unanswered = std::move(p.connecting);
      p.connecting.reset();
      unanswered->Close();
    }
    if (p.link || p.connecting) return;
    if (p.retry_timer && !p.reopen_waited && !p.connect_delayed) {
      loop_.Cancel(p.retry_timer);
      p.retry_timer = 0;
    }
    if (p.retry_timer == 0) ConnectPath(p);
    return;
  }
  // Not proof of a node (any client may connect and close): ask the host as
  // for a route. A node takes our connection (we are the smaller address)
  // and its congestion map makes it the node's path; a shim engine answers
  // the query and nothing else follows.
  if (c.probes_left == 0) {  // once per round of questions, not per poke
    log::Info("%s closed a connection before any message: asking it what it is",
              e.peer.addr.ToString());
  }
  c.probes_left = kNodeProbes;
  if (c.query_link) return;
  if (c.query_timer) {
    loop_.Cancel(c.query_timer);
    c.query_timer = 0;
  }
  --c.probes_left;
  StartQueryLink(c, 0);
}

}  // namespace rds
