/* lifetime_probe: RDS sockets at the edges of a process's life (issue 21).
 *
 * Plain C, as the programs users run; it works the same under the shim (LD_PRELOAD) and on kernel
 * RDS (the VM suite runs it both ways and compares the receiver's counts). Subcommands:
 *
 *   count ADDR PORT EXPECT TIMEOUT_MS [hold]
 *       Binds ADDR:PORT, prints "ready", then receives until EXPECT messages arrived or TIMEOUT_MS
 *       passed since the last one (or since the start); prints "got 1" at the first message and
 *       "count N" at the end. Exit 0. With "hold" its receive buffer is small and it reads
 *       nothing until its standard input ends: its port becomes congested.
 *   send-then HOW SRC DST DPORT
 *       Binds SRC:0, sends one message to DST:DPORT, then ends as HOW says: "close" (close(), then
 *       exit), "exit" (exit without close), "_exit" (_exit without close), "exec" (exec /bin/true
 *       with the socket still open), "wait" (a second, then exit: a kernel's connection to the
 *       destination host is up by then), "fork-exit" (a daemon's way: fork a child that keeps the
 *       socket 8 s without using it, and exit). What the kernel transmits in sendmsg must arrive.
 *   order ADDR PORT EXPECT TIMEOUT_MS
 *       As count, and prints "order N: <first byte of each message, in arrival order>".
 *   fork-order SRC DST DPORT N
 *       A daemon's parent sends N "p" messages, forks, closes its socket and exits; its child
 *       execs (connection delay off) and sends N "c" messages on the inherited socket at once.
 *   stream SRC DST DPORT COUNT block|nonblock LIMIT_MS [linger]
 *       Sends COUNT 1 KiB messages (a blocking socket, or a non-blocking one retried after EAGAIN
 *       and ENOBUFS every millisecond); prints "sent N" every 1000 messages and "done SENT FAILED"
 *       at the end: with the receiver's process gone, sends must go on (dropped at the receiving
 *       host), never hang. Gives up after LIMIT_MS with "stuck after N". With "linger" it then
 *       keeps its socket (and its links) until its standard input ends.
 *   fork-sockets N
 *       Makes one RDS socket, forks N children that each make, bind and use their own socket and
 *       keep it a second; prints "children-ok K of N".
 *   vfork-close close|close_range|closefrom|dup2
 *       Binds a socket, then a vfork() child (sharing this process's memory) closes or overwrites
 *       its inherited descriptors that way and execs /bin/true; the parent's socket must be
 *       untouched (getsockname, send to itself, receive, port still held).
 *   raw-close-range
 *       Uses RDS, then closes every descriptor above 2 with the raw close_range system call (as
 *       code built against a glibc without the wrapper does): a new RDS socket must work, closing
 *       it must not hang, and neither may the exit.
 *   dup2-internal
 *       Uses RDS, then dup2()s stdout onto every descriptor number this program did not open
 *       itself (the shim's own); dup2 must succeed as the kernel's does, and a new RDS socket must
 *       work afterwards.
 *
 * Prints "ok ..." / "FAIL ...: ..." lines for the checks it makes; exit status 1 if any failed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "preload_check.h"

#ifndef AF_RDS
#define AF_RDS 21
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

static int failures;

static void report(int ok, const char *what, const char *fmt, ...) {
  char why[512] = "";
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

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static struct sockaddr_in addr_of(const char *ip, int port) {
  struct sockaddr_in s;
  memset(&s, 0, sizeof s);
  s.sin_family = AF_INET;
  s.sin_port = htons((uint16_t)port);
  if (inet_pton(AF_INET, ip, &s.sin_addr) != 1) {
    printf("fatal: bad address %s\n", ip);
    exit(2);
  }
  return s;
}

static int bound_socket(const char *ip, int port, struct sockaddr_in *bound) {
  int fd = socket(AF_RDS, SOCK_SEQPACKET, 0);
  if (fd < 0) {
    printf("fatal: socket(AF_RDS): %s\n", en(errno));
    exit(2);
  }
  struct sockaddr_in a = addr_of(ip, port);
  if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0) {
    printf("fatal: bind %s:%d: %s\n", ip, port, en(errno));
    exit(2);
  }
  if (bound) {
    socklen_t l = sizeof *bound;
    getsockname(fd, (struct sockaddr *)bound, &l);
  }
  return fd;
}

/* Receives one message within timeout_ms; returns its length, or -1 with errno set. */
static ssize_t recv_within(int fd, char *buf, size_t size, int timeout_ms) {
  double end = now_ms() + timeout_ms;
  for (;;) {
    ssize_t n = recv(fd, buf, size, MSG_DONTWAIT);
    if (n >= 0 || errno != EAGAIN) return n;
    int left = (int)(end - now_ms());
    if (left <= 0) {
      errno = ETIMEDOUT;
      return -1;
    }
    struct pollfd p = {fd, POLLIN, 0};
    poll(&p, 1, left);
  }
}

static int cmd_count(const char *ip, int port, long expect, int timeout_ms, int hold) {
  int fd = bound_socket(ip, port, NULL);
  if (hold) {
    int rcvbuf = 4096; /* congested after a few messages */
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  }
  printf("ready\n");
  fflush(stdout);
  if (hold) {
    char line[64];
    while (fgets(line, sizeof line, stdin) != NULL) {
    }
  }
  long n = 0;
  char buf[2048];
  while (n < expect) {
    if (recv_within(fd, buf, sizeof buf, timeout_ms) < 0) break;
    if (++n == 1) {
      printf("got 1\n");
      fflush(stdout);
    }
  }
  printf("count %ld\n", n);
  fflush(stdout);
  return 0;
}

/* Receives until EXPECT messages or TIMEOUT_MS without one; prints "order N: ..." with each
 * message's first character (p or c below), in arrival order. */
static int cmd_order(const char *ip, int port, long expect, int timeout_ms) {
  int fd = bound_socket(ip, port, NULL);
  printf("ready\n");
  fflush(stdout);
  static char seen[100000];
  long n = 0;
  char buf[2048];
  while (n < expect && n < (long)sizeof seen - 1) {
    ssize_t r = recv_within(fd, buf, sizeof buf, timeout_ms);
    if (r < 0) break;
    seen[n++] = r > 0 ? buf[0] : '?';
  }
  seen[n] = 0;
  printf("order %ld: %s\n", n, seen);
  fflush(stdout);
  return 0;
}

/* A daemon's parent and its exec'd child on one socket: the parent sends N "p" messages, forks
 * and closes the socket and exits; the child sets RDS_PRELOAD_FAULT_CONNECT_DELAY_MS=0 and execs
 * "fork-order-child FD DST DPORT N", which sends N "c" messages on the inherited socket at once
 * and keeps it 8 s. A kernel socket delivers the parent's first. */
static int cmd_fork_order(const char *src, const char *dst, int dport, int n) {
  int fd = bound_socket(src, 0, NULL);
  struct sockaddr_in to = addr_of(dst, dport);
  for (int i = 0; i < n; ++i) {
    if (sendto(fd, "p", 1, 0, (struct sockaddr *)&to, sizeof to) != 1) {
      printf("fatal: sendto: %s\n", en(errno));
      return 2;
    }
  }
  pid_t child = fork();
  if (child < 0) {
    printf("fatal: fork: %s\n", en(errno));
    return 2;
  }
  if (child == 0) {
    char fdtext[16], ntext[16], port[16];
    snprintf(fdtext, sizeof fdtext, "%d", fd);
    snprintf(ntext, sizeof ntext, "%d", n);
    snprintf(port, sizeof port, "%d", dport);
    setenv("RDS_PRELOAD_FAULT_CONNECT_DELAY_MS", "0", 1);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    execl("/proc/self/exe", "lifetime_probe", "fork-order-child", fdtext, dst, port, ntext,
          (char *)NULL);
    _exit(3);
  }
  if (close(fd) != 0) printf("fatal: close: %s\n", en(errno));
  exit(0);
}

static int cmd_fork_order_child(int fd, const char *dst, int dport, int n) {
  struct sockaddr_in to = addr_of(dst, dport);
  for (int i = 0; i < n; ++i) {
    if (sendto(fd, "c", 1, 0, (struct sockaddr *)&to, sizeof to) != 1) return 2;
  }
  sleep(8);
  return 0;
}

static int cmd_send_then(const char *how, const char *src, const char *dst, int dport) {
  int fd = bound_socket(src, 0, NULL);
  struct sockaddr_in to = addr_of(dst, dport);
  char msg[64];
  int len = snprintf(msg, sizeof msg, "from pid %d", (int)getpid());
  if (sendto(fd, msg, (size_t)len, 0, (struct sockaddr *)&to, sizeof to) != len) {
    printf("fatal: sendto: %s\n", en(errno));
    return 2;
  }
  if (strcmp(how, "close") == 0) {
    if (close(fd) != 0) printf("fatal: close: %s\n", en(errno));
    exit(0);
  }
  if (strcmp(how, "exit") == 0) exit(0);
  if (strcmp(how, "wait") == 0) {
    sleep(1);
    exit(0);
  }
  if (strcmp(how, "_exit") == 0) _exit(0);
  if (strcmp(how, "fork-exit") == 0) {
    pid_t child = fork();
    if (child < 0) {
      printf("fatal: fork: %s\n", en(errno));
      return 2;
    }
    if (child == 0) {  /* holds the socket (and no output pipe) past the parent's exit */
      close(1);
      close(2);
      sleep(8);
      _exit(0);
    }
    exit(0);
  }
  if (strcmp(how, "exec") == 0) {
    execl("/bin/true", "true", (char *)NULL);
    printf("fatal: exec: %s\n", en(errno));
    return 2;
  }
  printf("fatal: unknown way to end: %s\n", how);
  return 2;
}

static int cmd_stream(const char *src, const char *dst, int dport, long count, int nonblock,
                      int limit_ms, int linger) {
  int fd = bound_socket(src, 0, NULL);
  if (nonblock) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  struct sockaddr_in to = addr_of(dst, dport);
  char msg[1024];
  memset(msg, 'x', sizeof msg);
  long sent = 0, failed = 0;
  double end = now_ms() + limit_ms;
  /* A blocking send that never returns is caught by an alarm. */
  alarm((unsigned)(limit_ms / 1000 + 1));
  while (sent + failed < count) {
    if (now_ms() > end) {
      printf("stuck after %ld\n", sent);
      fflush(stdout);
      return 1;
    }
    ssize_t n = sendto(fd, msg, sizeof msg, 0, (struct sockaddr *)&to, sizeof to);
    if (n == (ssize_t)sizeof msg) {
      if (++sent % 1000 == 0) {
        printf("sent %ld\n", sent);
        fflush(stdout);
      }
      continue;
    }
    if (errno == EAGAIN || errno == ENOBUFS) {
      usleep(1000);
      continue;
    }
    failed++;
  }
  printf("done %ld %ld\n", sent, failed);
  fflush(stdout);
  alarm(0);
  if (linger) {
    char line[64];
    while (fgets(line, sizeof line, stdin) != NULL) {
    }
  }
  return 0;
}

static int cmd_fork_sockets(int n) {
  int parent = socket(AF_RDS, SOCK_SEQPACKET, 0);
  if (parent < 0) {
    printf("fatal: socket(AF_RDS): %s\n", en(errno));
    return 2;
  }
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      int fd = socket(AF_RDS, SOCK_SEQPACKET, 0);
      if (fd < 0) {
        printf("child %d: socket(AF_RDS): %s\n", i, en(errno));
        fflush(stdout);
        _exit(1);
      }
      struct sockaddr_in me;
      int b = bound_socket("127.0.0.1", 0, &me);
      if (sendto(b, "self", 4, 0, (struct sockaddr *)&me, sizeof me) != 4) _exit(3);
      char buf[16];
      if (recv_within(b, buf, sizeof buf, 5000) != 4) _exit(4);
      usleep(1000 * 1000);
      _exit(0);
    }
    if (pid < 0) printf("fatal: fork: %s\n", en(errno));
  }
  int ok = 0;
  for (int i = 0; i < n; ++i) {
    int status;
    if (wait(&status) > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) ok++;
  }
  printf("children-ok %d of %d\n", ok, n);
  report(ok == n, "fork-sockets", "%d of %d children could not use a socket of their own", n - ok, n);
  return failures ? 1 : 0;
}

static int cmd_vfork_close(const char *how) {
  struct sockaddr_in me;
  int fd = bound_socket("127.0.0.1", 0, &me);
  if (sendto(fd, "before", 6, 0, (struct sockaddr *)&me, sizeof me) != 6) {
    printf("fatal: sendto before: %s\n", en(errno));
    return 2;
  }
  pid_t pid = vfork();
  if (pid == 0) {
    /* Only async-signal-safe calls between vfork and exec, as CPython's _posixsubprocess. */
    if (strcmp(how, "close") == 0) close(fd);
    else if (strcmp(how, "close_range") == 0) close_range(3, ~0U, 0);
    else if (strcmp(how, "closefrom") == 0) closefrom(3);
    else if (strcmp(how, "dup2") == 0) dup2(1, fd);
    execl("/bin/true", "true", (char *)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  struct sockaddr_in now;
  socklen_t l = sizeof now;
  memset(&now, 0, sizeof now);
  int r = getsockname(fd, (struct sockaddr *)&now, &l);
  report(r == 0 && now.sin_family == AF_INET && now.sin_port == me.sin_port &&
             now.sin_addr.s_addr == me.sin_addr.s_addr,
         "vfork child left getsockname alone", "getsockname: %d (%s), family %d, port %d", r,
         r ? en(errno) : "ok", now.sin_family, ntohs(now.sin_port));
  char buf[64];
  ssize_t n = recv_within(fd, buf, sizeof buf, 5000);
  report(n == 6, "message queued before the vfork still there", "recv: %zd (%s)", n,
         n < 0 ? en(errno) : "short");
  n = sendto(fd, "after", 5, 0, (struct sockaddr *)&me, sizeof me);
  report(n == 5, "sendto works after the vfork child", "sendto: %zd (%s)", n, n < 0 ? en(errno) : "");
  n = recv_within(fd, buf, sizeof buf, 5000);
  report(n == 5, "receive works after the vfork child", "recv: %zd (%s)", n,
         n < 0 ? en(errno) : "short");
  int other = socket(AF_RDS, SOCK_SEQPACKET, 0);
  r = bind(other, (struct sockaddr *)&me, sizeof me);
  report(r < 0 && errno == EADDRINUSE, "the port is still held", "bind of the same port: %d (%s)", r,
         r < 0 ? en(errno) : "succeeded");
  return failures ? 1 : 0;
}

/* A new socket sends to itself and receives within a bound. */
static void check_new_socket_works(const char *what) {
  char name[128];
  struct sockaddr_in me;
  int fd = socket(AF_RDS, SOCK_SEQPACKET, 0);
  snprintf(name, sizeof name, "%s: socket(AF_RDS)", what);
  report(fd >= 0, name, "%s", en(errno));
  if (fd < 0) return;
  struct sockaddr_in a = addr_of("127.0.0.1", 0);
  int r = bind(fd, (struct sockaddr *)&a, sizeof a);
  snprintf(name, sizeof name, "%s: bind", what);
  report(r == 0, name, "%s", en(errno));
  if (r != 0) return;
  socklen_t l = sizeof me;
  getsockname(fd, (struct sockaddr *)&me, &l);
  ssize_t n = sendto(fd, "hello", 5, 0, (struct sockaddr *)&me, sizeof me);
  snprintf(name, sizeof name, "%s: sendto", what);
  report(n == 5, name, "%zd (%s)", n, en(errno));
  char buf[16];
  n = recv_within(fd, buf, sizeof buf, 5000);
  snprintf(name, sizeof name, "%s: receive", what);
  report(n == 5, name, "%zd (%s)", n, en(errno));
  double t0 = now_ms();
  r = close(fd);
  snprintf(name, sizeof name, "%s: close returns at once", what);
  report(r == 0 && now_ms() - t0 < 2000, name, "close: %d (%s) after %.0f ms", r, en(errno),
         now_ms() - t0);
}

static int cmd_raw_close_range(void) {
  struct sockaddr_in me;
  int fd = bound_socket("127.0.0.1", 0, &me);
  char buf[16];
  if (sendto(fd, "warm", 4, 0, (struct sockaddr *)&me, sizeof me) != 4 ||
      recv_within(fd, buf, sizeof buf, 5000) != 4) {
    printf("fatal: the first socket does not work\n");
    return 2;
  }
  fflush(stdout);
  long r = syscall(SYS_close_range, 3U, ~0U, 0U);
  if (r != 0) {
    printf("fatal: close_range system call: %s\n", en(errno));
    return 2;
  }
  check_new_socket_works("after raw close_range");
  check_new_socket_works("a second socket after raw close_range");
  return failures ? 1 : 0;
}

static int cmd_dup2_internal(void) {
  struct sockaddr_in me;
  int fd = bound_socket("127.0.0.1", 0, &me);
  char buf[16];
  if (sendto(fd, "warm", 4, 0, (struct sockaddr *)&me, sizeof me) != 4 ||
      recv_within(fd, buf, sizeof buf, 5000) != 4) {
    printf("fatal: the first socket does not work\n");
    return 2;
  }
  /* Every descriptor this program did not open is the shim's (none on a kernel). */
  int others[4096], n_others = 0;
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    int n = atoi(e->d_name);
    if (e->d_name[0] == '.' || n <= 2 || n == fd || n == dirfd(d)) continue;
    if (n_others < 4096) others[n_others++] = n;
  }
  if (d) closedir(d);
  int bad = 0, first_errno = 0;
  for (int i = 0; i < n_others; ++i) {
    if (dup2(1, others[i]) != others[i]) {
      if (!bad++) first_errno = errno;
    }
  }
  printf("internal descriptors overwritten: %d\n", n_others);
  report(bad == 0, "dup2 onto every other descriptor succeeds", "%d of %d failed, first with %s", bad,
         n_others, en(first_errno));
  for (int i = 0; i < n_others; ++i) close(others[i]);
  check_new_socket_works("after dup2 over the shim's descriptors");
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  rds_require_preloaded(argv[0]);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc >= 6 && strcmp(argv[1], "count") == 0) {
    return cmd_count(argv[2], atoi(argv[3]), atol(argv[4]), atoi(argv[5]),
                     argc >= 7 && strcmp(argv[6], "hold") == 0);
  }
  if (argc >= 6 && strcmp(argv[1], "order") == 0) {
    return cmd_order(argv[2], atoi(argv[3]), atol(argv[4]), atoi(argv[5]));
  }
  if (argc >= 6 && strcmp(argv[1], "fork-order") == 0) {
    return cmd_fork_order(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
  }
  if (argc >= 6 && strcmp(argv[1], "fork-order-child") == 0) {
    return cmd_fork_order_child(atoi(argv[2]), argv[3], atoi(argv[4]), atoi(argv[5]));
  }
  if (argc >= 6 && strcmp(argv[1], "send-then") == 0) {
    return cmd_send_then(argv[2], argv[3], argv[4], atoi(argv[5]));
  }
  if (argc >= 8 && strcmp(argv[1], "stream") == 0) {
    return cmd_stream(argv[2], argv[3], atoi(argv[4]), atol(argv[5]),
                      strcmp(argv[6], "nonblock") == 0, atoi(argv[7]),
                      argc >= 9 && strcmp(argv[8], "linger") == 0);
  }
  if (argc >= 3 && strcmp(argv[1], "fork-sockets") == 0) return cmd_fork_sockets(atoi(argv[2]));
  if (argc >= 3 && strcmp(argv[1], "vfork-close") == 0) return cmd_vfork_close(argv[2]);
  if (argc >= 2 && strcmp(argv[1], "raw-close-range") == 0) return cmd_raw_close_range();
  if (argc >= 2 && strcmp(argv[1], "dup2-internal") == 0) return cmd_dup2_internal();
  fprintf(stderr, "usage: see the header of lifetime_probe.c\n");
  return 2;
}
