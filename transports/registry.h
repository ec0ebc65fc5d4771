// transports/registry.h — the one place transports are registered, and the
// rule that picks one for a path.
//
// An engine builds its transports once (MakeTransports) and asks
// TransportFor which one carries a connection: same-host links over
// AF_UNIX (transports/unix), links to other hosts over RDMA verbs
// (transports/verbs) from an address on an RDMA device, else over TCP
// (transports/tcp). Adding a transport means a directory under transports/,
// a line in MakeTransports and, if it competes for paths, a rule in
// TransportFor — nothing in engine/ (docs/DESIGN.md §2.6).
//
// Thread-safety: MakeTransports and SetTransportFactoryForTest before the
// engine starts; TransportSet is the engine's (see transport.h).
#ifndef RDS_TRANSPORTS_REGISTRY_H_
#define RDS_TRANSPORTS_REGISTRY_H_

#include <functional>
#include <memory>
#include <vector>

#include "transports/transport.h"

namespace rds {

struct TransportSet {
  std::unique_ptr<Transport> same_host;  // engines of this host
  std::unique_ptr<Transport> remote;     // engines (and kernel nodes) of other hosts
  // RDS over RDMA verbs to other hosts (null: turned off by RDS_PRELOAD_VERBS).
  std::unique_ptr<Transport> rdma;
  // Every transport, for Serve and WithdrawAtExit.
  std::vector<Transport*> All() const;
  // The transport of a connection whose foreign address is this host's
  // (`same_host`) or another's.
  Transport& For(bool same_host_peer) const { return same_host_peer ? *same_host : *remote; }
  // The kernel's rule for a connection to another host: RDMA when the local
  // address is on an RDMA device (rds_rdma is tried before rds_tcp), else
  // TCP. Any thread.
  bool UsesRdma(const std::shared_ptr<NetNs>& ns, const RdsAddr& laddr) const {
    return rdma != nullptr && rdma->CarriesFrom(ns, laddr);
  }
  // The transport whose connections another engine of the host hands over
  // (Link::HandOver / Transport::Adopt): the remote one.
  Transport& Handed() const { return *remote; }
};

// The transports an engine runs.
TransportSet MakeTransports(const TransportContext& ctx);

// Unit tests: engines started from now on build their transports with
// `factory` instead (null: the real ones).
void SetTransportFactoryForTest(std::function<TransportSet(const TransportContext&)> factory);

// Fork child: process-wide state of the transports (a peer arena's mapping
// of another process's memory, say) is forgotten.
void ResetTransportsAfterFork();

}  // namespace rds

#endif  // RDS_TRANSPORTS_REGISTRY_H_
