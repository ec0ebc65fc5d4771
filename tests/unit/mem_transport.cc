// tests/unit/mem_transport.cc — the in-memory transport.
#include "tests/unit/mem_transport.h"

#include <utility>

#include "transports/unix/unix_transport.h"

namespace rds::testing {

// The engine's end of a channel.
class MemLink : public Link, public std::enable_shared_from_this<MemLink> {
 public:
  MemLink(EventLoop& loop, std::string description, std::shared_ptr<MemChannel> channel)
      : loop_(loop), description_(std::move(description)), channel_(std::move(channel)) {}

  void SetCallbacks(Callbacks callbacks) override { cb_ = std::move(callbacks); }
  void Send(MessagePtr m) override {
    if (closed_ || m->cancelled.load()) return;
    channel_->Push(Record{m->header, std::vector<uint8_t>(m->payload.data(),
                                                          m->payload.data() + m->payload.size())});
  }
  void Close() override {
    closed_ = true;
    channel_->MarkClosed();
  }
  void CloseAfterFlush() override { Close(); }
  std::string Describe() const override { return description_; }
  std::optional<Endpoints> endpoints() const override {
    absl::MutexLock lock(&channel_->mu_);
    return channel_->endpoints_;
  }
  bool ReportTransportAcks() override {
    absl::MutexLock lock(&channel_->mu_);
    channel_->transport_acks_ = true;
    return true;
  }
  void PostTransportAck(uint64_t seq) {
    loop_.Post([self = shared_from_this(), seq] {
      if (!self->closed_ && self->cb_.on_transport_acked) self->cb_.on_transport_acked(seq);
    });
  }

  // From the test's thread: each runs on the engine's loop.
  void PostConnected() {
    loop_.Post([self = shared_from_this()] {
      if (!self->closed_ && self->cb_.on_connected) self->cb_.on_connected();
    });
  }
  void PostMessage(MessagePtr m) {
    loop_.Post([self = shared_from_this(), m = std::move(m)] {
      if (!self->closed_ && self->cb_.on_message) {
        self->cb_.on_message(wire::Header(m->header), std::move(m->payload));
      }
    });
  }
  void PostFailure(absl::Status why) {
    loop_.Post([self = shared_from_this(), why = std::move(why)] {
      if (self->closed_) return;
      self->closed_ = true;
      self->channel_->MarkClosed();
      if (self->cb_.on_closed) self->cb_.on_closed(why);
    });
  }

 private:
  EventLoop& loop_;
  const std::string description_;
  const std::shared_ptr<MemChannel> channel_;
  Callbacks cb_;
  bool closed_ = false;
};

void MemChannel::Push(Record r) {
  absl::MutexLock lock(&mu_);
  records_.push_back(std::move(r));
}

void MemChannel::MarkClosed() {
  absl::MutexLock lock(&mu_);
  closed_by_engine_ = true;
}

std::optional<Record> MemChannel::Next(absl::Duration limit) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !records_.empty(); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), limit)) return std::nullopt;
  Record r = std::move(records_.front());
  records_.pop_front();
  return r;
}

std::optional<Record> MemChannel::NextWhere(const std::function<bool(const Record&)>& want,
                                            absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  for (;;) {
    std::optional<Record> r = Next(deadline - absl::Now());
    if (!r || want(*r)) return r;
  }
}

bool MemChannel::ClosedByEngine() {
  absl::MutexLock lock(&mu_);
  return closed_by_engine_;
}

bool MemChannel::WaitClosedByEngine(absl::Duration limit) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&closed_by_engine_), limit);
}

void MemChannel::Connected() {
  if (auto l = link_.lock()) l->PostConnected();
}

void MemChannel::Deliver(MessagePtr m) {
  if (auto l = link_.lock()) l->PostMessage(std::move(m));
}

void MemChannel::Deliver(const wire::Header& header, const std::vector<uint8_t>& payload) {
  auto m = NewMessage();
  m->header = header;
  m->header.len = static_cast<uint32_t>(payload.size());
  m->payload = Payload(payload.data(), payload.size());
  Deliver(std::move(m));
}

void MemChannel::TransportAcked(uint64_t seq) {
  if (auto l = link_.lock()) l->PostTransportAck(seq);
}

bool MemChannel::reports_transport_acks() {
  absl::MutexLock lock(&mu_);
  return transport_acks_;
}

void MemChannel::SetEndpoints(const RdsEndpoint& local, const RdsEndpoint& peer) {
  absl::MutexLock lock(&mu_);
  endpoints_ = Link::Endpoints{local, peer};
}

void MemChannel::Fail(const absl::Status& why) {
  if (auto l = link_.lock()) l->PostFailure(why);
}

std::pair<std::shared_ptr<MemLink>, std::shared_ptr<MemChannel>> MemChannel::MakePair(
    EventLoop& loop, std::string what) {
  auto channel = std::make_shared<MemChannel>();
  auto link = std::make_shared<MemLink>(loop, std::move(what), channel);
  channel->link_ = link;
  return {link, channel};
}

// Links to other hosts, in memory: every outgoing link is an Attempt for the
// test to play the peer of.
class MemTransport final : public Transport {
 public:
  MemTransport(const TransportContext& ctx, MemNetwork* net) : ctx_(ctx), net_(net) {}

  const char* name() const override { return "mem"; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.message_oriented = true;
    return c;
  }
  absl::Status Serve(const std::shared_ptr<NetNs>&) override {
    absl::MutexLock lock(&net_->mu_);
    ++net_->served_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<Link>> Connect(const LinkTarget& to,
                                                const std::string& what) override {
    auto [link, channel] = MemChannel::MakePair(*ctx_.loop, "mem " + what);
    absl::MutexLock lock(&net_->mu_);
    net_->attempts_.push_back(Attempt{to, what, channel});
    return std::shared_ptr<Link>(link);
  }

 private:
  const TransportContext ctx_;
  MemNetwork* const net_;
};

std::optional<Attempt> MemNetwork::NextAttempt(absl::Duration limit) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !attempts_.empty(); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), limit)) return std::nullopt;
  Attempt a = std::move(attempts_.front());
  attempts_.pop_front();
  return a;
}

std::shared_ptr<MemChannel> MemNetwork::OpenToEngine(std::shared_ptr<NetNs> ns,
                                                     std::optional<Link::Endpoints> ends) {
  TransportContext ctx;
  {
    absl::MutexLock lock(&mu_);
    if (!ctx_) return nullptr;  // no engine has started
    ctx = *ctx_;
  }
  auto [link, channel] = MemChannel::MakePair(*ctx.loop, "mem incoming");
  if (ends) channel->SetEndpoints(ends->local, ends->peer);
  ctx.loop->Post([ctx, link = link, ns = std::move(ns)] { ctx.on_accept(link, ns); });
  return channel;
}

std::function<TransportSet(const TransportContext&)> MemNetwork::Factory() {
  return [this](const TransportContext& ctx) {
    {
      absl::MutexLock lock(&mu_);
      ctx_ = ctx;
    }
    TransportSet set;
    set.same_host = MakeUnixTransport(ctx);
    set.remote = std::make_unique<MemTransport>(ctx, this);
    return set;
  };
}

}  // namespace rds::testing
