// engine/socket.h — an RDS socket (the kernel's struct rds_sock) and the
// calls that act on the socket as a whole: creation, connect, getsockname /
// getpeername, poll, ioctl, close.
//
// bind, sendmsg, recvmsg and socket options live in bind.h, send.h, recv.h
// and sockopt.h, as in Linux net/rds.
//
// An RdsSocket is shared (shared_ptr) by every fd referring to it in this
// process and by calls in flight; `released` marks a socket whose last fd was
// closed. All mutable state is guarded by `mu`. The engine thread and
// application threads both take `mu`, never for longer than a queue operation
// (no system call that can block is made while holding it).
//
// Thread-safety: safe for concurrent use through `mu`.
#ifndef RDS_ENGINE_SOCKET_H_
#define RDS_ENGINE_SOCKET_H_

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/sync.h"
#include "absl/time/time.h"
#include "engine/addr.h"
#include "engine/message.h"
#include "engine/netns.h"

namespace rds {

class Waiter;

// Transport identifiers as SO_RDS_TRANSPORT reports them.
inline constexpr int kTransNone = ~0;
inline constexpr int kTransIb = 0;
inline constexpr int kTransTcp = 2;
inline constexpr int kTransLoop = 3;  // kernel-internal RDS_TRANS_LOOP, shown for 127.x binds

class DirectReceive;
class MemoryRegion;  // transports/transport.h
namespace share {
struct Client;
}

class RdsSocket : public std::enable_shared_from_this<RdsSocket> {
 public:
  RdsSocket(uint64_t id, std::shared_ptr<NetNs> ns, bool nonblocking);

  const uint64_t id;
  const std::shared_ptr<NetNs> ns;
  // How many fds of this process refer to the socket; the RDS close runs
  // when the last one is closed (maintained by the preload fd table).
  std::atomic<int> fd_refs{0};

  // Sharing between processes (engine/share.h). `remote`: another process
  // owns the socket and this one's calls are forwarded there through
  // `share_client` (set when the socket is made remote, never replaced);
  // cleared if this process takes the socket over. `maybe_shared` (owner):
  // other processes may hold a descriptor, so the socket is parked, not
  // released, when this process lets go of it.
  std::atomic<bool> remote{false};
  std::atomic<bool> maybe_shared{false};
  std::shared_ptr<share::Client> share_client;

  mutable rds::Mutex mu;
  bool released ABSL_GUARDED_BY(mu) = false;
  // Released because it was parked for another process (engine/share.h), not
  // closed: a message that finds it so is not dropped but goes where the
  // socket goes (DeliverResult::kParked).
  bool parked ABSL_GUARDED_BY(mu) = false;
  bool nonblocking ABSL_GUARDED_BY(mu);
  std::optional<RdsEndpoint> bound ABSL_GUARDED_BY(mu);
  // A socket other processes hold keeps its port with an open-file lock that
  // every holder has a descriptor of (engine/share.h), so the port outlives
  // any one of them: that internal fd, or -1 (the port is this process's).
  int port_fd ABSL_GUARDED_BY(mu) = -1;
  // The owner's own copy of the backing fd while the socket is shared (an
  // internal fd): readiness tokens are drained there, and other processes'
  // calls run with it (engine/share.h).
  int shared_fd ABSL_GUARDED_BY(mu) = -1;
  std::optional<RdsEndpoint> connected ABSL_GUARDED_BY(mu);
  int transport ABSL_GUARDED_BY(mu) = kTransNone;
  // SO_SNDBUF/SO_RCVBUF as the kernel stores them (twice the requested value);
  // RDS uses half (rds_sk_sndbuf / rds_sk_rcvbuf).
  int sk_sndbuf ABSL_GUARDED_BY(mu) = 0;
  int sk_rcvbuf ABSL_GUARDED_BY(mu) = 0;
  absl::Duration sndtimeo ABSL_GUARDED_BY(mu) = absl::InfiniteDuration();
  absl::Duration rcvtimeo ABSL_GUARDED_BY(mu) = absl::InfiniteDuration();
  bool recverr ABSL_GUARDED_BY(mu) = false;
  bool cong_monitor ABSL_GUARDED_BY(mu) = false;
  uint64_t cong_mask ABSL_GUARDED_BY(mu) = 0;
  uint64_t cong_notify ABSL_GUARDED_BY(mu) = 0;
  bool congested ABSL_GUARDED_BY(mu) = false;        // our port's bit is set
  bool seen_congestion ABSL_GUARDED_BY(mu) = false;  // a send hit a congested port
  uint64_t cong_gen_seen ABSL_GUARDED_BY(mu) = 0;    // rs_cong_track
  enum class Timestamp { kOff, kOld, kNew };
  Timestamp timestamp ABSL_GUARDED_BY(mu) = Timestamp::kOff;
  uint8_t rx_trace_count ABSL_GUARDED_BY(mu) = 0;
  uint8_t rx_trace_pos[3] ABSL_GUARDED_BY(mu) = {};
  uint8_t tos ABSL_GUARDED_BY(mu) = 0;
  bool zerocopy ABSL_GUARDED_BY(mu) = false;  // SO_ZEROCOPY
  bool inq ABSL_GUARDED_BY(mu) = false;       // UEK SO_RDS_INQ: RDS_CMSG_INQ on receive
  uint64_t inode = 0;  // the backing fd's inode (RDS_INFO_SOCKETS inum); set at creation
  bool has_sent ABSL_GUARDED_BY(mu) = false;  // kernel: rs_conn cached

  std::deque<MessagePtr> recv_queue ABSL_GUARDED_BY(mu);
  // RDMA memory regions registered on this socket, by rkey (engine/rdma.h).
  struct RdmaKey {
    std::shared_ptr<MemoryRegion> region;
    bool use_once = false;  // released by the first message that says it was used
  };
  absl::flat_hash_map<uint32_t, RdmaKey> rdma_keys ABSL_GUARDED_BY(mu);
  // RDMA operations' outcomes to report (RDS_CMSG_RDMA_STATUS), oldest first.
  struct RdmaNotification {
    uint64_t token;
    int32_t status;
  };
  std::deque<RdmaNotification> rdma_notify ABSL_GUARDED_BY(mu);
  // A waiting recvmsg's buffer, offered for the next large message
  // (engine/direct_receive.h); changed only with the run lock held too.
  DirectReceive* direct ABSL_GUARDED_BY(mu) = nullptr;
  std::deque<uint32_t> zcookies ABSL_GUARDED_BY(mu);  // zerocopy completions to report
  size_t rcv_bytes ABSL_GUARDED_BY(mu) = 0;
  size_t snd_bytes ABSL_GUARDED_BY(mu) = 0;
  // Messages admitted and not yet released (engine/send.h). While there are
  // any, `in_flight_pin` keeps this socket alive for them: a message names
  // its sender by a plain pointer, not a reference count of its own (two
  // atomic operations per message on the 64 B stream, docs/perf/history.md §9.9).
  size_t snd_msgs ABSL_GUARDED_BY(mu) = 0;
  std::shared_ptr<RdsSocket> in_flight_pin ABSL_GUARDED_BY(mu);

  std::vector<Waiter*> waiters ABSL_GUARDED_BY(mu);
  bool epoll_watched ABSL_GUARDED_BY(mu) = false;
  int token_sender ABSL_GUARDED_BY(mu) = -1;  // internal fd, while epoll-watched
  int tokens ABSL_GUARDED_BY(mu) = 0;  // readiness tokens queued on the fd

  // Counts a message of `len` bytes against the send buffer (admission).
  void AdmitLocked(size_t len) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Gives back `msgs` messages of `bytes` bytes in all. Returns the pin when
  // they were the last: the caller drops it after unlocking `mu`.
  [[nodiscard]] std::shared_ptr<RdsSocket> ReleaseLocked(size_t bytes, size_t msgs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  int RdsSndbuf() const ABSL_SHARED_LOCKS_REQUIRED(mu) { return sk_sndbuf / 2; }
  int RdsRcvbuf() const ABSL_SHARED_LOCKS_REQUIRED(mu) { return sk_rcvbuf / 2; }
  // Kernel RDS never drops for rcvbuf (congestion is back-pressure only). A
  // peer that ignores congestion could still grow a queue without bound, so
  // far beyond it the engine refuses further messages (they are not
  // acknowledged and come back later): 16 × rcvbuf + 16 MiB.
  bool OverHardLimitLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return rcv_bytes > 16 * static_cast<size_t>(RdsRcvbuf()) + (size_t{16} << 20);
  }
  bool Readable() const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return !recv_queue.empty() || cong_notify != 0 || !zcookies.empty() || !rdma_notify.empty();
  }

  // Wakes every waiter and, for an epoll-watched socket, raises readiness.
  // `arrival` is true when a new message or notification was queued.
  void NotifyLocked(bool arrival) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Wakes every waiter (state they wait for may have changed).
  void WakeWaitersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void AddWaiterLocked(Waiter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void RemoveWaiterLocked(Waiter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Called by the reader that emptied the queue: removes readiness tokens.
  void DrainTokensLocked(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

// Creates the RDS state for a new backing fd (socket() or adoption). `fd` is
// used to read the kernel's default buffer sizes.
absl::StatusOr<std::shared_ptr<RdsSocket>> CreateSocket(uint64_t id, std::shared_ptr<NetNs> ns,
                                                        int fd, bool nonblocking);

// Adds a socket this process took over from another (engine/share.h) to
// its live sockets; `fd` (its backing fd) gives its buffer sizes and inode.
void RegisterTakenOver(const std::shared_ptr<RdsSocket>& rs, int fd);

// Marks every socket this process owns as possibly shared (fork parent, exec
// from a vfork child). No allocation: callable in a vfork child.
void MarkAllShared();

// Every socket of this process that is not released, in the given namespace.
std::vector<std::shared_ptr<RdsSocket>> LiveSockets(NetNsKey ns);
// Every socket of this process that is not released.
std::vector<std::shared_ptr<RdsSocket>> AllLiveSockets();
// Forgets every socket (fork child).
void ResetSocketListAfterFork();

// connect(2): records the default destination (kernel-rds.md §A.3).
absl::Status Connect(RdsSocket& rs, const sockaddr* addr, socklen_t len);

// getsockname(2)/getpeername(2) (§A.8b): fills `out` and returns its length.
absl::StatusOr<socklen_t> GetName(RdsSocket& rs, bool peer, sockaddr_storage* out);

// The rds_poll mask (§A.6). Consumes a pending congestion-update event.
short PollMask(RdsSocket& rs);

// The wait of poll(2)/select(2) on RDS sockets, as rds_poll registers it:
// `waiter` on every socket added, and on the congestion table when one of
// them saw congestion (a map update may make it writable; §A.6). Everything
// is unregistered when the watch is destroyed. The sockets must outlive it.
// Thread-safety: one thread's (the poller's) object.
class PollWatch {
 public:
  explicit PollWatch(Waiter& waiter) : waiter_(waiter) {}
  PollWatch(const PollWatch&) = delete;
  PollWatch& operator=(const PollWatch&) = delete;
  ~PollWatch();
  void Add(RdsSocket& rs);

 private:
  Waiter& waiter_;
  std::vector<RdsSocket*> sockets_;
  bool congestion_ = false;  // registered on the congestion table
};

// ioctl(2) on an RDS socket (§A.9). `arg` is the application pointer.
absl::StatusOr<int> Ioctl(RdsSocket& rs, int fd, unsigned long request, void* arg);

// The socket's last fd was closed: the RDS close of §A.10.
void Release(RdsSocket& rs);

// Keeps readiness tokens on the socket's backing fd from now on (and raises
// readiness if it is readable): for epoll, and for other processes holding
// the socket (engine/share.h). False if the token sender cannot be made.
bool StartReadinessTokens(RdsSocket& rs);

// Marks a socket epoll-watched (readiness tokens from now on) and raises
// readiness if it is readable. `fd` is the fd being registered. False when
// the token sender (a kernel fd) cannot be made, e.g. at RLIMIT_NOFILE: the
// socket could never be reported, so the registration must fail.
bool WatchWithEpoll(RdsSocket& rs, int fd);

}  // namespace rds

#endif  // RDS_ENGINE_SOCKET_H_
