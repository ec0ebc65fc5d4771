// tests/unit/loopback_sockets.h — loopback TCP helpers for the unit tests of
// code that relays between real sockets (sdp_relay/relay, sdp_relay/tcp_proxy).
// Header-only: each test file includes it into its own anonymous namespace use.
#ifndef RDS_TESTS_UNIT_LOOPBACK_SOCKETS_H_
#define RDS_TESTS_UNIT_LOOPBACK_SOCKETS_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "gtest/gtest.h"

namespace rds::testing_util {

// A connected loopback TCP pair: [0] the outer end (non-blocking, the side
// the test plays), [1] the side the code under test owns (blocking, as the
// code under test sets its own flags).
inline void LoopbackPair(int fds[2]) {
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(l, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(l, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(getsockname(l, reinterpret_cast<sockaddr*>(&a), &len), 0);
  fds[0] = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(fds[0], reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  fds[1] = accept(l, nullptr, nullptr);
  ASSERT_GE(fds[1], 0);
  close(l);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
}

// Reads what is there without blocking. Sets *eof at end of stream and *err
// to a receive error other than EAGAIN (each if not null).
inline std::string ReadSome(int fd, bool* eof = nullptr, int* err = nullptr) {
  std::string got;
  char buf[65536];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      got.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0 && eof != nullptr) *eof = true;
    if (n < 0 && errno != EAGAIN && err != nullptr) *err = errno;
    return got;
  }
}

}  // namespace rds::testing_util

#endif  // RDS_TESTS_UNIT_LOOPBACK_SOCKETS_H_
