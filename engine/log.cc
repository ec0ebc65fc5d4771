// engine/log.cc — log output through raw system calls.
#include "engine/log.h"

#include <unistd.h>

#include <time.h>

#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "conf/settings.h"
#include "engine/sys.h"

namespace rds::log {
namespace {

constexpr const char* kNames[] = {"", "error", "warn", "info", "debug", "trace"};

// The output fd, resolved on first use; -1 means "not yet".
std::atomic<int> fd{-1};

int OutputFd() {
  int f = fd.load(std::memory_order_acquire);
  if (f >= 0) return f;
  const std::string& path = conf::Get().log_file;
  int chosen = 2;
  if (!path.empty()) {
    std::string p = absl::StrReplaceAll(path, {{"%p", std::to_string(getpid())}});
    int opened = sys::Open(p.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (opened >= 0) chosen = sys::MakeInternal(opened);
  }
  int expected = -1;
  if (!fd.compare_exchange_strong(expected, chosen) && chosen != 2) {
    sys::CloseInternal(chosen);
    return expected;
  }
  return chosen;
}

}  // namespace

void ResetAfterFork() { fd.store(-1); }

bool Enabled(Level level) {
  return static_cast<int64_t>(level) <= conf::Get().log_level;
}

void Emit(Level level, const std::string& text) {
  // With debug output on, each line says when (wall clock, microseconds):
  // what a debug log is read for is usually an order of events.
  std::string when;
  if (Enabled(Level::kDebug)) {
    timespec ts = {};
    clock_gettime(CLOCK_REALTIME, &ts);
    when = absl::StrFormat("%d.%06d ", static_cast<int64_t>(ts.tv_sec) % 100000,
                           static_cast<int>(ts.tv_nsec / 1000));
  }
  std::string line = absl::StrCat(when, "rds-preload[", getpid(), "] ",
                                  kNames[static_cast<int>(level)], ": ", text, "\n");
  sys::WriteAll(OutputFd(), line.data(), line.size());
}

}  // namespace rds::log
