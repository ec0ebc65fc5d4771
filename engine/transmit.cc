// engine/transmit.cc — the transmit side of paths (kernel send.c's
// rds_send_xmit and the acknowledgement handling of rds_send_path_drop_acked):
// submitting, routing what was submitted, loopback delivery, writing to a
// path's link, acknowledgements and the backlog after a link loss.
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
#include "engine/rdma.h"
#include "engine/recv.h"
#include "engine/registry.h"
#include "engine/send.h"
#include "engine/share.h"
#include "engine/socket.h"
#include "engine/stats.h"
#include "engine/sys.h"
#include "engine/engine_internal.h"

namespace rds {

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
  // the same — and, to a kernel node, whose paths are chosen by the sending
  // port, that port too (no connection, route and path look-ups per
  // message). Paths cannot go away during the batch: it runs with the run
  // lock held.
  Path* last_path = nullptr;
  struct RouteKey {
    const NetNs* ns;
    RdsAddr saddr, daddr;
    uint16_t sport, dport;
    std::optional<uint32_t> port_gen;
  } last;
  for (MessagePtr& mp : batch) {
    const Message& m = *mp;
    // Nothing releases a submitted message before it is routed here: its
    // sender, and the sender's namespace, are alive.
    const NetNs* ns = m.sender->ns.get();
    if (last_path != nullptr && last_path->link && ns == last.ns &&
        m.header.dport == last.dport && m.port_gen == last.port_gen && m.daddr == last.daddr &&
        m.saddr == last.saddr && (last_path->node_index < 0 || m.header.sport == last.sport)) {
      PathSend(*last_path, std::move(mp));
      continue;
    }
    last = {ns, m.saddr, m.daddr, m.header.sport, m.header.dport, m.port_gen};
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
    if (auto rs = FindBound(c.ns->key(), {m->saddr, m->header.sport})) Deliver(*rs, std::move(pong));
    return;
  }
  if (auto rs = FindBound(c.ns->key(), {m->daddr, m->header.dport})) {
    if (Deliver(*rs, std::move(m)) == DeliverResult::kParked) {
      // Parked meanwhile by another thread: the message waits for the
      // socket's next owner (nothing else waits for that port: it was ours).
      const uint16_t port = m->header.dport;
      c.unresolved[port].push_back(std::move(m));
      RetryParkedLater(c);
    }
  } else {
    stats::Inc(stats::kRecvDropNoSock);
  }
}

// A data message (or pong) takes the path's next sequence number and is
// kept until the peer acknowledges it.
void Engine::PathSend(Path& p, MessagePtr m) {
  if (m->cancelled.load()) return;
  m->header.sequence = p.next_tx_seq++;
  if (p.conn.node_record && IsKernelPath(p)) {
    // The host's node connection: a new owner after our death continues
    // from here and knows whose message took this sequence.
    p.conn.node_record->NoteSlot(p.node_index, m->header.sequence,
                                 m->relay_pid ? m->relay_pid : pid_, m->relay_seq);
    SyncNodeRecord(p);
  }
  if (p.link) {
    Transmit(p, std::move(m));
  } else {
    p.backlog.push_back(std::move(m));
    if (!p.connecting && p.retry_timer == 0) ConnectPath(p);
  }
}

void Engine::Transmit(Path& p, MessagePtr m) {
  if (!p.link || p.tx_held) {
    p.backlog.push_back(std::move(m));
    return;
  }
  if (m->rdma_op && !TransmitsRdmaOp(p, *m)) {
    ReleaseSendSpace(*m);  // its sequence number is skipped, as the kernel's drop does
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

// A message with an RDMA operation goes once, and only on an RDMA link of
// this process (the operation names its memory): after a reconnect it is
// dropped (rds_send_xmit: RDS_RDMA_DROPPED, never retransmitted), and toward
// another engine of the host (a relayer's path to the owner of the host's
// connection) it fails.
bool Engine::TransmitsRdmaOp(Path& p, Message& m) {
  if (m.header.flags & wire::kFlagRetransmitted) {
    m.rdma_op->Finish(RDS_RDMA_DROPPED);
    return false;
  }
  if (!p.link->IsRdma()) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      log::Warn("an RDMA operation to %s: another process of this host holds the RDMA "
                "connection there, and only the process whose memory it names can do it "
                "(RDS_RDMA_OTHER_ERROR; the message is dropped)",
                p.conn.key.faddr.ToString());
    }
    m.rdma_op->Finish(RDS_RDMA_OTHER_ERROR);
    return false;
  }
  return true;
}

// Control traffic (route queries, acknowledgements, notices) has no sequence
// number and is not retransmitted: it is regenerated when a link comes up.
void Engine::SendControl(Path& p, MessagePtr m) {
  if (!p.link || IsKernelPath(p)) return;  // a kernel node would misread it
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
    p.unacked.front()->payload_on_loan.store(false, std::memory_order_relaxed);
    if (p.unacked.front()->relay_pid != 0) OnRelayedDone(p.conn, *p.unacked.front());
    release.Add(*p.unacked.front());
    p.unacked.pop_front();
  }
  if (p.conn.node_record && IsKernelPath(p) && p.conn.node_record->owned()) {
    p.conn.node_record->path(p.node_index).acked_seq.store(ack, std::memory_order_relaxed);
  }
}

void Engine::ScheduleAck(Path& p, bool urgent) {
  // A kernel node takes TCP's acknowledgement; it has no use for ours.
  if (p.rx_acked == p.rx_delivered || IsKernelPath(p)) return;
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

}  // namespace rds
