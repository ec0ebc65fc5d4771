// Unit tests for engine/small_pool: a freed block is reused by its size class on the same
// thread, blocks freed on one thread reach another thread in batches, an exiting thread gives
// its cache back, and messages made by NewMessage() work across threads.
#include "engine/small_pool.h"

#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "engine/message.h"
#include "gtest/gtest.h"

namespace rds {
namespace {

#if defined(__SANITIZE_ADDRESS__)
#define SKIP_WITHOUT_POOL() GTEST_SKIP() << "the pool is off under AddressSanitizer"
#else
#define SKIP_WITHOUT_POOL() (void)0
#endif

TEST(SmallPoolTest, BlocksAreUsableUpToTheirClassSize) {
  for (size_t size : {1u, 63u, 64u, 65u, 200u, 1000u, 4096u}) {
    auto* p = static_cast<uint8_t*>(small_pool::Allocate(size));
    ASSERT_NE(p, nullptr);
    std::memset(p, 0xa5, size);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % alignof(std::max_align_t), 0u) << size;
    small_pool::Release(p, size);
  }
}

TEST(SmallPoolTest, AFreedBlockIsReusedBySameClassOnSameThread) {
  SKIP_WITHOUT_POOL();
  void* a = small_pool::Allocate(200);
  small_pool::Release(a, 200);
  // 129..256 bytes share a class.
  void* b = small_pool::Allocate(256);
  EXPECT_EQ(a, b);
  small_pool::Release(b, 256);
  // Another class does not get it.
  void* c = small_pool::Allocate(64);
  EXPECT_NE(a, c);
  small_pool::Release(c, 64);
}

TEST(SmallPoolTest, BlocksFreedOnOneThreadAreAllocatedOnAnother) {
  SKIP_WITHOUT_POOL();
  // The producer/consumer pattern of a message: made here, freed by "the engine".
  constexpr int kBlocks = 256;
  std::vector<void*> made;
  for (int i = 0; i < kBlocks; ++i) made.push_back(small_pool::Allocate(512));
  std::set<void*> freed_elsewhere(made.begin(), made.end());
  std::thread engine([&] {
    for (void* p : made) small_pool::Release(p, 512);
  });
  engine.join();
  // The freeing thread kept at most one batch per class in its cache and handed the rest
  // over (and gave the kept ones back when it exited): most come back here.
  int reused = 0;
  std::vector<void*> again;
  for (int i = 0; i < kBlocks; ++i) {
    again.push_back(small_pool::Allocate(512));
    reused += freed_elsewhere.count(again.back()) ? 1 : 0;
  }
  EXPECT_GE(reused, kBlocks - 64);
  for (void* p : again) small_pool::Release(p, 512);
}

TEST(SmallPoolTest, AnExitingThreadReturnsItsCache) {
  SKIP_WITHOUT_POOL();
  void* p = nullptr;
  std::thread t([&] {
    p = small_pool::Allocate(2048);
    small_pool::Release(p, 2048);  // stays in t's cache until t exits
  });
  t.join();
  std::vector<void*> got;
  bool found = false;
  // Other tests' batches of this class may come first; the exited thread's one is there.
  for (int i = 0; i < 64 * 32 && !found; ++i) {
    got.push_back(small_pool::Allocate(2048));
    found = got.back() == p;
  }
  EXPECT_TRUE(found);
  for (void* q : got) small_pool::Release(q, 2048);
}

TEST(SmallPoolTest, MessagesCrossThreads) {
  std::vector<MessagePtr> made;
  for (int i = 0; i < 1000; ++i) {
    MessagePtr m = NewMessage();
    m->payload = Payload("0123456789abcdef", 16);
    m->header.sport = static_cast<uint16_t>(i);
    made.push_back(std::move(m));
  }
  std::thread consumer([&] {
    for (int i = 0; i < 1000; ++i) {
      EXPECT_EQ(made[i]->header.sport, i);
      EXPECT_EQ(std::memcmp(made[i]->payload.data(), "0123456789abcdef", 16), 0);
    }
    made.clear();  // freed here
  });
  consumer.join();
  EXPECT_TRUE(made.empty());
}

}  // namespace
}  // namespace rds
