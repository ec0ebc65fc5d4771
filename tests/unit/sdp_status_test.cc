// Unit tests for the SDP status table (sdp/status_table.h) as preload/sdp_fds
// and preload/sdp_status publish it: read back from the file by the reader
// rdsctl uses, through dup, close, a withdrawn table and a fork child.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "conf/settings.h"
#include "gtest/gtest.h"
#include "preload/sdp_fds.h"
#include "sdp/status_table.h"

namespace rds::preload::sdp_fds {
namespace {

namespace status = sdp::status;

std::string PathOf(pid_t pid) { return absl::StrCat(conf::Get().rundir, "/sdp-", pid, ".status"); }

// A read-only view of a process's table, as rdsctl maps it.
class Table {
 public:
  explicit Table(pid_t pid) {
    fd_ = open(PathOf(pid).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return;
    void* m = mmap(nullptr, status::kFileSize, PROT_READ, MAP_SHARED, fd_, 0);
    if (m != MAP_FAILED) map_ = static_cast<const char*>(m);
  }
  ~Table() {
    if (map_ != nullptr) munmap(const_cast<char*>(map_), status::kFileSize);
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return map_ != nullptr; }
  const status::Header& header() const { return *reinterpret_cast<const status::Header*>(map_); }
  std::optional<status::SlotView> Slot(int fd) const {
    const auto* slots = reinterpret_cast<const status::Slot*>(map_ + sizeof(status::Header));
    return status::Read(slots[fd]);
  }
  // Whether the writer still holds its lock (it lives).
  bool Held() const { return flock(fd_, LOCK_EX | LOCK_NB) != 0; }

 private:
  int fd_ = -1;
  const char* map_ = nullptr;
};

int Listener() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(listen(fd, 1), 0);
  return fd;
}

uint16_t PortOf(const sockaddr_storage& ss) {
  return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
}

void SetShown(SdpFd& s, status::State st, status::Transport t, std::string note) {
  rds::MutexLock lock(&s.mu);
  s.shown = {st, t, std::move(note)};
}

TEST(SdpStatus, EachSdpFdIsShownWithItsStateAndFollowsDupAndClose) {
  const int l = Listener();
  auto s = std::make_shared<SdpFd>(AF_INET);
  Mark(l, s);
  SetShown(*s, status::State::kListening, status::Transport::kTcp, "a loopback address");
  Publish(l, s.get());

  Table t(getpid());
  ASSERT_TRUE(t.ok()) << PathOf(getpid());
  EXPECT_EQ(std::string(t.header().magic, 8), std::string(status::kMagic, 8));
  EXPECT_EQ(t.header().version, status::kVersion);
  EXPECT_EQ(t.header().pid, getpid());
  EXPECT_TRUE(t.Held()) << "the writer holds its lock while it lives";
  std::optional<status::SlotView> v = t.Slot(l);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->state, status::State::kListening);
  EXPECT_EQ(v->transport, status::Transport::kTcp);
  EXPECT_EQ(v->note, "a loopback address");
  EXPECT_EQ(v->id, s->id);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ASSERT_EQ(getsockname(l, reinterpret_cast<sockaddr*>(&bound), &len), 0);
  EXPECT_EQ(PortOf(v->local), PortOf(bound)) << "a TCP socket's own names";
  EXPECT_EQ(status::Show(v->local), absl::StrCat("127.0.0.1:", PortOf(bound)));

  // A publish for another entry at that fd (a stale callback) changes nothing.
  SdpFd other(AF_INET);
  SetShown(*s, status::State::kFailed, status::Transport::kTcp, "");
  Publish(l, &other);
  EXPECT_EQ(t.Slot(l)->state, status::State::kListening);

  const int d = dup(l);
  Duplicate(l, d);
  ASSERT_TRUE(t.Slot(d).has_value());
  EXPECT_EQ(t.Slot(d)->id, s->id) << "one socket under two fds";
  Forget(l);
  EXPECT_FALSE(t.Slot(l).has_value()) << "a closed fd's slot is free";
  EXPECT_TRUE(t.Slot(d).has_value());
  ForgetRange(static_cast<unsigned>(d), static_cast<unsigned>(d));
  EXPECT_FALSE(t.Slot(d).has_value());
  close(l);
  close(d);
}

TEST(SdpStatus, FdsBeyondTheSlotsAreCounted) {
  const int l = Listener();
  Mark(l, std::make_shared<SdpFd>(AF_INET));  // (makes the table if no test did)
  Table t(getpid());
  ASSERT_TRUE(t.ok());
  const uint64_t before = t.header().beyond.load();
  Mark(1 << 21, std::make_shared<SdpFd>(AF_INET));
  Duplicate(1 << 21, (1 << 21) + 1);
  EXPECT_EQ(t.header().beyond.load(), before + 2);
  Forget(1 << 21);
  Forget((1 << 21) + 1);
  EXPECT_EQ(t.header().beyond.load(), before);
  Forget(l);
  close(l);
}

TEST(SdpStatus, AWithdrawnTableIsMadeAgainWithEveryEntry) {
  const int a = Listener(), b = Listener();
  Mark(a, std::make_shared<SdpFd>(AF_INET));
  Withdraw();
  EXPECT_NE(access(PathOf(getpid()).c_str(), F_OK), 0) << "removed when the image ends";
  Mark(b, std::make_shared<SdpFd>(AF_INET));  // the next change makes it again
  Table t(getpid());
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t.Slot(a).has_value()) << "entries from before are written again";
  EXPECT_TRUE(t.Slot(b).has_value());
  Forget(a);
  Forget(b);
  close(a);
  close(b);
}

TEST(SdpStatus, AForkChildPublishesItsOwnTableNotItsParents) {
  const int a = Listener();
  auto s = std::make_shared<SdpFd>(AF_INET);
  Mark(a, s);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    SetShown(*s, status::State::kFailed, status::Transport::kTcp, "child");
    Publish(a, s.get());
    Table mine(getpid());
    const bool ok = mine.ok() && mine.Slot(a).has_value() && mine.Slot(a)->note == "child";
    Withdraw();
    _exit(ok ? 0 : 1);
  }
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "the child's own table shows its change";
  Table parent(getpid());
  ASSERT_TRUE(parent.ok());
  ASSERT_TRUE(parent.Slot(a).has_value());
  EXPECT_NE(parent.Slot(a)->note, "child") << "the parent's table is not the child's to write";
  EXPECT_NE(access(PathOf(child).c_str(), F_OK), 0) << "the child's table went with it";
  Forget(a);
  close(a);
}

// The table goes with the test process.
class WithdrawAtEnd : public ::testing::Environment {
 public:
  void TearDown() override { Withdraw(); }
};
[[maybe_unused]] ::testing::Environment* const withdraw_at_end =
    ::testing::AddGlobalTestEnvironment(new WithdrawAtEnd);

}  // namespace
}  // namespace rds::preload::sdp_fds
