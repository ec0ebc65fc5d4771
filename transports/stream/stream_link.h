// transports/stream/stream_link.h — a Link over a byte stream socket.
//
// The framing of Linux rds_tcp (one 48-byte header then h_len payload bytes
// per message) over any stream fd: TCP to other hosts, AF_UNIX to engines on
// the same host. Writes batch many messages per writev; reads take large
// chunks and read big payloads straight into the message buffer. Send()
// only queues: the write happens when the engine has handled everything ready
// in this round (EventLoop::Defer), so a burst of sends costs one writev. Invalid
// framing from the peer closes the link (counted as shim_conn_drop_bad_input).
//
// Between engines of one host (AF_UNIX links) a payload from the process's
// shared arena (engine/shm_arena.h) is not written at all: the header carries
// its offset, the peer borrows it from its mapping of the arena
// (peer_arena.h), and the link keeps the block lent until the peer releases
// it. The arena's announcement, the releases and the loans are this link's
// own business: the engine above sees ordinary messages (docs/perf/history.md §9.6).
//
// To other hosts (TCP links) a large payload is not copied into the socket
// either: its pages go in by reference (payload_splicer.h, docs/perf/history.md §9.8).
//
// Thread-safety: with the engine's event-loop run lock held (the engine
// thread, or an application thread on the inline send path).
#ifndef RDS_TRANSPORTS_STREAM_STREAM_LINK_H_
#define RDS_TRANSPORTS_STREAM_STREAM_LINK_H_

#include <sys/socket.h>
#include <sys/uio.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/control.h"
#include "engine/event_loop.h"
#include "engine/shm_arena.h"
#include "transports/stream/reassembler.h"
#include "transports/stream/payload_splicer.h"
#include "transports/stream/peer_arena.h"
#include "transports/transport.h"

namespace rds {

class StreamLink : public Link, public std::enable_shared_from_this<StreamLink> {
 public:
  // Takes ownership of `fd` (an internal, non-blocking stream socket).
  // `connecting`: a non-blocking connect is in progress. `accept_fds`: read
  // with room for SCM_RIGHTS (Unix links that may carry a handoff).
  static std::shared_ptr<StreamLink> Create(EventLoop& loop, int fd, bool connecting,
                                            bool accept_fds, std::string description);
  ~StreamLink() override;

  void SetCallbacks(Callbacks callbacks) override;
  // Payloads from the arena go by reference (an AF_UNIX link, arena on).
  // The constructor decides; tests may turn it off.
  bool shares_payloads() const { return share_payloads_; }
  void set_share_payloads(bool on) { share_payloads_ = on && unix_; }
  void Send(MessagePtr m) override;
  void Close() override;
  void CloseAfterFlush() override;
  std::string Describe() const override { return description_; }
  // A link made with `connecting`: fails (DeadlineExceeded, reported through
  // on_closed as any failure) unless its connect completes within `limit`.
  // A SYN lost while the peer was unreachable is otherwise retried by the
  // kernel's own back-off (1, 3, 7, 15 … s), and the engine, which would try
  // again at once, waits on it meanwhile.
  void ArmConnectDeadline(absl::Duration limit);
  // Still in its connect (no answer from the peer yet).
  bool connecting() const { return connecting_ && !closed_; }
  bool AwaitingConnect() const override { return connecting(); }

  int fd() const { return fd_; }
  // When the read that completed the message being handed to on_message
  // returned (MonotonicNs): its receive time, taken once per read rather
  // than once per message.
  int64_t last_receive_ns() const override { return last_read_ns_; }
  // TCP links: the connection's addresses, kept once known: a connection the
  // peer reset at once (a kernel node's poke) has none to ask the socket for.
  std::optional<Endpoints> endpoints() const override;
  // An accepted TCP link: the addresses accept() reported.
  void set_endpoints(const Endpoints& e) { endpoints_ = e; }
  // An fd received with SCM_RIGHTS (accept_fds links), or -1. Ownership passes
  // to the caller.
  int TakePassedFd() override;
  // TCP links accepted here: the socket goes to the engine at `engine` with
  // SCM_RIGHTS (transports/host_channel.h). The caller closes this link.
  absl::Status HandOver(const std::string& engine, const MessagePtr& hello) override;
  // TCP links only.
  absl::StatusOr<Detached> DetachForHandOn(absl::Duration limit) override;
  absl::Status RestoreInput(absl::Span<const uint8_t> partial) override;
  // TCP links: reports sequences whose bytes the peer's TCP acknowledged
  // (TCP_INFO tcpi_bytes_acked after each write, then every kAckPoll while any are pending).
  bool ReportTransportAcks() override;

 private:
  StreamLink(EventLoop& loop, int fd, bool connecting, bool accept_fds, std::string description);
  void OnEvents(uint32_t events);
  void OnReadable();
  // Sets SO_RCVLOWAT of a TCP link's socket for what the reader waits for.
  void UpdateWakeThreshold();
  void Flush();
  void ScheduleFlush();
  ssize_t WriteNoSignal(struct iovec* iov, int n, int pass_fd = -1, int flags = 0);
  // The front message's payload by reference (its header is written).
  // Returns false when Flush must stop (socket full, link failed).
  bool SpliceFront();
  // Counts `n` written bytes against the front of out_, finishing messages.
  // Returns false if the link closed meanwhile (an on_sent callback).
  bool Advance(size_t n);
  // A write failed with errno: waits for room (EAGAIN) or fails the link.
  void WriteFailed();
  void Fail(const absl::Status& why);
  void FailBadInput(const std::string& what);
  void UpdateInterest();
  // Shared payloads: the receiving side of a message (false: consumed here,
  // or the link failed), the peer's releases, and the end of all loans.
  bool ReceiveShared(wire::Header& h, Payload& p);
  void OnArenaAnnounce(const control::Control& c);
  void OnArenaRelease(const control::Control& c);
  void SendArenaReleases();
  // While payloads borrowed over this link are out, a timer sends what the
  // peer's arena view has released, should no other message carry it.
  void ArmReleaseTimer(absl::Duration delay);
  void QueueInternal(MessagePtr m, int pass_fd);
  void AnnounceArena(std::shared_ptr<ShmArena> arena);
  // Connected: a peer still holding blocks of ours (from a link that died)
  // needs our arena announced here to return them.
  void OnEstablished();
  void EndSharing();
  // The peer process (SO_PEERCRED), 0 if unknown.
  pid_t PeerPid();
  // ReportTransportAcks: a data message's last byte went into the socket.
  void AwaitTransportAck(const Message& m, uint64_t end);
  void CheckTransportAcks();
  // Everything up to `acked` bytes written is acknowledged by the peer's TCP.
  void AckedThrough(uint64_t acked);
  // tcpi_bytes_acked, or -1 (before Linux 4.1).
  int64_t TcpBytesAcked() const;
  void ArmAckPoll();

  struct Out {
    uint8_t header[wire::kHeaderSize];
    MessagePtr m;
    size_t offset = 0;     // bytes of header+payload already written
    bool by_ref = false;   // the payload stays in the arena: only the header is written
    int pass_fd = -1;      // sent with SCM_RIGHTS alongside this message's first byte
    bool internal = false; // the link's own (arena announcement, releases): no on_sent
    bool splice = false;   // the payload goes by reference into the TCP socket
    size_t WireBytes() const { return wire::kHeaderSize + (by_ref ? 0 : m->payload.size()); }
  };

  EventLoop& loop_;
  int fd_;
  bool connecting_;
  bool accept_fds_;
  bool closed_ = false;
  mutable std::optional<Endpoints> endpoints_;
  bool close_after_flush_ = false;
  bool want_write_ = false;
  bool flush_scheduled_ = false;
  bool tcp_ = false;  // a TCP link to another host (counted as rds_tcp's counters)
  bool unix_ = false;  // an AF_UNIX link to an engine of this host
  bool share_payloads_ = false;
  int64_t last_read_ns_ = 0;
  bool large_stream_ = false;  // the last message read had a large payload
  int rcvlowat_ = 1;           // the socket's SO_RCVLOWAT (UpdateWakeThreshold)
  std::string description_;
  Callbacks cb_;
  std::deque<Out> out_;
  Reassembler reassembler_;
  std::vector<uint8_t> read_buf_;
  std::vector<uint8_t> stage_;  // Flush: small messages copied together for one iovec entry
  std::vector<int> received_fds_;
  // Shared payloads (unix_ links): our arena once announced on this link (the
  // arena records the loans, per peer process), and the peer's arena.
  std::shared_ptr<ShmArena> arena_;
  std::shared_ptr<PeerArena> peer_arena_;
  EventLoop::TimerId release_timer_ = 0;
  // TCP links: payloads of splice_min_ bytes or more go by reference (0: off);
  // the splicer is made for the first one.
  size_t splice_min_ = 0;
  std::unique_ptr<PayloadSplicer> splicer_;
  bool splice_failed_ = false;  // no pipe could be made: copy
  pid_t peer_pid_ = -1;  // -1: not asked yet
  // ReportTransportAcks: bytes written in all, and each sequenced message
  // written whole but not yet acknowledged by TCP, with the byte count at its end.
  bool report_transport_acks_ = false;
  uint64_t bytes_written_ = 0;
  int64_t handshake_acked_ = -1;  // tcpi_bytes_acked when established (-1: unknown)
  struct AwaitedAck {
    uint64_t end;
    uint64_t seq;
  };
  std::deque<AwaitedAck> awaiting_ack_;
  EventLoop::TimerId ack_poll_timer_ = 0;
};

}  // namespace rds

#endif  // RDS_TRANSPORTS_STREAM_STREAM_LINK_H_
