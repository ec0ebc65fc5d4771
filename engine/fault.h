// engine/fault.h — fault injection for tests (RDS_PRELOAD_FAULT_*), off by
// default: reset links after N messages or at random, fail or delay
// connection attempts, cut a link in the middle of a message. Every decision
// is logged at debug level and counted (shim_fault_injected).
//
// Thread-safety: engine thread only.
#ifndef RDS_ENGINE_FAULT_H_
#define RDS_ENGINE_FAULT_H_

#include <cstdint>

#include "absl/time/time.h"

namespace rds::fault {

// True if any fault is configured (cheap check for hot paths).
bool Enabled();
// A link received its `count`-th message: reset it now?
bool ResetAfterMessage(uint64_t count);
// Fail this connection attempt?
bool FailConnect();
// Delay before each connection attempt.
absl::Duration ConnectDelay();
// Cut the link in the middle of the message about to be written?
bool CutMidMessage();

}  // namespace rds::fault

#endif  // RDS_ENGINE_FAULT_H_
