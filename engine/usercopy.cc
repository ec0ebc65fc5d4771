// engine/usercopy.cc — EFAULT-safe copies with a per-thread cache of good ranges.
#include "engine/usercopy.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "engine/errors.h"

namespace rds::usercopy {
namespace {

constexpr uintptr_t kPage = 4096;

struct Range {
  uintptr_t begin = 0, end = 0;
  bool writable = false;
};

// A few recently proven ranges, page aligned.
struct Cache {
  static constexpr int kSize = 8;
  Range ranges[kSize];
  int next = 0;

  bool Covers(uintptr_t b, uintptr_t e, bool write) const {
    for (const Range& r : ranges) {
      if (r.begin <= b && e <= r.end && (r.writable || !write)) return true;
    }
    return false;
  }
  void Add(uintptr_t b, uintptr_t e, bool write) {
    ranges[next] = {b & ~(kPage - 1), (e + kPage - 1) & ~(kPage - 1), write};
    next = (next + 1) % kSize;
  }
};

thread_local Cache cache;

// -1: the kernel refuses process_vm_* here (fall back to memcpy).
ssize_t VmCopy(bool to_user, const struct iovec* local, size_t nlocal, const struct iovec* remote,
               size_t nremote) {
  long r = syscall(to_user ? SYS_process_vm_writev : SYS_process_vm_readv, getpid(), local,
                   nlocal, remote, nremote, 0);
  return r;
}

absl::Status Copy(bool to_user, void* ours, const struct iovec* user, size_t usercnt, size_t n) {
  if (n == 0) return absl::OkStatus();
  // Fast path: every user segment inside a proven range.
  bool all_cached = true;
  size_t left = n;
  for (size_t i = 0; i < usercnt && left > 0; ++i) {
    size_t len = std::min(left, user[i].iov_len);
    auto b = reinterpret_cast<uintptr_t>(user[i].iov_base);
    if (len && (b + len < b || !cache.Covers(b, b + len, to_user))) {
      all_cached = false;
      break;
    }
    left -= len;
  }
  if (!all_cached) {
    struct iovec local = {ours, n};
    ssize_t r = VmCopy(to_user, &local, 1, user, usercnt);
    if (r >= 0) {
      if (static_cast<size_t>(r) < n) return RdsError(EFAULT);
      left = n;
      for (size_t i = 0; i < usercnt && left > 0; ++i) {
        size_t len = std::min(left, user[i].iov_len);
        auto b = reinterpret_cast<uintptr_t>(user[i].iov_base);
        if (len) cache.Add(b, b + len, to_user);
        left -= len;
      }
      return absl::OkStatus();
    }
    if (errno == EFAULT) return RdsError(EFAULT);
    // EPERM/ENOSYS: process_vm_* unavailable; trust the pointers.
  }
  auto* p = static_cast<uint8_t*>(ours);
  left = n;
  for (size_t i = 0; i < usercnt && left > 0; ++i) {
    size_t len = std::min(left, user[i].iov_len);
    if (to_user) {
      std::memcpy(user[i].iov_base, p, len);
    } else {
      std::memcpy(p, user[i].iov_base, len);
    }
    p += len;
    left -= len;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FromUser(void* dst, const void* src, size_t n) {
  struct iovec u = {const_cast<void*>(src), n};
  return Copy(false, dst, &u, 1, n);
}

absl::Status ToUser(void* dst, const void* src, size_t n) {
  struct iovec u = {dst, n};
  return Copy(true, const_cast<void*>(src), &u, 1, n);
}

absl::Status FromUserIov(void* dst, const struct iovec* iov, size_t iovcnt, size_t n) {
  return Copy(false, dst, iov, iovcnt, n);
}

absl::Status ToUserIov(const struct iovec* iov, size_t iovcnt, const void* src, size_t n) {
  return Copy(true, const_cast<void*>(src), iov, iovcnt, n);
}

absl::Status SockaddrFromUser(const struct sockaddr* addr, socklen_t len,
                              struct sockaddr_storage* out) {
  std::memset(out, 0, sizeof(*out));
  if (static_cast<int>(len) < 0 || len > sizeof(*out)) return RdsError(EINVAL);
  if (len == 0) return absl::OkStatus();
  return FromUser(out, addr, len);
}

absl::Status SockaddrToUser(const struct sockaddr_storage& kaddr, socklen_t klen,
                            struct sockaddr* uaddr, socklen_t* ulen) {
  int len = 0;
  if (absl::Status s = FromUser(&len, ulen, sizeof(len)); !s.ok()) return s;
  if (len < 0) return RdsError(EINVAL);
  size_t n = std::min<size_t>(static_cast<size_t>(len), klen);
  if (n > 0) {
    if (absl::Status s = ToUser(uaddr, &kaddr, n); !s.ok()) return s;
  }
  int out = static_cast<int>(klen);
  return ToUser(ulen, &out, sizeof(out));
}

}  // namespace rds::usercopy
