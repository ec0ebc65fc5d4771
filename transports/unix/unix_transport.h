// transports/unix/unix_transport.h — links between the engines of one host
// over AF_UNIX streams (unix.h), framed by stream/StreamLink, which also lends
// large payloads from the sender's shared arena instead of copying them.
//
// Every engine listens at its address in the run directory
// (TransportContext::engine_address); the listener takes links and the
// one-off requests of transports/host_channel.h alike, from processes of
// the users RDS_PRELOAD_LINK_UIDS admits.
//
// Thread-safety: see transports/transport.h.
#ifndef RDS_TRANSPORTS_UNIX_UNIX_TRANSPORT_H_
#define RDS_TRANSPORTS_UNIX_UNIX_TRANSPORT_H_

#include <memory>

#include "transports/transport.h"

namespace rds {

std::unique_ptr<Transport> MakeUnixTransport(const TransportContext& ctx);

}  // namespace rds

#endif  // RDS_TRANSPORTS_UNIX_UNIX_TRANSPORT_H_
