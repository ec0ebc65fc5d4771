// engine/usercopy.h — copying to and from application memory without
// crashing on bad pointers.
//
// The kernel answers an invalid user pointer with EFAULT; a library doing a
// plain memcpy would crash the application instead. Copies here go through
// process_vm_readv/writev on the calling process (the kernel checks the
// range and fails with EFAULT) the first time a range is seen; ranges that
// proved valid are remembered per thread, so the buffers a program reuses
// are then copied with memcpy at full speed. Where the kernel refuses those
// calls (seccomp profiles of some containers), copies fall back to memcpy.
//
// Thread-safety: safe for concurrent use (the cache is per thread).
#ifndef RDS_ENGINE_USERCOPY_H_
#define RDS_ENGINE_USERCOPY_H_

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstddef>

#include "absl/status/status.h"

namespace rds::usercopy {

// Copies `n` bytes from application memory `src` into `dst`. EFAULT if `src`
// is not readable.
absl::Status FromUser(void* dst, const void* src, size_t n);
// Copies `n` bytes from `src` into application memory `dst`. EFAULT if `dst`
// is not writable.
absl::Status ToUser(void* dst, const void* src, size_t n);
// Gathers up to `n` bytes from an application iovec array into `dst`.
absl::Status FromUserIov(void* dst, const struct iovec* iov, size_t iovcnt, size_t n);
// Scatters `n` bytes of `src` into an application iovec array.
absl::Status ToUserIov(const struct iovec* iov, size_t iovcnt, const void* src, size_t n);

// Reads an application sockaddr as the kernel's move_addr_to_kernel does:
// len > sizeof(sockaddr_storage) (or negative) → EINVAL, unreadable → EFAULT.
// The unused tail of `out` is zeroed.
absl::Status SockaddrFromUser(const struct sockaddr* addr, socklen_t len,
                              struct sockaddr_storage* out);
// Writes a sockaddr back as move_addr_to_user does: reads *ulen (EFAULT),
// negative → EINVAL, copies min(*ulen, klen) bytes, stores klen in *ulen.
absl::Status SockaddrToUser(const struct sockaddr_storage& kaddr, socklen_t klen,
                            struct sockaddr* uaddr, socklen_t* ulen);

}  // namespace rds::usercopy

#endif  // RDS_ENGINE_USERCOPY_H_
