/* fortify_client: an RDS program built with -O2 -D_FORTIFY_SOURCE=2.
 *
 * With fortification glibc redirects recv, recvfrom, read, poll and FD_SET/FD_ISSET on buffers
 * of known size to __recv_chk, __recvfrom_chk, __read_chk, __poll_chk and __fdelt_chk. Those
 * enter glibc's internals directly, so a shim that only wraps recv/recvfrom/read/poll never sees
 * them. The lengths below come from a volatile variable so the compiler cannot prove them safe
 * and must call the _chk variants (the driver checks the binary's imports with nm).
 *
 * Two sockets in one process (127.0.0.1, ports chosen by bind). Prints "ok ..." / "FAIL ...";
 * exit 0 only if every check passed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include "preload_check.h"

#define AF_RDS_ 21

static volatile size_t v_big = 256;   /* = sizeof buf, but unknown to the compiler */
static volatile size_t v_small = 8;   /* = sizeof small */
static volatile nfds_t v_nfds = 1;
static int failures;

static void check(int ok, const char *what, const char *fmt, ...) {
  char why[256] = "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  if (ok) {
    printf("ok %s\n", what);
  } else {
    printf("FAIL %s: %s\n", what, why);
    failures++;
  }
  fflush(stdout);
}

static const char *en(int e) {
  const char *n = strerrorname_np(e);
  return n ? n : "E?";
}

static int bound_socket(struct sockaddr_in *addr) {
  int fd = socket(AF_RDS_, SOCK_SEQPACKET, 0);
  if (fd < 0) {
    printf("FAIL setup: socket(AF_RDS): %s\n", en(errno));
    exit(1);
  }
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t l = sizeof *addr;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
      getsockname(fd, (struct sockaddr *)addr, &l) < 0) {
    printf("FAIL setup: bind/getsockname: %s\n", en(errno));
    exit(1);
  }
  return fd;
}

static void send_msg(int fd, const struct sockaddr_in *to, const char *text, size_t len) {
  ssize_t n = sendto(fd, text, len, 0, (const struct sockaddr *)to, sizeof *to);
  if (n != (ssize_t)len) {
    printf("FAIL setup: sendto: %zd %s\n", n, en(errno));
    exit(1);
  }
}

/* __poll_chk: pfd has a known size and nfds is not a constant. */
static int wait_in(int fd, int ms) {
  struct pollfd pfd[1] = {{.fd = fd, .events = POLLIN}};
  int n = poll(pfd, v_nfds, ms);
  return n == 1 && (pfd[0].revents & POLLIN);
}

int main(void) {
  rds_require_preloaded("fortify_client");
  struct sockaddr_in aa, ba;
  int a = bound_socket(&aa), b = bound_socket(&ba);
  check(b < FD_SETSIZE, "fd-below-FD_SETSIZE", "fd %d", b);
  char buf[256];
  char small[8];

  /* recv -> __recv_chk */
  send_msg(a, &ba, "one", 3);
  check(wait_in(b, 3000), "poll_chk-readable", "no POLLIN within 3 s");
  ssize_t n = recv(b, buf, v_big, 0);
  check(n == 3 && memcmp(buf, "one", 3) == 0, "recv_chk", "ret %zd %s", n, n < 0 ? en(errno) : "");

  /* select with FD_SET/FD_ISSET -> __fdelt_chk; recvfrom -> __recvfrom_chk */
  send_msg(a, &ba, "two", 3);
  fd_set rs;
  FD_ZERO(&rs);
  FD_SET(b, &rs);
  struct timeval tv = {3, 0};
  int sr = select(b + 1, &rs, NULL, NULL, &tv);
  check(sr == 1 && FD_ISSET(b, &rs), "fdelt_chk-select-readable", "select %d %s", sr,
        sr < 0 ? en(errno) : "");
  struct sockaddr_in from;
  socklen_t fl = sizeof from;
  memset(&from, 0, sizeof from);
  n = recvfrom(b, buf, v_big, 0, (struct sockaddr *)&from, &fl);
  check(n == 3 && memcmp(buf, "two", 3) == 0 && fl == sizeof from && from.sin_family == AF_INET &&
            from.sin_port == aa.sin_port && from.sin_addr.s_addr == aa.sin_addr.s_addr,
        "recvfrom_chk", "ret %zd namelen %u port %u (want %u)", n, fl, ntohs(from.sin_port),
        ntohs(aa.sin_port));

  /* read -> __read_chk */
  send_msg(a, &ba, "three", 5);
  check(wait_in(b, 3000), "poll_chk-readable-2", "no POLLIN within 3 s");
  n = read(b, buf, v_big);
  check(n == 5 && memcmp(buf, "three", 5) == 0, "read_chk", "ret %zd %s", n, n < 0 ? en(errno) : "");

  /* A longer message into a small fortified buffer: truncated to the buffer, rest discarded. */
  char hundred[100];
  memset(hundred, 'h', sizeof hundred);
  send_msg(a, &ba, hundred, sizeof hundred);
  check(wait_in(b, 3000), "poll_chk-readable-3", "no POLLIN within 3 s");
  n = recv(b, small, v_small, 0);
  check(n == 8 && memcmp(small, hundred, 8) == 0, "recv_chk-truncates", "ret %zd", n);
  n = recv(b, buf, v_big, MSG_DONTWAIT);
  check(n == -1 && errno == EAGAIN, "recv_chk-rest-discarded", "ret %zd %s", n,
        n < 0 ? en(errno) : "got data");

  /* Empty socket: MSG_DONTWAIT gives EAGAIN; read with O_NONBLOCK-free socket is not tried. */
  n = recvfrom(b, buf, v_big, MSG_DONTWAIT, NULL, NULL);
  check(n == -1 && errno == EAGAIN, "recvfrom_chk-eagain", "ret %zd %s", n, n < 0 ? en(errno) : "");

  /* Mixed poll: an RDS fd and a pipe; only the pipe is readable. */
  int pp[2];
  if (pipe(pp) == 0) {
    if (write(pp[1], "p", 1) != 1) printf("FAIL setup: pipe write\n");
    struct pollfd pfd[2] = {{.fd = b, .events = POLLIN}, {.fd = pp[0], .events = POLLIN}};
    volatile nfds_t two = 2;
    int pr = poll(pfd, two, 1000);
    /* b may carry one spurious POLLIN after a congestion update (kernel-rds.md A.6); the pipe
       must be reported in any case. */
    check(pr >= 1 && (pfd[1].revents & POLLIN), "poll_chk-mixed", "poll %d revents %#x %#x", pr,
          pfd[0].revents, pfd[1].revents);
    close(pp[0]);
    close(pp[1]);
  }

  /* The other direction, through the fortified calls again. */
  send_msg(b, &aa, "back", 4);
  FD_ZERO(&rs);
  FD_SET(a, &rs);
  tv.tv_sec = 3;
  tv.tv_usec = 0;
  sr = select(a + 1, &rs, NULL, NULL, &tv);
  n = sr == 1 ? recv(a, buf, v_big, 0) : -1;
  check(n == 4 && memcmp(buf, "back", 4) == 0, "reverse-direction", "select %d recv %zd", sr, n);

  check(close(a) == 0 && close(b) == 0, "close", "%s", en(errno));
  printf("summary failures %d\n", failures);
  return failures ? 1 : 0;
}
