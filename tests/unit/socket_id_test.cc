// Unit tests for the ids of RDS sockets (engine/readiness): one process's ids are consecutive
// (so its ownership locks merge into one range of the host-wide lock file), each names its
// backing fd, and a fork child draws ids from a base of its own.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>

#include "engine/readiness.h"
#include "engine/sys.h"
#include "gtest/gtest.h"

namespace rds {
namespace {

TEST(SocketIdTest, IdsOfOneProcessAreConsecutiveAndNameTheirFds) {
  absl::StatusOr<BackingFd> a = CreateBackingFd(SOCK_CLOEXEC);
  absl::StatusOr<BackingFd> b = CreateBackingFd(SOCK_CLOEXEC);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->id, a->id + 1);
  EXPECT_EQ(RecognizeBackingFd(a->fd), a->id);
  EXPECT_EQ(RecognizeBackingFd(b->fd), b->id);
  sys::Close(a->fd);
  sys::Close(b->fd);
}

TEST(SocketIdTest, AForkChildTakesIdsFromItsOwnBase) {
  absl::StatusOr<BackingFd> parent = CreateBackingFd(SOCK_CLOEXEC);
  ASSERT_TRUE(parent.ok()) << parent.status();
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ResetSocketIdsAfterFork();  // what the shim's pthread_atfork child handler does
    absl::StatusOr<BackingFd> child = CreateBackingFd(SOCK_CLOEXEC);
    uint64_t id = child.ok() ? child->id : 0;
    _exit(write(pipefd[1], &id, sizeof(id)) == sizeof(id) ? 0 : 1);
  }
  close(pipefd[1]);
  uint64_t child_id = 0;
  ASSERT_EQ(read(pipefd[0], &child_id, sizeof(child_id)), static_cast<ssize_t>(sizeof(child_id)));
  close(pipefd[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_NE(child_id, 0u);
  // Not the parent's next id: a base of its own (equal bases: 1 in 2^38).
  EXPECT_NE(child_id >> 22, parent->id >> 22);
  absl::StatusOr<BackingFd> next = CreateBackingFd(SOCK_CLOEXEC);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->id, parent->id + 1);  // the parent goes on with its own
  sys::Close(parent->fd);
  sys::Close(next->fd);
}

}  // namespace
}  // namespace rds
