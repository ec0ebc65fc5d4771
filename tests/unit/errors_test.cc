// Unit tests for engine/errors: every errno survives the Status round trip.
#include "engine/errors.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace rds {
namespace {

TEST(ErrorsTest, EveryRdsErrnoRoundTrips) {
  for (int e : {EAGAIN, EINVAL, ETIMEDOUT, EINTR, ENOTCONN, ENOBUFS, EADDRINUSE, EADDRNOTAVAIL,
                EOPNOTSUPP, EMSGSIZE, EBADF, EFAULT, EPERM, EIO, ENOPROTOOPT, ESOCKTNOSUPPORT,
                EAFNOSUPPORT, EDESTADDRREQ, EPROTOTYPE, ENOSPC, ENOTTY, ENOMEM}) {
    absl::Status s = RdsError(e);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(ErrnoOf(s), e) << e;
  }
}

TEST(ErrorsTest, FrequentErrnosAreCodeOnly) {
  EXPECT_EQ(RdsError(EAGAIN).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(RdsError(EAGAIN).message().empty());
}

TEST(ErrorsTest, InternalFailuresBecomeEio) {
  EXPECT_EQ(ErrnoOf(absl::InternalError("boom")), EIO);
  EXPECT_EQ(ErrnoOf(absl::OkStatus()), 0);
}

}  // namespace
}  // namespace rds
