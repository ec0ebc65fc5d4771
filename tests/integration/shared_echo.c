/* shared_echo.c — one RDS socket used by several processes, as kernel RDS shares it
 * (DESIGN.md §2.4; issue 22 point 1). Plain C, as users' programs are.
 *
 *   shared_echo server ADDR PORT WORKERS
 *       Pre-fork echo server: binds ADDR:PORT, forks WORKERS children that all block in
 *       recvfrom() on the inherited socket and answer each request from it with
 *       "<worker>:<request>", prints "ready" and exits at once (the parent goes first).
 *       A worker exits on the request "quit".
 *   shared_echo worker FD ID
 *       One worker loop on an inherited descriptor FD (after exec), answering as "<ID>:...".
 *   shared_echo client ADDR PORT COUNT
 *       Binds ADDR:0 and sends COUNT requests "<pid>/<n>" one at a time, each answered within
 *       10 s with "<worker>:<pid>/<n>"; prints "ok <count> <worker>=<n>..." or "FAIL ...".
 *   shared_echo quit ADDR PORT N
 *       Sends N "quit" requests.
 *   shared_echo handover ADDR PORT N
 *       Binds ADDR:PORT and forks a receiver; another child streams N numbered messages to the
 *       port while the binder closes its descriptor 50 ms in (the socket passes to the receiver
 *       with messages on their way). The receiver prints "ok N" when it got all N, in order,
 *       none twice, else "FAIL ...".
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef AF_RDS
#define AF_RDS 21
#endif

static struct sockaddr_in addr_of(const char* ip, int port) {
  struct sockaddr_in sin;
  memset(&sin, 0, sizeof(sin));
  sin.sin_family = AF_INET;
  sin.sin_port = htons((unsigned short)port);
  if (inet_pton(AF_INET, ip, &sin.sin_addr) != 1) {
    fprintf(stderr, "fatal: bad address %s\n", ip);
    exit(2);
  }
  return sin;
}

static int bound_socket(const char* ip, int port) {
  int fd = socket(AF_RDS, SOCK_SEQPACKET, 0);
  if (fd < 0) {
    printf("fatal: socket: %s\n", strerror(errno));
    exit(1);
  }
  struct sockaddr_in sin = addr_of(ip, port);
  if (bind(fd, (struct sockaddr*)&sin, sizeof(sin)) != 0) {
    printf("fatal: bind %s:%d: %s\n", ip, port, strerror(errno));
    exit(1);
  }
  return fd;
}

static int serve(int fd, int id) {
  char buf[2048], out[2100];
  for (;;) {
    struct sockaddr_in from;
    socklen_t len = sizeof(from);
    ssize_t n = recvfrom(fd, buf, sizeof(buf) - 1, 0, (struct sockaddr*)&from, &len);
    if (n < 0) {
      if (errno == EINTR) continue;
      printf("FAIL worker %d: recvfrom: %s\n", id, strerror(errno));
      fflush(stdout);
      return 1;
    }
    buf[n] = 0;
    if (strcmp(buf, "quit") == 0) return 0;
    int m = snprintf(out, sizeof(out), "%d:%s", id, buf);
    if (sendto(fd, out, (size_t)m, 0, (struct sockaddr*)&from, len) != m) {
      printf("FAIL worker %d: sendto: %s\n", id, strerror(errno));
      fflush(stdout);
      return 1;
    }
  }
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 5 && strcmp(argv[1], "server") == 0) {
    int fd = bound_socket(argv[2], atoi(argv[3]));
    int workers = atoi(argv[4]);
    /* The workers start once every fork is done: under AddressSanitizer (GCC 12's runtime) a
     * fork while another thread of the parent allocates leaves the child's allocator locked,
     * and a worker's first call sets the parent's engine thread to work (DESIGN.md §10). */
    int go[2];
    if (pipe(go) != 0) {
      printf("fatal: pipe: %s\n", strerror(errno));
      return 1;
    }
    for (int w = 0; w < workers; ++w) {
      pid_t pid = fork();
      if (pid < 0) {
        printf("fatal: fork: %s\n", strerror(errno));
        return 1;
      }
      if (pid == 0) {
        char c;
        close(go[1]);
        (void)!read(go[0], &c, 1); /* end of file: the parent forked them all */
        close(go[0]);
        _exit(serve(fd, w));
      }
    }
    close(go[1]);
    printf("ready\n");
    return 0;  /* the parent goes first; the workers keep the socket */
  }
  if (argc == 4 && strcmp(argv[1], "worker") == 0) {
    return serve(atoi(argv[2]), atoi(argv[3]));
  }
  if (argc == 5 && strcmp(argv[1], "client") == 0) {
    int fd = bound_socket(argv[2], 0);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in dst = addr_of(argv[2], atoi(argv[3]));
    long count = atol(argv[4]);
    long per_worker[64] = {0};
    char req[64], buf[2048];
    for (long i = 0; i < count; ++i) {
      int m = snprintf(req, sizeof(req), "%d/%ld", (int)getpid(), i);
      if (sendto(fd, req, (size_t)m, 0, (struct sockaddr*)&dst, sizeof(dst)) != m) {
        printf("FAIL sendto #%ld: %s\n", i, strerror(errno));
        return 1;
      }
      ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
      if (n < 0) {
        printf("FAIL no reply to #%ld: %s\n", i, strerror(errno));
        return 1;
      }
      buf[n] = 0;
      char* colon = strchr(buf, ':');
      if (colon == NULL || strcmp(colon + 1, req) != 0) {
        printf("FAIL reply to #%ld is \"%s\" (want \"<worker>:%s\")\n", i, buf, req);
        return 1;
      }
      int w = atoi(buf);
      if (w >= 0 && w < 64) per_worker[w]++;
    }
    printf("ok %ld", count);
    for (int w = 0; w < 64; ++w) {
      if (per_worker[w]) printf(" %d=%ld", w, per_worker[w]);
    }
    printf("\n");
    return 0;
  }
  if (argc == 5 && strcmp(argv[1], "quit") == 0) {
    int fd = bound_socket(argv[2], 0);
    struct sockaddr_in dst = addr_of(argv[2], atoi(argv[3]));
    for (int i = 0; i < atoi(argv[4]); ++i) sendto(fd, "quit", 4, 0, (struct sockaddr*)&dst, sizeof(dst));
    return 0;
  }
  if (argc == 5 && strcmp(argv[1], "handover") == 0) {
    int fd = bound_socket(argv[2], atoi(argv[3]));
    struct sockaddr_in dst = addr_of(argv[2], atoi(argv[3]));
    long n = atol(argv[4]);
    int go[2]; /* both children start after the last fork (see "server") */
    if (pipe(go) != 0) return 1;
    pid_t receiver = fork();
    if (receiver == 0) {
      char c;
      close(go[1]);
      (void)!read(go[0], &c, 1);
      struct timeval tv = {5, 0};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      long expect = 0;
      for (;;) {
        long v;
        ssize_t r = recv(fd, &v, sizeof(v), 0);
        if (r < 0) break;
        if (r != sizeof(v) || v != expect) {
          printf("FAIL message #%ld is %ld\n", expect, r == sizeof(v) ? v : -1);
          fflush(stdout);
          _exit(1);
        }
        if (++expect == n) break;
      }
      printf(expect == n ? "ok %ld\n" : "FAIL got %ld of %ld\n", expect, n);
      fflush(stdout);
      /* _exit in fork children, as the server's workers: a leak checker run at exit in the
       * child of a multi-threaded parent reports the parent's threads' objects. */
      _exit(expect == n ? 0 : 1);
    }
    pid_t sender = fork();
    if (sender == 0) {
      char c;
      close(go[1]);
      (void)!read(go[0], &c, 1);
      usleep(200000); /* the receiver's first call has reached the binder */
      int s = bound_socket(argv[2], 0);
      for (long i = 0; i < n; ++i) {
        while (sendto(s, &i, sizeof(i), 0, (struct sockaddr*)&dst, sizeof(dst)) < 0) {
          if (errno != ENOBUFS && errno != EAGAIN) {
            printf("FAIL sendto: %s\n", strerror(errno));
            fflush(stdout);
            _exit(1);
          }
          usleep(100);
        }
        usleep(20);
      }
      _exit(0);
    }
    close(go[1]);
    usleep(250000); /* half-way through the stream */
    close(fd);
    int status;
    waitpid(sender, &status, 0);
    waitpid(receiver, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  fprintf(stderr, "usage: see the header of shared_echo.c\n");
  return 2;
}
