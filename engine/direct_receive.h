// engine/direct_receive.h — a large message read straight into the buffer of
// the recvmsg that waits for it.
//
// Without it a payload arriving on a stream link is copied twice on the
// receiving side: by read() into a buffer of the engine, then by recvmsg into
// the application's. A recvmsg that must wait, with nothing queued and a
// first buffer segment of at least kMinSize bytes, *offers* that segment to
// its socket while its thread drives the event loop (EventLoop::Drive). When
// a link reads the header of a data message for that socket that fits, the
// engine lends the segment to the link's reassembler (Engine's payload
// storage hook), the kernel copies the payload straight into it, and the
// complete message is handed to the offering recvmsg alone — never queued,
// so no other reader can see memory of this call — which then copies nothing
// (docs/perf/history.md §9.8).
//
// Invariants (run lock held for every change of state):
// * An offer is registered on its socket (RdsSocket::direct) only between
//   the drive hooks of the offering recvmsg (Engine::WaitDriving). Withdraw(),
//   on leaving, takes the buffer back from a reassembler still filling it
//   (PayloadFiller::MovePayloadToOwnStorage): no payload refers to the
//   application's memory once recvmsg has returned, except the message
//   recvmsg itself returns.
// * A lent payload that does not become the offer's message (dropped as a
//   duplicate, the socket gone, the link reset) gives the buffer back when it
//   is destroyed (ReleasePayload): the offer stands again. Its bytes may have
//   been written into the application's buffer (as a failed kernel recvmsg
//   may have).
//
// Thread-safety: Offer/TakeMessage on the offering thread; the rest with the
// event loop's run lock held.
#ifndef RDS_ENGINE_DIRECT_RECEIVE_H_
#define RDS_ENGINE_DIRECT_RECEIVE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "engine/message.h"

namespace rds {

class Waiter;

class DirectReceive : public PayloadOwner, public std::enable_shared_from_this<DirectReceive> {
 public:
  // Smaller payloads are copied as before: the hand-over is not worth it.
  static constexpr size_t kMinSize = 64 * 1024;

  // The calling thread's, reused from one recvmsg to the next.
  static std::shared_ptr<DirectReceive> ForThisThread();
  // The offer behind a payload lent by one, or null.
  static DirectReceive* LenderOf(const Payload& p);

  // Offering thread, before driving: the buffer and whom to wake.
  void Prepare(uint8_t* buffer, size_t capacity, Waiter* waiter);
  // The buffer for a payload of `len` bytes that `filler` will read, if the
  // offer stands and the payload fits.
  std::optional<Payload> Lend(size_t len, PayloadFiller& filler);
  // The message whose payload this offer lent arrived whole: it is the
  // offering recvmsg's, which is woken.
  void Complete(MessagePtr m);
  // Leaving the drive: a payload still being read moves out of the buffer.
  void Withdraw();
  // Offering thread, after driving: the message Complete() handed over.
  MessagePtr TakeMessage();

  void ReleasePayload(uint8_t* data, size_t size) override;

 private:
  enum class State { kIdle, kOffered, kLent, kComplete };

  State state_ = State::kIdle;
  uint8_t* buffer_ = nullptr;
  size_t capacity_ = 0;
  Waiter* waiter_ = nullptr;
  PayloadFiller* filler_ = nullptr;
  MessagePtr message_;
};

}  // namespace rds

#endif  // RDS_ENGINE_DIRECT_RECEIVE_H_
