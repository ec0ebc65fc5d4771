// transports/verbs/verbs_transport.h — RDS over RDMA verbs (kernel rds_rdma's
// wire): the RDMA CM side, making VerbsLinks.
//
// Serves a namespace with the kernel's two listeners (IPv4 on 18634 with the
// 32-byte private data, IPv6 on 16385 with the 56-byte one; rds-ib.md §1.2),
// connects a path from its RDS local address (the CM resolves the device
// holding it), and answers a connection request as a kernel node does
// (§1.5): the version check (incompatible: reject, value 1), then the race
// rule — a request for an address pair that already has a connection of
// ours, connecting or up, is rejected with value 1 (a native int), and an up
// one is taken as stale and failed (its peer restarted). Both sides may
// connect (no address rule on RDMA); the rejected side retries after a random
// back-off, the engine's. An accepted link goes to TransportContext::on_accept
// as soon as it is accepted (the peer's first message may complete before the
// CM reports the connection established).
//
// Where verbs cannot work (no RDMA device, rdma-core missing) the transport
// says why once (info log), Serve does nothing and Connect fails with
// FailedPrecondition. The libraries are loaded on first use, never when the
// host has no RDMA device.
//
// Thread-safety: see transports/transport.h.
#ifndef RDS_TRANSPORTS_VERBS_VERBS_TRANSPORT_H_
#define RDS_TRANSPORTS_VERBS_VERBS_TRANSPORT_H_

#include <memory>

#include "transports/transport.h"
#include "transports/verbs/verbs_link.h"

namespace rds::verbs {

std::unique_ptr<Transport> MakeVerbsTransport(const TransportContext& ctx,
                                              VerbsLink::Sizes sizes = {});

// Why verbs cannot be used on this host, or OK (a device exists and
// rdma-core loads). Loads the libraries the first time a device is seen.
absl::Status VerbsUsable();

}  // namespace rds::verbs

#endif  // RDS_TRANSPORTS_VERBS_VERBS_TRANSPORT_H_
