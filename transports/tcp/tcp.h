// transports/tcp/tcp.h — TCP endpoints of the RDS-over-TCP transport.
//
// Listening on the rendezvous port (kernel rds_tcp_listen_init: dual-stack
// [::] or 0.0.0.0, SO_REUSEADDR; plus SO_REUSEPORT so every shim engine in a
// namespace can serve it) and connecting from an RDS address (the source is
// bound to the RDS local address, as rds_tcp_conn_path_connect does), with
// the kernel's socket tuning (TCP_NODELAY, keepalive 5 s / 5 s / 5 probes),
// plus TCP_USER_TIMEOUT 30 s: a peer that acknowledges nothing for 30 s is
// given up as keepalive gives up an idle one (the kernel keeps retransmitting
// for tcp_retries2, about 15 min, with everything behind it waiting).
// Framing over the connected socket is stream/StreamLink's.
//
// Call these in the network namespace the socket must live in
// (NetNs::RunIn). Returned fds are internal, non-blocking and close-on-exec.
//
// Thread-safety: stateless functions.
#ifndef RDS_TRANSPORTS_TCP_TCP_H_
#define RDS_TRANSPORTS_TCP_TCP_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/addr.h"

namespace rds::tcp {

absl::StatusOr<int> Listen(uint16_t port);
// Accepts one connection; -1 with errno EAGAIN when none is pending.
int Accept(int listen_fd, RdsEndpoint* peer, RdsEndpoint* local);
// A non-blocking connection from laddr to faddr:port; `path` >= 0: from a
// source port p with p % 8 == path (a kernel node's path, SPORT_IDX).
// `source_port` != 0: that port if it can be bound (LinkTarget::source_port).
absl::StatusOr<int> Connect(const RdsAddr& laddr, const RdsAddr& faddr, uint16_t port,
                            int path = -1, uint16_t source_port = 0);
// Socket options of every TCP link (both ends): no Nagle, keepalives, the
// user timeout, and the congestion control named by RDS_PRELOAD_TCP_CONGESTION, if any.
void Tune(int fd);

}  // namespace rds::tcp

#endif  // RDS_TRANSPORTS_TCP_TCP_H_
