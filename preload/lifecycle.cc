// preload/lifecycle.cc — constructor scan of inherited fds, and fork.
#include "preload/lifecycle.h"

#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>

#include <mutex>

#include "engine/fork.h"
#include "engine/readiness.h"
#include "preload/fd_table.h"

namespace rds::preload {
namespace {

void ChildAfterFork() {
  ResetEngineAfterFork();
  OrphanAllAfterFork();
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

}  // namespace

void EnsureForkHandlers() {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, ChildAfterFork); });
}

}  // namespace rds::preload
