// transports/verbs/verbs_link.h — a Link over one RC queue pair, speaking kernel
// rds_rdma's wire (ib_wire.h) with its acknowledgements (ib_ack.h).
//
// The link owns the queue pair it creates on an RDMA CM id (in the device's
// shared protection domain, protection_domain.h, where the socket's memory
// regions are too), its completion queue and channel (in the engine's event
// loop), and two areas registered once: a
// ring of receive buffers (a header and a 4 KiB fragment each), posted before
// the connection is made, and a ring of send slots into which each fragment
// (its message's header, then up to 4 KiB of payload) is copied. The transport
// makes the CM calls (connect, accept, events) and tells the link when the
// connection is established or gone.
//
// Sending: a message's RDMA operation (engine/rdma.h), if any, goes first:
// one RDMA WRITE or READ per local segment (each takes a send slot, unused);
// its status comes with the message's last completion (success) or with a
// failed completion (REMOTE_ERROR for an access error; the link fails).
// Then the message is cut into fragments, each a SEND (FENCE if the
// operation asked for it); the last
// one is SOLICITED (a kernel arms its receive CQ for solicited completions
// only); sends are signalled every 17th (and a message's last when its
// completion is awaited: an RDMA operation), and a completion frees its slot
// and every earlier one, reporting the messages in them sent (on_sent). Every header carries our acknowledgement (h_ack) and,
// by ib::AckState, ACK_REQUIRED; an ack-only frame answers the peer's
// ACK_REQUIRED (one in flight at most). Receiving: completions are reassembled
// (FragmentAssembler: a protocol error drops the link), each header's h_ack
// is reported through on_transport_acked when ReportTransportAcks was called.
//
// Thread-safety: with the engine's event-loop run lock held.
#ifndef RDS_TRANSPORTS_VERBS_VERBS_LINK_H_
#define RDS_TRANSPORTS_VERBS_VERBS_LINK_H_

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/event_loop.h"
#include "transports/transport.h"
#include "engine/rdma.h"
#include "transports/verbs/cq_events.h"
#include "transports/verbs/ib_ack.h"
#include "transports/verbs/ib_wire.h"
#include "transports/verbs/protection_domain.h"
#include "transports/verbs/verbs_api.h"

namespace rds::verbs {

class VerbsLink : public Link, public std::enable_shared_from_this<VerbsLink> {
 public:
  struct Sizes {
    int recv_slots = 256;  // posted receives (the kernel sends up to 256 unacknowledged)
    int send_slots = 64;   // fragments in flight
  };
  // A link on `id` (an outgoing id still resolving its address and route),
  // holding no verbs resources yet: messages queue until Attach and
  // OnEstablished. The link owns `id` and destroys it when it closes.
  static std::shared_ptr<VerbsLink> Make(const VerbsApi& api, EventLoop& loop, rdma_cm_id* id,
                                         Sizes sizes, std::string description);
  // Make and Attach at once (an id with its device known: a connection
  // request, or route resolved).
  static absl::StatusOr<std::shared_ptr<VerbsLink>> Create(const VerbsApi& api, EventLoop& loop,
                                                           rdma_cm_id* id, Sizes sizes,
                                                           std::string description);
  ~VerbsLink() override;

  // The transport's calls. Attach: the id has its device (route resolved, or
  // a connection request): creates the queue pair, registers the rings and
  // posts the receives; on error the link is unusable (Fail it). Then the CM
  // says the connection is up, or gone.
  absl::Status Attach();
  void OnEstablished();
  void OnDisconnected(const absl::Status& why);
  // Fails the link: on_closed(why) follows from the event loop.
  void Fail(const absl::Status& why);
  bool closed() const { return closed_; }
  bool established() const { return established_; }
  rdma_cm_id* cm_id() const { return id_; }
  // An outgoing connection: OnEstablished reports on_connected (an accepted
  // one has nothing to report: its peer speaks first).
  void mark_outgoing() { outgoing_ = true; }
  bool outgoing() const { return outgoing_; }
  // The RDS addresses of the connection (the private data's), for RDS_INFO
  // and rdsctl; set by the transport.
  void set_endpoints(const Endpoints& e) { endpoints_ = e; }
  std::optional<Endpoints> endpoints() const override { return endpoints_; }

  void SetCallbacks(Callbacks callbacks) override { cb_ = std::move(callbacks); }
  void Send(MessagePtr m) override;
  void Close() override;
  void CloseAfterFlush() override;
  std::string Describe() const override { return description_; }
  bool IsRdma() const override { return true; }
  std::optional<RdmaInfo> rdma_info() const override;
  bool ReportTransportAcks() override {
    report_acks_ = true;
    return true;
  }

  uint32_t qp_num() const;
  int posted_receives() const { return posted_receives_; }

 private:
  VerbsLink(const VerbsApi& api, EventLoop& loop, rdma_cm_id* id, Sizes sizes,
            std::string description);
  void Release();  // the verbs resources, in order, and the id
  void PostRecv(int slot);
  void OnCompletionChannel();
  void PollCompletions();
  void OnReceive(const ibv_wc& wc);
  void OnSendCompleted(uint64_t wr_id);
  void ScheduleFlush();
  void Flush();
  bool PostFragment(const uint8_t* header, const uint8_t* data, uint32_t len, bool last,
                    bool fence, bool must_signal);
  // The `index`th work request of a message's RDMA operation, at
  // `remote_offset` into the peer's region.
  bool PostRdma(const std::shared_ptr<RdmaOp>& op, size_t index, uint64_t remote_offset);
  // A work request failed (the queue pair is in error): its RDMA operation,
  // if it was one, ends with the matching status.
  void FinishFailedRdma(const ibv_wc& wc);
  void PostAckFrame();

  const VerbsApi& api_;
  EventLoop& loop_;
  rdma_cm_id* id_;
  const Sizes sizes_;
  const std::string description_;
  Callbacks cb_;
  std::optional<Endpoints> endpoints_;

  SharedPd pd_;  // the device's (protection_domain.h)
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  bool qp_created_ = false;
  bool watching_ = false;  // the completion channel is in the event loop
  std::vector<uint8_t> rx_, tx_;
  ibv_mr* rx_mr_ = nullptr;
  ibv_mr* tx_mr_ = nullptr;
  int posted_receives_ = 0;
  CqEvents cq_events_;
  uint64_t recv_completions_ = 0, send_completions_ = 0, ack_frames_ = 0;

  // Send ring: slots are used and freed in order; a signalled completion
  // frees its slot and every earlier one.
  int next_slot_ = 0;
  int slots_in_use_ = 0;
  int unsignaled_ = 0;
  int signalled_pending_ = 0;  // signalled sends (not the ack frame) not yet completed
  struct Posted {
    int slot;
    MessagePtr done;  // set on a message's last fragment
    std::shared_ptr<RdmaOp> op;  // set on an RDMA operation's work requests
  };
  std::deque<Posted> posted_;
  bool ack_frame_busy_ = false;

  std::deque<MessagePtr> queue_;
  uint32_t next_fragment_ = 0;  // of queue_.front()
  size_t next_rdma_wr_ = 0;     // of queue_.front()'s RDMA operation, posted before its fragments
  uint64_t rdma_offset_ = 0;    // into the peer's region, of that work request
  uint8_t header_[wire::kHeaderSize];  // queue_.front()'s, once header_ready_
  bool header_ready_ = false;
  bool flush_scheduled_ = false;

  ib::FragmentAssembler assembler_;
  ib::AckState acks_;
  bool report_acks_ = false;
  bool outgoing_ = false;
  bool established_ = false;
  bool closed_ = false;
  bool close_after_flush_ = false;
};

}  // namespace rds::verbs

#endif  // RDS_TRANSPORTS_VERBS_VERBS_LINK_H_
