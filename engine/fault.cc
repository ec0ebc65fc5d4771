// engine/fault.cc — fault injection decisions.
#include "engine/fault.h"

#include "absl/random/random.h"
#include "conf/settings.h"
#include "engine/log.h"
#include "engine/stats.h"

namespace rds::fault {
namespace {

bool Roll(int64_t permille) {
  if (permille <= 0) return false;
  thread_local absl::BitGen gen;
  return absl::Uniform<int64_t>(gen, 0, 1000) < permille;
}

bool Injected(const char* what) {
  stats::Inc(stats::kShimFaultInjected);
  log::Debug("fault injected: %s", what);
  return true;
}

}  // namespace

bool Enabled() {
  const conf::Settings& s = conf::Get();
  return s.fault_reset_every || s.fault_reset_permille || s.fault_connect_fail_permille ||
         s.fault_connect_delay_ms || s.fault_cut_permille;
}

bool ResetAfterMessage(uint64_t count) {
  const conf::Settings& s = conf::Get();
  if (s.fault_reset_every > 0 && count % static_cast<uint64_t>(s.fault_reset_every) == 0) {
    return Injected("link reset after N messages");
  }
  if (Roll(s.fault_reset_permille)) return Injected("random link reset");
  return false;
}

bool FailConnect() {
  return Roll(conf::Get().fault_connect_fail_permille) && Injected("connection attempt failed");
}

absl::Duration ConnectDelay() { return absl::Milliseconds(conf::Get().fault_connect_delay_ms); }

bool CutMidMessage() {
  return Roll(conf::Get().fault_cut_permille) && Injected("link cut mid-message");
}

}  // namespace rds::fault
