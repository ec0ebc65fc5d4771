// engine/errors.h — RDS errors as absl::Status values.
//
// The engine decides *which* errno a call fails with (that is RDS semantics);
// the preload layer turns a Status into -1/errno in exactly one place
// (preload/errno_policy.cc). RdsError(e) maps the errnos RDS calls return most
// often to a canonical code one-to-one (no allocation: safe on hot paths);
// rarer ones carry the errno as a payload.
//
// Thread-safety: stateless functions, safe for concurrent use.
#ifndef RDS_ENGINE_ERRORS_H_
#define RDS_ENGINE_ERRORS_H_

#include "absl/status/status.h"

namespace rds {

// A Status meaning "the call fails with errno `err`".
absl::Status RdsError(int err);

// The errno a Status stands for. OK → 0. Statuses not made by RdsError map
// from their canonical code (internal failures become EIO).
int ErrnoOf(const absl::Status& status);

}  // namespace rds

#endif  // RDS_ENGINE_ERRORS_H_
