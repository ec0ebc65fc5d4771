// engine/signals.h — whether a signal that interrupts a wait restarts it.
//
// Kernel RDS's waits return -ERESTARTSYS (waiter.h): after a handler installed
// with SA_RESTART the call goes on, otherwise it fails with EINTR. A thread
// that waits by reading its Waiter's timerfd gets exactly that from the
// kernel. A thread that drives the event loop waits in epoll_pwait, which
// always returns EINTR after a handler and does not say which signal ran, so
// the answer must be known before it waits: from the process's dispositions.
// If every caught signal has SA_RESTART (or none is caught) the wait restarts;
// if none has, it ends with EINTR; if both kinds exist, the thread must not
// drive (it sleeps on its timerfd, which is exact). Fault signals (SIGSEGV,
// SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT) do not count: a thread
// blocked in a wait cannot raise them, and their handlers (sanitizers, crash
// reporters) rarely have SA_RESTART.
//
// The dispositions are read (one sigaction() per signal) only after they may
// have changed: the preload layer reports every sigaction/signal-family call.
// A program that installs handlers with raw system calls is not seen.
//
// Thread-safety: safe from any thread.
#ifndef RDS_ENGINE_SIGNALS_H_
#define RDS_ENGINE_SIGNALS_H_

namespace rds::signals {

enum class Interrupted {
  kRestart,  // every caught signal has SA_RESTART, or none is caught
  kEintr,    // no caught signal has SA_RESTART
  kMixed,    // both kinds: a driver could not tell which one interrupted it
};

// What a handler running during a wait means now.
Interrupted Policy();

// A disposition may have changed (called by the interposed sigaction family).
void NoteDispositionChange();

}  // namespace rds::signals

#endif  // RDS_ENGINE_SIGNALS_H_
