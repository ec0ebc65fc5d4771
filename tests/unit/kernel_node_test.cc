// Unit tests for engine/kernel_node: the host-wide record of a kernel node
// connection — who owns it, whether a new owner continues the incarnation,
// and the slots that say which relayer's message took a node sequence.
// POSIX locks never conflict within one process, so the "other engines" are
// forked children.
#include "engine/kernel_node.h"

#include <arpa/inet.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "engine/addr.h"

namespace rds {
namespace {

class KernelNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/knode-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    in_addr a = {};
    ASSERT_EQ(inet_pton(AF_INET, "10.1.0.1", &a), 1);
    laddr_ = RdsAddr::FromV4(a);
    ASSERT_EQ(inet_pton(AF_INET, "10.1.0.2", &a), 1);
    faddr_ = RdsAddr::FromV4(a);
  }
  void TearDown() override {
    system(("rm -rf " + dir_).c_str());
  }
  std::unique_ptr<NodeRecord> Open(bool create) {
    absl::StatusOr<std::unique_ptr<NodeRecord>> r = NodeRecord::Open(dir_, laddr_, faddr_, create);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : nullptr;
  }
  // A child that claims the record, starts an incarnation and notes a slot,
  // then waits on `hold` until the parent writes to it (or exits at once if
  // `hold` is -1). Returns its pid once it owns the record.
  pid_t ChildOwner(int hold_read_fd) {
    int ready[2];
    EXPECT_EQ(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) {
      std::unique_ptr<NodeRecord> r = Open(true);
      bool continued = true;
      if (!r || !r->TryClaim(&continued) || continued) _exit(2);
      r->NewIncarnation(0x1234);
      r->state().npaths.store(8);
      r->path(3).next_tx_seq.store(43);
      r->NoteSlot(3, 42, 777, 9);
      r->path(3).acked_seq.store(40);
      char c = 1;
      if (write(ready[1], &c, 1) != 1) _exit(3);
      if (hold_read_fd >= 0 && read(hold_read_fd, &c, 1) < 0) _exit(4);
      _exit(0);
    }
    close(ready[1]);
    char c;
    EXPECT_EQ(read(ready[0], &c, 1), 1);
    close(ready[0]);
    return pid;
  }
  std::string dir_;
  RdsAddr laddr_, faddr_;
};

TEST_F(KernelNodeTest, NoRecordUntilSomeoneMakesIt) {
  absl::StatusOr<std::unique_ptr<NodeRecord>> r = NodeRecord::Open(dir_, laddr_, faddr_, false);
  EXPECT_TRUE(absl::IsNotFound(r.status())) << r.status();
  EXPECT_TRUE(NodeRecord::List(dir_).empty());
}

TEST_F(KernelNodeTest, ListNamesEveryRecordsAddresses) {
  std::unique_ptr<NodeRecord> r = Open(true);
  ASSERT_NE(r, nullptr);
  RdsAddr v6 = {};
  v6.bytes[0] = 0xfe;
  v6.bytes[1] = 0x80;
  v6.bytes[15] = 7;
  v6.scope_id = 3;
  absl::StatusOr<std::unique_ptr<NodeRecord>> other = NodeRecord::Open(dir_, v6, laddr_, true);
  ASSERT_TRUE(other.ok()) << other.status();
  std::vector<std::pair<RdsAddr, RdsAddr>> all = NodeRecord::List(dir_);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_TRUE((all[0] == std::make_pair(laddr_, faddr_) && all[1] == std::make_pair(v6, laddr_)) ||
              (all[1] == std::make_pair(laddr_, faddr_) && all[0] == std::make_pair(v6, laddr_)));
}

TEST_F(KernelNodeTest, OwnerIsSeenByOthersAndGoesWithItsProcess) {
  int hold[2];
  ASSERT_EQ(pipe(hold), 0);
  pid_t child = ChildOwner(hold[0]);
  std::unique_ptr<NodeRecord> r = Open(false);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->OtherOwner(), child);
  bool continued = false;
  EXPECT_FALSE(r->TryClaim(&continued));  // it is the child's
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(r->OtherOwner(), 0);
  // Nobody used the record beside the dead owner: a new incarnation.
  EXPECT_TRUE(r->TryClaim(&continued));
  EXPECT_FALSE(continued);
  close(hold[0]);
  close(hold[1]);
}

TEST_F(KernelNodeTest, ARelayerThatTakesOverContinuesTheIncarnation) {
  int hold[2];
  ASSERT_EQ(pipe(hold), 0);
  pid_t child = ChildOwner(hold[0]);
  std::unique_ptr<NodeRecord> r = Open(false);
  ASSERT_NE(r, nullptr);
  r->Join();  // relaying through the child
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  bool continued = false;
  ASSERT_TRUE(r->TryClaim(&continued));
  EXPECT_TRUE(continued);
  EXPECT_EQ(r->previous_owner(), static_cast<uint32_t>(child));
  EXPECT_EQ(r->state().gen.load(), 0x1234u);
  EXPECT_EQ(r->state().npaths.load(), 8u);
  EXPECT_EQ(r->path(3).next_tx_seq.load(), 43u);
  EXPECT_EQ(r->path(3).acked_seq.load(), 40u);
  EXPECT_EQ(r->path(0).next_tx_seq.load(), 0u);  // a path never used
  std::optional<std::pair<uint32_t, uint64_t>> slot = r->SlotOf(3, 42);
  ASSERT_TRUE(slot.has_value());
  EXPECT_EQ(slot->first, 777u);
  EXPECT_EQ(slot->second, 9u);
  // A slot is valid for its own sequence only (the ring wraps).
  EXPECT_FALSE(r->SlotOf(3, 42 + NodeRecord::kSlots).has_value());
  EXPECT_FALSE(r->SlotOf(3, 41).has_value());
  // Sequence spaces are per path.
  EXPECT_FALSE(r->SlotOf(2, 42).has_value());
  close(hold[0]);
  close(hold[1]);
}

TEST_F(KernelNodeTest, ANewIncarnationForgetsSequencesAndSlots) {
  std::unique_ptr<NodeRecord> r = Open(true);
  ASSERT_NE(r, nullptr);
  bool continued = true;
  ASSERT_TRUE(r->TryClaim(&continued));
  r->NewIncarnation(1);
  r->state().npaths.store(8);
  r->NoteSlot(7, 5, 100, 2);
  r->path(7).next_tx_seq.store(6);
  r->path(7).next_rx_seq.store(9);
  r->NewIncarnation(2);
  EXPECT_EQ(r->state().gen.load(), 2u);
  EXPECT_EQ(r->state().npaths.load(), 0u);
  EXPECT_EQ(r->path(7).next_tx_seq.load(), 1u);
  EXPECT_EQ(r->path(7).next_rx_seq.load(), 0u);
  EXPECT_FALSE(r->SlotOf(7, 5).has_value());
}

}  // namespace
}  // namespace rds
