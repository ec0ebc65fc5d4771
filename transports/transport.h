// transports/transport.h — the interfaces every transport implements: Link
// (one established channel) and Transport (how links are made), after the
// kernel's struct rds_transport.
//
// A Link is an established, reliable, ordered channel to one peer engine
// (or kernel RDS node) that carries whole RDS messages. The engine hands it
// messages whose headers are final (sequence numbers assigned) and receives
// complete messages back. Framing, buffering, payload hand-off between
// processes and anything else the medium needs are the link's own; the engine
// sees messages only.
//
// A Transport makes links: it serves a network namespace (its accepted links
// go to TransportContext::on_accept) and connects a path. Which transport a
// path uses is decided in transports/registry.h, the one place transports are
// registered; the engine holds only Transport and Link pointers. How to add
// one: docs/DESIGN.md §2.6.
//
// Thread-safety: Links and Transports are used with the engine's event-loop
// run lock held (the engine thread, or an application thread on the inline
// send path), except Transport::Serve (any thread, serialised by the engine).
#ifndef RDS_TRANSPORTS_TRANSPORT_H_
#define RDS_TRANSPORTS_TRANSPORT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "absl/status/statusor.h"
#include "engine/addr.h"
#include "engine/event_loop.h"
#include "engine/message.h"
#include "engine/netns.h"
#include "engine/wire.h"

namespace rds {

class Link {
 public:
  struct Callbacks {
    // A complete message arrived.
    std::function<void(wire::Header&& header, Payload&& payload)> on_message;
    // Optional: the header of a large payload was received; storage for it
    // other than a fresh buffer (engine/direct_receive.h), or nullopt. The
    // filler is the link's part that fills it, which the lender may ask to
    // give the storage back (PayloadFiller).
    std::function<std::optional<Payload>(const wire::Header& header, PayloadFiller& filler)>
        payload_storage;
    // An outgoing connection finished connecting (before any message).
    std::function<void()> on_connected;
    // A message has been written completely (its send space may be freed).
    std::function<void(const MessagePtr& m)> on_sent;
    // After ReportTransportAcks: the medium acknowledged every message through
    // sequence `seq` sent on this link (the peer's TCP stack has the bytes).
    std::function<void(uint64_t seq)> on_transport_acked;
    // The link failed or the peer closed it; no callback follows. Reported
    // from the event loop (never from inside Send); messages sent after the
    // failure and before this callback are silently dropped. An outgoing
    // link whose connection was refused (nobody serves that address) reports
    // NotFound; one the peer reset before it was seen connected (it accepted,
    // then closed: a kernel RDS node rejecting a poke) Aborted; other
    // failures are Unavailable.
    std::function<void(const absl::Status& why)> on_closed;
  };

  virtual ~Link() = default;
  virtual void SetCallbacks(Callbacks callbacks) = 0;
  // Queues a message; messages are written in order. A message whose
  // `cancelled` flag is set before its first byte is written is skipped.
  virtual void Send(MessagePtr m) = 0;
  // Closes now; queued messages are dropped and no callback follows.
  virtual void Close() = 0;
  // Closes after every queued message has been written.
  virtual void CloseAfterFlush() = 0;
  virtual std::string Describe() const = 0;

  // When the receive that completed the message being handed to on_message
  // returned (MonotonicNs), for the RX latency trace; 0 if the link does not
  // know (the caller takes the time itself).
  virtual int64_t last_receive_ns() const { return 0; }
  // The addresses of the connection under the link (a TCP connection's), for
  // RDS_INFO tables and rdsctl; nullopt if it has none.
  struct Endpoints {
    RdsEndpoint local, peer;
  };
  virtual std::optional<Endpoints> endpoints() const { return std::nullopt; }
  // The peer does not acknowledge messages itself (a kernel RDS node: its
  // sender frees a message once TCP has acknowledged the bytes, and so must
  // we): report the medium's acknowledgements through on_transport_acked.
  // False if the medium has none to report.
  virtual bool ReportTransportAcks() { return false; }
  // An outgoing link whose connect the peer has not answered yet (a TCP SYN
  // without its SYN-ACK). Links that cannot tell say false.
  virtual bool AwaitingConnect() const { return false; }
  // An RDMA connection (transports/verbs): its peer, kernel rds_rdma or a shim
  // engine, speaks the kernel's protocol and sends its congestion map first.
  virtual bool IsRdma() const { return false; }
  // An RDMA connection's queue pair and counters, for RDS_INFO_IB_CONNECTIONS
  // and rdsctl.
  struct RdmaInfo {
    uint32_t qp_num = 0;
    uint8_t src_gid[16] = {}, dst_gid[16] = {};
    uint32_t max_send_wr = 0, max_recv_wr = 0, max_send_sge = 0;
    uint32_t posted_receives = 0;
    uint64_t recv_completions = 0, send_completions = 0, cq_events = 0, ack_frames = 0;
  };
  virtual std::optional<RdmaInfo> rdma_info() const { return std::nullopt; }
  // Same-host links that carry descriptors: the one the peer passed with the
  // last message, or -1. Ownership passes to the caller.
  virtual int TakePassedFd() { return -1; }
  // An accepted link that belongs to another engine of this host (its hello
  // names that engine): moves the connection under it to the engine at
  // `engine` (TransportContext::engine_address), with `hello` ahead of
  // anything the peer sends; the caller then closes this link. Transports
  // that cannot move a connection between processes return Unimplemented.
  virtual absl::Status HandOver(const std::string& engine, const MessagePtr& hello) {
    return absl::UnimplementedError("this link cannot be handed over");
  }
  // A stream handed on mid-stream to another process (a kernel node's
  // connection going on with a socket another process takes over): nothing
  // more is read; every message given to the link is written into the
  // socket first (waiting at most `limit`: a stream left mid-message cannot
  // be continued by anyone); the result is a duplicate of the socket
  // (internal fd, the caller's) and the bytes of a message read only in
  // part. The caller then closes the link — its descriptor only: the
  // connection lives on in the duplicate. On error nothing was read.
  struct Detached {
    int fd = -1;
    std::vector<uint8_t> partial;
  };
  virtual absl::StatusOr<Detached> DetachForHandOn(absl::Duration limit) {
    return absl::UnimplementedError("this link cannot be handed on");
  }
  // The other end of DetachForHandOn, on a link just adopted from the
  // duplicate: `partial` is read ahead of the socket. It must not complete
  // a message (InvalidArgument if it would).
  virtual absl::Status RestoreInput(absl::Span<const uint8_t> partial) {
    return absl::UnimplementedError("this link cannot take input back");
  }
};

// What a path's link connects: the namespace, the RDS addresses and the peer
// engine's pid (0 when not known yet: a route query to a host).
struct LinkTarget {
  std::shared_ptr<NetNs> ns;
  RdsAddr laddr, faddr;
  uint32_t peer_pid = 0;
  // A kernel node's path (0..7): a TCP connection's source port is then
  // chosen with port % 8 == node_path (kernel-rds.md §C.7, SPORT_IDX). -1: any.
  int node_path = -1;
  // TCP: the source port to try first (0: none), falling back to the usual
  // choice when it cannot be bound. A kernel node's path reconnects from the
  // port of its last connection: a node that still holds that connection
  // (our side died silently, our reset lost) answers the SYN with a challenge
  // ACK, our SYN_SENT socket answers that with a reset in its window, and the
  // stale connection is gone at once — instead of refusing every new
  // connection until its own retransmissions meet our host (RFC 5961 §4).
  uint16_t source_port = 0;
};

// What a transport gets from the engine that runs it.
struct TransportContext {
  EventLoop* loop = nullptr;
  uint32_t own_pid = 0;
  // Where the engine of process `pid` listens on this host (the host model's
  // run directory, engine/registry.h): the address same-host links use.
  std::function<std::string(uint32_t pid)> engine_address;
  // A link a peer opened (engine thread). `from_ns`: the namespace it was
  // accepted in, for transports that reach other hosts; null for same-host
  // links (their hello names the namespace).
  std::function<void(std::shared_ptr<Link> link, std::shared_ptr<NetNs> from_ns)> on_accept;
};

// Memory of this process registered for the peers' RDMA operations (the
// kernel's struct rds_mr, get_mr): peers name it by `rkey`, and address it
// zero-based from the start of its first page (the kernel's FRWR mapping,
// rds-ib.md §6.2), so a cookie's offset is the region's in-page offset.
// Destroying it deregisters the memory: peers' accesses fail from then on.
// Any thread.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  virtual uint32_t rkey() const = 0;
  virtual uint32_t lkey() const = 0;  // for this process's own operations on it
};

class Transport {
 public:
  struct Capabilities {
    bool same_host = false;         // reaches engines of this host only
    bool message_oriented = false;  // the medium keeps message boundaries (no stream framing)
    bool own_acks = false;          // the medium acknowledges delivery to the peer itself
    bool rdma = false;              // RDMA operations (RDS_CMSG_RDMA_*)
    bool passes_fds = false;        // links carry descriptors (Link::TakePassedFd, HandOver)
  };

  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual Capabilities capabilities() const = 0;

  // Makes the engine reachable in `ns` over this transport (listening);
  // synchronous. A transport that serves the whole host (same_host) serves it
  // once; later calls are no-ops once it does.
  virtual absl::Status Serve(const std::shared_ptr<NetNs>& ns) = 0;
  // Opens a link to `to` (engine thread); on_connected follows when it is
  // connected. `what` describes it in logs. NotFound: nobody serves that
  // address (the peer engine or every engine of the host is gone); other
  // errors are worth a retry.
  virtual absl::StatusOr<std::shared_ptr<Link>> Connect(const LinkTarget& to,
                                                        const std::string& what) = 0;
  // Whether the medium exists on this host (RDMA: a device, and rdma-core
  // loads) — the kernel's "transport module available". Any thread.
  virtual bool Available() { return true; }
  // Whether this transport can carry a path from local address `laddr` in
  // `ns` (RDMA: the address is on an RDMA device there). Any thread.
  virtual bool CarriesFrom(const std::shared_ptr<NetNs>& ns, const RdsAddr& laddr) {
    return true;
  }
  // Registers [addr, addr + len) of this process on the device `laddr` is on
  // in `ns`: for RDMA by peers (`remote_access`: local write and remote read
  // and write, as the kernel always grants), or as the local side of this
  // process's own RDMA operations (local write only). Errors carry
  // the errno reason in words: InvalidArgument (bad range), PermissionDenied
  // (memory lock limit), ResourceExhausted, Unimplemented (no RDMA here).
  // Any thread.
  virtual absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(
      const std::shared_ptr<NetNs>& ns, const RdsAddr& laddr, void* addr, size_t len,
      bool remote_access) {
    return absl::UnimplementedError("this transport registers no memory");
  }
  // A connection of this transport that another engine of the host accepted
  // and handed over (Link::HandOver) arrived as descriptor `fd`: the link over
  // it. Transports whose connections cannot move close `fd` and return null.
  virtual std::shared_ptr<Link> Adopt(int fd, const std::string& what);
  // At process exit, after the drain: stop being reachable (withdraw the
  // listening address, so that other engines find it gone).
  virtual void WithdrawAtExit() {}
};

}  // namespace rds

#endif  // RDS_TRANSPORTS_TRANSPORT_H_
