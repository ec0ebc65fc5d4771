// engine/engine_internal.h — small predicates the engine's files share (the
// engine object's own files: engine.cc, transmit.cc, connection.cc, route.cc,
// path_receive.cc, accept.cc, drain.cc). Not for use outside them.
#ifndef RDS_ENGINE_ENGINE_INTERNAL_H_
#define RDS_ENGINE_ENGINE_INTERNAL_H_

#include <algorithm>

#include "absl/time/time.h"
#include "conf/settings.h"
#include "engine/connection.h"
#include "engine/message.h"
#include "engine/socket.h"
#include "engine/sync.h"

namespace rds {

// The back-off after a path's or a route query's first failure (at least
// 1 ms); it doubles with each failure after that.
inline absl::Duration FirstReconnectBackoff() {
  return absl::Milliseconds(std::max<int64_t>(conf::Get().reconnect_min_delay_ms, 1));
}

// A path that is down and whose reconnection has failed since (its back-off
// grew past the first step) has no reachable peer for now.
inline bool PathUnreachable(const Path& p) {
  return !p.link && !p.connecting && p.backoff > FirstReconnectBackoff();
}

// Route queries to the connection's host fail (its connection attempts do:
// a host whose listener takes the connection and closes it is there, as a
// kernel node rejecting a poke is), and no path to it is up.
inline bool QueriesFail(Connection& c) {
  return !c.AnyUpPath() && !c.query_link && c.query_unreachable;
}

// The sending socket was closed (its last fd). Called on the engine thread.
inline bool SenderClosed(const Message& m) {
  if (m.sender == nullptr) return false;
  rds::MutexLock lock(&m.sender->mu);
  return m.sender->released;
}

}  // namespace rds

#endif  // RDS_ENGINE_ENGINE_INTERNAL_H_
