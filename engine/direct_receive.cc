// engine/direct_receive.cc — lending a waiting recvmsg's buffer to a link.
#include "engine/direct_receive.h"

#include "engine/waiter.h"

namespace rds {

std::shared_ptr<DirectReceive> DirectReceive::ForThisThread() {
  thread_local std::shared_ptr<DirectReceive> mine;
  // Still referenced (a returned message's payload not yet destroyed): a new one.
  if (!mine || mine.use_count() > 1 || mine->state_ != State::kIdle) {
    mine = std::make_shared<DirectReceive>();
  }
  return mine;
}

DirectReceive* DirectReceive::LenderOf(const Payload& p) {
  const PayloadOwner* owner = p.owner();
  if (owner == nullptr) return nullptr;
  return dynamic_cast<DirectReceive*>(const_cast<PayloadOwner*>(owner));
}

void DirectReceive::Prepare(uint8_t* buffer, size_t capacity, Waiter* waiter) {
  buffer_ = buffer;
  capacity_ = capacity;
  waiter_ = waiter;
  message_.reset();
  state_ = State::kOffered;
}

std::optional<Payload> DirectReceive::Lend(size_t len, PayloadFiller& filler) {
  if (state_ != State::kOffered || len > capacity_ || len == 0) return std::nullopt;
  state_ = State::kLent;
  filler_ = &filler;
  return Payload::Borrowed(buffer_, len, shared_from_this());
}

void DirectReceive::Complete(MessagePtr m) {
  state_ = State::kComplete;
  filler_ = nullptr;
  message_ = std::move(m);
  waiter_->Wake();
}

void DirectReceive::Withdraw() {
  if (state_ == State::kLent && filler_ != nullptr) filler_->MovePayloadToOwnStorage();
  if (state_ != State::kComplete) state_ = State::kIdle;
}

MessagePtr DirectReceive::TakeMessage() { return std::move(message_); }

void DirectReceive::ReleasePayload(uint8_t*, size_t) {
  filler_ = nullptr;
  // A lent payload that did not arrive: the offer stands again. The
  // returned message's, once recvmsg is done with it: free for the next call.
  state_ = state_ == State::kLent ? State::kOffered : State::kIdle;
}

}  // namespace rds
