// preload/crash.cc — libunwind backtraces on fatal signals, when asked.
#define UNW_LOCAL_ONLY
#include "preload/crash.h"

#include <libunwind.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <cstdio>

#include "conf/settings.h"
#include "engine/sys.h"

namespace rds::preload {
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

// Async-signal-safe: libunwind's local unwinding, snprintf into a stack
// buffer, raw writes.
void PrintBacktrace(int sig) {
  char line[512];
  int n = snprintf(line, sizeof(line), "rds-preload[%d]: fatal signal %d (%s); backtrace:\n",
                   getpid(), sig, strsignal(sig));
  sys::WriteAll(2, line, static_cast<size_t>(n));
  unw_context_t context;
  unw_cursor_t cursor;
  if (unw_getcontext(&context) != 0 || unw_init_local(&cursor, &context) != 0) return;
  for (int frame = 0; frame < 64 && unw_step(&cursor) > 0; ++frame) {
    unw_word_t ip = 0, offset = 0;
    unw_get_reg(&cursor, UNW_REG_IP, &ip);
    char name[256];
    if (unw_get_proc_name(&cursor, name, sizeof(name), &offset) != 0) strcpy(name, "??");
    n = snprintf(line, sizeof(line), "  #%-2d 0x%016lx %s+0x%lx\n", frame,
                 static_cast<unsigned long>(ip), name, static_cast<unsigned long>(offset));
    sys::WriteAll(2, line, static_cast<size_t>(n));
  }
}

void OnFatalSignal(int sig) {
  PrintBacktrace(sig);
  // SA_RESETHAND restored the default action: raise it again.
  raise(sig);
}

}  // namespace

void InstallCrashHandlersIfAsked() {
  if (!conf::Get().backtrace) return;
  for (int sig : kSignals) {
    struct sigaction current;
    if (sigaction(sig, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) continue;
    struct sigaction sa = {};
    sa.sa_handler = OnFatalSignal;
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

}  // namespace rds::preload
