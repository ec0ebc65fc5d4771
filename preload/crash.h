// preload/crash.h — opt-in crash backtraces (RDS_PRELOAD_BACKTRACE=1).
//
// A good guest installs no signal handlers unless asked. When asked, handlers
// are installed only for fatal signals the program left at their default
// action; they print a libunwind backtrace to the log destination and
// re-raise the signal with its default action.
//
// Thread-safety: call once (the first RDS socket does).
#ifndef RDS_PRELOAD_CRASH_H_
#define RDS_PRELOAD_CRASH_H_

namespace rds::preload {

void InstallCrashHandlersIfAsked();

}  // namespace rds::preload

#endif  // RDS_PRELOAD_CRASH_H_
