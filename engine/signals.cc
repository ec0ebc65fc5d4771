// engine/signals.cc — the restart policy, read from the signal dispositions.
#include "engine/signals.h"

#include <signal.h>

#include <atomic>
#include <cstdint>

#include "engine/sys.h"

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
    // glibc's own internal signals (32 .. SIGRTMIN-1, which its sigaction
    // refuses) are not the application's.
    if (sig >= 32 && sig < SIGRTMIN) continue;
    // Read from the kernel: the interposed sigaction is the application's call.
    sys::SignalDisposition sa;
    if (sys::GetSignalDisposition(sig, &sa) != 0) continue;
    const void* dfl = reinterpret_cast<void*>(SIG_DFL);
    const void* ign = reinterpret_cast<void*>(SIG_IGN);
    if (!(sa.flags & SA_SIGINFO) && (sa.handler == dfl || sa.handler == ign)) continue;
    (sa.flags & SA_RESTART ? any_restart : any_plain) = true;
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
