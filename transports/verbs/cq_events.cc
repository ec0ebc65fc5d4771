// transports/verbs/cq_events.cc — see cq_events.h.
#include "transports/verbs/cq_events.h"

namespace rds::verbs {

namespace {
constexpr unsigned kAckBatch = 64;
}  // namespace

absl::Status CqEvents::DrainAndRearm(const VerbsApi& api, ibv_comp_channel* channel,
                                     ibv_cq* cq) {
  ibv_cq* event_cq = nullptr;
  void* context = nullptr;
  while (api.ibv.get_cq_event(channel, &event_cq, &context) == 0) {
    ++events_read_;
    if (++unacked_ >= kAckBatch) AckRest(api, cq);
  }
  if (ibv_req_notify_cq(cq, 0) != 0) return absl::InternalError("cannot re-arm the CQ");
  return absl::OkStatus();
}

void CqEvents::AckRest(const VerbsApi& api, ibv_cq* cq) {
  if (cq != nullptr && unacked_ > 0) api.ibv.ack_cq_events(cq, unacked_);
  unacked_ = 0;
}

}  // namespace rds::verbs
