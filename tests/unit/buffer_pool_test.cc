// Unit tests for engine/buffer_pool: large buffers are recycled by size class, and the pool
// keeps four per class.
#include "engine/buffer_pool.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <string>
#include <set>
#include <vector>

#include "engine/message.h"
#include "gtest/gtest.h"

namespace rds {
namespace {

TEST(BufferPoolTest, ALargeBufferIsReusedForTheSameSizeClass) {
  uint8_t* a = buffer_pool::Allocate(1 << 20);
  std::memset(a, 1, 1 << 20);  // the whole class size is usable
  buffer_pool::Release(a, 1 << 20);
  // 768 KiB rounds up to the same 1 MiB class.
  uint8_t* b = buffer_pool::Allocate(768 << 10);
  EXPECT_EQ(a, b);
  buffer_pool::Release(b, 768 << 10);
}

TEST(BufferPoolTest, DifferentClassesDoNotShare) {
  uint8_t* big = buffer_pool::Allocate(1 << 20);
  buffer_pool::Release(big, 1 << 20);
  uint8_t* small = buffer_pool::Allocate(64 << 10);
  EXPECT_NE(big, small);
  buffer_pool::Release(small, 64 << 10);
  uint8_t* again = buffer_pool::Allocate(1 << 20);
  EXPECT_EQ(big, again);
  buffer_pool::Release(again, 1 << 20);
}

TEST(BufferPoolTest, SmallAndLargeClassesDoNotShare) {
  // Up to 4 KiB the small-block pool serves (small_pool_test.cc); a 1 MiB buffer never
  // comes from there.
  uint8_t* p = buffer_pool::Allocate(100);
  buffer_pool::Release(p, 100);
  uint8_t* q = buffer_pool::Allocate(1 << 20);
  EXPECT_NE(p, q);
  buffer_pool::Release(q, 1 << 20);
}

TEST(BufferPoolTest, FourBuffersPerClassAreKept) {
  std::vector<uint8_t*> held;
  for (int i = 0; i < 6; ++i) held.push_back(buffer_pool::Allocate(128 << 10));
  for (uint8_t* p : held) buffer_pool::Release(p, 128 << 10);
  // The first four released are kept (the other two go back to the heap, which may hand
  // their addresses out again, so only the kept ones can be recognised).
  std::set<uint8_t*> kept(held.begin(), held.begin() + 4);
  std::vector<uint8_t*> again;
  for (int i = 0; i < 4; ++i) {
    again.push_back(buffer_pool::Allocate(128 << 10));
    EXPECT_TRUE(kept.count(again.back())) << "allocation " << i << " did not come from the pool";
  }
  for (uint8_t* p : again) buffer_pool::Release(p, 128 << 10);
}

TEST(BufferPoolTest, PayloadUsesThePool) {
  uint8_t* first;
  {
    Payload p(1 << 20);
    first = p.data();
  }
  Payload q(1 << 20);
  EXPECT_EQ(q.data(), first);
}

// A reader that still holds the first page of a buffer, as a socket the
// buffer was spliced into would (vmsplice into a pipe).
class SplicedPage {
 public:
  explicit SplicedPage(uint8_t* buffer) {
    EXPECT_EQ(pipe(fds_), 0);
    struct iovec iov = {buffer, kPage};
    EXPECT_EQ(vmsplice(fds_[1], &iov, 1, 0), static_cast<ssize_t>(kPage));
  }
  ~SplicedPage() {
    close(fds_[0]);
    close(fds_[1]);
  }
  // The page's bytes as the reader sees them now.
  std::string Read() {
    std::string seen(kPage, '\0');
    EXPECT_EQ(read(fds_[0], seen.data(), kPage), static_cast<ssize_t>(kPage));
    return seen;
  }

 private:
  static constexpr size_t kPage = 4096;
  int fds_[2] = {-1, -1};
};

// The pages of an abandoned buffer may still be read by the kernel (spliced
// into a socket): the buffer handed out again must not be those pages.
TEST(BufferPoolTest, AnAbandonedBufferGetsFreshPagesBeforeReuse) {
  constexpr size_t kSize = 256 << 10;
  ASSERT_TRUE(buffer_pool::PageBacked(kSize));
  uint8_t* a = buffer_pool::Allocate(kSize);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(a) % 4096, 0u) << "whole pages";
  std::memset(a, 'o', kSize);
  SplicedPage reader(a);
  buffer_pool::ReleaseAbandoned(a, kSize);
  uint8_t* b = buffer_pool::Allocate(kSize);
  EXPECT_EQ(a, b) << "the pool keeps the (remapped) buffer";
  EXPECT_EQ(b[0], 0) << "fresh zero pages";
  std::memset(b, 'n', kSize);  // the next message's bytes
  const std::string seen = reader.Read();
  EXPECT_EQ(seen.front(), 'o');
  EXPECT_EQ(seen.back(), 'o');
  buffer_pool::Release(b, kSize);
}

// Without abandoning, the same test shows what it prevents: the reader sees
// the next message's bytes.
TEST(BufferPoolTest, AReleasedBufferIsReusedAsItIs) {
  constexpr size_t kSize = 256 << 10;
  uint8_t* a = buffer_pool::Allocate(kSize);
  std::memset(a, 'o', kSize);
  SplicedPage reader(a);
  buffer_pool::Release(a, kSize);
  uint8_t* b = buffer_pool::Allocate(kSize);
  ASSERT_EQ(a, b);
  std::memset(b, 'n', kSize);
  EXPECT_EQ(reader.Read().front(), 'n');
  buffer_pool::Release(b, kSize);
}

TEST(BufferPoolTest, AMessageFreedWhileSplicedAbandonsItsPayload) {
  constexpr size_t kSize = 128 << 10;
  uint8_t* data;
  std::optional<SplicedPage> reader;
  {
    MessagePtr m = NewMessage();
    m->payload = Payload(kSize);
    data = m->payload.data();
    std::memset(data, 'o', kSize);
    reader.emplace(data);
    m->payload_on_loan.store(true);  // never acknowledged
  }
  uint8_t* b = buffer_pool::Allocate(kSize);
  ASSERT_EQ(b, data);
  EXPECT_EQ(b[0], 0);
  std::memset(b, 'n', kSize);
  EXPECT_EQ(reader->Read().front(), 'o');
  buffer_pool::Release(b, kSize);
}

}  // namespace
}  // namespace rds
