// engine/errors.cc — the errno <-> absl::Status mapping.
#include "engine/errors.h"

#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"

namespace rds {
namespace {

constexpr char kErrnoPayload[] = "rds-preload/errno";

struct Primary {
  int err;
  absl::StatusCode code;
};

// Each canonical code stands for exactly one errno, so these need no payload.
constexpr Primary kPrimary[] = {
    {EAGAIN, absl::StatusCode::kUnavailable},
    {EINVAL, absl::StatusCode::kInvalidArgument},
    {ETIMEDOUT, absl::StatusCode::kDeadlineExceeded},
    {EINTR, absl::StatusCode::kCancelled},
    {ENOTCONN, absl::StatusCode::kFailedPrecondition},
    {ENOBUFS, absl::StatusCode::kResourceExhausted},
    {EADDRINUSE, absl::StatusCode::kAlreadyExists},
    {EADDRNOTAVAIL, absl::StatusCode::kNotFound},
    {EOPNOTSUPP, absl::StatusCode::kUnimplemented},
    {EMSGSIZE, absl::StatusCode::kOutOfRange},
    {EBADF, absl::StatusCode::kAborted},
    {EFAULT, absl::StatusCode::kDataLoss},
    {EPERM, absl::StatusCode::kPermissionDenied},
    {EIO, absl::StatusCode::kInternal},
};

}  // namespace

absl::Status RdsError(int err) {
  for (const Primary& p : kPrimary) {
    if (p.err == err) return absl::Status(p.code, "");
  }
  absl::Status s(absl::StatusCode::kUnknown, strerror(err));
  s.SetPayload(kErrnoPayload, absl::Cord(std::to_string(err)));
  return s;
}

int ErrnoOf(const absl::Status& status) {
  if (status.ok()) return 0;
  if (absl::optional<absl::Cord> p = status.GetPayload(kErrnoPayload)) {
    int err = 0;
    if (absl::SimpleAtoi(std::string(*p), &err)) return err;
  }
  for (const Primary& p : kPrimary) {
    if (p.code == status.code()) return p.err;
  }
  return EIO;
}

}  // namespace rds
