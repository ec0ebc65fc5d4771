// engine/signals.cc — the restart policy, read from the signal dispositions.
#include "engine/signals.h"

#include <signal.h>

#include <atomic>
#include <cstdint>

namespace rds::signals {
namespace {

// Even: the cached policy may be stale. The generation counts changes.
std::atomic<uint64_t> g_generation{1};
std::atomic<uint64_t> g_cached_generation{0};
std::atomic<Interrupted> g_cached{Interrupted::kMixed};

// Signals the kernel raises on the thread that faults. A thread blocked in
// epoll_pwait executes nothing that could fault, so these reach it only
// through kill(); the programs that catch them (sanitizers, crash reporters,
// the shim's own RDS_PRELOAD_BACKTRACE handlers, managed runtimes) install
// them without SA_RESTART and never mean to interrupt waits with them.
bool RaisedByFaults(int sig) {
  switch (sig) {
    case SIGSEGV: case SIGBUS: case SIGFPE: case SIGILL: case SIGTRAP: case SIGSYS: case SIGABRT:
      return true;
    default:
      return false;
  }
}

Interrupted Read() {
  bool any_restart = false, any_plain = false;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (RaisedByFaults(sig)) continue;
    struct sigaction sa;
    // glibc refuses its own internal signals (EINVAL); they are not the application's.
    if (sigaction(sig, nullptr, &sa) != 0) continue;
    if (!(sa.sa_flags & SA_SIGINFO) && (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN)) {
      continue;
    }
    (sa.sa_flags & SA_RESTART ? any_restart : any_plain) = true;
  }
  if (any_restart && any_plain) return Interrupted::kMixed;
  return any_plain ? Interrupted::kEintr : Interrupted::kRestart;
}

}  // namespace

Interrupted Policy() {
  const uint64_t gen = g_generation.load(std::memory_order_acquire);
  if (g_cached_generation.load(std::memory_order_acquire) == gen) {
    return g_cached.load(std::memory_order_relaxed);
  }
  // A change during the read bumps the generation again: the next call re-reads.
  Interrupted p = Read();
  g_cached.store(p, std::memory_order_relaxed);
  g_cached_generation.store(gen, std::memory_order_release);
  return p;
}

void NoteDispositionChange() { g_generation.fetch_add(1, std::memory_order_acq_rel); }

}  // namespace rds::signals
