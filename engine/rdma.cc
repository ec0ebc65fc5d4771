// engine/rdma.h: memory registration per socket.
#include "engine/rdma.h"

#include <linux/rds.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/log.h"
#include "engine/stats.h"
#include "engine/usercopy.h"
#include "transports/transport.h"

namespace rds::rdma {
namespace {

uint64_t PageSize() {
  static const uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// rds_pages_in_vec: 0 for an empty, wrapping or over-4-GiB vector.
uint64_t PagesInVec(const rds_iovec& v) {
  if (v.addr + v.bytes <= v.addr || v.bytes > UINT32_MAX) return 0;
  const uint64_t page = PageSize();
  return (v.addr + v.bytes + page - 1) / page - v.addr / page;
}

// can_do_mlock: a memory lock limit above zero, or the capability to exceed it.
bool CanLockMemory() {
  rlimit r{};
  if (getrlimit(RLIMIT_MEMLOCK, &r) == 0 && r.rlim_cur != 0) return true;
  return geteuid() == 0;
}

// __rds_rdma_map for GET_MR and GET_MR_FOR_DEST (whose destination the
// kernel ignores too).
absl::StatusOr<uint64_t> GetMr(RdsSocket& rs, const rds_get_mr_args& args) {
  std::shared_ptr<NetNs> ns;
  RdsAddr laddr;
  {
    rds::MutexLock lock(&rs.mu);
    if (!rs.bound || rs.transport == kTransNone) return RdsError(ENOTCONN);
    if (rs.transport != kTransIb) return RdsError(EOPNOTSUPP);  // TCP has no get_mr
    ns = rs.ns;
    laddr = rs.bound->addr;
  }
  const uint64_t page = PageSize();
  const uint64_t end = args.vec.addr + args.vec.bytes;
  if (end < args.vec.addr || ((end + page - 1) & ~(page - 1)) < end) return RdsError(EINVAL);
  if (!CanLockMemory()) return RdsError(EPERM);
  const uint64_t pages = PagesInVec(args.vec);
  if (pages == 0) return RdsError(EINVAL);
  if (pages - 1 > wire::kMaxMessageSize / page) return RdsError(EMSGSIZE);
  absl::StatusOr<std::unique_ptr<MemoryRegion>> made = Engine::Get().RegisterMemory(
      ns, laddr, reinterpret_cast<void*>(args.vec.addr), args.vec.bytes, /*remote_access=*/true);
  if (!made.ok()) {
    log::Debug("RDS_GET_MR of %llu bytes: %s", static_cast<unsigned long long>(args.vec.bytes),
               made.status().ToString());
    const int err = ErrnoOf(made.status());
    return RdsError(err == EIO ? ENOMEM : err);
  }
  std::shared_ptr<MemoryRegion> region = *std::move(made);
  const uint64_t cookie = uint64_t{region->rkey()} | ((args.vec.addr & (page - 1)) << 32);
  if (args.cookie_addr != 0) {
    if (absl::Status s = usercopy::ToUser(reinterpret_cast<void*>(args.cookie_addr), &cookie,
                                          sizeof cookie);
        !s.ok()) {
      return RdsError(EFAULT);  // the region goes again
    }
  }
  const uint32_t rkey = region->rkey();
  rds::MutexLock lock(&rs.mu);
  rs.rdma_keys[rkey] = RdsSocket::RdmaKey{std::move(region), (args.flags & RDS_RDMA_USE_ONCE) != 0};
  stats::Inc(stats::kIbRdmaMrAlloc);
  return cookie;
}

// rds_free_mr: cookie 0 flushes the transport's unused regions (the shim
// keeps none); otherwise the socket's region of that rkey goes now.
absl::Status FreeMr(RdsSocket& rs, const rds_free_mr_args& args) {
  std::shared_ptr<MemoryRegion> region;  // deregistered after the lock
  rds::MutexLock lock(&rs.mu);
  if (args.cookie == 0) return rs.transport == kTransIb ? absl::OkStatus() : RdsError(EINVAL);
  auto it = rs.rdma_keys.find(static_cast<uint32_t>(args.cookie));
  if (it == rs.rdma_keys.end()) return RdsError(EINVAL);
  region = std::move(it->second.region);
  rs.rdma_keys.erase(it);
  stats::Inc(stats::kIbRdmaMrFree);
  return absl::OkStatus();
}

}  // namespace

absl::Status SetMemoryOption(RdsSocket& rs, int name, const void* optval, socklen_t optlen) {
  if (name == RDS_FREE_MR) {
    rds_free_mr_args args;
    if (optlen != sizeof args) return RdsError(EINVAL);
    if (absl::Status s = usercopy::FromUser(&args, optval, sizeof args); !s.ok()) return s;
    return FreeMr(rs, args);
  }
  rds_get_mr_args args;
  if (name == RDS_GET_MR) {
    if (optlen != sizeof args) return RdsError(EINVAL);
    if (absl::Status s = usercopy::FromUser(&args, optval, sizeof args); !s.ok()) return s;
  } else {
    rds_get_mr_for_dest_args dest;
    if (optlen != sizeof dest) return RdsError(EINVAL);
    if (absl::Status s = usercopy::FromUser(&dest, optval, sizeof dest); !s.ok()) return s;
    args.vec = dest.vec;
    args.cookie_addr = dest.cookie_addr;
    args.flags = dest.flags;
  }
  return GetMr(rs, args).status();
}

absl::StatusOr<uint64_t> MapForMessage(RdsSocket& rs, const rds_get_mr_args& args) {
  return GetMr(rs, args);
}

absl::StatusOr<std::shared_ptr<RdmaOp>> MakeOp(RdsSocket& rs, const rds_rdma_args& args) {
  auto op = std::make_shared<RdmaOp>();
  std::shared_ptr<NetNs> ns;
  RdsAddr laddr;
  {
    rds::MutexLock lock(&rs.mu);
    if (!rs.bound) return RdsError(ENOTCONN);
    ns = rs.ns;
    laddr = rs.bound->addr;
    op->recverr = rs.recverr;
  }
  // (nr_local and each vector's shape were checked by rds_rm_size's walk.)
  std::vector<rds_iovec> local(args.nr_local);
  if (absl::Status s = usercopy::FromUser(local.data(),
                                          reinterpret_cast<const void*>(args.local_vec_addr),
                                          local.size() * sizeof(rds_iovec));
      !s.ok()) {
    return s;
  }
  uint64_t total = 0;
  for (const rds_iovec& v : local) total += v.bytes;
  if (total > args.remote_vec.bytes) return RdsError(EINVAL);
  for (const rds_iovec& v : local) {
    absl::StatusOr<std::unique_ptr<MemoryRegion>> made = Engine::Get().RegisterMemory(
        ns, laddr, reinterpret_cast<void*>(v.addr), v.bytes, /*remote_access=*/false);
    if (!made.ok()) {
      log::Debug("RDMA operation's local memory: %s", made.status().ToString());
      const int err = ErrnoOf(made.status());
      return RdsError(err == EIO ? ENOMEM : err);
    }
    op->local.push_back({v.addr, static_cast<uint32_t>(v.bytes), (*made)->lkey()});
    op->regions.push_back(*std::move(made));
  }
  op->write = (args.flags & RDS_RDMA_READWRITE) != 0;
  op->fence = (args.flags & RDS_RDMA_FENCE) != 0;
  op->notify = (args.flags & RDS_RDMA_NOTIFY_ME) != 0;
  op->token = args.user_token;
  op->rkey = static_cast<uint32_t>(args.cookie);
  op->remote_addr = args.remote_vec.addr + (args.cookie >> 32);
  op->socket = rs.weak_from_this();
  return op;
}

absl::StatusOr<std::shared_ptr<MemoryRegion>> DestRegion(RdsSocket& rs, uint64_t cookie) {
  rds::MutexLock lock(&rs.mu);
  auto it = rs.rdma_keys.find(static_cast<uint32_t>(cookie));
  if (it == rs.rdma_keys.end()) return RdsError(EINVAL);
  return it->second.region;
}

void OnArrivalLocked(RdsSocket& rs, const wire::ExtHeaders& ext) {
  if (!ext.rdma_rkey) return;
  auto it = rs.rdma_keys.find(*ext.rdma_rkey);
  if (it == rs.rdma_keys.end()) return;  // unknown keys are ignored
  stats::Inc(stats::kIbRdmaMrUsed);
  if (!it->second.use_once) return;
  stats::Inc(stats::kIbRdmaMrFree);
  // Deregistration is a system call; rare (USE_ONCE regions), and the
  // region may still be held by a message offering it.
  rs.rdma_keys.erase(it);
}

void DropKeys(RdsSocket& rs) {
  absl::flat_hash_map<uint32_t, RdsSocket::RdmaKey> keys;  // deregistered after the lock
  rds::MutexLock lock(&rs.mu);
  keys.swap(rs.rdma_keys);
  stats::Add(stats::kIbRdmaMrFree, keys.size());
}

}  // namespace rds::rdma

namespace rds {

void RdmaOp::Finish(int status) {
  if (finished.exchange(true)) return;
  if (!notify && !(recverr && status != RDS_RDMA_SUCCESS)) return;
  std::shared_ptr<RdsSocket> rs = socket.lock();
  if (!rs) return;
  rds::MutexLock lock(&rs->mu);
  if (rs->released) return;
  rs->rdma_notify.push_back({token, status});
  rs->NotifyLocked(/*arrival=*/true);
}

}  // namespace rds
