// rds_tools_replay: replays the system-call sequences of Oracle's rds-tools (rds-ping, rds-info,
// rds-stress) as described in shared/reference/rds-tools.md, so that the integration drivers can
// check the shim against exactly what those unmodified binaries do. Written from the reference
// (§ numbers below); no rds-tools code is copied. The constants are the tools' own header's, i.e.
// the Oracle/UEK numbering (§2): SOL_RDS option 8 = RDS_CONN_RESET (12-byte struct rds_reset),
// 11 = RDS6_CONN_RESET, 12 = SO_RDS_INQ, cmsg 12 = RDS_CMSG_INQ.
//
// Built WITHOUT the shim and run under LD_PRELOAD by test_rds_ping.py, test_rds_info.py and
// test_rds_stress.py.
//
// Modes (argv[1], or the program's name rds-ping / rds-info / rds-stress; default: stress):
//   rds_tools_replay ping [-c count] [-i interval] [-I src] [-Q tos] [-n nsockets] dst     (§4)
//   rds_tools_replay info [-a] [-c] [-k] [-n] [-p] [-r] [-s] [-t] [-T] [-I] [-v]           (§5)
//   rds_tools_replay [stress] -r addr [-s addr] [-p port] [-q bytes] [-a bytes] [-d depth]
//        [-t tasks] [-T secs] [-o] [-Q tos] [-v] [-V] [-z] [--use-cong-monitor 0|1]
//        [--connect-retries n] [--disable-inq] [--reset] [--sync-always-bursty]             (§3)
//   --sync-always-bursty: 2.3.11's start-up for its burst modes, ftok("/sys/module/rds", 'S')
//   and semget (the burst timing itself involves no RDS call); --sync-key-only stops there.
//
// Output is the tools' (same lines, same order of calls); lines starting with "replay:" are
// additions for the drivers (ping: the source address and port of every reply; stress: the exact
// per-process totals after the children were reaped: messages of each kind, data messages
// that carried RDS_CMSG_INQ, RDS_CMSG_CONG_UPDATE notifications). RDS_REPLAY_TRACE=1 in the environment
// traces every RDS_INFO getsockopt call on stderr ("trace getsockopt ...").
//
// What is simplified (the reference marks it as needing RDMA or other UEK-only machinery, or
// it has no bearing on the RDS calls): rds-stress -D/RDMA, --async, -c (CPU soakers), -R,
// --show-*, --always-bursty, --cancel-sent-to, IPv6 traffic (IPv6 is supported by ping, info
// and --reset). Those options are rejected with exit 2 (usage).
//
// Exit status: as the tools (§3.7, §4, §5): 0 ok, 1 die(), 2 usage; rds-ping 1 when no reply.

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "preload_check.h"

namespace {

// ---------------------------------------------------------------------------------------------
// The tools' header (rds-tools.md §2): Oracle/UEK numbering.

constexpr int kDefaultPfRds = 21;
constexpr int kDefaultSolRds = 276;
constexpr int kSolRdsLiteral = 276;  // rds-stress passes SO_RDS_INQ at a literal 276 (§3.2 step 9)

constexpr int kRdsCongMonitor = 6;
constexpr int kRdsConnReset = 8;    // UEK: struct rds_reset (12 bytes)
constexpr int kRds6ConnReset = 11;  // UEK: struct rds6_reset (36 bytes)
constexpr int kSoRdsInq = 12;       // UEK

constexpr int kCmsgRdmaDest = 2;
constexpr int kCmsgRdmaSendStatus = 4;
constexpr int kCmsgCongUpdate = 5;
constexpr int kCmsgInq = 12;  // UEK (upstream 12 is RDS_CMSG_ZCOPY_COOKIE)

constexpr unsigned long kSiocRdsSetTos = 0x89E0;  // SIOCPROTOPRIVATE

constexpr int kInfoCounters = 10000;
constexpr int kInfoConnections = 10001;
constexpr int kInfoSendMessages = 10003;
constexpr int kInfoRetransMessages = 10004;
constexpr int kInfoRecvMessages = 10005;
constexpr int kInfoSockets = 10006;
constexpr int kInfoTcpSockets = 10007;
constexpr int kInfoIbConnections = 10008;
constexpr int kInfo6Connections = 10011;
constexpr int kInfo6SendMessages = 10012;
constexpr int kInfo6RetransMessages = 10013;
constexpr int kInfo6RecvMessages = 10014;
constexpr int kInfo6Sockets = 10015;
constexpr int kInfo6TcpSockets = 10016;
constexpr int kInfo6IbConnections = 10017;
constexpr int kInfoConnPaths = 10020;   // UEK only
constexpr int kInfo6ConnPaths = 10021;  // UEK only

struct RdsReset {  // UEK struct rds_reset: natural alignment, 12 bytes
  uint8_t tos;
  in_addr src;
  in_addr dst;
};
struct Rds6Reset {  // UEK struct rds6_reset: 36 bytes
  uint8_t tos;
  in6_addr src;
  in6_addr dst;
};
static_assert(sizeof(RdsReset) == 12 && sizeof(Rds6Reset) == 36);

const char *progname = "rds_tools_replay";
int pf_rds = kDefaultPfRds;
int sol_rds = kDefaultSolRds;

[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fflush(stdout);
  exit(1);
}

[[noreturn]] void die_errno(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void die_errno(const char *fmt, ...) {
  int e = errno;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, ", errno: %d (%s)\n", e, strerror(e));
  fflush(stdout);
  exit(1);
}

// pfhack (§1.4): the number in /proc/sys/net/rds/{pf_rds,sol_rds} if the file exists (it must
// then parse), else the defaults.
int discover(const char *path, int fallback) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return fallback;
  char buf[32] = {};
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  char *end = nullptr;
  long v = n > 0 ? strtol(buf, &end, 0) : 0;
  if (n <= 0 || end == buf || (*end && *end != '\n')) die("%s: cannot parse %s\n", progname, path);
  return static_cast<int>(v);
}

void pfhack() {
  pf_rds = discover("/proc/sys/net/rds/pf_rds", kDefaultPfRds);
  sol_rds = discover("/proc/sys/net/rds/sol_rds", kDefaultSolRds);
}

// strtoull with K/M/G suffixes, as the tools' parse_long/parse_ull.
bool parse_long(const char *ptr, unsigned long *ret) {
  char *end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(ptr, &end, 0);
  if (end == ptr || errno) return false;
  switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
  }
  if (*end) return false;
  *ret = static_cast<unsigned long>(v);
  return true;
}

union SockaddrIp {
  sockaddr sa;
  sockaddr_in v4;
  sockaddr_in6 v6;
};

// getaddrinfo, numeric first (as rds-ping 2.3.11 does).
bool parse_ip(const char *text, SockaddrIp *out) {
  addrinfo hints = {};
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo *ai = nullptr;
  if (getaddrinfo(text, nullptr, &hints, &ai) != 0 && getaddrinfo(text, nullptr, nullptr, &ai) != 0)
    return false;
  bool ok = false;
  if (ai->ai_family == AF_INET || ai->ai_family == AF_INET6) {
    memset(out, 0, sizeof *out);
    memcpy(out, ai->ai_addr, ai->ai_addrlen);
    ok = true;
  }
  freeaddrinfo(ai);
  return ok;
}

socklen_t ip_len(const SockaddrIp &a) {
  return a.sa.sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

std::string ip_str(const SockaddrIp &a) {
  char b[INET6_ADDRSTRLEN] = "?";
  if (a.sa.sa_family == AF_INET) inet_ntop(AF_INET, &a.v4.sin_addr, b, sizeof b);
  if (a.sa.sa_family == AF_INET6) inet_ntop(AF_INET6, &a.v6.sin6_addr, b, sizeof b);
  return b;
}

unsigned ip_port(const SockaddrIp &a) {
  return ntohs(a.sa.sa_family == AF_INET6 ? a.v6.sin6_port : a.v4.sin_port);
}

bool same_ip(const SockaddrIp &a, const SockaddrIp &b) {
  if (a.sa.sa_family != b.sa.sa_family) return false;
  if (a.sa.sa_family == AF_INET) return a.v4.sin_addr.s_addr == b.v4.sin_addr.s_addr;
  return memcmp(&a.v6.sin6_addr, &b.v6.sin6_addr, sizeof(in6_addr)) == 0;
}

long usec_sub(const timeval &a, const timeval &b) {
  return static_cast<long>((a.tv_sec - b.tv_sec) * 1000000L + (a.tv_usec - b.tv_usec));
}

// =============================================================================================
// rds-ping (§4)

struct PingSocket {
  int fd = -1;
  unsigned sent_id = 0;
  timeval sent_ts = {};
  unsigned nreplies = 0;
  bool outstanding = false;
};

unsigned long ping_count = 0;
timeval ping_wait = {1, 1};  // 1.000001 s
SockaddrIp ping_src = {};
SockaddrIp ping_dst = {};
unsigned long ping_tos = 0;  // an unsigned long: rds-ping passes &opt_tos to SIOCRDSSETTOS
unsigned long ping_nsockets = 8;

bool parse_interval(const char *ptr, timeval *ret) {
  char *end = nullptr;
  double seconds = strtod(ptr, &end);
  if (end == ptr) return false;
  if (!strcmp(end, "ms") || !strcmp(end, "msec")) seconds *= 1e-3;
  else if (!strcmp(end, "us") || !strcmp(end, "usec")) seconds *= 1e-6;
  else if (*end) return false;
  ret->tv_sec = static_cast<long>(seconds);
  ret->tv_usec = static_cast<long>((seconds - ret->tv_sec) * 1e6);
  return true;
}

// §4 step 1: one RDS socket; the source address (once) from a connected UDP socket;
// bind(src:0); SIOCRDSSETTOS with a pointer to an unsigned long.
int ping_socket() {
  int fd = socket(pf_rds, SOCK_SEQPACKET, 0);
  if (fd < 0) die_errno("unable to create RDS socket");
  if (ping_src.sa.sa_family == AF_UNSPEC) {
    int ufd = socket(ping_dst.sa.sa_family, SOCK_DGRAM, 0);
    if (ufd < 0) die_errno("unable to create UDP socket");
    SockaddrIp probe = ping_dst;
    if (probe.sa.sa_family == AF_INET) probe.v4.sin_port = htons(1);
    else probe.v6.sin6_port = htons(1);
    if (connect(ufd, &probe.sa, ip_len(probe)) < 0)
      die_errno("unable to connect to %s", ip_str(ping_dst).c_str());
    socklen_t alen = sizeof ping_src;
    if (getsockname(ufd, &ping_src.sa, &alen) < 0) die_errno("getsockname failed");
    close(ufd);
  }
  if (ping_src.sa.sa_family == AF_INET) ping_src.v4.sin_port = 0;
  else ping_src.v6.sin6_port = 0;
  if (bind(fd, &ping_src.sa, ip_len(ping_src)) != 0) die_errno("bind() failed");
  if (ping_tos && ioctl(fd, kSiocRdsSetTos, &ping_tos)) die_errno("ERROR: failed to set TOS\n");
  return fd;
}

void report_packet(PingSocket *sp, const timeval *now, const SockaddrIp *from, int err) {
  printf(" %3u:", sp->sent_id);
  if (now) printf(" %ld usec", usec_sub(*now, sp->sent_ts));
  if (from && !same_ip(*from, ping_dst)) printf(" (%s)", ip_str(*from).c_str());
  if (sp->nreplies) printf(" DUP!");
  if (err) printf(" ERROR: %s", strerror(err));
  printf("\n");
  sp->nreplies++;
}

[[noreturn]] void ping_usage(const char *complaint) {
  fprintf(stderr,
          "%s\nUsage: rds-ping [options] dst_addr\nOptions:\n"
          " -c count      limit packet count\n"
          " -i interval   wait interval between pings\n"
          " -I interface  source IP address\n"
          " -Q tos        type of service\n"
          " -n number     number of RDS sockets used\n",
          complaint);
  exit(1);
}

int ping_main(int argc, char **argv) {
  bool nsockets_given = false;
  int c;
  while ((c = getopt(argc, argv, "c:i:I:Q:n:")) != -1) {
    switch (c) {
      case 'c':
        if (!parse_long(optarg, &ping_count)) die("Bad packet count <%s>\n", optarg);
        break;
      case 'i':
        if (!parse_interval(optarg, &ping_wait)) die("Bad wait time <%s>\n", optarg);
        break;
      case 'I':
        if (!parse_ip(optarg, &ping_src)) die("Unknown source address <%s>\n", optarg);
        break;
      case 'Q':
        if (!parse_long(optarg, &ping_tos)) die("Bad tos <%s>\n", optarg);
        break;
      case 'n':
        if (!parse_long(optarg, &ping_nsockets) || ping_nsockets < 1 || ping_nsockets > 32)
          die("Invalid number of sockets <%s>\n", optarg);
        nsockets_given = true;
        break;
      default:
        ping_usage("Unknown option");
    }
  }
  if (optind + 1 != argc) ping_usage("Missing destination address");
  if (!parse_ip(argv[optind], &ping_dst)) die("Cannot parse destination address <%s>\n", argv[optind]);
  if (ping_src.sa.sa_family != AF_UNSPEC && ping_src.sa.sa_family != ping_dst.sa.sa_family)
    die("Source and destination address family are not the same\n");
  if (!nsockets_given && ping_count && ping_count < ping_nsockets) ping_nsockets = ping_count;

  std::vector<PingSocket> sockets(ping_nsockets);
  std::vector<pollfd> pfd(ping_nsockets);
  for (unsigned long i = 0; i < ping_nsockets; ++i) {
    sockets[i].fd = ping_socket();
    pfd[i].fd = sockets[i].fd;
    pfd[i].events = POLLIN;
  }
  SockaddrIp dst = ping_dst;  // port 0
  if (dst.sa.sa_family == AF_INET) dst.v4.sin_port = 0;
  else dst.v6.sin6_port = 0;

  unsigned sent = 0, recv = 0;
  unsigned long next = 0;
  timeval next_ts;
  gettimeofday(&next_ts, nullptr);
  while (true) {
    if (ping_count && recv >= ping_count) break;
    timeval now;
    gettimeofday(&now, nullptr);
    if (timercmp(&now, &next_ts, >=)) {
      PingSocket *sp = &sockets[next];
      if (ping_count && sent >= ping_count) break;
      // A socket whose ping is still unanswered is not reused: the rotation waits on it.
      if (!sp->outstanding) {
        timeradd(&next_ts, &ping_wait, &next_ts);
        int err = 0;
        if (sendto(sp->fd, nullptr, 0, 0, &dst.sa, ip_len(dst))) err = errno;
        sp->sent_id = ++sent;
        sp->sent_ts = now;
        sp->nreplies = 0;
        sp->outstanding = err == 0;
        next = (next + 1) % ping_nsockets;
        if (err) {
          static unsigned nerrs = 0;
          report_packet(sp, nullptr, nullptr, err);
          if (err == EINVAL && nerrs++ == 0)
            printf("      Maybe your kernel does not support rds ping yet\n");
        }
      }
    }
    long deadline = usec_sub(next_ts, now);
    int ret = poll(pfd.data(), ping_nsockets, static_cast<int>(deadline / 1000));
    if (ret < 0) {
      if (errno == EINTR) continue;
      die_errno("poll");
    }
    if (ret == 0) continue;
    for (unsigned long i = 0; i < ping_nsockets; ++i) {
      PingSocket *sp = &sockets[i];
      if (!(pfd[i].revents & POLLIN)) continue;
      SockaddrIp from = {};
      socklen_t alen = sizeof from;
      ssize_t r = recvfrom(sp->fd, nullptr, 0, MSG_DONTWAIT, &from.sa, &alen);
      gettimeofday(&now, nullptr);
      if (r < 0) {
        if (errno != EAGAIN && errno != EINTR) report_packet(sp, &now, nullptr, errno);
      } else {
        report_packet(sp, &now, &from, 0);
        printf("replay: reply seq %u from %s port %u len %zd namelen %u\n", sp->sent_id,
               ip_str(from).c_str(), ip_port(from), r, static_cast<unsigned>(alen));
        sp->outstanding = false;
        recv++;
      }
    }
  }
  printf("replay: sent %u received %u\n", sent, recv);
  fflush(stdout);
  return recv == 0;
}

// =============================================================================================
// rds-info (§5)

#pragma pack(push, 1)
struct InfoCounter {
  uint8_t name[32];
  uint64_t value;
};
struct InfoSocket {  // UEK 36: upstream 28 + pid + cong
  uint32_t sndbuf;
  uint32_t bound_addr;
  uint32_t connected_addr;
  uint16_t bound_port;
  uint16_t connected_port;
  uint32_t rcvbuf;
  uint64_t inum;
  int32_t pid;
  int32_t cong;
};
struct Info6Socket {  // UEK 60: upstream 52 + pid + cong
  uint32_t sndbuf;
  in6_addr bound_addr;
  in6_addr connected_addr;
  uint16_t bound_port;
  uint16_t connected_port;
  uint32_t rcvbuf;
  uint64_t inum;
  int32_t pid;
  int32_t cong;
};
struct InfoConnection {  // 42
  uint64_t next_tx_seq;
  uint64_t next_rx_seq;
  uint32_t laddr;
  uint32_t faddr;
  uint8_t transport[16];
  uint8_t flags;
  uint8_t tos;
};
struct Info6Connection {  // UEK 66 (upstream 65, no tos)
  uint64_t next_tx_seq;
  uint64_t next_rx_seq;
  in6_addr laddr;
  in6_addr faddr;
  uint8_t transport[16];
  uint8_t flags;
  uint8_t tos;
};
struct InfoMessage {  // 26
  uint64_t seq;
  uint32_t len;
  uint32_t laddr;
  uint32_t faddr;
  uint16_t lport;
  uint16_t fport;
  uint8_t flags;
  uint8_t tos;
};
struct Info6Message {  // 50
  uint64_t seq;
  uint32_t len;
  in6_addr laddr;
  in6_addr faddr;
  uint16_t lport;
  uint16_t fport;
  uint8_t flags;
  uint8_t tos;
};
struct InfoTcpSocket {  // UEK 40 (upstream 41 adds tos)
  uint32_t local_addr;
  uint16_t local_port;
  uint32_t peer_addr;
  uint16_t peer_port;
  uint64_t hdr_rem;
  uint64_t data_rem;
  uint32_t last_sent_nxt;
  uint32_t last_expected_una;
  uint32_t last_seen_una;
};
struct Info6TcpSocket {  // 64
  in6_addr local_addr;
  uint16_t local_port;
  in6_addr peer_addr;
  uint16_t peer_port;
  uint64_t hdr_rem;
  uint64_t data_rem;
  uint32_t last_sent_nxt;
  uint32_t last_expected_una;
  uint32_t last_seen_una;
};
struct InfoPathHeader {  // UEK RDS_INFO_CONN_PATHS item header, 50
  in6_addr local_addr;
  in6_addr peer_addr;
  uint8_t transport[16];
  uint8_t tos;
  uint8_t npaths;
};
struct InfoPath {  // 37
  int64_t attempt_time;
  int64_t connect_time;
  int64_t reset_time;
  uint32_t disconnect_reason;
  uint32_t connect_attempts;
  uint32_t index;
  uint8_t flags;
};
#pragma pack(pop)
struct InfoIbConnection {  // not packed; the upstream prefix of the UEK struct
  uint32_t src_addr;
  uint32_t dst_addr;
  uint8_t src_gid[16];
  uint8_t dst_gid[16];
  uint32_t max_send_wr;
  uint32_t max_recv_wr;
  uint32_t max_send_sge;
  uint32_t rdma_mr_max;
  uint32_t rdma_mr_size;
  uint8_t tos;
  uint8_t sl;
  uint32_t cache_allocs;
};
static_assert(sizeof(InfoCounter) == 40 && sizeof(InfoSocket) == 36 && sizeof(Info6Socket) == 60);
static_assert(sizeof(InfoConnection) == 42 && sizeof(Info6Connection) == 66);
static_assert(sizeof(InfoMessage) == 26 && sizeof(Info6Message) == 50);
static_assert(sizeof(InfoTcpSocket) == 40 && sizeof(Info6TcpSocket) == 64);
static_assert(sizeof(InfoPathHeader) == 50 && sizeof(InfoPath) == 37);
static_assert(sizeof(InfoIbConnection) == 68);

// Walks items at stride `each`, copying min(each, sizeof(T)) bytes into a zeroed T.
template <typename T, typename F>
void for_each_item(const void *data, int each, socklen_t len, F f) {
  const uint8_t *p = static_cast<const uint8_t *>(data);
  while (len > 0 && each > 0) {
    T item;
    memset(&item, 0, sizeof item);
    memcpy(&item, p, static_cast<size_t>(each) < sizeof item ? static_cast<size_t>(each) : sizeof item);
    f(item);
    p += each;
    len -= static_cast<socklen_t>(each) < len ? static_cast<socklen_t>(each) : len;
  }
}

std::string v4(uint32_t be) {
  char b[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &be, b, sizeof b);
  return b;
}

// 2.3.11 -a: v4-mapped addresses are printed as IPv4.
std::string v6(const in6_addr &a) {
  char b[INET6_ADDRSTRLEN];
  if (IN6_IS_ADDR_V4MAPPED(&a)) {
    uint32_t be;
    memcpy(&be, a.s6_addr + 12, 4);
    return v4(be);
  }
  inet_ntop(AF_INET6, &a, b, sizeof b);
  return b;
}

std::string comm_of(int pid) {
  if (pid <= 0) return "-";
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/comm", pid);
  FILE *f = fopen(path, "re");
  if (!f) return "-";
  char buf[64] = {};
  if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
  fclose(f);
  buf[strcspn(buf, "\n")] = 0;
  return buf[0] ? buf : "-";
}

// The tool maps the reported cong value: 0 (not reported) -> -1, -1 (not congested) -> 0.
int cong_shown(int32_t c) { return c == 0 ? -1 : c == -1 ? 0 : c; }

std::string conn_flags(uint8_t flags, const uint8_t transport[16]) {
  uint8_t f = flags | transport[15];  // older UEK kept the flag bits in transport[15]
  std::string s;
  s += (f & 1) ? 's' : '-';
  s += (f & 2) ? 'c' : '-';
  s += ' ';
  s += (f & 4) ? 'C' : '-';
  s += (f & 8) ? 'E' : '-';
  return s;
}

void print_counters(const void *data, int each, socklen_t len, const char *) {
  printf("\nCounters:\n%32s %16s\n", "CounterName", "Value");
  for_each_item<InfoCounter>(data, each, len, [](const InfoCounter &c) {
    char name[33];
    memcpy(name, c.name, 32);
    name[32] = 0;
    printf("%32s %16" PRIu64 "\n", name, c.value);
  });
}

void print_sockets(const void *data, int each, socklen_t len, const char *) {
  printf("\nRDS Sockets:\n%15s %5s %15s %5s %10s %10s %8s %4s %8s %s\n", "BoundAddr", "BPort",
         "ConnAddr", "CPort", "SndBuf", "RcvBuf", "Inode", "Cong", "Pid", "Comm");
  for_each_item<InfoSocket>(data, each, len, [](const InfoSocket &s) {
    printf("%15s %5u %15s %5u %10u %10u %8" PRIu64 " %4d %8d %s\n", v4(s.bound_addr).c_str(),
           ntohs(s.bound_port), v4(s.connected_addr).c_str(), ntohs(s.connected_port), s.sndbuf,
           s.rcvbuf, s.inum, cong_shown(s.cong), s.pid, comm_of(s.pid).c_str());
  });
}

void print_sockets6(const void *data, int each, socklen_t len, const char *) {
  printf("\nRDS Sockets:\n%39s %5s %39s %5s %10s %10s %8s %4s %8s %s\n", "BoundAddr", "BPort",
         "ConnAddr", "CPort", "SndBuf", "RcvBuf", "Inode", "Cong", "Pid", "Comm");
  for_each_item<Info6Socket>(data, each, len, [](const Info6Socket &s) {
    printf("%39s %5u %39s %5u %10u %10u %8" PRIu64 " %4d %8d %s\n", v6(s.bound_addr).c_str(),
           ntohs(s.bound_port), v6(s.connected_addr).c_str(), ntohs(s.connected_port), s.sndbuf,
           s.rcvbuf, s.inum, cong_shown(s.cong), s.pid, comm_of(s.pid).c_str());
  });
}

void print_conns(const void *data, int each, socklen_t len, const char *) {
  printf("\nRDS Connections:\n%15s %15s %4s %16s %16s %5s\n", "LocalAddr", "RemoteAddr", "Tos",
         "NextTX", "NextRX", "Flgs");
  for_each_item<InfoConnection>(data, each, len, [](const InfoConnection &c) {
    printf("%15s %15s %4u %16" PRIu64 " %16" PRIu64 " %5s\n", v4(c.laddr).c_str(),
           v4(c.faddr).c_str(), c.tos, c.next_tx_seq, c.next_rx_seq,
           conn_flags(c.flags, c.transport).c_str());
  });
}

void print_conns6(const void *data, int each, socklen_t len, const char *) {
  printf("\nRDS Connections:\n%39s %39s %4s %16s %16s %5s\n", "LocalAddr", "RemoteAddr", "Tos",
         "NextTX", "NextRX", "Flgs");
  for_each_item<Info6Connection>(data, each, len, [each](const Info6Connection &c) {
    // An upstream 65-byte item has no tos: the copy leaves it 0.
    printf("%39s %39s %4u %16" PRIu64 " %16" PRIu64 " %5s\n", v6(c.laddr).c_str(),
           v6(c.faddr).c_str(), each >= 66 ? c.tos : 0, c.next_tx_seq, c.next_rx_seq,
           conn_flags(c.flags, c.transport).c_str());
  });
}

void print_msgs(const void *data, int each, socklen_t len, const char *what) {
  printf("\n%s Message Queue:\n%15s %5s %15s %5s %4s %16s %10s\n", what, "LocalAddr", "LPort",
         "RemoteAddr", "RPort", "Tos", "Seq", "Bytes");
  for_each_item<InfoMessage>(data, each, len, [](const InfoMessage &m) {
    printf("%15s %5u %15s %5u %4u %16" PRIu64 " %10u\n", v4(m.laddr).c_str(), ntohs(m.lport),
           v4(m.faddr).c_str(), ntohs(m.fport), m.tos, m.seq, m.len);
  });
}

void print_msgs6(const void *data, int each, socklen_t len, const char *what) {
  printf("\n%s Message Queue:\n%39s %5s %39s %5s %4s %16s %10s\n", what, "LocalAddr", "LPort",
         "RemoteAddr", "RPort", "Tos", "Seq", "Bytes");
  for_each_item<Info6Message>(data, each, len, [](const Info6Message &m) {
    printf("%39s %5u %39s %5u %4u %16" PRIu64 " %10u\n", v6(m.laddr).c_str(), ntohs(m.lport),
           v6(m.faddr).c_str(), ntohs(m.fport), m.tos, m.seq, m.len);
  });
}

void print_tcp(const void *data, int each, socklen_t len, const char *) {
  printf("\nTCP Connections:\n%15s %5s %15s %5s %10s %10s %10s %10s %10s\n", "LocalAddr", "LPort",
         "RemoteAddr", "RPort", "HdrRemain", "DataRemain", "SentNxt", "ExpectUna", "SeenUna");
  for_each_item<InfoTcpSocket>(data, each, len, [](const InfoTcpSocket &t) {
    printf("%15s %5u %15s %5u %10" PRIu64 " %10" PRIu64 " %10u %10u %10u\n",
           v4(t.local_addr).c_str(), ntohs(t.local_port), v4(t.peer_addr).c_str(),
           ntohs(t.peer_port), t.hdr_rem, t.data_rem, t.last_sent_nxt, t.last_expected_una,
           t.last_seen_una);
  });
}

void print_tcp6(const void *data, int each, socklen_t len, const char *) {
  printf("\nTCP Connections:\n%39s %5s %39s %5s %10s %10s %10s %10s %10s\n", "LocalAddr", "LPort",
         "RemoteAddr", "RPort", "HdrRemain", "DataRemain", "SentNxt", "ExpectUna", "SeenUna");
  for_each_item<Info6TcpSocket>(data, each, len, [](const Info6TcpSocket &t) {
    printf("%39s %5u %39s %5u %10" PRIu64 " %10" PRIu64 " %10u %10u %10u\n",
           v6(t.local_addr).c_str(), ntohs(t.local_port), v6(t.peer_addr).c_str(),
           ntohs(t.peer_port), t.hdr_rem, t.data_rem, t.last_sent_nxt, t.last_expected_una,
           t.last_seen_una);
  });
}

void print_ib(const void *data, int each, socklen_t len, const char *) {
  printf("\nRDS IB Connections:\n%15s %15s %39s %39s\n", "LocalAddr", "RemoteAddr", "LocalDev",
         "RemoteDev");
  for_each_item<InfoIbConnection>(data, each, len, [](const InfoIbConnection &ic) {
    in6_addr s, d;
    memcpy(&s, ic.src_gid, 16);
    memcpy(&d, ic.dst_gid, 16);
    char sb[INET6_ADDRSTRLEN], db[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, &s, sb, sizeof sb);
    inet_ntop(AF_INET6, &d, db, sizeof db);
    printf("%15s %15s %39s %39s\n", v4(ic.src_addr).c_str(), v4(ic.dst_addr).c_str(), sb, db);
  });
}

void print_paths(const void *data, int each, socklen_t len, const char *) {
  printf("\nRDS Connection Paths:\n%39s %39s %4s %5s %8s %12s %12s %12s %8s %6s\n", "LocalAddr",
         "RemoteAddr", "Tos", "Index", "Flgs", "Attempt", "Connect", "Reset", "Attempts", "Reason");
  const uint8_t *p = static_cast<const uint8_t *>(data);
  while (len > 0 && each >= static_cast<int>(sizeof(InfoPathHeader))) {
    InfoPathHeader h;
    memcpy(&h, p, sizeof h);
    int shown = 0;
    for (int i = 0; i < h.npaths || shown == 0; ++i) {
      InfoPath path = {};
      size_t off = sizeof h + static_cast<size_t>(i) * sizeof(InfoPath);
      if (off + sizeof(InfoPath) <= static_cast<size_t>(each)) memcpy(&path, p + off, sizeof path);
      printf("%39s %39s %4u %5u %8x %12" PRId64 " %12" PRId64 " %12" PRId64 " %8u %6u\n",
             v6(h.local_addr).c_str(), v6(h.peer_addr).c_str(), h.tos, path.index, path.flags,
             path.attempt_time, path.connect_time, path.reset_time, path.connect_attempts,
             path.disconnect_reason);
      shown++;
      if (i + 1 >= h.npaths) break;
    }
    p += each;
    len -= static_cast<socklen_t>(each) < len ? static_cast<socklen_t>(each) : len;
  }
}

using InfoPrinter = void (*)(const void *, int, socklen_t, const char *);

struct InfoSource {
  char letter;
  int opt;
  int opt6;  // -a; 0 = none
  const char *description;
  InfoPrinter print;
  InfoPrinter print6;
  const char *extra;
};

// Output order = option letter code (§5): I, T, c, k, n, p, r, s, t.
const InfoSource kInfoSources[] = {
    {'I', kInfoIbConnections, kInfo6IbConnections, "IB transport connections", print_ib, print_ib, nullptr},
    {'T', kInfoTcpSockets, kInfo6TcpSockets, "TCP transport sockets", print_tcp, print_tcp6, nullptr},
    {'c', kInfoCounters, 0, "statistic counters", print_counters, nullptr, nullptr},
    {'k', kInfoSockets, kInfo6Sockets, "sockets", print_sockets, print_sockets6, nullptr},
    {'n', kInfoConnections, kInfo6Connections, "connections", print_conns, print_conns6, nullptr},
    {'p', kInfoConnPaths, kInfo6ConnPaths, "connection paths", print_paths, print_paths, nullptr},
    {'r', kInfoRecvMessages, kInfo6RecvMessages, "recv queue messages", print_msgs, print_msgs6, "Receive"},
    {'s', kInfoSendMessages, kInfo6SendMessages, "send queue messages", print_msgs, print_msgs6, "Send"},
    {'t', kInfoRetransMessages, kInfo6RetransMessages, "retransmit queue messages", print_msgs, print_msgs6,
     "Retransmit"},
};

bool info_trace = false;

int traced_getsockopt(int fd, int opt, void *data, socklen_t *len) {
  socklen_t before = *len;
  int each = getsockopt(fd, sol_rds, opt, data, len);
  int e = errno;
  if (info_trace) {
    fprintf(stderr, "trace getsockopt opt %d buf %s len_in %u = %d errno %s len_out %u\n", opt,
            data ? "set" : "NULL", before, each, each < 0 ? strerrorname_np(e) : "0", *len);
    fflush(stderr);
  }
  errno = e;
  return each;
}

int info_main(int argc, char **argv) {
  bool given[128] = {};
  int given_options = 0;
  bool use_v6 = false;
  int c;
  while ((c = getopt(argc, argv, "vaITcknprst")) != -1) {
    if (c == 'v') continue;
    if (c == 'a') {
      use_v6 = true;
      continue;
    }
    if (c == '?' || !strchr("ITcknprst", c)) {
      fprintf(stderr, "rds-info: Invalid option '-%c'\n", optopt);
      return 1;
    }
    given[c] = true;
    given_options++;
  }
  info_trace = getenv("RDS_REPLAY_TRACE") && *getenv("RDS_REPLAY_TRACE") == '1';

  int fd = socket(pf_rds, SOCK_SEQPACKET, 0);
  if (fd < 0) {
    fprintf(stderr, "rds-info: Unable to create socket: %s\n", strerror(errno));
    return 1;
  }
  void *data = nullptr;
  socklen_t len = 0;  // reused from one source to the next, as is the buffer
  for (const InfoSource &src : kInfoSources) {
    if (given_options && !given[static_cast<unsigned char>(src.letter)]) continue;
    int opt = use_v6 && src.opt6 ? src.opt6 : src.opt;
    InfoPrinter print = opt == src.opt ? src.print : src.print6;
    bool invalid = false;
    int each;
    while ((each = traced_getsockopt(fd, opt, data, &len)) < 0) {
      if (errno == ENOPROTOOPT && opt == src.opt6 && opt != src.opt) {
        opt = src.opt;  // -a: fall back to the IPv4 variant
        print = src.print;
        continue;
      }
      if (errno != ENOSPC) {
        fprintf(stderr, "rds-info: Unable to get statistics to process the \"%s\" info request: %s\n",
                src.description, strerror(errno));
        invalid = true;
        break;
      }
      void *grown = data ? realloc(data, len) : malloc(len);
      if (!grown) {
        fprintf(stderr, "rds-info: Unable to allocate memory for %u bytes of info: %s\n", len,
                strerror(errno));
        return 1;
      }
      data = grown;
    }
    if (invalid) continue;
    print(data, each, len, src.extra);
    fflush(stdout);
  }
  free(data);  // (rds-info itself leaves it to exit; freed here for LeakSanitizer)
  return 0;
}

// =============================================================================================
// rds-stress (§3)

constexpr const char *kVersion = "2.3.11";
constexpr uint8_t kOpReq = 1;
constexpr uint8_t kOpAck = 2;
constexpr uint8_t kJsonGoReply = 97;

// §3.3: the 63-byte message header. The basic part (seq .. op) is what the receiver checks.
#pragma pack(push, 1)
struct StressHeader {
  uint32_t seq;        // big-endian
  uint32_t from_addr;  // network order
  uint32_t to_addr;
  uint16_t from_port;
  uint16_t to_port;
  uint16_t index;  // big-endian
  uint8_t op;
  // RDMA fields (unused without -D, sent as zeros)
  uint8_t rdma_op;
  uint64_t rdma_addr;
  uint64_t rdma_phyaddr;
  uint64_t rdma_pattern;
  uint64_t rdma_key;
  uint32_t rdma_size;
  uint32_t rdma_vector;
  uint8_t retry;
  uint8_t rdma_remote_err;
  uint8_t pending;
};
#pragma pack(pop)
static_assert(sizeof(StressHeader) == 63);
constexpr size_t kBasicHeader = offsetof(StressHeader, rdma_op);
constexpr uint32_t kMinMsg = sizeof(StressHeader);

struct StressOptions {
  uint32_t req_depth = 1;
  uint32_t req_size = 1024;
  uint32_t ack_size = kMinMsg;
  uint32_t send_addr = 0;     // host order
  uint32_t receive_addr = 0;  // host order
  uint16_t starting_port = 4000;
  uint16_t nr_tasks = 1;
  uint32_t run_time = 0;
  uint8_t summary_only = 0;
  uint8_t tracing = 0;
  uint8_t verify = 0;
  uint8_t use_cong_monitor = 1;
  uint8_t suppress_warnings = 0;
  uint8_t simplex = 0;
  uint8_t tos = 0;
  // 2.3.11 "json options"
  uint8_t disable_inq = 0;
  // local only
  bool passive = false;
  unsigned connect_retries = 0;
};

// The negotiation formats (§3.1 step 3): "V1" = 59 bytes, integers big-endian, addresses in
// host order converted with htonl; "full" = 16-byte version string + V1 + tos + async (77).
constexpr size_t kV1Size = 59;
constexpr size_t kVersionSize = 16;
constexpr size_t kFullSize = kVersionSize + kV1Size + 2;

void put16(uint8_t *p, uint16_t v) { v = htons(v); memcpy(p, &v, 2); }
void put32(uint8_t *p, uint32_t v) { v = htonl(v); memcpy(p, &v, 4); }
uint16_t get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return ntohs(v); }
uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return ntohl(v); }

void encode_v1(const StressOptions &o, uint8_t *b) {
  memset(b, 0, kV1Size);
  put32(b + 0, o.req_depth);
  put32(b + 4, o.req_size);
  put32(b + 8, o.ack_size);
  put32(b + 12, 0);  // rdma_size
  put32(b + 16, o.send_addr);
  put32(b + 20, o.receive_addr);
  put16(b + 24, o.starting_port);
  put16(b + 26, o.nr_tasks);
  put32(b + 28, o.run_time);
  b[32] = o.summary_only;
  b[33] = 0;  // rtprio
  b[34] = o.tracing;
  b[35] = o.verify;
  b[36] = 0;  // show_params
  b[37] = 0;  // show_perfdata
  b[38] = o.use_cong_monitor;
  // 39..43: rdma_use_once, rdma_use_get_mr, rdma_use_fence, rdma_cache_mrs, rdma_key_o_meter
  b[44] = 0;  // suppress_warnings
  b[45] = o.simplex;
  // 46..49 rdma_alignment, 50..53 connect_retries (not used by the peer), 54 show_histogram,
  // 55..58 show_outliers
}

void decode_v1(const uint8_t *b, StressOptions *o) {
  o->req_depth = get32(b + 0);
  o->req_size = get32(b + 4);
  o->ack_size = get32(b + 8);
  if (get32(b + 12) != 0) die("RDMA (-D) requested by the peer is not supported by this replay\n");
  o->send_addr = get32(b + 16);
  o->receive_addr = get32(b + 20);
  o->starting_port = get16(b + 24);
  o->nr_tasks = get16(b + 26);
  o->run_time = get32(b + 28);
  o->summary_only = b[32];
  o->tracing = b[34];
  o->verify = b[35];
  o->use_cong_monitor = b[38];
  o->simplex = b[45];
}

enum Stat { S_REQ_TX_BYTES, S_REQ_RX_BYTES, S_ACK_TX_BYTES, S_ACK_RX_BYTES, S_SENDMSG_USECS,
            S_RTT_USECS,
            S_INQ_MSGS,      // replay only: data messages that carried RDS_CMSG_INQ
            S_CONG_UPDATES,  // replay only: RDS_CMSG_CONG_UPDATE notifications
            NR_STATS };

struct Counter {
  uint64_t nr;
  uint64_t sum;
  uint64_t min;
  uint64_t max;
};

// Shared (MAP_SHARED) between the parent and one child.
struct alignas(256) ChildControl {
  pid_t pid;
  int ready;
  int stopping;
  timeval start;
  Counter cur[NR_STATS];
};

uint64_t load(const uint64_t &v) { return __atomic_load_n(&v, __ATOMIC_RELAXED); }
void store(uint64_t &v, uint64_t x) { __atomic_store_n(&v, x, __ATOMIC_RELAXED); }

void stat_inc(Counter *c, uint64_t val) {
  store(c->nr, c->nr + 1);
  store(c->sum, c->sum + val);
  if (c->min == 0 || (val && val < c->min)) store(c->min, val);
  if (val > c->max) store(c->max, val);
}

struct Task {
  unsigned pending = 0;   // REQs sent, not yet ACKed
  unsigned unacked = 0;   // REQs received, ACK not yet sent
  bool congested = false;
  sockaddr_in src_addr = {};
  sockaddr_in dst_addr = {};
  uint32_t send_seq = 0;
  uint32_t recv_seq = 0;
  uint16_t send_index = 0;
  uint16_t recv_index = 0;
  std::vector<timeval> send_time;
  std::vector<StressHeader> ack_header;
};

const StressOptions *g_opts = nullptr;
std::vector<uint8_t> msg_pattern;

void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void trace(const char *fmt, ...) {
  if (!g_opts || !g_opts->tracing) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
}

void init_msg_pattern(const StressOptions &o) {
  size_t n = o.req_size > o.ack_size ? o.req_size : o.ack_size;
  msg_pattern.resize(n);
  unsigned k = 7;
  for (size_t i = 0; i < n; ++i) {
    k = 37 * (k + 5) + static_cast<unsigned>(i >> 9);
    msg_pattern[i] = static_cast<uint8_t>(k);
  }
}

void check_parent(pid_t parent) {
  if (getppid() != parent) die("parent %u exited\n", static_cast<unsigned>(parent));
}

// §3.2: the per-child socket sequence, in order.
int stress_rds_socket(const StressOptions &o, const sockaddr_in &sin, bool *cong_monitor,
                      bool *inq) {
  int fd = socket(pf_rds, SOCK_SEQPACKET, 0);
  if (fd < 0) die_errno("socket(%d, %d, %d) failed", pf_rds, SOCK_SEQPACKET, 0);
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one))
    die_errno("setsockopt(SO_REUSEADDR) failed");
  if (bind(fd, reinterpret_cast<const sockaddr *>(&sin), sizeof(sockaddr_in)))
    die_errno("bind() failed");

  int bytes = static_cast<int>(o.nr_tasks * o.req_depth * (o.req_size + o.ack_size) * 2);
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes))
    die_errno("setsockopt(SNDBUF, %d) failed", bytes);
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes))
    die_errno("setsockopt(RCVBUF, %d) failed", bytes);
  int val;
  socklen_t optlen = sizeof val;
  if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &val, &optlen)) die_errno("getsockopt(SNDBUF) failed");
  if (val / 2 < bytes && !o.suppress_warnings)
    fprintf(stderr, "getsockopt(SNDBUF) returned %d, we wanted %d * 2\n", val, bytes);
  optlen = sizeof val;
  if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &val, &optlen)) die_errno("getsockopt(RCVBUF) failed");
  if (val / 2 < bytes && !o.suppress_warnings)
    fprintf(stderr, "getsockopt(RCVBUF) returned %d, we need %d * 2\n", val, bytes);

  *cong_monitor = false;
  if (o.use_cong_monitor) {
    if (setsockopt(fd, sol_rds, kRdsCongMonitor, &one, sizeof one) == 0) {
      *cong_monitor = true;
    } else if (errno == ENOPROTOOPT) {
      printf("Kernel does not support congestion monitoring; disabled\n");
      fflush(stdout);
    } else {
      die_errno("setsockopt(RDS_CONG_MONITOR) failed");
    }
  }

  fcntl(fd, F_SETFL, O_NONBLOCK);  // return value ignored, flags overwritten wholesale

  if (o.tos) {
    uint8_t tos = o.tos;
    if (ioctl(fd, kSiocRdsSetTos, &tos)) die_errno("ERROR: failed to set TOS");
  }

  *inq = false;
  if (!o.disable_inq) {
    if (setsockopt(fd, kSolRdsLiteral, kSoRdsInq, &one, sizeof one) == 0) *inq = true;
    else printf("Setting RDS_INQ flag failed errno = %d\n", errno);
  }
  return fd;
}

void build_header(const Task &t, StressHeader *h, uint8_t op, unsigned qindex) {
  memset(h, 0, sizeof *h);
  h->op = op;
  h->seq = htonl(t.send_seq);
  h->from_addr = t.src_addr.sin_addr.s_addr;
  h->from_port = t.src_addr.sin_port;
  h->to_addr = t.dst_addr.sin_addr.s_addr;
  h->to_port = t.dst_addr.sin_port;
  h->index = htons(static_cast<uint16_t>(qindex));
}

std::vector<uint8_t> send_buf;

// §3.4 send: sendmsg(fd, msg, 0) with msg_name = destination, one iovec, no flags.
ssize_t send_packet(int fd, Task *t, const StressHeader &h, uint32_t size) {
  if (send_buf.size() < size) send_buf.resize(size);
  memset(send_buf.data(), 0, size);
  memcpy(send_buf.data(), &h, sizeof h);
  // The sequence number is per (this socket -> that socket), REQs and ACKs alike, and taken at
  // transmission: an ACK header is built when its REQ arrives but may go out after REQs.
  uint32_t seq = htonl(t->send_seq);
  memcpy(send_buf.data() + offsetof(StressHeader, seq), &seq, sizeof seq);
  if (g_opts->verify) memcpy(send_buf.data() + sizeof h, msg_pattern.data(), size - sizeof h);
  iovec iov = {send_buf.data(), size};
  msghdr msg = {};
  msg.msg_name = &t->dst_addr;
  msg.msg_namelen = sizeof t->dst_addr;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  ssize_t ret = sendmsg(fd, &msg, 0);
  if (ret < 0) {
    if (errno != EAGAIN && errno != ENOBUFS) die_errno("sendto() failed");
    return ret;
  }
  if (ret != static_cast<ssize_t>(size)) die("sendto() truncated - %zd\n", ret);
  t->send_seq++;
  return ret;
}

int send_one(int fd, Task *t, ChildControl *ctl) {
  StressHeader h;
  build_header(*t, &h, kOpReq, t->send_index);
  timeval start, stop;
  gettimeofday(&start, nullptr);
  ssize_t ret = send_packet(fd, t, h, g_opts->req_size);
  gettimeofday(&stop, nullptr);
  if (ret < 0) return -1;
  t->send_time[t->send_index] = start;
  stat_inc(&ctl->cur[S_REQ_TX_BYTES], static_cast<uint64_t>(ret));
  stat_inc(&ctl->cur[S_SENDMSG_USECS], static_cast<uint64_t>(usec_sub(stop, start)));
  t->send_index = static_cast<uint16_t>((t->send_index + 1) % g_opts->req_depth);
  t->pending++;
  return 0;
}

int send_ack(int fd, Task *t, unsigned qindex, ChildControl *ctl) {
  ssize_t ret = send_packet(fd, t, t->ack_header[qindex], g_opts->ack_size);
  if (ret < 0) return -1;
  stat_inc(&ctl->cur[S_ACK_TX_BYTES], static_cast<uint64_t>(ret));
  return 0;
}

// Keeps `depth` REQs outstanding and sends the queued ACKs; an internal EAGAIN when poll did
// not report POLLOUT.
int send_anything(int fd, Task *t, ChildControl *ctl, bool can_send) {
  const StressOptions &o = *g_opts;
  bool send_reqs = !(o.simplex && o.passive);  // -o: the passive side only ACKs
  while (t->unacked || (send_reqs && t->pending < o.req_depth)) {
    if (t->unacked) {
      unsigned qindex = (t->recv_index + o.req_depth - t->unacked) % o.req_depth;
      if (!can_send) goto eagain;
      if (send_ack(fd, t, qindex, ctl) < 0) return -1;
      t->unacked--;
    }
    if (send_reqs && t->pending < o.req_depth) {
      if (!can_send) goto eagain;
      if (send_one(fd, t, ctl) < 0) return -1;
    }
  }
  return 0;
eagain:
  errno = EAGAIN;
  return -1;
}

std::vector<uint8_t> recv_buf;

struct RecvResult {
  ssize_t ret;
  bool inq_seen;
  uint8_t inq;
};

// §3.3/§3.4 receive: one recvmsg(MSG_DONTWAIT), cmsgs parsed, every check fatal.
RecvResult recv_one(int fd, std::vector<Task> &tasks, const sockaddr_in &self, ChildControl *ctl) {
  const StressOptions &o = *g_opts;
  RecvResult rr = {-1, false, 0};
  size_t bufsize = o.req_size > o.ack_size ? o.req_size : o.ack_size;
  if (recv_buf.size() < bufsize) recv_buf.resize(bufsize);
  sockaddr_in sin = {};
  alignas(cmsghdr) uint8_t control[256];
  iovec iov = {recv_buf.data(), bufsize};
  msghdr msg = {};
  msg.msg_name = &sin;
  msg.msg_namelen = sizeof sin;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t ret = recvmsg(fd, &msg, MSG_DONTWAIT);
  timeval tstamp;
  gettimeofday(&tstamp, nullptr);
  if (ret < 0) {
    if (errno != EAGAIN && errno != EINTR) die_errno("recvmsg failed");
    return rr;
  }
  for (cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != sol_rds) continue;
    switch (c->cmsg_type) {
      case kCmsgCongUpdate: {
        uint64_t mask;
        memcpy(&mask, CMSG_DATA(c), sizeof mask);
        for (Task &t : tasks) {
          if (mask & (1ULL << (ntohs(t.dst_addr.sin_port) % 64))) t.congested = false;
        }
        trace("cong update mask %" PRIx64 "\n", mask);
        stat_inc(&ctl->cur[S_CONG_UPDATES], 1);
        break;
      }
      case kCmsgRdmaDest:
      case kCmsgRdmaSendStatus:
        break;  // RDMA only
      case kCmsgInq:
        rr.inq_seen = true;
        rr.inq = *CMSG_DATA(c);  // the tool reads only the first byte
        break;
      default:
        break;
    }
  }
  rr.ret = ret;
  if (ret == 0) return rr;  // only control messages
  if (rr.inq_seen) stat_inc(&ctl->cur[S_INQ_MSGS], 1);

  if (msg.msg_namelen < sizeof(sockaddr_in))
    die("socklen = %u < sizeof(sin) (%zu)\n", msg.msg_namelen, sizeof(sockaddr_in));
  unsigned task_index = static_cast<unsigned>(ntohs(sin.sin_port) - o.starting_port - 1);
  if (task_index >= o.nr_tasks) die("received bad task index %u\n", task_index);
  Task &t = tasks[task_index];
  if (static_cast<size_t>(ret) < sizeof(StressHeader)) die("recvfrom() returned short data: %zd\n", ret);
  const StressHeader *in = reinterpret_cast<const StressHeader *>(recv_buf.data());
  unsigned expect_index;
  switch (in->op) {
    case kOpReq:
      stat_inc(&ctl->cur[S_REQ_RX_BYTES], static_cast<uint64_t>(ret));
      if (ret != static_cast<ssize_t>(o.req_size)) die("req size %zd, not %u\n", ret, o.req_size);
      expect_index = t.recv_index;
      break;
    case kOpAck:
      stat_inc(&ctl->cur[S_ACK_RX_BYTES], static_cast<uint64_t>(ret));
      if (ret != static_cast<ssize_t>(o.ack_size)) die("ack size %zd, not %u\n", ret, o.ack_size);
      expect_index = (t.send_index + o.req_depth - t.pending) % o.req_depth;  // oldest outstanding
      break;
    default:
      die("unknown op %u\n", in->op);
  }
  StressHeader want = {};
  want.op = in->op;
  want.seq = htonl(t.recv_seq);
  want.from_addr = sin.sin_addr.s_addr;
  want.from_port = sin.sin_port;
  want.to_addr = self.sin_addr.s_addr;
  want.to_port = self.sin_port;
  want.index = htons(static_cast<uint16_t>(expect_index));
  if (memcmp(in, &want, kBasicHeader) != 0) {
    char wf[INET_ADDRSTRLEN], gf[INET_ADDRSTRLEN], wt[INET_ADDRSTRLEN], gt[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &want.from_addr, wf, sizeof wf);
    inet_ntop(AF_INET, &in->from_addr, gf, sizeof gf);
    inet_ntop(AF_INET, &want.to_addr, wt, sizeof wt);
    inet_ntop(AF_INET, &in->to_addr, gt, sizeof gt);
    printf("An incoming message had a header which\ndidn't contain the fields we expected:\n"
           "    member        expected eq             got\n"
           "       seq %15u %s %15u\n from_addr %15s %s %15s\n from_port %15u %s %15u\n"
           "   to_addr %15s %s %15s\n   to_port %15u %s %15u\n     index %15u %s %15u\n"
           "        op %15u %s %15u\n",
           ntohl(want.seq), want.seq == in->seq ? " =" : "!=", ntohl(in->seq), wf,
           want.from_addr == in->from_addr ? " =" : "!=", gf, ntohs(want.from_port),
           want.from_port == in->from_port ? " =" : "!=", ntohs(in->from_port), wt,
           want.to_addr == in->to_addr ? " =" : "!=", gt, ntohs(want.to_port),
           want.to_port == in->to_port ? " =" : "!=", ntohs(in->to_port), ntohs(want.index),
           want.index == in->index ? " =" : "!=", ntohs(in->index), want.op, " =", in->op);
    fflush(stdout);
    die("header from %s:%u to id %u bogus\n", gf, ntohs(sin.sin_port), ntohs(self.sin_port));
  }
  if (o.verify && memcmp(recv_buf.data() + sizeof(StressHeader), msg_pattern.data(),
                         static_cast<size_t>(ret) - sizeof(StressHeader)) != 0) {
    size_t first = 0, count = 0;
    for (size_t i = sizeof(StressHeader); i < static_cast<size_t>(ret); ++i) {
      if (recv_buf[i] != msg_pattern[i - sizeof(StressHeader)]) {
        if (!count) first = i - sizeof(StressHeader);
        count++;
      }
    }
    printf("An incoming message has a corrupted payload at offset %zu; %zu bytes corrupted\n", first,
           count);
    fflush(stdout);
    die("payload from %s:%u bogus\n", inet_ntoa(sin.sin_addr), ntohs(sin.sin_port));
  }
  if (in->op == kOpAck) {
    stat_inc(&ctl->cur[S_RTT_USECS], static_cast<uint64_t>(usec_sub(tstamp, t.send_time[expect_index])));
    t.pending--;
  } else {
    build_header(t, &t.ack_header[t.recv_index], kOpAck, t.recv_index);
    t.unacked++;
    t.recv_index = static_cast<uint16_t>((t.recv_index + 1) % o.req_depth);
  }
  t.recv_seq++;
  return rr;
}

[[noreturn]] void run_child(pid_t parent, ChildControl *ctl, const StressOptions &o, uint16_t id) {
  sockaddr_in sin = {};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(static_cast<uint16_t>(o.starting_port + 1 + id));
  sin.sin_addr.s_addr = htonl(o.receive_addr);

  std::vector<Task> tasks(o.nr_tasks);
  for (uint16_t i = 0; i < o.nr_tasks; ++i) {
    tasks[i].src_addr = sin;
    tasks[i].dst_addr.sin_family = AF_INET;
    tasks[i].dst_addr.sin_addr.s_addr = htonl(o.send_addr);
    tasks[i].dst_addr.sin_port = htons(static_cast<uint16_t>(o.starting_port + 1 + i));
    tasks[i].send_time.resize(o.req_depth);
    tasks[i].ack_header.resize(o.req_depth);
  }

  bool cong_monitor = false, inq = false;
  int fd = stress_rds_socket(o, sin, &cong_monitor, &inq);
  __atomic_store_n(&ctl->ready, 1, __ATOMIC_RELEASE);

  while (__atomic_load_n(&ctl->start.tv_sec, __ATOMIC_ACQUIRE) == 0) {
    check_parent(parent);
    sleep(1);
  }
  timeval now;
  gettimeofday(&now, nullptr);
  if (timercmp(&now, &ctl->start, <)) usleep(static_cast<useconds_t>(usec_sub(ctl->start, now)));

  pollfd pfd = {fd, POLLIN | POLLOUT, 0};
  while (true) {
    check_parent(parent);
    int ret = poll(&pfd, 1, 1000);
    if (ret < 0) {
      if (errno == EINTR) continue;
      die_errno("poll failed");
    }
    pfd.events = POLLIN;
    if (pfd.revents & POLLIN) {
      while (true) {
        RecvResult r = recv_one(fd, tasks, sin, ctl);
        if (r.ret < 0) break;
        // 2.3.11 with INQ: stop draining when the RDS_CMSG_INQ byte reads 0.
        if (inq && r.ret > 0 && r.inq_seen && r.inq == 0) break;
      }
    }
    if (__atomic_load_n(&ctl->stopping, __ATOMIC_ACQUIRE)) continue;  // keep receiving only

    bool can_send = pfd.revents & POLLOUT;
    for (Task &t : tasks) {
      if (cong_monitor && t.congested) continue;
      if (send_anything(fd, &t, ctl, can_send) < 0) {
        if (errno == ENOBUFS) {
          // The destination is congested; with the monitor, skip it until a CONG_UPDATE
          // names its port.
          trace("ENOBUFS to port %u\n", ntohs(t.dst_addr.sin_port));
          if (cong_monitor) t.congested = true;
        }
        pfd.events |= POLLOUT;
        continue;  // 2.3.11 continues with the other tasks
      }
    }
  }
}

ChildControl *start_children(StressOptions &o, int control_fd) {
  size_t len = o.nr_tasks * sizeof(ChildControl);
  void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_SHARED, -1, 0);
  if (m == MAP_FAILED) die("mmap of %u child control structs failed", o.nr_tasks);
  auto *ctl = static_cast<ChildControl *>(m);
  memset(ctl, 0, len);
  init_msg_pattern(o);
  pid_t parent = getpid();
  fflush(stdout);
  for (uint16_t i = 0; i < o.nr_tasks; ++i) {
    pid_t pid = fork();
    if (pid == -1) die_errno("forking child nr %u failed", i);
    if (pid == 0) {
      if (control_fd >= 0) close(control_fd);
      if (nice(5) == -1 && errno) { /* ignored */ }
      StressOptions mine = o;
      mine.suppress_warnings = i > 0;
      g_opts = &mine;
      run_child(parent, ctl + i, mine, i);
    }
    ctl[i].pid = pid;
  }
  for (uint16_t i = 0; i < o.nr_tasks; ++i) {
    if (__atomic_load_n(&ctl[i].ready, __ATOMIC_ACQUIRE)) continue;
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) die("child %u (pid %u) exited\n", i, static_cast<unsigned>(pid));
    sleep(1);
    i--;  // try this child again
  }
  return ctl;
}

// 0: nothing reaped; 1: a child ended normally (exit 0 or SIGTERM); dies otherwise.
int reap_one_child(int wflags) {
  int status;
  pid_t pid = waitpid(-1, &status, wflags);
  if (pid < 0) die("waitpid returned %d\n", pid);
  if (pid == 0) return 0;
  if (WIFEXITED(status)) {
    if (WEXITSTATUS(status) == 0) return 1;
    die("child pid %u exited with status %d\n", static_cast<unsigned>(pid), WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    if (WTERMSIG(status) == SIGTERM) return 1;
    die("child pid %u exited with signal %d\n", static_cast<unsigned>(pid), WTERMSIG(status));
  }
  die("child pid %u wait status %d\n", static_cast<unsigned>(pid), status);
}

struct Snapshot {
  Counter s[NR_STATS];
};

void snapshot(const ChildControl *ctl, unsigned n, std::vector<Snapshot> *last, Snapshot *disp) {
  memset(disp, 0, sizeof *disp);
  for (unsigned i = 0; i < n; ++i) {
    for (int s = 0; s < NR_STATS; ++s) {
      Counter now = {load(ctl[i].cur[s].nr), load(ctl[i].cur[s].sum), 0, 0};
      disp->s[s].nr += now.nr - (*last)[i].s[s].nr;
      disp->s[s].sum += now.sum - (*last)[i].s[s].sum;
      (*last)[i].s[s] = now;
    }
  }
}

double avg(const Counter &c) { return c.nr ? static_cast<double>(c.sum) / c.nr : 0.0; }

double throughput(const Snapshot &d) {
  return static_cast<double>(d.s[S_REQ_TX_BYTES].sum + d.s[S_REQ_RX_BYTES].sum +
                             d.s[S_ACK_TX_BYTES].sum + d.s[S_ACK_RX_BYTES].sum);
}

// §3.1 step 5 and §3.7: start time, "Starting up....", one line per second, the stop sequence.
void release_children_and_wait(const StressOptions &o, ChildControl *ctl, int control_fd) {
  timeval start;
  gettimeofday(&start, nullptr);
  start.tv_sec += 2;
  for (unsigned i = 0; i < o.nr_tasks; ++i) {
    ctl[i].start.tv_usec = start.tv_usec;
    __atomic_store_n(&ctl[i].start.tv_sec, start.tv_sec, __ATOMIC_RELEASE);
  }
  std::vector<Snapshot> last(o.nr_tasks);
  memset(last.data(), 0, last.size() * sizeof(Snapshot));
  Snapshot disp;

  printf("Starting up");
  fflush(stdout);
  for (int i = 0; i < 4; ++i) {
    sleep(1);
    snapshot(ctl, o.nr_tasks, &last, &disp);
    printf(".");
    fflush(stdout);
  }
  printf("\n");

  timeval first_ts, last_ts, end = {}, now;
  gettimeofday(&first_ts, nullptr);
  if (o.run_time && !o.passive) {
    end = first_ts;
    end.tv_sec += o.run_time;
  }
  printf("%4s %6s %6s %10s %10s %10s %7s %8s %5s\n", "tsks", "tx/s", "rx/s", "tx+rx K/s", "mbi K/s",
         "mbo K/s", "tx us/c", "rtt us", "cpu %");
  fflush(stdout);

  Snapshot summary;
  memset(&summary, 0, sizeof summary);
  unsigned nr_running = o.nr_tasks;
  last_ts = first_ts;
  while (nr_running) {
    bool stop = false;
    if (o.passive) {
      // The passive side stops as soon as the control connection becomes readable or hangs up.
      pollfd p = {control_fd, POLLIN | POLLHUP, 0};
      int r = poll(&p, 1, 1000);
      if (r < 0 && errno != EINTR) die_errno("poll(control) failed");
      if (r > 0) stop = true;
    } else {
      sleep(1);
    }
    snapshot(ctl, o.nr_tasks, &last, &disp);
    gettimeofday(&now, nullptr);
    long elapsed = usec_sub(now, last_ts);
    double scale = elapsed > 0 ? 1e6 / elapsed : 1.0;
    if (!o.summary_only) {
      printf("%4u %6" PRIu64 " %6" PRIu64 " %10.2f %10.2f %10.2f %7.2f %8.2f %5.2f\n", nr_running,
             disp.s[S_REQ_TX_BYTES].nr, disp.s[S_REQ_RX_BYTES].nr, scale * throughput(disp) / 1024.0,
             0.0, 0.0, avg(disp.s[S_SENDMSG_USECS]), avg(disp.s[S_RTT_USECS]), -1.0);
      fflush(stdout);
    }
    for (int s = 0; s < NR_STATS; ++s) {
      summary.s[s].nr += disp.s[s].nr;
      summary.s[s].sum += disp.s[s].sum;
    }
    last_ts = now;
    if (timerisset(&end) && timercmp(&now, &end, >=)) stop = true;
    if (stop) break;
    if (reap_one_child(WNOHANG)) nr_running--;
  }

  // Stop: close the control socket, children stop sending (they keep receiving), one second,
  // SIGTERM, reap.
  if (control_fd >= 0) close(control_fd);
  for (unsigned i = 0; i < o.nr_tasks; ++i) __atomic_store_n(&ctl[i].stopping, 1, __ATOMIC_RELEASE);
  sleep(1);
  for (unsigned i = 0; i < o.nr_tasks; ++i) kill(ctl[i].pid, SIGTERM);
  while (nr_running && reap_one_child(0)) nr_running--;

  double scale = 1e6 / static_cast<double>(usec_sub(last_ts, first_ts) > 0 ? usec_sub(last_ts, first_ts) : 1);
  if (!o.summary_only) printf("---------------------------------------------\n");
  printf("%4u %6.0f %6.0f %10.2f %10.2f %10.2f %7.2f %8.2f %5.2f  (average)\n", o.nr_tasks,
         scale * summary.s[S_REQ_TX_BYTES].nr, scale * summary.s[S_REQ_RX_BYTES].nr,
         scale * throughput(summary) / 1024.0, 0.0, 0.0, avg(summary.s[S_SENDMSG_USECS]),
         avg(summary.s[S_RTT_USECS]), -1.0);

  // Not printed by rds-stress: the exact totals since the children started, for the drivers.
  uint64_t tot[NR_STATS] = {};
  for (unsigned i = 0; i < o.nr_tasks; ++i)
    for (int s = 0; s < NR_STATS; ++s) tot[s] += load(ctl[i].cur[s].nr);
  printf("replay: totals req_tx %" PRIu64 " req_rx %" PRIu64 " ack_tx %" PRIu64 " ack_rx %" PRIu64
         " inq_msgs %" PRIu64 " cong_updates %" PRIu64 "\n", tot[S_REQ_TX_BYTES],
         tot[S_REQ_RX_BYTES], tot[S_ACK_TX_BYTES], tot[S_ACK_RX_BYTES], tot[S_INQ_MSGS],
         tot[S_CONG_UPDATES]);
  fflush(stdout);
}

void peer_send(int fd, const void *p, size_t n) {
  const uint8_t *b = static_cast<const uint8_t *>(p);
  while (n) {
    ssize_t r = write(fd, b, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      die_errno("Cannot send to peer");
    }
    b += r;
    n -= static_cast<size_t>(r);
  }
}

void peer_recv(int fd, void *p, size_t n) {
  uint8_t *b = static_cast<uint8_t *>(p);
  while (n) {
    ssize_t r = read(fd, b, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      die_errno("Cannot recv from peer");
    }
    if (r == 0) die("Peer closed the control connection during negotiation\n");
    b += r;
    n -= static_cast<size_t>(r);
  }
}

int bound_tcp_socket(uint32_t addr, uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
  if (fd < 0) die_errno("socket(AF_INET, SOCK_STREAM) failed");
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one))
    die_errno("setsockopt(SO_REUSEADDR) failed");
  sockaddr_in sin = {};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  sin.sin_addr.s_addr = htonl(addr);
  if (bind(fd, reinterpret_cast<sockaddr *>(&sin), sizeof sin)) die_errno("bind() failed");
  return fd;
}

std::string hp(uint32_t host_order_addr, uint16_t port) {
  in_addr a = {htonl(host_order_addr)};
  char b[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a, b, sizeof b);
  return std::string(b) + ":" + std::to_string(port);
}

std::string sin_str(const sockaddr_in &s) { return hp(ntohl(s.sin_addr.s_addr), ntohs(s.sin_port)); }

// The 2.3.11 JSON exchange after the first GO byte (only when a json option is used).
std::string options_json(const StressOptions &o) {
  return std::string("{\"disable_inq\":") + (o.disable_inq ? "1" : "0") + "}";
}

void apply_json(const std::string &j, StressOptions *o) {
  size_t k = j.find("\"disable_inq\":");
  if (k == std::string::npos) die("bad options JSON from peer: %s\n", j.c_str());
  o->disable_inq = j[k + 14] == '1';
}

void json_send(int fd, const std::string &j) {
  uint32_t n = static_cast<uint32_t>(j.size());  // host order
  peer_send(fd, &n, sizeof n);
  peer_send(fd, j.data(), j.size());
}

std::string json_recv(int fd) {
  uint32_t n;
  peer_recv(fd, &n, sizeof n);
  if (n > 65536) die("options JSON too long (%u)\n", n);
  std::string j(n, '\0');
  peer_recv(fd, j.data(), n);
  return j;
}

bool uses_json(const StressOptions &o) { return o.disable_inq; }

int active_parent(StressOptions &o) {
  int fd = bound_tcp_socket(o.receive_addr, 0);
  sockaddr_in sin = {};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(o.starting_port);
  sin.sin_addr.s_addr = htonl(o.send_addr);
  printf("connecting to %s\n", sin_str(sin).c_str());
  fflush(stdout);
  for (unsigned attempt = 0;; ++attempt) {
    if (connect(fd, reinterpret_cast<sockaddr *>(&sin), sizeof sin) == 0) break;
    if ((errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH) &&
        attempt < o.connect_retries) {
      sleep(1);
      continue;
    }
    die_errno("connect() failed");
  }
  if (o.receive_addr == 0) {
    sockaddr_in me = {};
    socklen_t l = sizeof me;
    if (getsockname(fd, reinterpret_cast<sockaddr *>(&me), &l)) die_errno("getsockname failed");
    o.receive_addr = ntohl(me.sin_addr.s_addr);
  }

  // -Q (and the json options) force the full struct with the version string; otherwise V1.
  bool full = o.tos || uses_json(o);
  uint8_t buf[kFullSize] = {};
  if (full) {
    snprintf(reinterpret_cast<char *>(buf), kVersionSize, "%s", kVersion);
    if (uses_json(o)) memcpy(buf + strlen(kVersion) + 1, "json", 4);
    encode_v1(o, buf + kVersionSize);
    buf[kVersionSize + kV1Size] = o.tos;
    buf[kVersionSize + kV1Size + 1] = 0;  // async
    peer_send(fd, buf, kFullSize);
  } else {
    encode_v1(o, buf);
    peer_send(fd, buf, kV1Size);
  }
  uint8_t ok = 0;
  if (uses_json(o)) {
    peer_send(fd, &ok, 1);
    peer_recv(fd, &ok, 1);
    if (ok != kJsonGoReply) die("peer does not understand json options (reply %u)\n", ok);
    json_send(fd, options_json(o));
    apply_json(json_recv(fd), &o);
  }
  printf("negotiated options, tasks will start in 2 seconds\n");
  fflush(stdout);
  ChildControl *ctl = start_children(o, fd);
  ok = 0;
  peer_send(fd, &ok, 1);
  peer_recv(fd, &ok, 1);
  release_children_and_wait(o, ctl, fd);
  return 0;
}

int passive_parent(StressOptions &local) {
  int lfd = bound_tcp_socket(local.receive_addr, local.starting_port);
  if (listen(lfd, 255)) die_errno("listen() failed");
  printf("waiting for incoming connection on %s\n", hp(local.receive_addr, local.starting_port).c_str());
  fflush(stdout);
  sockaddr_in from = {};
  socklen_t l = sizeof from;
  int fd = accept(lfd, reinterpret_cast<sockaddr *>(&from), &l);
  if (fd < 0) die_errno("accept() failed");
  close(lfd);
  uint32_t my_addr = local.receive_addr;
  sockaddr_in me = {};
  l = sizeof me;
  if (getsockname(fd, reinterpret_cast<sockaddr *>(&me), &l)) die_errno("getsockname failed");
  if (my_addr == 0) my_addr = ntohl(me.sin_addr.s_addr);
  printf("accepted connection from %s on %s\n", sin_str(from).c_str(), sin_str(me).c_str());
  fflush(stdout);

  StressOptions o;
  uint8_t buf[kFullSize] = {};
  bool json = false;
  // One read of the version-string size, compared with ours.
  peer_recv(fd, buf, kVersionSize);
  char ours[kVersionSize] = {};
  snprintf(ours, sizeof ours, "%s", kVersion);
  if (strncmp(reinterpret_cast<char *>(buf), ours, strlen(ours) + 1) == 0) {
    peer_recv(fd, buf + kVersionSize, kFullSize - kVersionSize);
    json = memcmp(buf + strlen(kVersion) + 1, "json", 4) == 0;
    decode_v1(buf + kVersionSize, &o);
    o.tos = buf[kVersionSize + kV1Size];
    if (buf[kVersionSize + kV1Size + 1]) die("--async requested by the peer is not supported\n");
  } else {
    peer_recv(fd, buf + kVersionSize, kV1Size - kVersionSize);
    decode_v1(buf, &o);
  }
  // The sender gave us its send and receive addresses: swap them.
  o.send_addr = o.receive_addr;
  o.receive_addr = my_addr;
  o.passive = true;
  uint8_t ok = 0;
  if (json) {
    peer_recv(fd, &ok, 1);
    ok = kJsonGoReply;
    peer_send(fd, &ok, 1);
    apply_json(json_recv(fd), &o);
    json_send(fd, options_json(o));
  }
  ChildControl *ctl = start_children(o, fd);
  peer_recv(fd, &ok, 1);
  peer_send(fd, &ok, 1);
  printf("negotiated options, tasks will start in 2 seconds\n");
  fflush(stdout);
  g_opts = &o;
  release_children_and_wait(o, ctl, fd);
  return 0;
}

// --reset (§3.6, 2.3.11): bind to the -r address port 0, RDS_CONN_RESET {tos, src, dst}, exit 0.
int do_reset(const SockaddrIp &recv, const SockaddrIp &send, uint8_t tos) {
  int fd = socket(pf_rds, SOCK_SEQPACKET, 0);
  if (fd < 0) die_errno("socket(%d, %d, %d) failed", pf_rds, SOCK_SEQPACKET, 0);
  SockaddrIp local = recv;
  if (local.sa.sa_family == AF_INET) local.v4.sin_port = 0;
  else local.v6.sin6_port = 0;
  if (bind(fd, &local.sa, ip_len(local))) die_errno("bind() failed");
  if (recv.sa.sa_family == AF_INET) {
    RdsReset r = {};
    r.tos = tos;
    r.src = recv.v4.sin_addr;
    r.dst = send.v4.sin_addr;
    if (setsockopt(fd, sol_rds, kRdsConnReset, &r, sizeof r)) die_errno("setsockopt(RDS_CONN_RESET) failed");
  } else {
    Rds6Reset r = {};
    r.tos = tos;
    r.src = recv.v6.sin6_addr;
    r.dst = send.v6.sin6_addr;
    if (setsockopt(fd, sol_rds, kRds6ConnReset, &r, sizeof r)) die_errno("setsockopt(RDS6_CONN_RESET) failed");
  }
  printf("connection %s -> %s tos %u reset\n", ip_str(recv).c_str(), ip_str(send).c_str(), tos);
  return 0;
}

[[noreturn]] void stress_usage() {
  printf("Usage: rds-stress -r addr [-s addr] [-p port] [-q bytes] [-a bytes] [-d depth] [-t tasks]\n"
         "       [-T secs] [-o] [-Q tos] [-v] [-V] [-z] [--use-cong-monitor 0|1]\n"
         "       [--connect-retries n] [--disable-inq] [--reset]\n");
  exit(2);
}

uint32_t parse_size(const char *arg, uint32_t max) {
  unsigned long v;
  if (!parse_long(arg, &v) || v > max) die("invalid number '%s'\n", arg);
  return static_cast<uint32_t>(v);
}

int stress_main(int argc, char **argv) {
  setlinebuf(stdout);
  StressOptions o;
  bool reset = false, have_recv = false, have_send = false, have_ack = false;
  SockaddrIp recv_ip = {}, send_ip = {};
  enum { OPT_CONG = 256, OPT_RETRIES, OPT_DISABLE_INQ, OPT_RESET, OPT_UNSUPPORTED, OPT_SYNC_BURSTY,
         OPT_SYNC_KEY_ONLY };
  bool sync_bursty = false, sync_key_only = false;
  static const option longopts[] = {
      {"use-cong-monitor", required_argument, nullptr, OPT_CONG},
      {"connect-retries", required_argument, nullptr, OPT_RETRIES},
      {"disable-inq", no_argument, nullptr, OPT_DISABLE_INQ},
      {"reset", no_argument, nullptr, OPT_RESET},
      {"recv-addr", required_argument, nullptr, 'r'},
      {"send-addr", required_argument, nullptr, 's'},
      {"port", required_argument, nullptr, 'p'},
      {"req-bytes", required_argument, nullptr, 'q'},
      {"ack-bytes", required_argument, nullptr, 'a'},
      {"depth", required_argument, nullptr, 'd'},
      {"tasks", required_argument, nullptr, 't'},
      {"time", required_argument, nullptr, 'T'},
      {"one-way", no_argument, nullptr, 'o'},
      {"tos", required_argument, nullptr, 'Q'},
      {"verify", no_argument, nullptr, 'v'},
      {"trace", no_argument, nullptr, 'V'},
      {"report-summary", no_argument, nullptr, 'z'},
      {"async", no_argument, nullptr, OPT_UNSUPPORTED},
      {"sync-always-bursty", no_argument, nullptr, OPT_SYNC_BURSTY},
      {"sync-key-only", no_argument, nullptr, OPT_SYNC_KEY_ONLY},
      {nullptr, 0, nullptr, 0},
  };
  int c;
  while ((c = getopt_long(argc, argv, "+r:s:p:q:a:d:t:T:oQ:vVzD:cRh", longopts, nullptr)) != -1) {
    switch (c) {
      case 'r':
        if (!parse_ip(optarg, &recv_ip)) die("invalid host name or dotted quad '%s'\n", optarg);
        have_recv = true;
        break;
      case 's':
        if (!parse_ip(optarg, &send_ip)) die("invalid host name or dotted quad '%s'\n", optarg);
        have_send = true;
        break;
      case 'p': o.starting_port = static_cast<uint16_t>(parse_size(optarg, 65535)); break;
      case 'q': o.req_size = parse_size(optarg, UINT32_MAX); break;
      case 'a': o.ack_size = parse_size(optarg, UINT32_MAX); have_ack = true; break;
      case 'd': o.req_depth = parse_size(optarg, UINT32_MAX); break;
      case 't': o.nr_tasks = static_cast<uint16_t>(parse_size(optarg, 65535)); break;
      case 'T': o.run_time = parse_size(optarg, UINT32_MAX); break;
      case 'o': o.simplex = 1; break;
      case 'Q': o.tos = static_cast<uint8_t>(parse_size(optarg, 255)); break;
      case 'v': o.verify = 1; break;
      case 'V': o.tracing = 1; break;
      case 'z': o.summary_only = 1; break;
      case OPT_CONG: o.use_cong_monitor = parse_size(optarg, 1) != 0; break;
      case OPT_RETRIES: o.connect_retries = parse_size(optarg, UINT32_MAX); break;
      case OPT_DISABLE_INQ: o.disable_inq = 1; break;
      case OPT_RESET: reset = true; break;
      case OPT_SYNC_BURSTY: sync_bursty = true; break;
      case OPT_SYNC_KEY_ONLY: sync_bursty = sync_key_only = true; break;
      default:
        fprintf(stderr, "option not supported by this replay (RDMA/UEK-only or not an RDS call)\n");
        stress_usage();
    }
  }
  if (optind != argc) stress_usage();
  (void)have_ack;

  if (sync_bursty) {
    // rds-stress 2.3.11's burst modes: a System V semaphore shared by the host's rds-stress
    // processes, keyed by the RDS module's sysfs directory; it exits when ftok fails.
    key_t key = ftok("/sys/module/rds", 'S');
    if (key == -1) die("ftok(\"/sys/module/rds\", 'S') failed, errno: %d\n", errno);
    int sem = semget(key, 1, IPC_CREAT | 0666);
    if (sem < 0) die("semget(0x%x) failed, errno: %d\n", static_cast<unsigned>(key), errno);
    printf("sync-key 0x%x\n", static_cast<unsigned>(key));  // for the drivers
    if (sync_key_only) return 0;
  }

  if (reset) {
    if (!have_recv || !have_send) die("--reset needs -r and -s\n");
    if (recv_ip.sa.sa_family != send_ip.sa.sa_family) die("-r and -s must be of the same family\n");
    return do_reset(recv_ip, send_ip, o.tos);
  }
  if ((have_recv && recv_ip.sa.sa_family != AF_INET) || (have_send && send_ip.sa.sa_family != AF_INET))
    die("IPv6 traffic is not supported by this replay\n");
  if (have_recv) o.receive_addr = ntohl(recv_ip.v4.sin_addr.s_addr);
  g_opts = &o;
  if (!have_send) {
    o.passive = true;
    return passive_parent(o);
  }
  o.send_addr = ntohl(send_ip.v4.sin_addr.s_addr);
  if (o.ack_size < kMinMsg) die("ack size must be at least %u bytes\n", kMinMsg);
  if (o.req_size < kMinMsg) die("req size must be at least %u bytes\n", kMinMsg);
  if (o.req_depth == 0) die("depth must be at least 1\n");
  if (o.nr_tasks == 0) die("tasks must be at least 1\n");
  return active_parent(o);
}

}  // namespace

int main(int argc, char **argv) {
  rds_require_preloaded("rds_tools_replay");
  pfhack();
  const char *base = strrchr(argv[0], '/');
  base = base ? base + 1 : argv[0];
  std::string mode;
  if (!strcmp(base, "rds-ping") || !strcmp(base, "rds-info") || !strcmp(base, "rds-stress")) {
    mode = base + 4;
  } else if (argc > 1 && (!strcmp(argv[1], "ping") || !strcmp(argv[1], "info") ||
                          !strcmp(argv[1], "stress"))) {
    mode = argv[1];
    argv[1] = argv[0];
    argv++;
    argc--;
  } else {
    mode = "stress";
  }
  if (mode == "ping") {
    progname = "rds-ping";
    return ping_main(argc, argv);
  }
  if (mode == "info") {
    progname = "rds-info";
    return info_main(argc, argv);
  }
  progname = "rds-stress";
  return stress_main(argc, argv);
}
