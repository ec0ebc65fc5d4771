/* sdp_transcript — the SDP differential conformance cases (issue 18; DESIGN.md §11).
 *
 *   sdp_transcript tcp   every case on ordinary kernel TCP sockets (no shim)
 *   sdp_transcript sdp   the same cases on SDP sockets (under the shim): made with
 *                        socket(AF_INET[6], SOCK_STREAM, 257) or socket(27 / 28, SOCK_STREAM, 0)
 *                        in turn, addresses given to bind/connect with family 27 / 28
 *
 * The cases run over loopback, or over the addresses in SDP_TRANSCRIPT_ADDR (IPv4) and
 * SDP_TRANSCRIPT_ADDR6 (IPv6) when set — addresses of this host on an RDMA device, so that the
 * SDP sockets run over RDMA verbs (tests/vm/sdp_verbs.sh).
 *
 * Each case prints what a TCP program observes — results, errno names, bytes, poll events,
 * ioctl answers, address families — one line per step (also sendfile into the socket, SO_LINGER
 * with a timeout, and the socket passed with SCM_RIGHTS); test_sdp.py runs both modes and requires
 * the transcripts to be identical (the documented deviations print nothing). After the common
 * cases, "sdp" mode prints the SDP-only section (its options, the OFED creation errors, OpenJDK's
 * conversion by dup2), which the driver checks on its own.
 *
 * Plain C, as users' programs. Every blocking step is bounded by alarm(). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define AF_INET_SDP 27
#define AF_INET6_SDP 28
#define PROTO_SDP 257
#define SDP_ZCOPY_THRESH 80
#define SDP_LAST_BIND_ERR 81

static int sdp_mode;
static int form;  /* which SDP creation form the next socket uses (alternates) */

static const char* err_name(int e) {
  const char* n = strerrorname_np(e);
  return n ? n : "?";
}

/* Prints "label = r" or "label = -1 ENAME". */
static long show(const char* label, long r) {
  if (r < 0) printf("%s = -1 %s\n", label, err_name(errno));
  else printf("%s = %ld\n", label, r);
  fflush(stdout);
  return r;
}

static int stream_socket(int family, int flags) {
  if (!sdp_mode) return socket(family, SOCK_STREAM | flags, 0);
  form ^= 1;
  if (form) return socket(family, SOCK_STREAM | flags, PROTO_SDP);
  return socket(family == AF_INET6 ? AF_INET6_SDP : AF_INET_SDP, SOCK_STREAM | flags, 0);
}

/* The addresses the cases use: loopback unless the environment names others. */
static struct in_addr test_addr4;
static struct in6_addr test_addr6;

/* The test address of `family` with `port`, its family as a program of the mode gives it. */
static socklen_t test_address(int family, int port, struct sockaddr_storage* ss) {
  memset(ss, 0, sizeof(*ss));
  if (family == AF_INET6) {
    struct sockaddr_in6* a = (struct sockaddr_in6*)ss;
    a->sin6_family = sdp_mode && form ? AF_INET6_SDP : AF_INET6;
    a->sin6_addr = test_addr6;
    a->sin6_port = htons(port);
    return sizeof(*a);
  }
  struct sockaddr_in* a = (struct sockaddr_in*)ss;
  a->sin_family = sdp_mode && form ? AF_INET_SDP : AF_INET;
  a->sin_addr = test_addr4;
  a->sin_port = htons(port);
  return sizeof(*a);
}

/* Waits (at most 5 s) until `fd` has something to read: at once over loopback TCP, a moment
 * later over RDMA verbs. Prints nothing: the transcripts stay the same. */
static void wait_readable(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  poll(&p, 1, 5000);
}

static int port_of(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (getsockname(fd, (struct sockaddr*)&ss, &len) != 0) return -1;
  return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6*)&ss)->sin6_port
                                        : ((struct sockaddr_in*)&ss)->sin_port);
}

/* A listener on an ephemeral port of the test address. */
static int listener(int family) {
  int fd = stream_socket(family, 0);
  if (fd < 0) { perror("socket"); exit(2); }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_storage ss;
  socklen_t len = test_address(family, 0, &ss);
  if (bind(fd, (struct sockaddr*)&ss, len) != 0 || listen(fd, 8) != 0) { perror("listen"); exit(2); }
  return fd;
}

/* A connected pair: *client (ours) and the accepted *server. */
static void pair(int family, int* client, int* server) {
  int l = listener(family);
  *client = stream_socket(family, 0);
  struct sockaddr_storage ss;
  socklen_t len = test_address(family, port_of(l), &ss);
  if (connect(*client, (struct sockaddr*)&ss, len) != 0) { perror("connect"); exit(2); }
  *server = accept(l, NULL, NULL);
  if (*server < 0) { perror("accept"); exit(2); }
  close(l);
}

static void case_echo(int family) {
  printf("-- echo %s\n", family == AF_INET6 ? "IPv6" : "IPv4");
  int c, s;
  pair(family, &c, &s);
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  getsockname(c, (struct sockaddr*)&ss, &len);
  printf("getsockname family %d len %u\n", ss.ss_family, (unsigned)len);
  len = sizeof(ss);
  getpeername(s, (struct sockaddr*)&ss, &len);
  printf("getpeername family %d len %u\n", ss.ss_family, (unsigned)len);
  char out[100000], in[100000];
  for (size_t i = 0; i < sizeof(out); ++i) out[i] = (char)(i * 7 + 3);
  pid_t child = fork();
  if (child == 0) {  /* the echo side, in a child: SDP fds survive fork */
    close(c);
    size_t got = 0;
    while (got < sizeof(in)) {
      ssize_t n = read(s, in + got, sizeof(in) - got);
      if (n <= 0) _exit(3);
      got += (size_t)n;
    }
    _exit(write(s, in, got) == (ssize_t)got ? 0 : 4);
  }
  close(s);
  show("write 100000", write(c, out, sizeof(out)));
  size_t got = 0;
  while (got < sizeof(in)) {
    ssize_t n = read(c, in + got, sizeof(in) - got);
    if (n <= 0) break;
    got += (size_t)n;
  }
  printf("echoed %zu bytes, %s\n", got, memcmp(in, out, sizeof(out)) == 0 ? "equal" : "DIFFERENT");
  int status = 0;
  waitpid(child, &status, 0);
  printf("echo child exit %d\n", WEXITSTATUS(status));
  close(c);
}

static void case_half_close(void) {
  printf("-- half-close\n");
  int c, s;
  pair(AF_INET, &c, &s);
  show("write", write(c, "question", 8));
  show("shutdown SHUT_WR", shutdown(c, SHUT_WR));
  char buf[64];
  show("server read", read(s, buf, sizeof(buf)));
  show("server read at EOF", read(s, buf, sizeof(buf)));
  show("server write after peer's SHUT_WR", write(s, "answer", 6));
  show("client read", read(c, buf, sizeof(buf)));
  show("client write after SHUT_WR", send(c, "x", 1, MSG_NOSIGNAL));
  show("shutdown SHUT_RDWR (server)", shutdown(s, SHUT_RDWR));
  show("client read at EOF", read(c, buf, sizeof(buf)));
  show("shutdown bad how", shutdown(c, 7));
  close(c);
  close(s);
}

static void case_urgent(int oobinline) {
  printf("-- urgent data, SO_OOBINLINE %d\n", oobinline);
  int c, s;
  pair(AF_INET, &c, &s);
  setsockopt(s, SOL_SOCKET, SO_OOBINLINE, &oobinline, sizeof(oobinline));
  show("send", send(c, "abc", 3, 0));
  show("send MSG_OOB", send(c, "!", 1, MSG_OOB));
  show("send", send(c, "def", 3, 0));
  /* Until the urgent byte is signalled (at once over loopback TCP, a moment over verbs). */
  struct pollfd p = {s, POLLIN | POLLPRI, 0};
  long polled = 0;
  for (int i = 0; i < 500; ++i) {
    polled = poll(&p, 1, 10);
    if (p.revents & POLLPRI) break;
    usleep(10000);  /* (POLLIN alone returns at once) */
  }
  show("poll", polled);
  printf("revents%s%s\n", (p.revents & POLLIN) ? " POLLIN" : "", (p.revents & POLLPRI) ? " POLLPRI" : "");
  int mark = -1;
  show("SIOCATMARK", ioctl(s, SIOCATMARK, &mark));
  printf("at mark %d\n", mark);
  char buf[64] = {0};
  ssize_t n = show("read (stops at the mark)", read(s, buf, sizeof(buf)));
  printf("bytes \"%.*s\"\n", (int)(n > 0 ? n : 0), buf);
  show("SIOCATMARK", ioctl(s, SIOCATMARK, &mark));
  printf("at mark %d\n", mark);
  char oob = 0;
  n = show("recv MSG_OOB", recv(s, &oob, 1, MSG_OOB));
  if (n == 1) printf("urgent byte '%c'\n", oob);
  n = show("read", read(s, buf, sizeof(buf)));
  printf("bytes \"%.*s\"\n", (int)(n > 0 ? n : 0), buf);
  show("recv MSG_OOB again", recv(s, &oob, 1, MSG_OOB | MSG_DONTWAIT));
  close(c);
  close(s);
}

static void case_linger_zero(void) {
  printf("-- SO_LINGER 0: abort\n");
  int c, s;
  pair(AF_INET, &c, &s);
  struct linger l = {1, 0};
  show("setsockopt SO_LINGER {1,0}", setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof(l)));
  struct linger got;
  socklen_t len = sizeof(got);
  show("getsockopt SO_LINGER", getsockopt(c, SOL_SOCKET, SO_LINGER, &got, &len));
  printf("linger %d %d\n", got.l_onoff, got.l_linger);
  show("close", close(c));
  usleep(50000);
  char buf[8];
  show("peer read", read(s, buf, sizeof(buf)));
  close(s);
}

static void case_close_unread(void) {
  printf("-- close with unread data: reset\n");
  int c, s;
  pair(AF_INET, &c, &s);
  show("write", write(c, "unread", 6));
  wait_readable(s);
  show("server close", close(s));
  usleep(50000);
  char buf[8];
  show("client read", read(c, buf, sizeof(buf)));
  close(c);
}

static void case_errors(void) {
  printf("-- errors\n");
  int l = listener(AF_INET);
  int port = port_of(l);
  struct sockaddr_storage ss;
  int fd = stream_socket(AF_INET, 0);
  socklen_t len = test_address(AF_INET, port, &ss);
  show("bind to a port in use", bind(fd, (struct sockaddr*)&ss, len));
  close(fd);
  close(l);  /* nothing listens there now */
  fd = stream_socket(AF_INET, 0);
  len = test_address(AF_INET, port, &ss);
  show("connect to a closed port", connect(fd, (struct sockaddr*)&ss, len));
  close(fd);
  int c, s;
  pair(AF_INET, &c, &s);
  len = test_address(AF_INET, port_of(s), &ss);
  show("connect again", connect(c, (struct sockaddr*)&ss, len));
  close(c);
  close(s);
  fd = stream_socket(AF_INET, 0);
  struct sockaddr_in other = {0};
  other.sin_family = AF_INET;
  inet_pton(AF_INET, "192.0.2.1", &other.sin_addr);  /* TEST-NET-1: no interface has it */
  show("bind to an address not here", bind(fd, (struct sockaddr*)&other, sizeof(other)));
  if (getuid() != 0) {
    len = test_address(AF_INET, 80, &ss);
    show("bind to a reserved port", bind(fd, (struct sockaddr*)&ss, len));
  }
  char buf[4];
  show("read unconnected", read(fd, buf, sizeof(buf)));
  show("send unconnected", send(fd, "x", 1, MSG_NOSIGNAL));
  show("accept unlistened", accept(fd, NULL, NULL));
  close(fd);
}

static void case_nonblocking(void) {
  printf("-- non-blocking connect and I/O\n");
  int l = listener(AF_INET);
  int fd = stream_socket(AF_INET, SOCK_NONBLOCK);
  struct sockaddr_storage ss;
  socklen_t len = test_address(AF_INET, port_of(l), &ss);
  long r = connect(fd, (struct sockaddr*)&ss, len);
  /* Loopback may complete at once; a program must accept both. */
  printf("connect %s\n", r == 0 || errno == EINPROGRESS ? "0 or EINPROGRESS" : err_name(errno));
  struct pollfd p = {fd, POLLOUT, 0};
  show("poll POLLOUT", poll(&p, 1, 2000));
  int soerr = -1;
  socklen_t elen = sizeof(soerr);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &elen);
  printf("SO_ERROR %d\n", soerr);
  int s = accept(l, NULL, NULL);
  char buf[16];
  show("read with nothing there", read(fd, buf, sizeof(buf)));
  show("server write", write(s, "0123456789", 10));
  wait_readable(fd);
  usleep(20000);  /* (all ten bytes: one write over either transport) */
  int inq = -1, outq = -1;
  show("SIOCINQ", ioctl(fd, SIOCINQ, &inq));
  printf("in queue %d\n", inq);
  show("SIOCOUTQ", ioctl(s, SIOCOUTQ, &outq));
  printf("out queue %d\n", outq);
  show("read", read(fd, buf, sizeof(buf)));
  close(fd);
  close(s);
  close(l);
}

static void case_options(void) {
  printf("-- options\n");
  int fd = stream_socket(AF_INET, 0);
  int v = 1;
  socklen_t len = sizeof(v);
  show("TCP_NODELAY on", setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v)));
  v = -1;
  show("TCP_NODELAY get", getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &len));
  printf("TCP_NODELAY %d\n", v != 0);
  int opts[] = {SO_REUSEADDR, SO_KEEPALIVE, SO_DEBUG, SO_OOBINLINE};
  const char* names[] = {"SO_REUSEADDR", "SO_KEEPALIVE", "SO_DEBUG", "SO_OOBINLINE"};
  for (int i = 0; i < 4; ++i) {
    v = 1;
    long r = setsockopt(fd, SOL_SOCKET, opts[i], &v, sizeof(v));
    if (opts[i] == SO_DEBUG && r < 0 && errno == EACCES) {  /* unprivileged: as the kernel says */
      printf("%s set = -1 EACCES\n", names[i]);
      continue;
    }
    printf("%s set = %ld\n", names[i], r);
    v = -1;
    len = sizeof(v);
    getsockopt(fd, SOL_SOCKET, opts[i], &v, &len);
    printf("%s = %d\n", names[i], v);
  }
  len = sizeof(v);
  show("SO_TYPE", getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len));
  printf("type %d\n", v);
  show("SO_DOMAIN", getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len));
  printf("domain %d\n", v);
  close(fd);
}

static void case_sendfile_linger_passing(void) {
  printf("-- sendfile, SO_LINGER with a timeout, SCM_RIGHTS\n");
  int c, s;
  pair(AF_INET, &c, &s);
  char path[] = "/tmp/sdp_transcript.XXXXXX";
  int file = mkstemp(path);
  unlink(path);
  char data[5000];
  for (size_t i = 0; i < sizeof(data); ++i) data[i] = (char)('a' + i % 26);
  if (write(file, data, sizeof(data)) != (ssize_t)sizeof(data)) exit(2);
  off_t off = 0;
  show("sendfile 5000", sendfile(c, file, &off, sizeof(data)));
  close(file);
  char in[5000];
  size_t got = 0;
  while (got < sizeof(in)) {
    ssize_t n = read(s, in + got, sizeof(in) - got);
    if (n <= 0) break;
    got += (size_t)n;
  }
  printf("received %zu bytes, %s\n", got, memcmp(in, data, sizeof(data)) == 0 ? "equal" : "DIFFERENT");
  /* The connected socket passed over a Unix socket, used through the received fd. */
  int sv[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  char cbuf[CMSG_SPACE(sizeof(int))] = {0};
  struct iovec iov = {"f", 1};
  struct msghdr m = {0};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = cbuf;
  m.msg_controllen = sizeof(cbuf);
  struct cmsghdr* cm = CMSG_FIRSTHDR(&m);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &c, sizeof(int));
  show("sendmsg SCM_RIGHTS", sendmsg(sv[0], &m, 0));
  char one;
  struct msghdr r = {0};
  struct iovec riov = {&one, 1};
  r.msg_iov = &riov;
  r.msg_iovlen = 1;
  char rbuf[CMSG_SPACE(sizeof(int))];
  r.msg_control = rbuf;
  r.msg_controllen = sizeof(rbuf);
  show("recvmsg SCM_RIGHTS", recvmsg(sv[1], &r, 0));
  int passed = -1;
  memcpy(&passed, CMSG_DATA(CMSG_FIRSTHDR(&r)), sizeof(int));
  close(c);
  close(sv[0]);
  close(sv[1]);
  show("write through the passed fd", write(passed, "passed", 6));
  show("peer read", read(s, in, sizeof(in)));
  struct linger l = {1, 2};
  show("setsockopt SO_LINGER {1,2}", setsockopt(passed, SOL_SOCKET, SO_LINGER, &l, sizeof(l)));
  show("write", write(passed, "bye", 3));
  show("close (lingers until sent)", close(passed));
  show("peer read", read(s, in, sizeof(in)));
  show("peer read at EOF", read(s, in, sizeof(in)));
  close(s);
}

/* Only SDP sockets have these; "sdp" mode only. */
static void sdp_only(void) {
  printf("== SDP only\n");
  int fd = socket(AF_INET, SOCK_STREAM, PROTO_SDP);
  int v = -1;
  socklen_t len = sizeof(v);
  show("SDP_ZCOPY_THRESH get", getsockopt(fd, IPPROTO_TCP, SDP_ZCOPY_THRESH, &v, &len));
  printf("zcopy %d\n", v);
  v = 4096;
  show("SDP_ZCOPY_THRESH set", setsockopt(fd, IPPROTO_TCP, SDP_ZCOPY_THRESH, &v, sizeof(v)));
  len = sizeof(v);
  getsockopt(fd, IPPROTO_TCP, SDP_ZCOPY_THRESH, &v, &len);
  printf("zcopy %d\n", v);
  struct sockaddr_in other = {0};
  other.sin_family = AF_INET_SDP;
  inet_pton(AF_INET, "192.0.2.1", &other.sin_addr);
  show("bind to an address not here", bind(fd, (struct sockaddr*)&other, sizeof(other)));
  len = sizeof(v);
  show("SDP_LAST_BIND_ERR", getsockopt(fd, IPPROTO_TCP, SDP_LAST_BIND_ERR, &v, &len));
  printf("last bind error %s\n", v < 0 ? err_name(-v) : "none");
  v = 1;
  show("SO_KEEPALIVE at level 27", setsockopt(fd, AF_INET_SDP, SO_KEEPALIVE, &v, sizeof(v)));
  len = sizeof(v);
  getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &len);
  printf("SO_KEEPALIVE %d\n", v);
  show("another option at level 27", setsockopt(fd, AF_INET_SDP, SO_DEBUG, &v, sizeof(v)));
  close(fd);
  show("socket(27, SOCK_DGRAM, 0)", socket(AF_INET_SDP, SOCK_DGRAM, 0));
  show("socket(27, SOCK_STREAM, IPPROTO_UDP)", socket(AF_INET_SDP, SOCK_STREAM, IPPROTO_UDP));
  show("socket(AF_INET, SOCK_DGRAM, 257)", socket(AF_INET, SOCK_DGRAM, PROTO_SDP));
  show("socket(27, SOCK_STREAM | 0x100000, 0)", socket(AF_INET_SDP, SOCK_STREAM | 0x100000, 0));
  /* OpenJDK's conversion: an ordinary TCP socket, an SDP socket dup2'ed over it. */
  int tcp = socket(AF_INET, SOCK_STREAM, 0);
  len = sizeof(v);
  show("plain TCP: SDP_ZCOPY_THRESH", getsockopt(tcp, IPPROTO_TCP, SDP_ZCOPY_THRESH, &v, &len));
  int s = socket(AF_INET_SDP, SOCK_STREAM, 0);
  show("dup2 SDP over TCP", dup2(s, tcp) == tcp ? 0 : -1);
  close(s);
  len = sizeof(v);
  show("converted: SDP_ZCOPY_THRESH", getsockopt(tcp, IPPROTO_TCP, SDP_ZCOPY_THRESH, &v, &len));
  int d = dup(tcp);
  close(tcp);
  len = sizeof(v);
  show("its dup: SDP_ZCOPY_THRESH", getsockopt(d, IPPROTO_TCP, SDP_ZCOPY_THRESH, &v, &len));
  int l = listener(AF_INET);
  struct sockaddr_storage ss;
  len = test_address(AF_INET, port_of(l), &ss);
  ((struct sockaddr_in*)&ss)->sin_family = AF_INET_SDP;
  show("converted: connect with family 27", connect(d, (struct sockaddr*)&ss, len));
  int a = accept(l, NULL, NULL);
  len = sizeof(v);
  show("accepted: SDP_ZCOPY_THRESH", getsockopt(a, IPPROTO_TCP, SDP_ZCOPY_THRESH, &v, &len));
  close(a);
  close(d);
  close(l);
  len = sizeof(v);
  show("closed number: SDP_ZCOPY_THRESH", getsockopt(d, IPPROTO_TCP, SDP_ZCOPY_THRESH, &v, &len));
}

int main(int argc, char** argv) {
  if (argc != 2 || (strcmp(argv[1], "tcp") && strcmp(argv[1], "sdp"))) {
    fprintf(stderr, "usage: sdp_transcript tcp|sdp\n");
    return 2;
  }
  sdp_mode = strcmp(argv[1], "sdp") == 0;
  test_addr4.s_addr = htonl(INADDR_LOOPBACK);
  test_addr6 = in6addr_loopback;
  const char* a4 = getenv("SDP_TRANSCRIPT_ADDR");
  const char* a6 = getenv("SDP_TRANSCRIPT_ADDR6");
  if ((a4 && inet_pton(AF_INET, a4, &test_addr4) != 1) ||
      (a6 && inet_pton(AF_INET6, a6, &test_addr6) != 1)) {
    fprintf(stderr, "sdp_transcript: bad SDP_TRANSCRIPT_ADDR or SDP_TRANSCRIPT_ADDR6\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  alarm(60);
  case_echo(AF_INET);
  case_echo(AF_INET6);
  case_half_close();
  case_urgent(0);
  case_urgent(1);
  case_linger_zero();
  case_close_unread();
  case_errors();
  case_nonblocking();
  case_options();
  case_sendfile_linger_passing();
  if (sdp_mode) sdp_only();
  printf("== end\n");
  return 0;
}
