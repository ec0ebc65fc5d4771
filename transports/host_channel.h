// transports/host_channel.h — one-off requests between the engines of a host.
//
// Besides links, engines of one host send each other single messages: a
// connection reset made by another process (RDS_CONN_RESET), a shared
// socket's client stream (engine/share.h), an RDS_INFO or rdsctl question.
// Each goes over a fresh connection to the engine's same-host address
// (TransportContext::engine_address), whose listener hands it to the engine
// as an accepted link; the message is a hello (engine/control.h).
// Implemented by the same-host transport (transports/unix).
//
// Thread-safety: stateless, blocking, bounded; any thread.
#ifndef RDS_TRANSPORTS_HOST_CHANNEL_H_
#define RDS_TRANSPORTS_HOST_CHANNEL_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/message.h"
#include "engine/wire.h"

namespace rds::host_channel {

// Sends `m` (header + payload) to the engine at `engine`, with `fd_to_pass`
// attached (SCM_RIGHTS) unless it is -1. Bounded (1 s). NotFound: no engine
// listens there.
absl::Status Send(const std::string& engine, const MessagePtr& m, int fd_to_pass = -1);

// Sends `request` to the engine at `engine` and hands each message it answers
// with to `sink` until the sink returns true (done). Each wait for the engine
// is bounded by `limit`. OK once the sink is done; otherwise NotFound (no
// engine listens there), DeadlineExceeded (no answer in time), Unavailable
// (it closed the connection first) or DataLoss (invalid framing).
absl::Status Ask(const std::string& engine, const MessagePtr& request,
                 const std::function<bool(wire::Header&& header, Payload&& payload)>& sink,
                 absl::Duration limit);

// OK if an engine listens at `engine`; NotFound if nobody does (the address
// is stale or missing); other errors when it cannot be told.
absl::Status Probe(const std::string& engine);

}  // namespace rds::host_channel

#endif  // RDS_TRANSPORTS_HOST_CHANNEL_H_
