// engine/netns.cc — namespace handles, switching and address checks.
#include "engine/netns.h"
#include "engine/abandon.h"

#include <linux/sockios.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "engine/sync.h"
#include "conf/settings.h"
#include "engine/fork.h"
#include "engine/log.h"
#include "engine/sys.h"

namespace rds {
namespace {

rds::Mutex table_mu(absl::kConstInit);
absl::flat_hash_map<NetNsKey, std::shared_ptr<NetNs>>* table ABSL_GUARDED_BY(table_mu) = nullptr;

absl::StatusOr<NetNsKey> KeyOf(int ns_fd) {
  struct stat st;
  if (fstat(ns_fd, &st) != 0) return absl::InternalError("fstat(netns)");
  return NetNsKey{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

absl::StatusOr<NetNsKey> CurrentKey() {
  struct stat st;
  if (sys::Stat("/proc/thread-self/ns/net", &st) != 0) {
    return absl::InternalError(absl::StrFormat("stat /proc/thread-self/ns/net: %s", strerror(errno)));
  }
  return NetNsKey{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

}  // namespace

rds::Mutex& NetNsTableMutex() { return table_mu; }

NetNs::NetNs(NetNsKey key, int ns_fd, std::unique_ptr<PortRegistry> ports)
    : key_(key), ns_fd_(ns_fd), ports_(std::move(ports)) {}

NetNs::~NetNs() { sys::CloseInternal(ns_fd_); }

absl::StatusOr<std::shared_ptr<NetNs>> NetNs::Intern(int ns_fd) {
  absl::StatusOr<NetNsKey> key = KeyOf(ns_fd);
  if (!key.ok()) {
    sys::Close(ns_fd);
    return key.status();
  }
  rds::MutexLock lock(&table_mu);
  if (table == nullptr) table = new absl::flat_hash_map<NetNsKey, std::shared_ptr<NetNs>>();
  auto it = table->find(*key);
  if (it != table->end()) {
    sys::Close(ns_fd);
    return it->second;
  }
  absl::StatusOr<std::unique_ptr<PortRegistry>> ports =
      PortRegistry::Open(conf::Get().rundir, *key);
  if (!ports.ok()) {
    sys::Close(ns_fd);
    return ports.status();
  }
  auto ns = std::shared_ptr<NetNs>(new NetNs(*key, sys::MakeInternal(ns_fd), std::move(*ports)));
  (*table)[*key] = ns;
  return ns;
}

absl::StatusOr<std::shared_ptr<NetNs>> NetNs::OfCurrentThread() {
  absl::StatusOr<NetNsKey> key = CurrentKey();
  if (!key.ok()) return key.status();
  {
    rds::MutexLock lock(&table_mu);
    if (table != nullptr) {
      auto it = table->find(*key);
      if (it != table->end()) return it->second;
    }
  }
  int fd = sys::Open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("open /proc/thread-self/ns/net");
  return Intern(fd);
}

absl::StatusOr<std::shared_ptr<NetNs>> NetNs::OfSocketFd(int fd) {
  int ns_fd = sys::Ioctl(fd, SIOCGSKNS, nullptr);
  if (ns_fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrFormat("SIOCGSKNS: %s (needs CAP_NET_ADMIN over the socket's namespace)",
                        strerror(errno)));
  }
  return Intern(ns_fd);
}

void NetNs::ResetAfterFork() {
  // The child keeps (leaks) the parent's objects: their locks may be held by
  // threads that do not exist in the child.
  Abandon(table);
  table = nullptr;
}

absl::Status NetNs::RunIn(const std::function<absl::Status()>& fn) {
  absl::StatusOr<NetNsKey> cur = CurrentKey();
  if (cur.ok() && *cur == key_) return fn();
  int saved = sys::Open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC, 0);
  if (saved < 0) return absl::InternalError("open /proc/thread-self/ns/net");
  if (sys::Setns(ns_fd_, CLONE_NEWNET) != 0) {
    int err = errno;
    sys::Close(saved);
    return absl::PermissionDeniedError(
        absl::StrFormat("cannot enter network namespace: %s", strerror(err)));
  }
  absl::Status s = fn();
  if (sys::Setns(saved, CLONE_NEWNET) != 0) {
    log::Error("cannot return to the original network namespace: %s", strerror(errno));
  }
  sys::Close(saved);
  return s;
}

bool NetNs::IsLocalAddressCached(const RdsAddr& addr) {
  // A sender asks about the same address message after message: the last
  // answer is read without the lock (answers are never freed or changed).
  if (const LocalAnswer* last = last_local_.load(std::memory_order_acquire);
      last != nullptr && last->addr == addr) {
    return last->local;
  }
  {
    rds::ReaderMutexLock lock(&local_mu_);
    auto it = local_cache_.find(addr);
    if (it != local_cache_.end()) {
      last_local_.store(it->second.get(), std::memory_order_release);
      return it->second->local;
    }
  }
  bool local = IsLocalAddress(addr);
  rds::MutexLock lock(&local_mu_);
  auto& slot = local_cache_[addr];
  if (!slot) slot = std::make_unique<LocalAnswer>(LocalAnswer{addr, local});
  last_local_.store(slot.get(), std::memory_order_release);
  return slot->local;
}

bool NetNs::IsLocalAddress(const RdsAddr& addr) {
  bool local = false;
  absl::Status s = RunIn([&]() -> absl::Status {
    sockaddr_storage ss;
    socklen_t len = ToSockaddr(addr, 0, &ss);
    int fd = sys::Socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError("socket");
    local = sys::Bind(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0;
    sys::Close(fd);
    return absl::OkStatus();
  });
  if (!s.ok()) log::Warn("address check for %s failed: %s", addr.ToString(), s.ToString());
  return local;
}

}  // namespace rds
