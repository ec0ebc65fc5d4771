// sdp_relay/verbs_channel.cc — see verbs_channel.h.
#include "sdp_relay/verbs_channel.h"

#include <fcntl.h>
#include <sys/epoll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/log.h"
#include "engine/sys.h"
#include "sdp/wire.h"
#include "transports/verbs/internal_fds.h"

namespace rds::sdp {
namespace {

// Receive work requests carry this tag with their slot (a failed
// completion's opcode is undefined; its id tells a receive from a send).
constexpr uint64_t kRecvTag = uint64_t{1} << 63;
// One send in this many is signalled (and the one that fills the ring).
constexpr uint32_t kSignalEvery = 16;
// How long a disconnect waits for what was sent to be delivered.
constexpr absl::Duration kDisconnectWait = absl::Seconds(2);

}  // namespace

absl::StatusOr<std::unique_ptr<VerbsChannel>> VerbsChannel::Create(const verbs::VerbsApi& api,
                                                                   RelayLoop& loop,
                                                                   rdma_cm_id* id,
                                                                   const Sizes& sizes) {
  std::unique_ptr<VerbsChannel> ch(new VerbsChannel(api, loop, id, sizes));
  if (absl::Status s = ch->Attach(); !s.ok()) {
    ch->id_ = nullptr;  // the caller keeps the id (to reject the request)
    return s;           // the destructor releases the rest
  }
  return ch;
}

absl::Status VerbsChannel::Attach() {
  if (id_ == nullptr || id_->verbs == nullptr) {
    return absl::FailedPreconditionError("the RDMA CM id has no device (route not resolved)");
  }
  absl::StatusOr<verbs::SharedPd> pd = verbs::ProtectionDomainFor(api_, id_->verbs);
  if (!pd.ok()) return pd.status();
  pd_ = *std::move(pd);
  absl::StatusOr<ibv_comp_channel*> comp = verbs::CreateCompChannel(api_, id_->verbs);
  if (!comp.ok()) return comp.status();
  comp_ = *comp;
  cq_ = api_.ibv.create_cq(id_->verbs, static_cast<int>(sizes_.recv_bufs + sizes_.send_slots),
                           this, comp_, 0);
  if (cq_ == nullptr) return absl::ResourceExhaustedError("cannot allocate a CQ");
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq_;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = sizes_.send_slots;
  qa.cap.max_recv_wr = sizes_.recv_bufs;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  if (api_.cm.create_qp(id_, pd_.get(), &qa) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("rdma_create_qp: ", strerror(errno)));
  }
  qp_created_ = true;
  rx_.resize(size_t{sizes_.recv_bufs} * sizes_.buf_size);
  tx_.resize(size_t{sizes_.send_slots} * sizes_.send_slot_size);
  rx_mr_ = api_.ibv.reg_mr(pd_.get(), rx_.data(), rx_.size(), IBV_ACCESS_LOCAL_WRITE);
  tx_mr_ = api_.ibv.reg_mr(pd_.get(), tx_.data(), tx_.size(), 0);
  if (rx_mr_ == nullptr || tx_mr_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("ibv_reg_mr: ", strerror(errno)));
  }
  for (uint32_t s = 0; s < sizes_.recv_bufs && !closed_; ++s) PostRecv(s);
  if (closed_) return absl::InternalError("cannot post the receive ring");
  if (ibv_req_notify_cq(cq_, 0) != 0) return absl::InternalError("cannot arm the CQ");
  if (absl::Status s = loop_.Add(comp_->fd, EPOLLIN, [this](uint32_t) { OnCompletionChannel(); });
      !s.ok()) {
    return s;
  }
  watching_ = true;
  return absl::OkStatus();
}

VerbsChannel::~VerbsChannel() {
  if (disconnect_timer_ != 0) loop_.Cancel(disconnect_timer_);
  if (watching_) loop_.Remove(comp_->fd);
  if (qp_created_) api_.cm.destroy_qp(id_);
  cq_events_.AckRest(api_, cq_);
  if (rx_mr_ != nullptr) api_.ibv.dereg_mr(rx_mr_);
  if (tx_mr_ != nullptr) api_.ibv.dereg_mr(tx_mr_);
  if (cq_ != nullptr) api_.ibv.destroy_cq(cq_);
  verbs::DestroyCompChannel(api_, comp_);
  pd_.reset();
  // Its events were all acknowledged before they were acted on (the service
  // copies them first): rdma_destroy_id does not wait.
  if (id_ != nullptr) api_.cm.destroy_id(id_);
}

void VerbsChannel::PostRecv(uint32_t slot) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(&rx_[size_t{slot} * sizes_.buf_size]), sizes_.buf_size,
              rx_mr_->lkey};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = kRecvTag | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (ibv_post_recv(id_->qp, &wr, &bad) != 0) Fail(absl::InternalError("ibv_post_recv failed"));
}

bool VerbsChannel::CanSend() const {
  return !closed_ && !disconnecting_ && sends_posted_ - sends_completed_ < sizes_.send_slots;
}

void VerbsChannel::Send(absl::Span<const uint8_t> message) {
  if (!CanSend()) return;
  if (message.size() > sizes_.send_slot_size) {
    Fail(absl::InternalError("a message larger than a send slot"));
    return;
  }
  const uint32_t slot = static_cast<uint32_t>(sends_posted_ % sizes_.send_slots);
  uint8_t* p = &tx_[size_t{slot} * sizes_.send_slot_size];
  std::memcpy(p, message.data(), message.size());
  ibv_sge sge{reinterpret_cast<uintptr_t>(p), static_cast<uint32_t>(message.size()),
              tx_mr_->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = sends_posted_ + 1;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  // Solicited: the peer's receive CQ event comes for every message (its
  // relay writes the bytes on at once). Signalled: one in kSignalEvery, the
  // one that fills the ring, and every control message (a BSDH alone: the
  // last before a disconnect is one, FinishDisconnect).
  wr.send_flags = IBV_SEND_SOLICITED;
  if (++unsignaled_ >= kSignalEvery || message.size() <= wire::kBsdhSize ||
      sends_posted_ + 1 - sends_completed_ == sizes_.send_slots) {
    wr.send_flags |= IBV_SEND_SIGNALED;
    unsignaled_ = 0;
  }
  if (ibv_post_send(id_->qp, &wr, &bad) != 0) {
    Fail(absl::UnavailableError(absl::StrCat("ibv_post_send: ", strerror(errno))));
    return;
  }
  ++sends_posted_;
}

void VerbsChannel::Repost(uint64_t id) {
  if (!closed_) PostRecv(static_cast<uint32_t>(id));
}

void VerbsChannel::Disconnect() {
  if (closed_ || disconnecting_) return;
  disconnecting_ = true;
  disconnect_deadline_ = absl::Now() + kDisconnectWait;
  FinishDisconnect();
}

void VerbsChannel::FinishDisconnect() {
  if (closed_) return;
  // The last message before a disconnect is a control message (DisConn,
  // AbortConn or a credit update), and those are signalled (Send): its
  // completion says everything before it is delivered. A relay that could
  // send none (no credit) waits no longer than the deadline.
  if (sends_completed_ == sends_posted_ || absl::Now() >= disconnect_deadline_) {
    closed_ = true;
    api_.cm.disconnect(id_);
    return;
  }
  if (disconnect_timer_ == 0) {
    disconnect_timer_ = loop_.After(kDisconnectWait, [this] {
      disconnect_timer_ = 0;
      FinishDisconnect();
    });
  }
}

void VerbsChannel::OnDisconnected(const absl::Status& why) {
  // The CM's event and the completions come on different fds: what the peer
  // sent before its disconnect may still wait in the CQ. It goes first.
  if (!closed_) PollCompletions();
  Fail(why);
}

void VerbsChannel::Fail(const absl::Status& why) {
  if (closed_) {
    // Disconnect() was ours; the peer's DISCONNECTED still ends it.
    if (cb_.on_closed) {
      auto cb = std::move(cb_.on_closed);
      cb_.on_closed = nullptr;
      cb(why);
    }
    return;
  }
  closed_ = true;
  if (established_) api_.cm.disconnect(id_);
  log::Debug("SDP channel: closed: %s", why.ToString());
  if (cb_.on_closed) {
    auto cb = std::move(cb_.on_closed);
    cb_.on_closed = nullptr;
    cb(why);
  }
}

void VerbsChannel::OnCompletionChannel() {
  if (absl::Status s = cq_events_.DrainAndRearm(api_, comp_, cq_); !s.ok()) {
    Fail(s);
    return;
  }
  PollCompletions();
}

void VerbsChannel::PollCompletions() {
  ibv_wc wc[32];
  bool freed = false;
  for (;;) {
    const int n = ibv_poll_cq(cq_, 32, wc);
    if (n <= 0) {
      if (n < 0) Fail(absl::InternalError("ibv_poll_cq failed"));
      break;
    }
    for (int k = 0; k < n; ++k) {
      if (wc[k].status != IBV_WC_SUCCESS) {
        if (wc[k].status != IBV_WC_WR_FLUSH_ERR) {
          Fail(absl::UnavailableError(
              absl::StrCat("completion error: ", api_.ibv.wc_status_str(wc[k].status))));
        }
        continue;  // flushed: the connection is going
      }
      if (wc[k].wr_id & kRecvTag) {
        const uint32_t slot = static_cast<uint32_t>(wc[k].wr_id & ~kRecvTag);
        if (cb_.on_message) {
          cb_.on_message(slot, absl::MakeConstSpan(&rx_[size_t{slot} * sizes_.buf_size],
                                                   wc[k].byte_len));
        }
      } else {
        sends_completed_ = std::max(sends_completed_, wc[k].wr_id);
        freed = true;
      }
    }
  }
  if (freed && disconnecting_) FinishDisconnect();
  if (freed && CanSend() && cb_.on_send_space) cb_.on_send_space();
}

}  // namespace rds::sdp
