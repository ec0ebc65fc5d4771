// sdp_relay/verbs_channel.h — SDP's MessageChannel over one RC queue pair
// (rdma-core through transports/verbs' loader): a ring of registered receive
// buffers, a ring of registered send slots (each message is copied into one:
// buffer copy, sdp.md §1.5), one completion channel watched by the relay
// loop. Created on an RDMA CM id whose route is resolved (the connecting
// side) or that came with a request (the accepting side), before
// rdma_connect / rdma_accept: the receive ring is posted before the peer can
// send. It owns the id once made (not when Create fails) and destroys it last.
//
// The owner destroys a channel only from a task posted to the loop, never
// inside one of its callbacks.
//
// Thread-safety: the relay loop's thread only.
#ifndef RDS_SDP_RELAY_VERBS_CHANNEL_H_
#define RDS_SDP_RELAY_VERBS_CHANNEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "sdp_relay/channel.h"
#include "sdp_relay/relay_loop.h"
#include "transports/verbs/cq_events.h"
#include "transports/verbs/protection_domain.h"
#include "transports/verbs/verbs_api.h"

namespace rds::sdp {

class VerbsChannel final : public MessageChannel {
 public:
  struct Sizes {
    uint32_t recv_bufs = 64;            // gen2's ring
    uint32_t buf_size = 32 * 1024 + 16; // gen2's default receive buffer, BSDH included
    uint32_t send_slots = 64;
    uint32_t send_slot_size = 32 * 1024 + 16;  // at least the peer's buffers (capped to them)
  };
  struct Callbacks {
    std::function<void(uint64_t id, absl::Span<const uint8_t> message)> on_message;
    std::function<void()> on_send_space;
    std::function<void(const absl::Status& why)> on_closed;
  };

  static absl::StatusOr<std::unique_ptr<VerbsChannel>> Create(const verbs::VerbsApi& api,
                                                              RelayLoop& loop, rdma_cm_id* id,
                                                              const Sizes& sizes);
  ~VerbsChannel() override;

  void SetCallbacks(Callbacks cb) { cb_ = std::move(cb); }
  rdma_cm_id* id() const { return id_; }
  const Sizes& sizes() const { return sizes_; }
  // The connection is up (the CM said ESTABLISHED).
  void OnEstablished() { established_ = true; }
  // The CM said DISCONNECTED (or the device went away).
  void OnDisconnected(const absl::Status& why);
  // Disconnected, or failed: nothing in flight is owed to the peer any more,
  // and the channel may be destroyed. (Destroying it sooner destroys the
  // queue pair under sends not yet delivered.)
  bool finished() const { return closed_; }

  // MessageChannel.
  bool CanSend() const override;
  // (A Data message's completion may be unsignalled: the control messages
  // are signalled, so a DisConn's completion covers all before it.)
  bool AllSent() const override { return closed_ || sends_completed_ == sends_posted_; }
  void Send(absl::Span<const uint8_t> message) override;
  void Repost(uint64_t id) override;
  void Disconnect() override;

 private:
  VerbsChannel(const verbs::VerbsApi& api, RelayLoop& loop, rdma_cm_id* id, const Sizes& sizes)
      : api_(api), loop_(loop), id_(id), sizes_(sizes) {}
  absl::Status Attach();
  void PostRecv(uint32_t slot);
  // Disconnects once every posted send has completed (a disconnect moves
  // the queue pair to the error state: sends still in flight would be
  // flushed, never delivered), or at the deadline.
  void FinishDisconnect();
  void OnCompletionChannel();
  void PollCompletions();
  void Fail(const absl::Status& why);

  const verbs::VerbsApi& api_;
  RelayLoop& loop_;
  rdma_cm_id* id_;
  const Sizes sizes_;
  Callbacks cb_;
  verbs::SharedPd pd_;
  ibv_comp_channel* comp_ = nullptr;
  ibv_cq* cq_ = nullptr;
  bool qp_created_ = false;
  bool watching_ = false;
  std::vector<uint8_t> rx_, tx_;
  ibv_mr* rx_mr_ = nullptr;
  ibv_mr* tx_mr_ = nullptr;
  // Sends complete in order: a signalled one (its id the count of sends
  // posted through it) frees every slot before it.
  uint64_t sends_posted_ = 0;
  uint64_t sends_completed_ = 0;
  uint32_t unsignaled_ = 0;
  verbs::CqEvents cq_events_;
  bool established_ = false;
  bool disconnecting_ = false;  // Disconnect() called: no more sends
  absl::Time disconnect_deadline_;
  uint64_t disconnect_timer_ = 0;
  bool closed_ = false;
};

}  // namespace rds::sdp

#endif  // RDS_SDP_RELAY_VERBS_CHANNEL_H_
