// preload/exec_calls.cc — interposed exec family, _exit and _Exit.
//
// Kernel RDS has transmitted a message by the time sendmsg returns; the
// shim's engine writes it later. Before the process image ends, the messages
// sendmsg accepted are flushed (FlushBeforeImageEnds: acknowledged by their
// receivers, bounded by RDS_PRELOAD_EXIT_FLUSH_MS), as exit() already does.
// Nothing is flushed in a vfork child (the parent's engine carries on) or in a
// process without an engine, so fork-and-exec costs nothing extra.
// Async-signal-safe where the caller is (after vfork): no allocation here.
#include <stdarg.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload/lifecycle.h"
#include "preload/real.h"

namespace {

// The variadic exec arguments (execl, execlp, execle) as an argv array on
// the caller's stack: `argv` must hold CountArgs() + 1 entries.
size_t CountArgs(const char* arg0, va_list ap) {
  size_t n = 1;
  va_list copy;
  va_copy(copy, ap);
  while (arg0 != nullptr && va_arg(copy, const char*) != nullptr) ++n;
  va_end(copy);
  return arg0 == nullptr ? 0 : n;
}

void FillArgs(const char* arg0, va_list ap, size_t n, char** argv) {
  if (n > 0) argv[0] = const_cast<char*>(arg0);
  for (size_t i = 1; i < n; ++i) argv[i] = va_arg(ap, char*);
  if (n > 0) va_arg(ap, char*);  // the terminating null
  argv[n] = nullptr;
}

// exec returned: it failed, and this image goes on with the sockets it
// parked for the next one (preload/lifecycle.h).
int AfterFailedExec(int result) {
  const int saved = errno;
  rds::preload::AfterFailedExec();
  errno = saved;
  return result;
}

}  // namespace

extern "C" {

int execve(const char* path, char* const argv[], char* const envp[]) {
  rds::preload::FlushBeforeImageEnds(/*exiting=*/false);
  return AfterFailedExec(rds::real::execve(path, argv, envp));
}

int execv(const char* path, char* const argv[]) {
  rds::preload::FlushBeforeImageEnds(/*exiting=*/false);
  return AfterFailedExec(rds::real::execv(path, argv));
}

int execvp(const char* file, char* const argv[]) {
  rds::preload::FlushBeforeImageEnds(/*exiting=*/false);
  return AfterFailedExec(rds::real::execvp(file, argv));
}

int execvpe(const char* file, char* const argv[], char* const envp[]) {
  rds::preload::FlushBeforeImageEnds(/*exiting=*/false);
  return AfterFailedExec(rds::real::execvpe(file, argv, envp));
}

int fexecve(int fd, char* const argv[], char* const envp[]) {
  rds::preload::FlushBeforeImageEnds(/*exiting=*/false);
  return AfterFailedExec(rds::real::fexecve(fd, argv, envp));
}

int execveat(int dirfd, const char* path, char* const argv[], char* const envp[], int flags) {
  rds::preload::FlushBeforeImageEnds(/*exiting=*/false);
  return AfterFailedExec(rds::real::execveat(dirfd, path, argv, envp, flags));
}

int execl(const char* path, const char* arg0, ...) {
  va_list ap;
  va_start(ap, arg0);
  size_t n = CountArgs(arg0, ap);
  char* argv[n + 1];
  FillArgs(arg0, ap, n, argv);
  va_end(ap);
  return execv(path, argv);
}

int execlp(const char* file, const char* arg0, ...) {
  va_list ap;
  va_start(ap, arg0);
  size_t n = CountArgs(arg0, ap);
  char* argv[n + 1];
  FillArgs(arg0, ap, n, argv);
  va_end(ap);
  return execvp(file, argv);
}

int execle(const char* path, const char* arg0, ...) {
  va_list ap;
  va_start(ap, arg0);
  size_t n = CountArgs(arg0, ap);
  char* argv[n + 1];
  FillArgs(arg0, ap, n, argv);
  char* const* envp = va_arg(ap, char* const*);
  va_end(ap);
  return execve(path, argv, envp);
}

void _exit(int status) {
  rds::preload::FlushBeforeImageEnds(/*exiting=*/true);
  rds::real::_exit(status);
}

void _Exit(int status) {
  rds::preload::FlushBeforeImageEnds(/*exiting=*/true);
  rds::real::_exit(status);
}

}  // extern "C"
