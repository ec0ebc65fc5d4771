// transports/transport.h — the one interface every transport implements.
//
// A Link is an established, reliable, ordered channel to one peer engine
// (or kernel RDS node) that carries whole RDS messages. The engine hands it
// messages whose headers are final (sequence numbers assigned) and receives
// complete messages back; a transport never interprets header fields
// (engine/wire does). Stream transports (TCP, Unix) implement it with
// stream/StreamLink; verbs will implement it with queue pairs.
//
// Thread-safety: a Link is used only on the engine thread.
#ifndef RDS_TRANSPORTS_TRANSPORT_H_
#define RDS_TRANSPORTS_TRANSPORT_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "engine/message.h"
#include "engine/reassembler.h"
#include "engine/wire.h"

namespace rds {

class Link {
 public:
  struct Callbacks {
    // A complete message arrived.
    std::function<void(wire::Header&& header, Payload&& payload)> on_message;
    // Optional: the header of a large payload was read; storage for it other
    // than a fresh buffer (Reassembler::Storage), or nullopt.
    Reassembler::Storage payload_storage;
    // An outgoing connection finished connecting (before any message).
    std::function<void()> on_connected;
    // A message has been written completely (its send space may be freed).
    std::function<void(const MessagePtr& m)> on_sent;
    // The link failed or the peer closed it; no callback follows. Reported
    // from the event loop (never from inside Send); messages sent after the
    // failure and before this callback are silently dropped. An outgoing
    // link whose connection was refused (nobody serves that address) reports
    // NotFound; other failures are Unavailable.
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
};

}  // namespace rds

#endif  // RDS_TRANSPORTS_TRANSPORT_H_
