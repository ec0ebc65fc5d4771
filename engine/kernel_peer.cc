// engine/kernel_peer.cc — kernel RDS nodes as peers (rds_tcp): telling one
// from a shim engine, its one path per address pair, the handshake it
// expects, who connects, and acknowledgement by TCP (kernel-rds.md §C.6–§C.9,
// §E; DESIGN.md §3.5).
//
// Members of Engine (engine/engine.h); engine.cc owns the thread and its state.
#include "engine/engine.h"

#include <memory>
#include <utility>

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
// How long after a poke we connect back (OnPoke).
constexpr absl::Duration kPokeAnswerDelay = absl::Milliseconds(20);
}  // namespace

void Engine::AdoptKernelLink(Connection& c, std::shared_ptr<Link> link, wire::Header&& first,
                             Payload&& payload) {
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
    return;
  }
  if (NodePathHeld(c)) {
    // Survivors are still sending what a dead owner had not confirmed: the
    // node reconnects after the hold (Engine::StartTakeover).
    log::Info("%s: the node connected during a takeover's hold; closing", link->Describe());
    link->Close();
    return;
  }
  if (!link->ReportTransportAcks()) {
    // Nothing would ever free what is sent to the node: refuse loudly.
    log::Error("%s: a kernel RDS node on a link that cannot report acknowledgements; closing",
               link->Describe());
    link->Close();
    return;
  }
  Path& p = GetPath(c, kKernelNodePid, /*connect=*/false);
  if (p.connecting && p.connecting != link) p.connecting->Close();
  p.connecting.reset();
  AttachLink(p, link, p.peer_gen, 0);
  OnPathMessage(p, std::move(first), std::move(payload));
}

void Engine::SendHandshake(Path& p, bool pong) {
  auto m = NewMessage();
  m->header.sport = pong ? 0 : wire::kProbePort;
  m->header.dport = pong ? wire::kProbePort : 0;
  wire::ExtWriter ext(&m->header);
  ext.Npaths(1);
  ext.GenNum(NodeGeneration(p.conn));
  m->saddr = p.conn.key.laddr;
  m->daddr = p.conn.key.faddr;
  PathSend(p, std::move(m));  // takes a sequence number, as the kernel's do
}

void Engine::OnKernelHandshake(Path& p, const wire::Header& h) {
  const wire::ExtHeaders ext = wire::ParseExtHeaders(h);
  if (ext.gen_num && *ext.gen_num != 0) {
    if (p.peer_gen != 0 && *ext.gen_num != p.peer_gen) {
      // The node restarted (its module was reloaded): what it was sent is
      // stale and both sequence spaces begin again (rds_conn_peer_gen_update).
      log::Info("kernel node %s restarted (generation %08x -> %08x)",
                p.conn.key.faddr.ToString(), p.peer_gen, *ext.gen_num);
      stats::Inc(stats::kShimPeerRestarts);
      for (MessagePtr& m : p.unacked) DropNodeMessage(p, m);
      p.unacked.clear();
      p.next_tx_seq = 1;
      p.next_rx_seq = 0;
    }
    p.peer_gen = *ext.gen_num;
    SyncNodeRecord(p);
  }
  if (wire::IsHandshakePong(h)) p.stale_until_pong = false;  // it has our generation now
  if (wire::IsHandshakePing(h)) SendHandshake(p, /*pong=*/true);
}

void Engine::ConnectKernelPath(Path& p, const std::shared_ptr<Link>& link) {
  Path* pp = &p;
  std::weak_ptr<Link> weak = link;
  Link::Callbacks cb;
  cb.on_connected = [this, pp, weak] {
    auto l = weak.lock();
    if (!l || pp->connecting != l) return;
    if (pp->conn.key.laddr < pp->conn.key.faddr) {
      // The smaller address is the client of every connection (§C.7). Nothing
      // is written until the node's congestion map shows that it took this
      // connection as its path: a node that still holds an old connection
      // resets a new one — after its TCP acknowledged what we wrote, which
      // would then count as delivered (lost; seen when our side of a
      // connection died silently).
      Path* p2 = pp;
      loop_.After(kNodeMapWait, [this, p2, weak] {
        auto stale = weak.lock();
        if (!stale || p2->connecting != stale) return;
        log::Warn("%s: connected, but no congestion map came from the node within %lld ms; "
                  "trying again",
                  stale->Describe(), static_cast<long long>(absl::ToInt64Milliseconds(kNodeMapWait)));
        p2->connecting.reset();
        stale->Close();
        SchedulePathRetry(*p2);
      });
      return;
    }
    // The larger address: a connection from us only makes the node connect
    // back (the "poke"); it resets ours. Nothing is sent on it.
    pp->connecting.reset();
    l->Close();
    SchedulePathRetry(*pp);
  };
  cb.on_message = [this, pp, weak](wire::Header&& h, Payload&& payload) {
    auto l = weak.lock();
    if (!l || pp->connecting != l) return;
    pp->connecting.reset();
    if (!LooksLikeKernelNode(h)) {
      log::Warn("%s: the first message is no kernel node's congestion map; closing", l->Describe());
      stats::Inc(stats::kShimConnDropBadInput);
      l->Close();
      SchedulePathRetry(*pp);
      return;
    }
    AdoptKernelLink(pp->conn, l, std::move(h), std::move(payload));
  };
  cb.on_closed = [this, pp, weak](const absl::Status& why) {
    OnConnectFailed(*pp, weak.lock(), why);
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
  if (c.kernel_peer || FindNodeOwner(c)) {
    GetPath(c, kKernelNodePid, /*connect=*/true);
    return;
  }
  // Not proof of a node (any client may connect and close): ask the host as
  // for a route. A node takes our connection (we are the smaller address)
  // and its congestion map makes it the node's path; a shim engine answers
  // the query and nothing else follows.
  log::Info("%s closed a connection before any message: asking it what it is",
            e.peer.addr.ToString());
  c.probes_left = kNodeProbes;
  if (!c.query_link && !c.query_timer) {
    // Not at once: the node tears its poke down through a worker, and a
    // connection that arrives meanwhile (its path neither down nor
    // connecting) is reset (kernel-rds.md §C.7).
    Connection* cp = &c;
    c.query_timer = loop_.After(kPokeAnswerDelay, [this, cp] {
      cp->query_timer = 0;
      if (cp->query_link || cp->kernel_peer) return;
      --cp->probes_left;
      StartQueryLink(*cp, 0);
    });
  }
}

}  // namespace rds
