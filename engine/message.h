// engine/message.h — one RDS message, on its way out or on its way in.
//
// A Message is created by sendmsg (or by the engine for pongs and control
// traffic), travels through a path's send queue to a transport, and on the
// receiving side sits in a socket's receive queue until recvmsg takes it.
// Payload bytes are owned by the message and never copied between queues.
//
// Thread-safety: a Message is built by one thread and then only read, except
// `cancelled`, which any thread may set (close, RDS_CANCEL_SENT_TO).
#ifndef RDS_ENGINE_MESSAGE_H_
#define RDS_ENGINE_MESSAGE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>

#include "absl/time/time.h"
#include "engine/addr.h"
#include "engine/buffer_pool.h"
#include "engine/small_pool.h"
#include "engine/wire.h"

namespace rds {

class RdsSocket;
class MemoryRegion;  // transports/transport.h
struct RdmaOp;       // engine/rdma.h

// Monotonic nanoseconds (the clock of the RX latency trace points).
int64_t MonotonicNs();

// Storage a Payload borrows rather than owns: a block of a shared-memory
// arena (engine/shm_arena.h, transports/stream/peer_arena.h). ReleasePayload
// is called exactly once per payload handed out, from any thread.
class PayloadOwner {
 public:
  virtual ~PayloadOwner() = default;
  virtual void ReleasePayload(uint8_t* data, size_t size) = 0;
};

// A transport filling a payload in storage lent to it (a receive buffer of
// the application, engine/direct_receive.h): the lender may need its storage
// back before the payload is complete, and the filler then moves what has
// arrived to a buffer of its own and goes on filling that.
class PayloadFiller {
 public:
  virtual void MovePayloadToOwnStorage() = 0;

 protected:
  ~PayloadFiller() = default;
};

// Returns a payload's storage to the pool it came from, or to its owner.
struct PayloadRelease {
  size_t size = 0;
  std::shared_ptr<PayloadOwner> owner;  // null: engine/buffer_pool.h storage
  bool abandoned = false;               // the kernel may still read the pages
  void operator()(uint8_t* p) const {
    if (owner) {
      owner->ReleasePayload(p, size);
    } else if (abandoned) {
      buffer_pool::ReleaseAbandoned(p, size);
    } else {
      buffer_pool::Release(p, size);
    }
  }
};

// Payload bytes: an uninitialised buffer of `size` bytes (no memset for
// 1 MiB messages); large ones are recycled (engine/buffer_pool.h). A payload
// may instead borrow a block of shared memory (Borrowed); it is read and
// written the same way (a peer's arena is mapped read-only: only the
// receiving side borrows one, and it never writes a received payload).
class Payload {
 public:
  Payload() = default;
  explicit Payload(size_t size)
      : data_(size ? buffer_pool::Allocate(size) : nullptr, PayloadRelease{size, nullptr}),
        size_(size) {}
  Payload(const void* src, size_t size) : Payload(size) {
    if (size) std::memcpy(data_.get(), src, size);
  }
  // `size` bytes at `data`, given back to `owner` when the payload goes.
  static Payload Borrowed(uint8_t* data, size_t size, std::shared_ptr<PayloadOwner> owner) {
    Payload p;
    p.data_ = std::unique_ptr<uint8_t[], PayloadRelease>(data, PayloadRelease{size, std::move(owner)});
    p.size_ = size;
    return p;
  }
  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  // The owner of borrowed storage, or null.
  const PayloadOwner* owner() const { return data_.get_deleter().owner.get(); }
  // Storage of whole pages of its own, which may be lent to the kernel by
  // reference (transports/stream/payload_splicer.h).
  bool PageBacked() const { return !owner() && buffer_pool::PageBacked(size_); }
  // The kernel may still read this storage when it is freed: it must not be
  // reused as it is (buffer_pool::ReleaseAbandoned).
  void Abandon() { data_.get_deleter().abandoned = true; }

 private:
  std::unique_ptr<uint8_t[], PayloadRelease> data_;
  size_t size_ = 0;
};

struct Message {
  Message() = default;
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;
  ~Message() {
    if (payload_on_loan.load(std::memory_order_relaxed)) payload.Abandon();
  }

  wire::Header header;  // sport, dport, len, flags, exthdr; sequence set by the path
  Payload payload;
  RdsAddr saddr;        // source address (the sending socket's bound address)
  RdsAddr daddr;        // destination address
  // Sending side: the socket whose send buffer this message occupies (null for
  // engine-generated messages), until ReleaseSendSpace (engine/send.h), which
  // every path that drops an admitted message calls exactly once. The socket
  // lives while it counts the message (RdsSocket::in_flight_pin).
  RdsSocket* sender = nullptr;
  // The sender's send buffer was half full when it was admitted: the path
  // asks the peer to acknowledge it at once (ACK_REQUIRED), so that space
  // comes back before the sender must wait for it.
  bool ack_soon = false;
  std::atomic<bool> cancelled{false};
  // Same-host destinations: the destination port's bind generation when
  // sendmsg() ran; a different one at routing time means the port was
  // re-bound (or closed) since, and the message is not for the new socket.
  std::optional<uint32_t> port_gen;
  // Sending side: the transport lent the payload's pages to the kernel by
  // reference (a TCP link's splice, transports/stream/payload_splicer.h; a
  // device's DMA would be the same). The peer's side reads them until the
  // peer has received the bytes, which its acknowledgement of this message
  // says (Engine::OnAck clears the flag); a message freed without it —
  // cancelled, its path dropped — abandons its storage rather than let it be
  // written under a reader.
  std::atomic<bool> payload_on_loan{false};
  // At a kernel node connection's owner: a message another engine of the
  // host relayed (its pid and its sequence on the relay path), acknowledged
  // to it once the node's TCP has acknowledged this one (DESIGN.md §3.5).
  uint32_t relay_pid = 0;
  uint64_t relay_seq = 0;
  // MSG_ZEROCOPY: the cookie reported to the sender when the message is done.
  std::optional<uint32_t> zcopy_cookie;
  // Sending side: the region an RDMA_DEST cookie in the header offers
  // (engine/rdma.h), kept registered while the message lives, as the kernel
  // holds its MR.
  std::shared_ptr<MemoryRegion> rdma_region;
  // Sending side: the RDMA operation that goes before this message (its
  // header has the RDMA record naming the peer's region); only an RDMA link
  // can do it.
  std::shared_ptr<RdmaOp> rdma_op;
  // Receiving side: when the message was queued to the socket (SO_TIMESTAMP).
  absl::Time received_at;
  // Receiving side: monotonic ns at the kernel's RX trace points (header
  // seen, header complete, queued to the socket, cmsg built), for
  // SO_RDS_MSG_RXPATH_LATENCY.
  int64_t rx_trace[4] = {0, 0, 0, 0};
};

using MessagePtr = std::shared_ptr<Message>;

// Asks the CPU to fetch a message (and the reference count in front of it)
// ahead of a walk over many cold ones: acknowledgement of a send buffer's
// worth of small messages (docs/perf/history.md §9.9).
inline void PrefetchMessage(const Message& m) {
  constexpr size_t kLine = 64;
  const char* p = reinterpret_cast<const char*>(&m) - 2 * sizeof(int);
  for (size_t off = 0; off < sizeof(Message) + 2 * sizeof(int); off += kLine) {
    __builtin_prefetch(p + off, 1);
  }
}

// A new, empty message. Messages are freed on another thread than the one
// that made them, so they come from the small-block pool (engine/small_pool.h).
inline MessagePtr NewMessage() {
  return std::allocate_shared<Message>(small_pool::PoolAllocator<Message>());
}

}  // namespace rds

#endif  // RDS_ENGINE_MESSAGE_H_
