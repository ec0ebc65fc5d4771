// engine/registry.h — the host registry: one RDS port space per network
// namespace, shared by every process using the shim.
//
// Kernel RDS has one bind table per netns; a user-space RDS has one engine per
// process, so the table is kept in files under RDS_PRELOAD_RUNDIR with POSIX
// record locks (kernel-rds.md §A.2 rules; DESIGN.md §4):
//   ns-<dev>-<ino>/ports.<address>   byte p locked (open-file lock) by the process bound to
//                                     port p, or by the holders of a shared socket (share.h);
//                                     the file's bytes hold each port's generation and socket
//   ns-<dev>-<ino>/bindgen           a shared counter bumped by every bind/unbind
//   sockets.lock                      byte <id> locked by the process owning socket <id>
//   engine-<pid>.sock                 each engine's Unix listener
// A lock dies with its process (crash-safe). A socket's lock is a POSIX
// record lock: F_GETLK names its holder, and it is not inherited by fork. A
// port's is an open-file lock (closing another descriptor of the file does
// not drop it); the socket recorded for the port names its owner. Locks never
// conflict within one process, so callers check their own process's tables
// first.
//
// Thread-safety: safe for concurrent use.
#ifndef RDS_ENGINE_REGISTRY_H_
#define RDS_ENGINE_REGISTRY_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/sync.h"
#include "engine/addr.h"

namespace rds {

// Identity of a network namespace (the st_dev/st_ino of its nsfs inode).
struct NetNsKey {
  uint64_t dev = 0;
  uint64_t ino = 0;
  friend bool operator==(const NetNsKey&, const NetNsKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const NetNsKey& k) {
    return H::combine(std::move(h), k.dev, k.ino);
  }
};

// Host-wide paths and socket ownership.
class HostRegistry {
 public:
  // The process-wide instance, rooted at the configured run directory.
  static HostRegistry& Get();

  const std::string& rundir() const { return rundir_; }
  std::string EngineSocketPath(pid_t pid) const;
  // The Unix socket paths of every other engine registered on this host.
  std::vector<std::string> OtherEngineSockets() const;
  // The same with each engine's pid.
  std::vector<std::pair<pid_t, std::string>> OtherEngines() const;
  // Removes the folders of namespaces no process uses (deleted namespaces',
  // typically): a PortRegistry holds a shared flock on its folder's bindgen
  // file for its lifetime, so a folder whose bindgen can be locked exclusively
  // has no user, and a new user re-creates it. Returns how many went.
  int PruneUnusedNamespaceDirs() const;

  // Socket ownership (DESIGN.md §2.4).
  absl::Status ClaimSocket(uint64_t id);      // EBUSY-like failure if another process owns it
  void ReleaseSocket(uint64_t id);
  pid_t SocketOwner(uint64_t id);             // 0 if unowned or owned by this process

  // Fork child: forget the inherited lock fd (its locks belong to the parent).
  void ResetAfterFork();

  // Ensures a directory exists (mode 1777 for shared directories).
  static absl::Status EnsureDir(const std::string& path);
  // Opens (creating, mode 0666) a file every engine of the host shares; an
  // internal fd, or -1 with errno.
  static int OpenSharedFile(const std::string& path);

 private:
  friend rds::Mutex& HostRegistryMutex();
  explicit HostRegistry(std::string rundir);
  std::string rundir_;
  int sockets_fd_ = -1;  // sockets.lock; opened on first use
  rds::Mutex mu_;
  int SocketsFd();
};

// PortRegistry::Owner of a port whose socket is parked (engine/share.h): no
// process receives for it until one of the socket's holders takes it over.
inline constexpr pid_t kParkedPortOwner = -1;

// The port space of one network namespace.
class PortRegistry {
 public:
  static absl::StatusOr<std::unique_ptr<PortRegistry>> Open(const std::string& rundir,
                                                             NetNsKey key);
  ~PortRegistry();

  // Takes (addr, port) for socket `id` of this process. EADDRINUSE if another
  // process has it.
  absl::Status Lock(const RdsAddr& addr, uint16_t port, uint64_t id);
  void Unlock(const RdsAddr& addr, uint16_t port);
  // A socket other processes hold (engine/share.h): the port's lock moves
  // from this process to a new open file description, returned (an internal
  // fd, to be passed on: the lock lives while any process holds it), with the
  // port taken at every step. `id` is recorded as the port's socket, whose
  // owner Owner() then names.
  absl::StatusOr<int> ParkPort(const RdsAddr& addr, uint16_t port, uint64_t id);
  // Records the socket whose owner Owner() names for a taken port; kNoSocket
  // while a parked socket has no owner (Owner() answers kParkedPortOwner).
  void SetPortSocket(const RdsAddr& addr, uint16_t port, uint64_t id);
  static constexpr uint64_t kNoSocket = 0;  // socket ids are never 0
  // The pid holding (addr, port), 0 if none, kParkedPortOwner if its socket is
  // parked (own locks are invisible).
  absl::StatusOr<pid_t> Owner(const RdsAddr& addr, uint16_t port);

  uint64_t BindGeneration() const { return gen_->load(std::memory_order_acquire); }
  void BumpBindGeneration() { gen_->fetch_add(1, std::memory_order_acq_rel); }

  // Per port: bumped by every bind and unbind of (addr, port), host-wide.
  // A message stamped with it at sendmsg() is only delivered to the binding
  // that existed then (DESIGN.md §3.4). Kept in the ports file itself (the
  // file's bytes; its locks are separate).
  absl::StatusOr<uint32_t> PortGeneration(const RdsAddr& addr, uint16_t port);
  void BumpPortGeneration(const RdsAddr& addr, uint16_t port);

  const std::string& dir() const { return dir_; }

 private:
  PortRegistry(std::string dir, int gen_fd, std::atomic<uint64_t>* gen);
  struct AddrFile {
    int fd = -1;
    std::atomic<uint32_t>* port_gens = nullptr;  // 65536 counters, mmap'd
    std::atomic<uint64_t>* port_sockets = nullptr;  // 65536 socket ids, after them
    size_t mapped = 0;
  };
  absl::StatusOr<AddrFile> File(const RdsAddr& addr);
  absl::StatusOr<int> PortsFd(const RdsAddr& addr);
  // The counters of the address looked up last, read without the lock: every
  // sendmsg to a same-host port reads its generation, twice (docs/perf/history.md §9.4).
  // Mappings and these entries live as long as the registry.
  struct RecentGens {
    RdsAddr addr;
    std::atomic<uint32_t>* gens;
  };
  std::atomic<const RecentGens*> recent_{nullptr};
  absl::flat_hash_map<RdsAddr, std::unique_ptr<RecentGens>> recents_ ABSL_GUARDED_BY(mu_);

  std::string dir_;
  int gen_fd_;
  std::atomic<uint64_t>* gen_;  // mmap'd, shared with every process in the netns
  rds::Mutex mu_;
  absl::flat_hash_map<RdsAddr, AddrFile> files_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rds

#endif  // RDS_ENGINE_REGISTRY_H_
