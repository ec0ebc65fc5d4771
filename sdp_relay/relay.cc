// sdp_relay/relay.cc — see relay.h.
#include "sdp_relay/relay.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/log.h"
#include "engine/sys.h"

namespace rds::sdp {

Relay::Relay(int local, Conversation conversation, MessageChannel* channel, std::string name)
    : local_(local),
      conv_(std::move(conversation)),
      channel_(channel),
      name_(std::move(name)),
      send_buf_(wire::kBsdhSize + conv_.max_payload()) {
  const int flags = sys::Fcntl(local_, F_GETFL, 0);
  if (flags >= 0) sys::Fcntl(local_, F_SETFL, flags | O_NONBLOCK);
  // The urgent byte stays in the stream, and a read stops at its mark.
  const int one = 1;
  sys::Setsockopt(local_, SOL_SOCKET, SO_OOBINLINE, &one, sizeof one);
}

Relay::~Relay() {
  if (!channel_closed_) {
    for (const Pending& p : pending_) channel_->Repost(p.id);
  }
  if (local_ >= 0) CloseLocal(/*reset=*/true);
}

void Relay::OnMessage(uint64_t id, absl::Span<const uint8_t> message) {
  if (local_ < 0) {  // reset already: nothing more is delivered
    channel_->Repost(id);
    return;
  }
  absl::StatusOr<Conversation::Received> r = conv_.OnMessage(message);
  if (!r.ok()) {
    channel_->Repost(id);
    Abort(absl::InvalidArgumentError(absl::StrCat("protocol error: ", r.status().message())),
          /*tell_peer=*/true);
    return;
  }
  switch (r->kind) {
    case Conversation::Kind::kAbortConn:
      channel_->Repost(id);
      Abort(absl::UnavailableError("the peer reset the connection (AbortConn)"),
            /*tell_peer=*/false);
      return;
    case Conversation::Kind::kData:
      if (r->payload.empty()) {  // a credit update: nothing to write
        channel_->Repost(id);
        conv_.Reposted(1);
        break;
      }
      pending_.push_back(Pending{id, r->kind, r->payload, 0, r->urgent});
      break;
    case Conversation::Kind::kDisConn:
      log::Debug("%s: the peer's DisConn", name_);
      pending_.push_back(Pending{id, r->kind, {}, 0, false});
      break;
  }
  Pump();
}

void Relay::OnClosed(const absl::Status& why) {
  log::Debug("%s: the channel closed (%s); DisConn sent %d, received %d, %d messages unwritten",
             name_, why.ToString(), conv_.sent_disconn(), conv_.received_disconn(),
             static_cast<int>(pending_.size()));
  channel_closed_ = true;
  disconnected_ = true;  // nothing left to disconnect
  if (local_ < 0) return;
  if (!conv_.closed()) {
    Abort(why.ok() ? absl::UnavailableError("the peer disconnected before both sides closed")
                   : why,
          /*tell_peer=*/false);
    return;
  }
  Pump();  // what is left to write, then the close
}

void Relay::Pump() {
  if (local_ < 0) return;
  Flush();
  if (local_ < 0) return;
  ReadAndSend();
  if (local_ < 0) return;
  if (!channel_closed_ && channel_->CanSend()) {
    if (std::optional<wire::Bsdh> h = conv_.NextCreditUpdate()) SendMessage(*h, 0);
  }
  if (conv_.closed() && pending_.empty() && local_shut_) {
    log::Debug("%s: closed in order", name_);
    DisconnectChannel();
    CloseLocal(/*reset=*/false);
  }
}

bool Relay::Flush() {
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    if (p.kind == Conversation::Kind::kDisConn) {
      sys::Shutdown(local_, SHUT_WR);  // the application reads its EOF
      local_shut_ = true;
      if (!channel_closed_) channel_->Repost(p.id);
      conv_.Reposted(1);
      pending_.pop_front();
      continue;
    }
    const size_t left = p.payload.size() - p.written;
    // The urgent byte goes alone, with MSG_OOB: it becomes the mark.
    const bool oob = p.urgent && left == 1;
    const size_t n = oob ? 1 : (p.urgent ? left - 1 : left);
    const ssize_t w = sys::Sendto(local_, p.payload.data() + p.written, n,
                                  MSG_DONTWAIT | MSG_NOSIGNAL | (oob ? MSG_OOB : 0), nullptr, 0);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      Abort(absl::UnavailableError(absl::StrCat("the application's socket: ", strerror(errno))),
            /*tell_peer=*/true);
      return false;
    }
    p.written += static_cast<size_t>(w);
    if (p.written == p.payload.size()) {
      if (!channel_closed_) channel_->Repost(p.id);
      conv_.Reposted(1);
      pending_.pop_front();
    }
  }
  return true;
}

void Relay::ReadAndSend() {
  while (!local_eof_ && !channel_closed_ && channel_->CanSend() && conv_.can_send_data()) {
    int at_mark = 0;
    if (sys::Ioctl(local_, SIOCATMARK, &at_mark) < 0) at_mark = 0;
    const size_t want = at_mark ? 1 : conv_.max_payload();
    const ssize_t n = sys::Recv(local_, send_buf_.data() + wire::kBsdhSize, want, MSG_DONTWAIT);
    if (n > 0) {
      size_t payload = 0;
      std::optional<wire::Bsdh> h = conv_.NextData(
          static_cast<size_t>(n), at_mark ? std::optional<size_t>(0) : std::nullopt, &payload);
      // can_send_data() held and n <= max_payload(): all of it goes.
      SendMessage(*h, payload);
      continue;
    }
    if (n == 0) {
      local_eof_ = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    Abort(absl::UnavailableError(absl::StrCat("the application reset its connection (",
                                              strerror(errno), ")")),
          /*tell_peer=*/true);
    return;
  }
  if (local_eof_ && !conv_.sent_disconn() && !channel_closed_ && channel_->CanSend()) {
    if (std::optional<wire::Bsdh> h = conv_.NextDisConn()) {
      log::Debug("%s: our DisConn (MSeq %u)", name_, h->mseq);
      SendMessage(*h, 0);
    }
  }
}

bool Relay::Flushed() const {
  if (channel_closed_) return true;  // nothing more can go
  if (!channel_->AllSent()) return false;
  if (local_ < 0) return true;
  int unread = 0;
  if (sys::Ioctl(local_, SIOCINQ, &unread) == 0 && unread > 0) return false;
  return !local_eof_ || conv_.sent_disconn();
}

void Relay::SendMessage(const wire::Bsdh& h, size_t payload_size) {
  wire::EncodeBsdh(h, send_buf_.data());
  channel_->Send(absl::MakeConstSpan(send_buf_.data(), wire::kBsdhSize + payload_size));
}

void Relay::Abort(const absl::Status& why, bool tell_peer) {
  if (error_.ok()) error_ = why;
  log::Info("%s: reset: %s", name_, why.message());
  std::optional<wire::Bsdh> h = conv_.NextAbortConn();
  if (tell_peer && h && !channel_closed_ && channel_->CanSend()) SendMessage(*h, 0);
  for (const Pending& p : pending_) {
    if (!channel_closed_) channel_->Repost(p.id);
  }
  pending_.clear();
  DisconnectChannel();
  if (local_ >= 0) CloseLocal(/*reset=*/true);
}

void Relay::CloseLocal(bool reset) {
  if (reset) {
    const struct linger abortive = {1, 0};  // close sends a RST: the application's ECONNRESET
    sys::Setsockopt(local_, SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive);
  }
  sys::CloseInternal(local_);
  local_ = -1;
}

void Relay::DisconnectChannel() {
  if (disconnected_) return;
  disconnected_ = true;
  channel_->Disconnect();
}

}  // namespace rds::sdp
