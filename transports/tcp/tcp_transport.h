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

class EventLoop;

std::unique_ptr<Transport> MakeTcpTransport(const TransportContext& ctx);

// The next connection waiting on `listen_fd` as a link (null: none), with the
// addresses accept() reported: a connection its peer reset before we took it
// (a kernel node's poke, §C.7) still says where it came from.
std::shared_ptr<Link> AcceptTcpLink(EventLoop& loop, int listen_fd);

}  // namespace rds

#endif  // RDS_TRANSPORTS_TCP_TCP_TRANSPORT_H_
