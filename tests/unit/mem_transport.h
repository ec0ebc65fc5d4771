// tests/unit/mem_transport.h — an in-memory transport for driving the real
// engine in unit tests (transports/transport.h, registered through
// SetTransportFactoryForTest).
//
// Each link the engine opens or accepts is one end of a MemChannel; the test
// plays the other end — the peer engine of another host — from its own
// thread: it takes the records the engine wrote (each encoded at Send time, as
// a stream transport writes it, so later changes to the engine's Message are
// not seen), and injects messages, connection and failure, which reach the
// engine's callbacks on its event loop as a real transport's would.
//
// Thread-safety: MemNetwork and MemChannel are safe for concurrent use; the
// engine-side MemLink is used as transport.h says.
#ifndef RDS_TESTS_UNIT_MEM_TRANSPORT_H_
#define RDS_TESTS_UNIT_MEM_TRANSPORT_H_

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/wire.h"
#include "transports/registry.h"
#include "transports/transport.h"

namespace rds::testing {

// A message as it crossed the channel.
struct Record {
  wire::Header header;
  std::vector<uint8_t> payload;
};

class MemLink;

// The test's end of one link.
class MemChannel {
 public:
  // The next record the engine wrote, waiting up to `limit`.
  std::optional<Record> Next(absl::Duration limit = absl::Seconds(5));
  // The next record for which `want` holds; the others are discarded.
  std::optional<Record> NextWhere(const std::function<bool(const Record&)>& want,
                                  absl::Duration limit = absl::Seconds(5));
  // Peer to engine: the connection is made (an outgoing link's on_connected),
  // a message arrives, the connection fails (on_closed with `why`).
  void Connected();
  void Deliver(const wire::Header& header, const std::vector<uint8_t>& payload = {});
  void Deliver(MessagePtr m);
  void Fail(const absl::Status& why);
  // The medium acknowledged everything through `seq` (a link the engine
  // asked to ReportTransportAcks: a kernel node's).
  void TransportAcked(uint64_t seq);
  bool reports_transport_acks();
  // The connection's addresses (Link::endpoints), before the engine sees it.
  void SetEndpoints(const RdsEndpoint& local, const RdsEndpoint& peer);
  // True once the engine closed its end.
  bool ClosedByEngine();
  bool WaitClosedByEngine(absl::Duration limit = absl::Seconds(5));

 private:
  friend class MemLink;
  friend class MemTransport;
  friend class MemNetwork;
  // A link and its channel.
  static std::pair<std::shared_ptr<MemLink>, std::shared_ptr<MemChannel>> MakePair(
      EventLoop& loop, std::string what);
  void Push(Record r);
  void MarkClosed();

  absl::Mutex mu_;
  std::deque<Record> records_ ABSL_GUARDED_BY(mu_);
  bool closed_by_engine_ ABSL_GUARDED_BY(mu_) = false;
  std::weak_ptr<MemLink> link_;  // set by MakePair, before the channel is shared
  std::optional<Link::Endpoints> endpoints_ ABSL_GUARDED_BY(mu_);
  bool transport_acks_ ABSL_GUARDED_BY(mu_) = false;
};

// What the engine did with the transport: each outgoing attempt, in order.
struct Attempt {
  LinkTarget target;
  std::string what;
  std::shared_ptr<MemChannel> channel;
};

class MemNetwork {
 public:
  // The next link the engine opened, waiting up to `limit`.
  std::optional<Attempt> NextAttempt(absl::Duration limit = absl::Seconds(5));
  // A peer opens a link to the engine (accepted in `ns`, as from another
  // host): the channel of the accepted link.
  std::shared_ptr<MemChannel> OpenToEngine(std::shared_ptr<NetNs> ns,
                                           std::optional<Link::Endpoints> ends = std::nullopt);
  int served() {
    absl::MutexLock lock(&mu_);
    return served_;
  }

  // A factory for SetTransportFactoryForTest: the real same-host transport,
  // and this network for other hosts.
  std::function<TransportSet(const TransportContext&)> Factory();

 private:
  friend class MemTransport;
  absl::Mutex mu_;
  std::deque<Attempt> attempts_ ABSL_GUARDED_BY(mu_);
  int served_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<TransportContext> ctx_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rds::testing

#endif  // RDS_TESTS_UNIT_MEM_TRANSPORT_H_
