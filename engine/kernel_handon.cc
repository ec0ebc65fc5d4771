// engine/kernel_handon.cc — a kernel node's connection outlives the image
// that held it: when an image ends (exit, exec) while its engine owns a
// node's connection and parks a socket bound on the connection's address for
// the next process (engine/share.h), the TCP connections go with the socket,
// unbroken, and the engine that takes the socket over reads on where this
// one stopped (DESIGN.md §3.5, "An image ends").
//
// Why: the node counts a message delivered once its TCP has acknowledged
// the bytes. Closing the connection at the image's end lost whatever was in
// its receive queue, and what was read and still on its way to the socket;
// a fork's parent that exits and a child that execs did so twice in a row.
//
// Members of Engine (engine/engine.h); engine.cc owns the thread and its state.
#include "engine/engine.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "engine/log.h"
#include "engine/stats.h"
#include "engine/sys.h"

namespace rds {

namespace {
// How long an ending image waits to finish writing a message it had begun
// on a node's connection (the next writer must start at a boundary).
constexpr absl::Duration kFinishWriteLimit = absl::Milliseconds(500);
}  // namespace

std::vector<HandedNodeConnection> Engine::HandOnNodeConnections(
    const std::shared_ptr<NetNs>& ns, const RdsAddr& laddr, size_t max_paths) {
  // Shared with the task: should the wait give up, the task may still run.
  auto result = std::make_shared<std::vector<HandedNodeConnection>>();
  auto task = [this, ns, laddr, max_paths, result] {
    std::vector<HandedNodeConnection>& out = *result;
    size_t paths_out = 0;
    for (auto& [key, cp] : connections_) {
      Connection& c = *cp;
      // (An RDMA queue pair cannot move between processes: the next owner
      // connects again and the node retransmits.)
      if (!(c.key.ns == ns->key()) || !(c.key.laddr == laddr) || !c.kernel_peer || c.rdma ||
          c.relaying() ||
          c.handed_on || !c.node_record || !c.node_record->owned()) {
        continue;
      }
      std::vector<Path*> up;
      for (int i = 0; i < kNodePathsMax; ++i) {
        Path* p = c.NodePath(i);
        if (p != nullptr && p->link && IsKernelPath(*p)) up.push_back(p);
      }
      if (up.empty()) continue;  // nothing open: the next owner connects
      if (paths_out + up.size() > max_paths) {
        log::Warn("%s -> %s: too many kernel node connections go with one socket; this one "
                  "closes with the image", c.key.laddr.ToString(), c.key.faddr.ToString());
        continue;
      }
      HandedNodeConnection hc;
      hc.laddr = c.key.laddr;
      hc.faddr = c.key.faddr;
      absl::Status failed;
      for (Path* p : up) {
        absl::StatusOr<Link::Detached> d = p->link->DetachForHandOn(kFinishWriteLimit);
        if (!d.ok()) {
          failed = d.status();
          break;
        }
        hc.paths.push_back({p->node_index, d->fd, std::move(d->partial)});
      }
      if (!failed.ok()) {
        // Read on here as before (it closes with the image).
        for (size_t i = 0; i < hc.paths.size(); ++i) {
          sys::CloseInternal(hc.paths[i].fd);
          (void)up[i]->link->RestoreInput(hc.paths[i].partial);
        }
        log::Warn("%s -> %s: the kernel node's connection cannot go on with the socket (%s); "
                  "it closes with this image", c.key.laddr.ToString(), c.key.faddr.ToString(),
                  failed.ToString());
        continue;
      }
      // Everything sent is in the connection's stream, ahead of what the next
      // owner writes: done here (a relayer's message as the node's TCP
      // acknowledgement would make it). The record says where each path's
      // sequences stand; then it is free for the next holder (this engine
      // stays a user of it).
      for (Path* p : up) {
        if (!p->unacked.empty()) OnAck(*p, p->unacked.back()->header.sequence);
        SyncNodeRecord(*p);
      }
      c.handed_on = true;
      for (int i = 0; i < kNodePathsMax; ++i) {
        if (Path* p = c.NodePath(i); p != nullptr && IsKernelPath(*p)) CloseNodePathLinks(*p);
      }
      c.node_record->Release();
      WatchHandedOn(c, absl::Now() + kHandedOnWatch);
      log::Info("%s -> %s: the kernel node's connection goes on with a socket this image "
                "leaves to the next process (%zu paths)",
                c.key.laddr.ToString(), c.key.faddr.ToString(), hc.paths.size());
      stats::Inc(stats::kShimHandoffs);
      paths_out += hc.paths.size();
      out.push_back(std::move(hc));
    }
  };
  if (OnEngineThread()) {
    task();
  } else {
    RunOnLoopAndWait(task);
  }
  return std::move(*result);
}

void Engine::WatchHandedOn(Connection& c, absl::Time until) {
  if (!c.handed_on) return;
  if (FindNodeOwner(c)) {
    // The next holder has it: what this engine sends the node from now on
    // (and what waited meanwhile) goes through it.
    c.handed_on = false;
    return;
  }
  if (absl::Now() >= until) {
    log::Info("%s -> %s: nobody took the kernel node's connection this engine handed on; it "
              "connects again when it has something for the node",
              c.key.laddr.ToString(), c.key.faddr.ToString());
    c.handed_on = false;
    return;
  }
  Connection* cp = &c;
  loop_.After(kHandedOnPoll, [this, cp, until] { WatchHandedOn(*cp, until); });
}

void Engine::TakeHandedNodeConnections(const std::shared_ptr<NetNs>& ns,
                                       std::vector<HandedNodeConnection> conns) {
  // Reachable over TCP too: the node reconnects to us should the connection fail.
  if (absl::Status s = Serve(ns); !s.ok()) {
    log::Warn("kernel node connections taken over while the namespace is not served: %s",
              s.ToString());
  }
  // Before the caller goes on: its next send to the node must find the
  // connection here (not ask the node's host what it is, which would cut it).
  auto shared = std::make_shared<std::vector<HandedNodeConnection>>(std::move(conns));
  auto task = [this, ns, shared] {
    for (HandedNodeConnection& hc : *shared) TakeHandedNodeConnection(ns, hc);
  };
  if (OnEngineThread()) {
    task();
  } else {
    RunOnLoopAndWait(task);
  }
}

void Engine::TakeHandedNodeConnection(const std::shared_ptr<NetNs>& ns, HandedNodeConnection& hc) {
  auto close_all = [&hc] {
    for (HandedNodeConnection::Path& p : hc.paths) {
      if (p.fd >= 0) sys::CloseInternal(std::exchange(p.fd, -1));
    }
  };
  Connection& c = GetConnection(ns, hc.laddr, hc.faddr);
  NodeRecord* r = NodeRecordOf(c, /*create=*/true);
  if (r == nullptr || r->owned()) {
    // No record (logged), or this engine made a connection of its own first.
    log::Warn("%s -> %s: a kernel node's connection handed on by the previous process is "
              "closed: %s; what the node's TCP acknowledged on it and nobody read is lost",
              hc.laddr.ToString(), hc.faddr.ToString(),
              r == nullptr ? "no host record" : "this engine holds one of its own");
    close_all();
    return;
  }
  bool continued = false;
  if (!r->TryClaim(&continued, /*users_here=*/true)) {
    const pid_t owner = r->OtherOwner();
    log::Warn("%s -> %s: engine %d took the kernel node's connection over first; the one handed "
              "on by the previous process is closed (what the node's TCP acknowledged on it and "
              "nobody read is lost)", hc.laddr.ToString(), hc.faddr.ToString(), owner);
    close_all();
    if (owner > 1) RelayThrough(c, static_cast<uint32_t>(owner));
    return;
  }
  BecomeNodeOwner(c, continued, /*from_record=*/true);
  for (HandedNodeConnection::Path& hp : hc.paths) {
    std::shared_ptr<Link> link =
        transports_.Handed().Adopt(std::exchange(hp.fd, -1), "tcp handed on");
    if (!link) continue;
    if (absl::Status s = link->RestoreInput(hp.partial); !s.ok()) {
      log::Warn("%s: the bytes the previous process had read of a message cannot be restored "
                "(%s); closed", link->Describe(), s.ToString());
      link->Close();
      continue;
    }
    if (hp.index >= std::max(c.node_npaths, 1)) {
      log::Warn("%s: handed on as node path %d of %d; closed", link->Describe(), hp.index,
                c.node_npaths);
      link->Close();
      continue;
    }
    AdoptKernelLink(c, std::move(link), hp.index);
  }
  log::Info("%s -> %s: the kernel node's connection, handed on by the previous process, goes "
            "on here", hc.laddr.ToString(), hc.faddr.ToString());
}

}  // namespace rds
