// transports/tcp/tcp_transport.h — RDS over TCP to other hosts (rds_tcp).
//
// Serves each namespace on the rendezvous port (tcp.h), connects a path from
// its RDS local address, and frames messages over the connection with
// stream/StreamLink. Its connections can move between the engines of a host
// (a connection accepted by one engine for another: Link::HandOver, Adopt).
//
// Thread-safety: see transports/transport.h.
#ifndef RDS_TRANSPORTS_TCP_TCP_TRANSPORT_H_
#define RDS_TRANSPORTS_TCP_TCP_TRANSPORT_H_

#include <memory>

#include "transports/transport.h"

namespace rds {

std::unique_ptr<Transport> MakeTcpTransport(const TransportContext& ctx);

}  // namespace rds

#endif  // RDS_TRANSPORTS_TCP_TCP_TRANSPORT_H_
