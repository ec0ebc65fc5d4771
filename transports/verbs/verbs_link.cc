// transports/verbs/verbs_link.cc — see verbs_link.h.
#include "transports/verbs/verbs_link.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/log.h"
#include "engine/stats.h"
#include "engine/sys.h"
#include "transports/verbs/internal_fds.h"

namespace rds::verbs {

namespace {

constexpr uint64_t kAckWrId = ~uint64_t{0};
// Receive work requests' ids: the slot with this tag (a failed completion's
// opcode is undefined; its id tells a receive from a send).
constexpr uint64_t kRecvWrTag = uint64_t{1} << 32;
// The kernel signals every (max_unsignaled_wr + 1)-th send: 17th by default.
constexpr int kSignalEvery = 17;

}  // namespace

VerbsLink::VerbsLink(const VerbsApi& api, EventLoop& loop, rdma_cm_id* id, Sizes sizes,
                     std::string description)
    : api_(api), loop_(loop), id_(id), sizes_(sizes), description_(std::move(description)) {}

std::shared_ptr<VerbsLink> VerbsLink::Make(const VerbsApi& api, EventLoop& loop, rdma_cm_id* id,
                                           Sizes sizes, std::string description) {
  return std::shared_ptr<VerbsLink>(new VerbsLink(api, loop, id, sizes, std::move(description)));
}

absl::StatusOr<std::shared_ptr<VerbsLink>> VerbsLink::Create(const VerbsApi& api,
                                                             EventLoop& loop, rdma_cm_id* id,
                                                             Sizes sizes,
                                                             std::string description) {
  std::shared_ptr<VerbsLink> link = Make(api, loop, id, sizes, std::move(description));
  if (absl::Status s = link->Attach(); !s.ok()) {
    link->Release();
    return s;
  }
  return link;
}

VerbsLink::~VerbsLink() { Release(); }

absl::Status VerbsLink::Attach() {
  if (closed_) return absl::FailedPreconditionError("the link is closed");
  if (pd_ != nullptr) return absl::FailedPreconditionError("the link is attached already");
  if (id_ == nullptr || id_->verbs == nullptr) {
    return absl::FailedPreconditionError("the RDMA CM id has no device (address not resolved)");
  }
  absl::StatusOr<SharedPd> pd = ProtectionDomainFor(api_, id_->verbs);
  if (!pd.ok()) return pd.status();
  pd_ = *std::move(pd);
  absl::StatusOr<ibv_comp_channel*> channel = CreateCompChannel(api_, id_->verbs);
  if (!channel.ok()) return channel.status();
  channel_ = *channel;
  cq_ = api_.ibv.create_cq(id_->verbs, sizes_.recv_slots + sizes_.send_slots + 1, this, channel_,
                           0);
  if (cq_ == nullptr) return absl::ResourceExhaustedError("cannot allocate a CQ");
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq_;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = static_cast<uint32_t>(sizes_.send_slots + 1);  // + the ack frame
  qa.cap.max_recv_wr = static_cast<uint32_t>(sizes_.recv_slots);
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  if (api_.cm.create_qp(id_, pd_.get(), &qa) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("rdma_create_qp: ", strerror(errno)));
  }
  qp_created_ = true;
  // Registered once: receive buffers, and send slots of a header and a
  // fragment each plus one header for the ack frame.
  rx_.resize(size_t(sizes_.recv_slots) * ib::kReceiveBufferSize);
  tx_.resize(size_t(sizes_.send_slots) * ib::kReceiveBufferSize + wire::kHeaderSize);
  rx_mr_ = api_.ibv.reg_mr(pd_.get(), rx_.data(), rx_.size(), IBV_ACCESS_LOCAL_WRITE);
  tx_mr_ = api_.ibv.reg_mr(pd_.get(), tx_.data(), tx_.size(), 0);
  if (rx_mr_ == nullptr || tx_mr_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("ibv_reg_mr: ", strerror(errno)));
  }
  // Posted before the connection is made: a kernel sends its congestion map
  // as soon as it sees the connection established.
  for (int s = 0; s < sizes_.recv_slots; ++s) PostRecv(s);
  if (closed_) return absl::InternalError("cannot post the receive ring");
  if (ibv_req_notify_cq(cq_, 0) != 0) return absl::InternalError("cannot arm the CQ");
  VerbsLink* self = this;
  loop_.Add(channel_->fd, EPOLLIN, [self](uint32_t) { self->OnCompletionChannel(); });
  watching_ = true;
  return absl::OkStatus();
}

void VerbsLink::Release() {
  if (watching_) loop_.Remove(channel_->fd);
  watching_ = false;
  if (qp_created_) api_.cm.destroy_qp(id_);
  qp_created_ = false;
  cq_events_.AckRest(api_, cq_);
  if (rx_mr_ != nullptr) api_.ibv.dereg_mr(rx_mr_);
  if (tx_mr_ != nullptr) api_.ibv.dereg_mr(tx_mr_);
  rx_mr_ = tx_mr_ = nullptr;
  if (cq_ != nullptr) api_.ibv.destroy_cq(cq_);
  cq_ = nullptr;
  DestroyCompChannel(api_, channel_);
  channel_ = nullptr;
  pd_.reset();  // the device's domain, freed with its last holder
  // No event of the id may be unacknowledged here (rdma_destroy_id waits for
  // them): the transport acknowledges each before acting on it.
  if (id_ != nullptr) api_.cm.destroy_id(id_);
  id_ = nullptr;
}

uint32_t VerbsLink::qp_num() const { return id_ && id_->qp ? id_->qp->qp_num : 0; }

std::optional<Link::RdmaInfo> VerbsLink::rdma_info() const {
  RdmaInfo r;
  r.qp_num = qp_num();
  if (id_ != nullptr && established_) {
    // The GIDs as the kernel reports them (rdma_addr_get_sgid / _dgid).
    std::memcpy(r.src_gid, id_->route.addr.addr.ibaddr.sgid.raw, sizeof r.src_gid);
    std::memcpy(r.dst_gid, id_->route.addr.addr.ibaddr.dgid.raw, sizeof r.dst_gid);
    r.max_send_wr = static_cast<uint32_t>(sizes_.send_slots);
    r.max_recv_wr = static_cast<uint32_t>(sizes_.recv_slots);
    r.max_send_sge = 1;
  }
  r.posted_receives = static_cast<uint32_t>(posted_receives_);
  r.recv_completions = recv_completions_;
  r.send_completions = send_completions_;
  r.cq_events = cq_events_.events_read();
  r.ack_frames = ack_frames_;
  return r;
}

void VerbsLink::PostRecv(int slot) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(&rx_[size_t(slot) * ib::kReceiveBufferSize]),
              static_cast<uint32_t>(ib::kReceiveBufferSize), rx_mr_->lkey};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = kRecvWrTag | static_cast<uint64_t>(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (ibv_post_recv(id_->qp, &wr, &bad) != 0) {
    Fail(absl::InternalError("ibv_post_recv failed"));
    return;
  }
  ++posted_receives_;
}

void VerbsLink::OnEstablished() {
  if (closed_) return;
  established_ = true;
  auto keep = shared_from_this();
  if (outgoing_ && cb_.on_connected) cb_.on_connected();
  ScheduleFlush();
}

void VerbsLink::OnDisconnected(const absl::Status& why) { Fail(why); }

void VerbsLink::Send(MessagePtr m) {
  if (closed_) return;
  queue_.push_back(std::move(m));
  if (established_) ScheduleFlush();
}

void VerbsLink::ScheduleFlush() {
  if (flush_scheduled_ || closed_) return;
  flush_scheduled_ = true;
  auto keep = shared_from_this();
  loop_.Defer([keep] {
    keep->flush_scheduled_ = false;
    keep->Flush();
  });
}

void VerbsLink::Flush() {
  while (established_ && !closed_ && !queue_.empty()) {
    const MessagePtr m = queue_.front();
    const uint32_t len = m->header.len;
    if (next_fragment_ == 0 && !header_ready_) {
      if (m->cancelled.load()) {  // nothing of it written yet: skipped
        queue_.pop_front();
        continue;
      }
      // The header of every fragment: our acknowledgement, and whether we ask
      // for one (never on a congestion map, which is neither acked nor
      // sequenced).
      wire::Header h = m->header;
      h.ack = acks_.Piggyback();
      if (!wire::IsCongMap(h)) {
        const bool last_of_burst = queue_.size() == 1;
        const bool must = (h.flags & wire::kFlagRetransmitted) || m->ack_soon || last_of_burst;
        if (acks_.AskForAck(len, must)) h.flags |= wire::kFlagAckRequired;
      }
      h.csum = 0;
      wire::Encode(h, header_);
      wire::SetHeaderChecksum(header_);
      header_ready_ = true;  // once per message, even if the ring is full now
    }
    if (m->rdma_op) {  // the operation first, then the message (rds-ib.md §6.4)
      const std::vector<RdmaOp::Segment>& segments = m->rdma_op->local;
      while (next_rdma_wr_ < segments.size()) {
        if (slots_in_use_ == sizes_.send_slots) return;  // resumes on a send completion
        if (!PostRdma(m->rdma_op, next_rdma_wr_, rdma_offset_)) return;
        stats::Add(stats::kSendRdmaBytes, segments[next_rdma_wr_].len);
        if (next_rdma_wr_ == 0) stats::Inc(stats::kSendRdma);
        rdma_offset_ += segments[next_rdma_wr_].len;
        ++next_rdma_wr_;
      }
    }
    const bool fence = m->rdma_op && m->rdma_op->fence;
    const uint32_t count = ib::FragmentCount(len);
    while (next_fragment_ < count) {
      if (slots_in_use_ == sizes_.send_slots) {
        stats::Inc(stats::kIbTxRingFull);
        return;  // resumes on a send completion
      }
      const uint32_t off = next_fragment_ * ib::kFragmentSize;
      const uint32_t n = std::min(ib::kFragmentSize, len - std::min(off, len));
      const bool last = next_fragment_ + 1 == count;
      if (!PostFragment(header_, len ? m->payload.data() + off : nullptr, n, last, fence,
                        m->rdma_op != nullptr || close_after_flush_)) {
        return;
      }
      if (last) posted_.back().done = m;
      ++next_fragment_;
    }
    queue_.pop_front();
    next_fragment_ = 0;
    next_rdma_wr_ = 0;
    rdma_offset_ = 0;
    header_ready_ = false;
  }
  if (close_after_flush_ && queue_.empty() && (posted_.empty() || signalled_pending_ == 0)) Close();
}

bool VerbsLink::PostRdma(const std::shared_ptr<RdmaOp>& op, size_t index,
                         uint64_t remote_offset) {
  const RdmaOp::Segment& seg = op->local[index];
  const int slot = next_slot_;  // taken, not written: the ring's accounting is per work request
  ibv_sge sge{seg.addr, seg.len, seg.lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = static_cast<uint64_t>(slot);
  wr.opcode = op->write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = op->remote_addr + remote_offset;
  wr.wr.rdma.rkey = op->rkey;
  if (++unsignaled_ >= kSignalEvery || slots_in_use_ + 1 == sizes_.send_slots) {
    wr.send_flags |= IBV_SEND_SIGNALED;
    unsignaled_ = 0;
    ++signalled_pending_;
  }
  if (ibv_post_send(id_->qp, &wr, &bad) != 0) {
    Fail(absl::UnavailableError(absl::StrCat("ibv_post_send (RDMA): ", strerror(errno))));
    return false;
  }
  posted_.push_back({slot, nullptr, op});
  next_slot_ = (slot + 1) % sizes_.send_slots;
  ++slots_in_use_;
  return true;
}

void VerbsLink::FinishFailedRdma(const ibv_wc& wc) {
  if (wc.status == IBV_WC_WR_FLUSH_ERR) return;  // flushed: no notification (rds_ib_send_complete)
  for (const Posted& p : posted_) {
    if (p.slot == static_cast<int>(wc.wr_id) && p.op) {
      p.op->Finish(wc.status == IBV_WC_REM_ACCESS_ERR ? RDS_RDMA_REMOTE_ERROR
                                                      : RDS_RDMA_OTHER_ERROR);
      return;
    }
  }
}

bool VerbsLink::PostFragment(const uint8_t* header, const uint8_t* data, uint32_t len,
                             bool last, bool fence, bool must_signal) {
  const int slot = next_slot_;
  uint8_t* p = &tx_[size_t(slot) * ib::kReceiveBufferSize];
  std::memcpy(p, header, wire::kHeaderSize);
  if (len > 0) std::memcpy(p + wire::kHeaderSize, data, len);
  ibv_sge sge{reinterpret_cast<uintptr_t>(p), static_cast<uint32_t>(wire::kHeaderSize + len),
              tx_mr_->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = static_cast<uint64_t>(slot);
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  // Signalled: every 17th, the one that fills the ring (else nothing would
  // free it), and a message's last fragment when its completion is awaited (an
  // RDMA operation's status; a link closing after its flush). Not every
  // message's: each signalled send costs the engine a completion event, and
  // messages are freed by the peer's h_ack, not by their completions.
  const bool signal = (last && must_signal) || ++unsignaled_ >= kSignalEvery ||
                      slots_in_use_ + 1 == sizes_.send_slots;
  if (signal) {
    wr.send_flags |= IBV_SEND_SIGNALED;
    unsignaled_ = 0;
    ++signalled_pending_;
  }
  if (last) wr.send_flags |= IBV_SEND_SOLICITED;
  if (fence) wr.send_flags |= IBV_SEND_FENCE;
  if (ibv_post_send(id_->qp, &wr, &bad) != 0) {
    Fail(absl::UnavailableError(absl::StrCat("ibv_post_send: ", strerror(errno))));
    return false;
  }
  posted_.push_back({slot, nullptr, nullptr});
  next_slot_ = (slot + 1) % sizes_.send_slots;
  ++slots_in_use_;
  return true;
}

void VerbsLink::PostAckFrame() {
  uint8_t* p = &tx_[size_t(sizes_.send_slots) * ib::kReceiveBufferSize];
  ib::EncodeAckOnly(acks_.PostAckFrame(), p);
  ibv_sge sge{reinterpret_cast<uintptr_t>(p), static_cast<uint32_t>(wire::kHeaderSize),
              tx_mr_->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = kAckWrId;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (ibv_post_send(id_->qp, &wr, &bad) != 0) {
    Fail(absl::UnavailableError(absl::StrCat("ibv_post_send (ack): ", strerror(errno))));
    return;
  }
  ack_frame_busy_ = true;
  ++ack_frames_;
  stats::Inc(stats::kIbAckSent);
}

void VerbsLink::OnCompletionChannel() {
  if (closed_) return;
  auto keep = shared_from_this();
  if (absl::Status s = cq_events_.DrainAndRearm(api_, channel_, cq_); !s.ok()) {
    Fail(s);
    return;
  }
  PollCompletions();
}

void VerbsLink::PollCompletions() {
  ibv_wc wc[32];
  bool sends = false, receives = false;
  for (;;) {
    if (closed_) return;
    const int n = ibv_poll_cq(cq_, 32, wc);
    if (n < 0) {
      Fail(absl::InternalError("ibv_poll_cq failed"));
      return;
    }
    if (n == 0) break;
    for (int k = 0; k < n && !closed_; ++k) {
      if (wc[k].status != IBV_WC_SUCCESS) {
        if (wc[k].wr_id != kAckWrId && !(wc[k].wr_id & kRecvWrTag)) FinishFailedRdma(wc[k]);
        Fail(absl::UnavailableError(
            absl::StrCat("completion error: ", api_.ibv.wc_status_str(wc[k].status))));
        return;
      }
      if (wc[k].opcode & IBV_WC_RECV) {
        receives = true;
        ++recv_completions_;
        OnReceive(wc[k]);
      } else {
        sends = true;
        ++send_completions_;
        OnSendCompleted(wc[k].wr_id);
      }
    }
  }
  if (sends) stats::Inc(stats::kIbTxCqEvent);
  if (receives) stats::Inc(stats::kIbRxCqEvent);
  if (established_ && !ack_frame_busy_ && acks_.AckFrameDue()) PostAckFrame();
  if (!queue_.empty()) Flush();
}

void VerbsLink::OnReceive(const ibv_wc& wc) {
  const int slot = static_cast<int>(wc.wr_id & ~kRecvWrTag);
  --posted_receives_;
  absl::StatusOr<ib::FragmentAssembler::Result> r =
      assembler_.Feed({&rx_[size_t(slot) * ib::kReceiveBufferSize], wc.byte_len});
  PostRecv(slot);  // the assembler copied what it keeps
  if (!r.ok()) {
    Fail(r.status());
    return;
  }
  if (std::optional<uint64_t> acked = acks_.OnPeerAck(r->ack)) {
    stats::Inc(stats::kIbAckReceived);
    if (report_acks_ && cb_.on_transport_acked) cb_.on_transport_acked(*acked);
  }
  if (!r->header) return;
  if (!wire::IsCongMap(*r->header)) {
    acks_.OnMessageReceived(r->header->sequence,
                            (r->header->flags & wire::kFlagAckRequired) != 0);
  }
  if (cb_.on_message) cb_.on_message(std::move(*r->header), std::move(r->payload));
}

void VerbsLink::OnSendCompleted(uint64_t wr_id) {
  if (wr_id == kAckWrId) {
    ack_frame_busy_ = false;
    acks_.OnAckFrameSent();
    return;
  }
  --signalled_pending_;
  while (!posted_.empty()) {
    Posted p = std::move(posted_.front());
    posted_.pop_front();
    --slots_in_use_;
    if (p.done && p.done->rdma_op) p.done->rdma_op->Finish(RDS_RDMA_SUCCESS);
    if (p.done && cb_.on_sent) cb_.on_sent(p.done);
    if (p.slot == static_cast<int>(wr_id)) break;
  }
}

void VerbsLink::Close() {
  if (closed_) return;
  closed_ = true;
  if (established_) api_.cm.disconnect(id_);
  Release();
  queue_.clear();
  posted_.clear();
  header_ready_ = false;
}

void VerbsLink::CloseAfterFlush() {
  close_after_flush_ = true;
  // Unsignalled sends complete unseen: with none signalled in flight there is
  // nothing to wait for (RC delivers what was posted before the disconnect).
  if (queue_.empty() && (posted_.empty() || signalled_pending_ == 0)) Close();
}

void VerbsLink::Fail(const absl::Status& why) {
  if (closed_) return;
  log::Debug("link %s closed: %s", description_, why.ToString());
  Close();
  auto keep = shared_from_this();
  loop_.Post([keep, why] {
    if (keep->cb_.on_closed) keep->cb_.on_closed(why);
  });
}

}  // namespace rds::verbs
