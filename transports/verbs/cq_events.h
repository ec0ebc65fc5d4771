// transports/verbs/cq_events.h — a completion channel's events for one CQ:
// read all that are pending, acknowledge them in batches (ibv_ack_cq_events
// takes a mutex), re-arm the CQ. Shared by the RDS verbs link and the SDP
// relay's channel, both of which watch the channel's fd in an epoll loop.
//
// Contract: DrainAndRearm is called when the channel's fd is readable (the fd
// non-blocking), and before the CQ is polled: a completion that lands after
// the caller's last poll raises a new event. AckRest is called before the CQ
// is destroyed (ibv_destroy_cq waits for every event to be acknowledged).
// Not thread-safe: one loop thread owns it.
#ifndef RDS_TRANSPORTS_VERBS_CQ_EVENTS_H_
#define RDS_TRANSPORTS_VERBS_CQ_EVENTS_H_

#include <infiniband/verbs.h>

#include <cstdint>

#include "absl/status/status.h"
#include "transports/verbs/verbs_api.h"

namespace rds::verbs {

class CqEvents {
 public:
  // Reads the pending events (counted in events_read()), then re-arms `cq`.
  absl::Status DrainAndRearm(const VerbsApi& api, ibv_comp_channel* channel, ibv_cq* cq);
  // Acknowledges the events not yet acknowledged.
  void AckRest(const VerbsApi& api, ibv_cq* cq);

  uint64_t events_read() const { return events_read_; }

 private:
  unsigned unacked_ = 0;
  uint64_t events_read_ = 0;
};

}  // namespace rds::verbs

#endif  // RDS_TRANSPORTS_VERBS_CQ_EVENTS_H_
