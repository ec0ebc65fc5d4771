// preload/lifecycle.cc — constructor scan of inherited fds, and fork.
#include "preload/lifecycle.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>

#include <atomic>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "conf/settings.h"
#include "engine/sys.h"
#include "preload/crash.h"
#include "engine/engine.h"
#include "engine/fork.h"
#include "engine/log.h"
#include "engine/sync.h"
#include "engine/readiness.h"
#include "engine/share.h"
#include "engine/socket.h"
#include "preload/fd_table.h"
#include "preload/sdp_calls.h"
#include "preload/sdp_fds.h"

namespace rds::preload {
namespace {

void PrepareFork() {
  LockTableForFork();
  PrepareEngineForFork();
}

void ParentFork() {
  ParentAfterFork();
  UnlockTableAfterFork();
  // The child holds every descriptor this process has (engine/share.h).
  for (auto& [fd, rs] : OwnedFds()) share::MarkShared(*rs, fd);
}

void ChildAfterFork() {
  ResetEngineAfterFork();
  UnlockTableAfterFork();
  ReexamineAllAfterFork();
}

// RDS fds that survived exec are noted here and adopted on first use
// (DESIGN.md §2.4). Cheap: one getsockname per open socket fd, no threads.
__attribute__((constructor)) void NoteInheritedRdsFds() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return;
  int self = dirfd(d);
  while (struct dirent* ent = readdir(d)) {
    if (ent->d_type != DT_LNK) continue;
    int fd = atoi(ent->d_name);
    if (fd == self) continue;
    if (RecognizeBackingFd(fd)) PublishPending(fd);
  }
  closedir(d);
}

__attribute__((constructor)) void FollowLostFds() {
  SetLostFdsHandler([] { RecoverFromLostFds(); });
}

rds::Mutex recover_mu(absl::kConstInit);

// exit() and return from main (a program whose sockets were closed first,
// as CPython's at shutdown, included). _exit and exec are interposed
// (preload/exec_calls.cc); fatal signals cannot be caught (DESIGN.md §4.1).
__attribute__((destructor)) void FlushAtExit() { FlushBeforeImageEnds(/*exiting=*/true); }

}  // namespace

void RecoverFromLostFds(int overwritten) {
  rds::MutexLock lock(&recover_mu);
  if (overwritten < 0 && !sys::InternalFdsLost()) return;  // nothing lost, or recovered
  if (Engine::IfRunning() == nullptr && overwritten < 0 && !AnyRds()) return;
  log::Warn("%s; RDS sockets opened so far are unusable (EBADF), new ones start afresh",
            overwritten >= 0 ? absl::StrCat("the application replaced descriptor ", overwritten,
                                            ", one of the engine's own")
                             : std::string("the engine's descriptors were closed behind its back"));
  LockTableForFork();
  PrepareEngineForFork();
  ResetEngineAfterLostFds(overwritten);  // releases the engine's locks
  ForgetLostAfterLostFds();
  UnlockTableAfterFork();
}

void FlushBeforeImageEnds(bool exiting) {
  if (InVforkChild()) {
    if (!exiting && AnyRds()) MarkAllShared();
    return;
  }
  // The SDP sockets' table for rdsctl goes with the process. (At exec its
  // lock goes with the image: rdsctl removes it, or the new image, should it
  // make SDP sockets, takes the file over.)
  if (exiting) sdp_fds::Withdraw();
  // SDP connections over verbs end with the image (their relay thread is
  // its): what the application wrote is delivered first.
  sdp_calls::FlushBeforeImageEnds();
  if (Engine::IfRunning() != nullptr) {
    Engine::DrainAtExit(absl::Milliseconds(conf::Get().exit_flush_ms),
                        absl::Milliseconds(conf::Get().exit_flush_shared_ms));
  }
  if (AnyRds()) {
    // A child started without fork (posix_spawn) holds the descriptors that
    // lack FD_CLOEXEC: those sockets are handed on too.
    if (exiting) {
      for (auto& [fd, rs] : OwnedFds()) {
        const int flags = sys::Fcntl(fd, F_GETFD, 0);
        if (flags >= 0 && !(flags & FD_CLOEXEC)) share::MarkShared(*rs);
      }
    }
    share::ParkAllBeforeImageEnds(/*exec=*/!exiting);
  }
  // After exec the pid lives on, and a new image that uses RDS binds the file
  // again; should exec fail, this engine goes on serving. Only an exit removes it.
  if (exiting && Engine::IfRunning() != nullptr) Engine::WithdrawAtExit();
}

void AfterFailedExec() {
  if (!InVforkChild() && AnyRds()) ReexamineReleased();
}

void OnFirstRdsSocket() {
  static std::once_flag once;
  std::call_once(once, [] {
    pthread_atfork(PrepareFork, ParentFork, ChildAfterFork);
    InstallCrashHandlersIfAsked();
    if (conf::Get().show_config) {
      std::string line = absl::StrCat("rds-preload ", kVersion, ": pid ", getpid());
      std::vector<std::pair<std::string, std::string>> changed = conf::NonDefault();
      if (changed.empty()) absl::StrAppend(&line, ", all settings at their defaults");
      for (const auto& [name, value] : changed) {
        absl::StrAppend(&line, "\n  ", conf::kEnvPrefix, name, "=", value);
      }
      line += "\n";
      sys::WriteAll(2, line.data(), line.size());
    }
  });
}

}  // namespace rds::preload
