// preload/signal_calls.cc — interposed sigaction and the signal() family.
//
// Each call goes straight to libc; one that may change a disposition tells
// engine/signals.h, whose restart-or-EINTR policy for driving threads depends
// on the dispositions. Nothing else about signals is touched: the shim never
// installs, wraps or defers the application's handlers.
#include <signal.h>

#include "engine/signals.h"
#include "preload/real.h"

extern "C" {

// glibc's alias of signal(); its headers declare it only for old X/Open modes.
sighandler_t bsd_signal(int sig, sighandler_t handler);

int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  int rc = rds::real::sigaction(sig, act, old);
  if (act != nullptr && rc == 0) rds::signals::NoteDispositionChange();
  return rc;
}

sighandler_t signal(int sig, sighandler_t handler) {
  sighandler_t prev = rds::real::signal(sig, handler);
  rds::signals::NoteDispositionChange();
  return prev;
}

sighandler_t sysv_signal(int sig, sighandler_t handler) {
  sighandler_t prev = rds::real::sysv_signal(sig, handler);
  rds::signals::NoteDispositionChange();
  return prev;
}

sighandler_t bsd_signal(int sig, sighandler_t handler) {
  sighandler_t prev = rds::real::signal(sig, handler);
  rds::signals::NoteDispositionChange();
  return prev;
}

sighandler_t sigset(int sig, sighandler_t handler) {
  sighandler_t prev = rds::real::sigset(sig, handler);
  rds::signals::NoteDispositionChange();
  return prev;
}

int siginterrupt(int sig, int flag) {
  int rc = rds::real::siginterrupt(sig, flag);
  rds::signals::NoteDispositionChange();
  return rc;
}

}  // extern "C"
