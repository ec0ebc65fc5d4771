// engine/netns.h — the network namespaces an engine serves.
//
// An RDS socket belongs to the network namespace in which socket() was
// called (kernel-rds.md §A.1, DESIGN.md decision 7). A NetNs holds a handle
// to that namespace (an nsfs fd), its port registry, and runs code inside it
// when the engine must create kernel sockets there (TCP listener and
// connections, address checks) from a thread that lives elsewhere.
//
// Thread-safety: safe for concurrent use. RunIn() switches only the calling
// thread's namespace and restores it before returning.
#ifndef RDS_ENGINE_NETNS_H_
#define RDS_ENGINE_NETNS_H_

#include <atomic>
#include <functional>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/sync.h"
#include "absl/status/statusor.h"
#include "engine/addr.h"
#include "engine/registry.h"

namespace rds {

class NetNs {
 public:
  // The namespace of the calling thread.
  static absl::StatusOr<std::shared_ptr<NetNs>> OfCurrentThread();
  // The namespace an existing socket fd was created in (ioctl SIOCGSKNS).
  static absl::StatusOr<std::shared_ptr<NetNs>> OfSocketFd(int fd);
  // Forgets every namespace (after fork, in the child: fds are reopened lazily).
  static void ResetAfterFork();

  ~NetNs();

  NetNsKey key() const { return key_; }
  PortRegistry& ports() { return *ports_; }

  // Runs fn with the calling thread inside this namespace.
  absl::Status RunIn(const std::function<absl::Status()>& fn);

  // True if `addr` is a local address of this namespace (what the kernel's
  // TCP transport accepts in bind: rds_tcp_laddr_check).
  bool IsLocalAddress(const RdsAddr& addr);
  // The same, remembered per address (for the send path).
  bool IsLocalAddressCached(const RdsAddr& addr);

 private:
  NetNs(NetNsKey key, int ns_fd, std::unique_ptr<PortRegistry> ports);
  static absl::StatusOr<std::shared_ptr<NetNs>> Intern(int ns_fd);

  NetNsKey key_;
  int ns_fd_;
  rds::Mutex local_mu_;
  struct LocalAnswer {
    RdsAddr addr;
    bool local;
  };
  absl::flat_hash_map<RdsAddr, std::unique_ptr<const LocalAnswer>> local_cache_
      ABSL_GUARDED_BY(local_mu_);
  std::atomic<const LocalAnswer*> last_local_{nullptr};  // an entry of local_cache_
  std::unique_ptr<PortRegistry> ports_;
};

}  // namespace rds

#endif  // RDS_ENGINE_NETNS_H_
