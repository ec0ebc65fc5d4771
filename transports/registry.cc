// transports/registry.cc — the transports an engine runs.
#include "transports/registry.h"

#include "conf/settings.h"
#include "engine/sync.h"
#include "engine/sys.h"
#include "transports/stream/peer_arena.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/unix/unix_transport.h"
#include "transports/verbs/verbs_transport.h"

namespace rds {
namespace {

rds::Mutex factory_mu(absl::kConstInit);
std::function<TransportSet(const TransportContext&)>* test_factory ABSL_GUARDED_BY(factory_mu) =
    nullptr;

}  // namespace

std::shared_ptr<Link> Transport::Adopt(int fd, const std::string&) {
  sys::CloseInternal(fd);
  return nullptr;
}

std::vector<Transport*> TransportSet::All() const {
  std::vector<Transport*> all;
  for (Transport* t : {same_host.get(), remote.get(), rdma.get()}) {
    if (t != nullptr) all.push_back(t);
  }
  return all;
}

TransportSet MakeTransports(const TransportContext& ctx) {
  {
    rds::MutexLock lock(&factory_mu);
    if (test_factory != nullptr) return (*test_factory)(ctx);
  }
  TransportSet set;
  set.same_host = MakeUnixTransport(ctx);
  set.remote = MakeTcpTransport(ctx);
  if (conf::Get().verbs) set.rdma = verbs::MakeVerbsTransport(ctx);
  return set;
}

void SetTransportFactoryForTest(std::function<TransportSet(const TransportContext&)> factory) {
  rds::MutexLock lock(&factory_mu);
  delete test_factory;
  test_factory = factory ? new std::function<TransportSet(const TransportContext&)>(
                               std::move(factory))
                         : nullptr;
}

void ResetTransportsAfterFork() { PeerArena::ResetAfterFork(); }

}  // namespace rds
