// engine/waiter.cc — per-thread eventfd sleeping with socket signal semantics.
#include "engine/waiter.h"

#include <poll.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <cstdint>

#include "absl/time/clock.h"
#include "engine/errors.h"
#include "engine/sys.h"

namespace rds {

Waiter& Waiter::ForThisThread() {
  thread_local Waiter waiter;
  return waiter;
}

Waiter::Waiter() : fd_(sys::MakeInternal(sys::EventFd(0, EFD_CLOEXEC))) {}

Waiter::~Waiter() { sys::CloseInternal(fd_); }

void Waiter::Reopen() { fd_ = sys::MakeInternal(sys::EventFd(0, EFD_CLOEXEC)); }

void Waiter::Wake() {
  uint64_t one = 1;
  sys::Write(fd_, &one, sizeof(one));
}

void Waiter::Reset() {
  struct pollfd p = {fd_, POLLIN, 0};
  if (sys::Poll(&p, 1, 0) == 1) {
    uint64_t v;
    sys::Read(fd_, &v, sizeof(v));
  }
}

absl::Status Waiter::Sleep(std::optional<absl::Time> deadline) {
  uint64_t v;
  if (!deadline) {
    // A blocking read: the kernel restarts it after an SA_RESTART handler.
    if (sys::Read(fd_, &v, sizeof(v)) < 0) {
      return errno == EINTR ? RdsError(EINTR) : RdsError(EIO);
    }
    return absl::OkStatus();
  }
  absl::Duration left = *deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return RdsError(ETIMEDOUT);
  int ms = static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))), 1 << 30));
  struct pollfd p = {fd_, POLLIN, 0};
  int r = sys::Poll(&p, 1, ms);
  if (r < 0) return errno == EINTR ? RdsError(EINTR) : RdsError(EIO);
  if (r == 0) return absl::Now() >= *deadline ? RdsError(ETIMEDOUT) : absl::OkStatus();
  sys::Read(fd_, &v, sizeof(v));
  return absl::OkStatus();
}

}  // namespace rds
