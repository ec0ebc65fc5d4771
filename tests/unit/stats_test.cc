// Unit tests for engine/stats: counts made on many threads, concurrently and by threads that
// have exited (whose counter shards the next threads reuse), all appear in the sum, once.
#include "engine/stats.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace rds {
namespace {

// A counter no other unit test touches.
constexpr stats::Counter kCounter = stats::kShimFaultInjected;

TEST(StatsTest, CountsOfConcurrentAndExitedThreadsAreSummed) {
  const uint64_t before = stats::Get(kCounter);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 10000;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([] {
      for (int j = 0; j < kPerThread; ++j) stats::Inc(kCounter);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(stats::Get(kCounter) - before, uint64_t{kThreads} * kPerThread);

  // New threads take over the exited threads' shards and add to them.
  threads.clear();
  for (int i = 0; i < kThreads; ++i) threads.emplace_back([] { stats::Add(kCounter, 5); });
  for (std::thread& t : threads) t.join();
  stats::Add(kCounter, 7);
  EXPECT_EQ(stats::Get(kCounter) - before, uint64_t{kThreads} * kPerThread + kThreads * 5 + 7);
}

TEST(StatsTest, ReadsWhileOthersCountNeverGoBackwards) {
  std::atomic<bool> stop{false};
  std::thread counter([&] {
    while (!stop.load()) stats::Inc(kCounter);
  });
  uint64_t last = stats::Get(kCounter);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t now = stats::Get(kCounter);
    ASSERT_GE(now, last);
    last = now;
  }
  stop.store(true);
  counter.join();
}

}  // namespace
}  // namespace rds
