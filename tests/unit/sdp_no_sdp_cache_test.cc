// Unit tests for sdp/no_sdp_cache.h: remembered for the time given, forgotten
// on success, bounded.
#include "sdp/no_sdp_cache.h"

#include "gtest/gtest.h"

namespace rds::sdp {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(NoSdpCacheTest, ADestinationIsKnownUntilItsAnswerIsOld) {
  NoSdpCache cache(absl::Seconds(60), 8);
  EXPECT_FALSE(cache.Known("10.0.0.2:80", kT0));
  cache.Remember("10.0.0.2:80", kT0);
  EXPECT_TRUE(cache.Known("10.0.0.2:80", kT0 + absl::Seconds(59)));
  EXPECT_FALSE(cache.Known("10.0.0.2:81", kT0));  // another port may serve SDP
  EXPECT_FALSE(cache.Known("10.0.0.2:80", kT0 + absl::Seconds(60)));
  EXPECT_EQ(cache.size(), 0u);  // (the old answer is dropped)
}

TEST(NoSdpCacheTest, ASuccessForgetsIt) {
  NoSdpCache cache(absl::Seconds(60), 8);
  cache.Remember("a", kT0);
  cache.Forget("a");
  EXPECT_FALSE(cache.Known("a", kT0));
}

TEST(NoSdpCacheTest, AFullTableDropsTheExpiredThenTheOldest) {
  NoSdpCache cache(absl::Seconds(60), 3);
  cache.Remember("old", kT0);
  cache.Remember("b", kT0 + absl::Seconds(30));
  cache.Remember("c", kT0 + absl::Seconds(31));
  cache.Remember("d", kT0 + absl::Seconds(61));  // "old" has expired: it goes
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_FALSE(cache.Known("old", kT0 + absl::Seconds(61)));
  cache.Remember("e", kT0 + absl::Seconds(62));  // none expired: the oldest, "b", goes
  EXPECT_FALSE(cache.Known("b", kT0 + absl::Seconds(62)));
  EXPECT_TRUE(cache.Known("c", kT0 + absl::Seconds(62)));
  EXPECT_TRUE(cache.Known("d", kT0 + absl::Seconds(62)));
  EXPECT_TRUE(cache.Known("e", kT0 + absl::Seconds(62)));
}

}  // namespace
}  // namespace rds::sdp
