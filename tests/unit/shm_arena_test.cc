// Unit tests for engine/shm_arena and transports/stream/peer_arena: the
// shared-memory payload arena, as its owner and as a peer sees it.
#include "engine/shm_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "engine/sys.h"
#include "transports/stream/peer_arena.h"

namespace rds {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

std::shared_ptr<ShmArena> MakeArena(size_t mib) {
  absl::StatusOr<std::shared_ptr<ShmArena>> a = ShmArena::Create(mib * kMiB);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? *a : nullptr;
}

TEST(ShmArenaTest, SizesRoundUpToPowerOfTwoBlocksCarvedFromChunks) {
  auto arena = MakeArena(2);
  ASSERT_TRUE(arena);
  EXPECT_FALSE(arena->Allocate(ShmArena::kMinBlock - 1)) << "small payloads go through the link";
  EXPECT_FALSE(arena->Allocate(ShmArena::kMaxBlock + 1));
  std::optional<Payload> a = arena->Allocate(100 * 1024);  // a 128 KiB block
  ASSERT_TRUE(a);
  EXPECT_EQ(a->size(), 100u * 1024);
  EXPECT_TRUE(arena->Owns(*a));
  EXPECT_EQ(arena->OffsetOf(*a) % (128 * 1024), 0u);
  std::memset(a->data(), 0x5a, a->size());  // writable
  ShmArena::Usage u = arena->GetUsage();
  EXPECT_EQ(u.blocks_in_use, 1u);
  EXPECT_EQ(u.bytes_in_use, 128u * 1024);
  EXPECT_EQ(u.chunks_carved, 1u);
  // The rest of that chunk serves the same class; a 1 MiB payload needs the second chunk.
  std::vector<Payload> same;
  for (int i = 0; i < 7; ++i) {
    std::optional<Payload> p = arena->Allocate(128 * 1024);
    ASSERT_TRUE(p) << i;
    same.push_back(std::move(*p));
  }
  EXPECT_EQ(arena->GetUsage().chunks_carved, 1u);
  std::optional<Payload> big = arena->Allocate(kMiB);
  ASSERT_TRUE(big);
  EXPECT_EQ(arena->GetUsage().chunks_carved, 2u);
  EXPECT_FALSE(arena->Allocate(kMiB)) << "the arena is full";
  EXPECT_FALSE(arena->Allocate(64 * 1024)) << "no chunk left for a new class";
  // A freed block is reused by the next payload of its class.
  const uint64_t freed = arena->OffsetOf(same.back());
  same.pop_back();
  std::optional<Payload> again = arena->Allocate(128 * 1024);
  ASSERT_TRUE(again);
  EXPECT_EQ(arena->OffsetOf(*again), freed);
}

TEST(ShmArenaTest, AChunkWithNothingInUseServesAnySizeAgain) {
  auto arena = MakeArena(1);
  ASSERT_TRUE(arena);
  std::vector<Payload> small;
  for (int i = 0; i < 16; ++i) {  // the only chunk, carved into 64 KiB blocks
    std::optional<Payload> p = arena->Allocate(64 * 1024);
    ASSERT_TRUE(p) << i;
    small.push_back(std::move(*p));
  }
  EXPECT_FALSE(arena->Allocate(64 * 1024));
  EXPECT_FALSE(arena->Allocate(1 << 20));
  small.erase(small.begin());  // one block free: still no room for 1 MiB
  EXPECT_FALSE(arena->Allocate(1 << 20));
  EXPECT_EQ(arena->GetUsage().chunks_carved, 1u);
  small.clear();  // the whole chunk is free again
  EXPECT_EQ(arena->GetUsage().chunks_carved, 0u);
  std::optional<Payload> big = arena->Allocate(1 << 20);
  ASSERT_TRUE(big) << "the chunk was given back and carved for 1 MiB";
  EXPECT_EQ(arena->OffsetOf(*big), 0u);
  EXPECT_FALSE(arena->Allocate(64 * 1024));
  big.reset();
  std::optional<Payload> again = arena->Allocate(200 * 1024);
  ASSERT_TRUE(again);
  EXPECT_EQ(arena->GetUsage().blocks_in_use, 1u);
  EXPECT_EQ(arena->GetUsage().bytes_in_use, 256u * 1024);
}

TEST(ShmArenaTest, ALentBlockIsFreedOnlyWhenEveryReferenceIsGone) {
  auto arena = MakeArena(1);
  ASSERT_TRUE(arena);
  std::optional<Payload> p = arena->Allocate(kMiB);
  ASSERT_TRUE(p);
  const uint64_t off = arena->OffsetOf(*p);
  const pid_t peer = getpid(), other = getppid();  // both alive
  arena->Lend(peer, off);
  arena->Lend(peer, off);
  EXPECT_EQ(arena->LentTo(peer), 2u);
  p.reset();  // the message is acknowledged; two loans remain
  EXPECT_EQ(arena->GetUsage().blocks_in_use, 1u);
  EXPECT_FALSE(arena->Allocate(kMiB));
  EXPECT_FALSE(arena->Return(other, off)) << "only the borrower can return a loan";
  EXPECT_TRUE(arena->Return(peer, off));
  EXPECT_FALSE(arena->Allocate(kMiB));
  EXPECT_TRUE(arena->Return(peer, off));
  EXPECT_EQ(arena->GetUsage().blocks_in_use, 0u);
  EXPECT_EQ(arena->GetUsage().loans, 0u);
  EXPECT_FALSE(arena->Return(peer, off)) << "no loan left";
  EXPECT_FALSE(arena->Return(peer, off + 4096));
  EXPECT_TRUE(arena->Allocate(kMiB));
}

TEST(ShmArenaTest, LoansOfAnExitedPeerEndWhenSpaceIsNeeded) {
  auto arena = MakeArena(2);
  ASSERT_TRUE(arena);
  std::optional<Payload> mine = arena->Allocate(kMiB);
  std::optional<Payload> theirs = arena->Allocate(kMiB);
  ASSERT_TRUE(mine && theirs);
  const uint64_t off_mine = arena->OffsetOf(*mine), off_theirs = arena->OffsetOf(*theirs);
  // A live borrower (this process), and one that has exited (a reaped child).
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  arena->Lend(getpid(), off_mine);
  arena->Lend(child, off_theirs);
  mine.reset();
  theirs.reset();
  EXPECT_EQ(arena->GetUsage().loans, 2u);
  // The next allocation that finds no room takes back the exited peer's block only.
  std::optional<Payload> next = arena->Allocate(kMiB);
  ASSERT_TRUE(next);
  EXPECT_EQ(arena->OffsetOf(*next), off_theirs);
  EXPECT_EQ(arena->GetUsage().loans, 1u);
  EXPECT_FALSE(arena->Allocate(kMiB));
}

TEST(PeerArenaTest, MapsAnArenaReadOnlyAndQueuesReleases) {
  auto arena = MakeArena(1);
  ASSERT_TRUE(arena);
  std::optional<Payload> p = arena->Allocate(200 * 1024);
  ASSERT_TRUE(p);
  for (size_t i = 0; i < p->size(); ++i) p->data()[i] = static_cast<uint8_t>(i * 7);
  // The peer: a process that has exited (a reaped child), so that its
  // waiting releases are dropped at the end.
  const pid_t peer = fork();
  if (peer == 0) _exit(0);
  ASSERT_GT(peer, 0);
  int status;
  ASSERT_EQ(waitpid(peer, &status, 0), peer);
  absl::StatusOr<std::shared_ptr<PeerArena>> mapped =
      PeerArena::Map(peer, sys::MakeInternal(dup(arena->fd())), arena->size());
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  std::shared_ptr<PeerArena> view = *mapped;
  int cues = 0, link1 = 0, link2 = 0;
  view->Attach(&link1, [&cues] { ++cues; });
  const uint64_t off = arena->OffsetOf(*p);
  absl::StatusOr<Payload> b = view->Borrow(off, p->size());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(std::memcmp(b->data(), p->data(), p->size()), 0) << "the same bytes, no copy";
  EXPECT_EQ(b->owner(), view.get());
  absl::StatusOr<Payload> b2 = view->Borrow(off, 1);
  ASSERT_TRUE(b2.ok());
  EXPECT_FALSE(view->Borrow(arena->size() - 10, 11).ok()) << "beyond the end";
  EXPECT_FALSE(view->Borrow(~uint64_t{0} - 5, 10).ok()) << "offset overflow";
  EXPECT_EQ(view->Borrowed(), 2);
  *b = Payload();
  *b2 = Payload();
  EXPECT_EQ(view->Borrowed(), 0);
  EXPECT_TRUE(view->HasReleased());
  EXPECT_EQ(cues, 0) << "200 KiB held back: left for the next message (or the link's timer)";
  EXPECT_EQ(view->TakeReleased(), (std::vector<uint64_t>{off, off}));
  EXPECT_FALSE(view->HasReleased());
  EXPECT_TRUE(view->TakeReleased().empty());
  // A quarter of the arena (256 KiB of 1 MiB) held back cues the link, once.
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<Payload> big = view->Borrow(0, 100 * 1024);
    ASSERT_TRUE(big.ok());
  }
  EXPECT_EQ(cues, 1);
  view->TakeReleased();

  // The same process announcing the same arena again (a new link) gets the same view.
  absl::StatusOr<std::shared_ptr<PeerArena>> again =
      PeerArena::Map(peer, sys::MakeInternal(dup(arena->fd())), arena->size());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), view.get());

  // With no link attached, releases wait (and survive the last reference
  // but the payload's); the next link to attach is cued at once.
  absl::StatusOr<Payload> b3 = view->Borrow(off, 16);
  ASSERT_TRUE(b3.ok());
  view->Detach(&link2);  // not the attached one: no effect
  *b3 = Payload();
  EXPECT_EQ(cues, 1);
  view->TakeReleased();
  b3 = view->Borrow(off, 16);
  view->Detach(&link1);
  std::weak_ptr<PeerArena> weak = view;
  view.reset();
  mapped->reset();
  again->reset();
  EXPECT_FALSE(weak.expired()) << "a borrowed payload keeps the mapping";
  EXPECT_EQ(b3->data()[1], 7);
  *b3 = Payload();
  EXPECT_EQ(cues, 1) << "no link attached";
  EXPECT_FALSE(weak.expired()) << "the waiting release keeps the mapping";
  // The next mapping notices that the peer has exited and drops it.
  absl::StatusOr<std::shared_ptr<PeerArena>> other =
      PeerArena::Map(getpid(), sys::MakeInternal(dup(arena->fd())), arena->size());
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(weak.expired());
}

TEST(PeerArenaTest, ReleasesWaitForTheNextLinkAndRequeuedOnesGoFirst) {
  auto arena = MakeArena(1);
  ASSERT_TRUE(arena);
  absl::StatusOr<std::shared_ptr<PeerArena>> view =
      PeerArena::Map(77, sys::MakeInternal(dup(arena->fd())), arena->size());
  ASSERT_TRUE(view.ok());
  absl::StatusOr<Payload> b = (*view)->Borrow(3 << 16, 10);
  ASSERT_TRUE(b.ok());
  *b = Payload();  // released with no link attached
  const uint64_t unsent[] = {1 << 16, 2 << 16};
  (*view)->Requeue(unsent);
  int cues = 0, link = 0;
  (*view)->Attach(&link, [&cues] { ++cues; });
  EXPECT_EQ(cues, 1);
  EXPECT_EQ((*view)->TakeReleased(), (std::vector<uint64_t>{1 << 16, 2 << 16, 3 << 16}));
}

TEST(PeerArenaTest, RefusesAnythingButASealedMemfdOfTheAnnouncedSize) {
  auto arena = MakeArena(1);
  ASSERT_TRUE(arena);
  auto map = [](int fd, uint64_t size) {
    return PeerArena::Map(0, sys::MakeInternal(fd), size).status();
  };
  EXPECT_FALSE(map(dup(arena->fd()), arena->size() + 1).ok()) << "larger than the file";
  EXPECT_FALSE(map(dup(arena->fd()), 0).ok());
  EXPECT_FALSE(map(dup(arena->fd()), PeerArena::kMaxSize + 1).ok());
  int unsealed = memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(ftruncate(unsealed, kMiB), 0);
  EXPECT_FALSE(map(unsealed, kMiB).ok()) << "a peer could shrink it under our mapping";
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  close(pipefd[1]);
  EXPECT_FALSE(map(pipefd[0], kMiB).ok());
}

}  // namespace
}  // namespace rds

namespace rds {
namespace {

TEST(PeerArenaTest, OverlappingLinksHandReleasesOnWhenTheLatestCloses) {
  absl::StatusOr<std::shared_ptr<ShmArena>> arena = ShmArena::Create(1 << 20);
  ASSERT_TRUE(arena.ok());
  absl::StatusOr<std::shared_ptr<PeerArena>> view =
      PeerArena::Map(getpid(), sys::MakeInternal(dup((*arena)->fd())), (*arena)->size());
  ASSERT_TRUE(view.ok());
  int first = 0, second = 0, l1 = 0, l2 = 0;
  (*view)->Attach(&l1, [&first] { ++first; });
  (*view)->Attach(&l2, [&second] { ++second; });
  absl::StatusOr<Payload> b = (*view)->Borrow(0, 300 * 1024);  // over a quarter: a cue
  ASSERT_TRUE(b.ok());
  *b = Payload();
  EXPECT_EQ(second, 1) << "the latest link returns releases";
  EXPECT_EQ(first, 0);
  // The latest link closes before it sent them: the older one is cued.
  (*view)->Detach(&l2);
  EXPECT_EQ(first, 1);
  EXPECT_EQ((*view)->TakeReleased(), std::vector<uint64_t>{0});
  // The last link closes with a release pending: the view stays for the next link.
  b = (*view)->Borrow(1 << 16, 300 * 1024);
  ASSERT_TRUE(b.ok());
  *b = Payload();
  EXPECT_EQ(first, 2);
  std::weak_ptr<PeerArena> weak = *view;
  (*view)->Detach(&l1);
  view->reset();
  ASSERT_FALSE(weak.expired()) << "a waiting release keeps the view";
  int third = 0, l3 = 0;
  std::shared_ptr<PeerArena> next_link_holds = weak.lock();  // as a link's peer_arena_ does
  next_link_holds->Attach(&l3, [&third] { ++third; });
  EXPECT_EQ(third, 1);
  EXPECT_EQ(next_link_holds->TakeReleased(), std::vector<uint64_t>{1 << 16});
}

}  // namespace
}  // namespace rds
