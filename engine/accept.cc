// engine/accept.cc — links and same-host requests that peers open (the
// transports accept them): their hellos (link, route query, hand-off,
// RDS_INFO, reset, socket sharing) and the link collision rule.
//
// Members of Engine (engine/engine.h); engine.cc owns the thread and its state.
#include "engine/engine.h"

#include <unistd.h>

#include <tuple>

#include "engine/control.h"
#include "engine/info.h"
#include "engine/log.h"
#include "engine/registry.h"
#include "engine/share.h"
#include "engine/stats.h"
#include "engine/sys.h"

namespace rds {

// ---------------------------------------------------------------------------
// Accepting links: the hello a peer's link opens with says what it is for.

void Engine::WatchIncoming(std::shared_ptr<Link> link, std::shared_ptr<NetNs> tcp_ns,
                           bool may_hand_over) {
  if (tcp_ns && link->IsRdma()) {
    AdoptRdmaLink(link, tcp_ns);
    return;
  }
  if (tcp_ns && may_hand_over && HandNodeConnectionToOwner(link, tcp_ns)) return;
  if (tcp_ns && AdoptNodePathAtAccept(link, tcp_ns)) return;
  incoming_.insert(link);
  std::weak_ptr<Link> weak = link;
  Link::Callbacks cb;
  cb.on_message = [this, weak, tcp_ns](wire::Header&& h, Payload&& payload) {
    auto l = weak.lock();
    if (!l) return;
    OnIncomingHello(l, tcp_ns, std::move(h), std::move(payload));
  };
  // A TCP connection's addresses while it is open (a poke closes before any message).
  std::optional<Link::Endpoints> ends = tcp_ns ? link->endpoints() : std::nullopt;
  cb.on_closed = [this, weak, tcp_ns, ends](const absl::Status&) {
    auto l = weak.lock();
    if (!l || !incoming_.contains(l)) return;
    incoming_.erase(l);
    if (tcp_ns && ends) OnPoke(tcp_ns, *ends);
  };
  link->SetCallbacks(std::move(cb));
}

bool Engine::HandNodeConnectionToOwner(const std::shared_ptr<Link>& link,
                                       const std::shared_ptr<NetNs>& tcp_ns) {
  std::optional<Link::Endpoints> e = link->endpoints();
  // Only a node with the smaller address opens paths (a larger one's
  // connection is a poke, closed by the node itself).
  if (!e || !(e->peer.addr < e->local.addr)) return false;
  pid_t owner = 0;
  auto it = connections_.find(ConnKey{tcp_ns->key(), e->local.addr, e->peer.addr});
  if (it != connections_.end() && it->second->node_record) {
    if (it->second->node_record->owned()) return false;
    owner = it->second->node_record->OtherOwner();
  } else {
    // No Connection of ours holds the record (closing a descriptor of it
    // would drop our POSIX locks): a look is harmless.
    absl::StatusOr<std::unique_ptr<NodeRecord>> r =
        NodeRecord::Open(tcp_ns->ports().dir(), e->local.addr, e->peer.addr, /*create=*/false);
    if (!r.ok()) return false;  // no node there that this host knows of
    owner = (*r)->OtherOwner();
  }
  if (owner <= 1) return false;
  // Nothing was read from it: what the node's TCP acknowledged is all in
  // the socket that goes to the owner.
  control::Hello h;
  h.kind = control::HelloKind::kHandoff;
  h.relay = control::Relay::kNodeConnection;
  h.pid = pid_;
  h.gen = gen_;
  h.uid = getuid();
  h.ns = tcp_ns->key();
  h.from_addr = e->local.addr;
  h.to_addr = e->peer.addr;
  absl::Status s = link->HandOver(HostRegistry::Get().EngineSocketPath(owner),
                                  control::EncodeHello(h));
  if (!s.ok()) {
    log::Info("%s: could not pass the kernel node's connection to engine %d (%s); keeping it",
              link->Describe(), owner, s.ToString());
    return false;
  }
  log::Info("%s: a kernel node's connection, passed to engine %d, which holds the node's",
            link->Describe(), owner);
  stats::Inc(stats::kShimHandoffs);
  link->Close();  // our descriptor only: the connection lives on in the owner
  return true;
}

bool Engine::AdoptNodePathAtAccept(const std::shared_ptr<Link>& link,
                                   const std::shared_ptr<NetNs>& tcp_ns) {
  std::optional<Link::Endpoints> e = link->endpoints();
  if (!e) return false;
  auto it = connections_.find(ConnKey{tcp_ns->key(), e->local.addr, e->peer.addr});
  if (it == connections_.end()) return false;
  Connection& c = *it->second;
  // A node we use several paths with opens them without a first message of
  // its own on each (its congestion map goes out on one of them): it is
  // known by its address. With one path, its map says what it is, as before.
  // (A node with the larger address connects only to poke: not a path.)
  if (!c.kernel_peer || c.relaying() || c.node_npaths == 1 || !(e->peer.addr < e->local.addr)) {
    return false;
  }
  if (c.node_npaths == 0) {
    // Perhaps a further path, opened as soon as the node read our NPATHS:
    // its first message says, or the agreement does (SetNodePaths).
    if (Path* first = NodePathOf(c); first != nullptr && first->link) c.unclaimed.push_back(link);
    return false;
  }
  const int index = NodePathForAccepted(c, e->peer.port, /*map_first=*/false);
  if (index < 0) {
    log::Info("%s: every path to the node is up; closing its new connection", link->Describe());
    link->Close();
    return true;
  }
  AdoptKernelLink(c, link, index);
  return true;
}

void Engine::Reply(const std::shared_ptr<Link>& link, control::HelloResult result,
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

void Engine::OnIncomingHello(const std::shared_ptr<Link>& link,
                             const std::shared_ptr<NetNs>& tcp_ns, wire::Header&& h,
                             Payload&& payload) {
  if (!incoming_.contains(link)) return;  // already handled; more bytes before our reply
  std::optional<Link::Endpoints> e = tcp_ns ? link->endpoints() : std::nullopt;
  // A kernel node connected (it has the smaller address): its congestion map
  // first, or — on a further path of a node we know — anything but a hello.
  // What it sent is not dropped: its TCP counts it delivered already.
  if (e && (LooksLikeKernelNode(h) ||
            (!control::IsHello(h) && IsKnownNode(tcp_ns, e->local.addr, e->peer.addr)))) {
    incoming_.erase(link);
    Connection& c = GetConnection(tcp_ns, e->local.addr, e->peer.addr);
    const int index = NodePathForAccepted(c, e->peer.port, LooksLikeKernelNode(h));
    if (index < 0) {
      link->Close();  // every path is up: the kernel resets such a connection
      return;
    }
    AdoptKernelLink(c, link, index, std::move(h), std::move(payload));
    return;
  }
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
      int fd = link->TakePassedFd();
      incoming_.erase(link);
      link->Close();
      std::shared_ptr<NetNs> ns = tcp_ns ? nullptr : ServedNetNs(hello->ns);
      if (fd < 0 || !ns) {
        if (fd >= 0) sys::CloseInternal(fd);
        return;
      }
      std::shared_ptr<Link> tcp_link = transports_.Handed().Adopt(fd, "tcp handed over");
      if (!tcp_link) return;
      stats::Inc(stats::kShimHandoffs);
      if (hello->relay == control::Relay::kNodeConnection) {
        // A kernel node's connection, unread: as if this engine had accepted
        // it (and not passed on again: no circles between engines).
        WatchIncoming(tcp_link, ns, /*may_hand_over=*/false);
        return;
      }
      incoming_.insert(tcp_link);
      control::Hello as_link = *hello;
      as_link.kind = control::HelloKind::kLink;
      AcceptLink(tcp_link, ns, as_link);
      return;
    }
    case control::HelloKind::kShareClient: {
      // Same-host only: another process holds a descriptor of one of our
      // sockets; its calls come on the stream it passed (engine/share.h).
      int fd = link->TakePassedFd();
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
      if (hello->relay != control::Relay::kNone) {
        // A kernel node's traffic between two engines of this host.
        if (tcp_ns || hello->target_pid != pid_) {
          Reply(link, control::HelloResult::kRefused, 0, true);
          return;
        }
        AcceptRelayLink(link, ns, *hello);
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
        absl::Status s = link->HandOver(
            HostRegistry::Get().EngineSocketPath(static_cast<pid_t>(hello->target_pid)),
            control::EncodeHello(handoff));
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

void Engine::AcceptLink(const std::shared_ptr<Link>& link, const std::shared_ptr<NetNs>& ns,
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

}  // namespace rds
