// sdp_relay/relay.h — one SDP connection's relay (DESIGN.md §11): the
// relay's end of the application's loopback TCP connection on one side, a
// MessageChannel on the other, sdp::Conversation between them. Every TCP
// semantic the application sees is its kernel socket's; the relay converts
// at its own end only:
//   bytes read here      -> Data messages, as credits allow (a read stops at
//                           the urgent mark: SO_OOBINLINE, SIOCATMARK; the
//                           urgent byte goes alone, OOB_PRES|OOB_PEND)
//   end of file here     -> DisConn after the last Data
//   reset here           -> AbortConn, then Disconnect
//   Data received        -> written here; its receive buffer is reposted only
//                           once all of it is written (so a reader that stops
//                           reading stops the peer's writer: credits)
//   OOB_PRES             -> the last byte written with MSG_OOB (SIGURG,
//                           POLLPRI and SIOCATMARK at the application)
//   DisConn received     -> shutdown(SHUT_WR) here after the data (EOF)
//   AbortConn, a protocol error, or the channel ending before both DisConns
//                        -> a reset here (SO_LINGER 0 and close: ECONNRESET)
// Both DisConns through and everything written: Disconnect, close, done().
//
// Event-driven and non-blocking: the owner calls the On* methods (the local
// fd edge-triggered for EPOLLIN and EPOLLOUT; each call does all the work it
// can) and destroys the relay once done().
//
// Not thread-safe: the relay thread's.
#ifndef RDS_SDP_RELAY_RELAY_H_
#define RDS_SDP_RELAY_RELAY_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "sdp/conversation.h"
#include "sdp_relay/channel.h"

namespace rds::sdp {

class Relay {
 public:
  // `local` (owned, closed as an internal fd — engine/sys.h; made
  // non-blocking and SO_OOBINLINE here) is the relay's end of the
  // application's connection; `channel` outlives the relay.
  Relay(int local, Conversation conversation, MessageChannel* channel, std::string name);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  void OnLocalReadable() { Pump(); }
  void OnLocalWritable() { Pump(); }
  // A received message, whole; its buffer stays the relay's until it calls
  // channel->Repost(id).
  void OnMessage(uint64_t id, absl::Span<const uint8_t> message);
  // The channel's send ring has room again.
  void OnSendSpace() { Pump(); }
  // The channel ended: the peer disconnected, or the connection failed.
  void OnClosed(const absl::Status& why);

  bool done() const { return local_ < 0 && disconnected_; }
  // Everything the application has written so far has gone to the peer:
  // nothing left to read at our end, every message delivered, and the
  // application's end of file sent as DisConn if it came (or the channel is
  // gone). What an exiting process waits for (Service::FlushBeforeExit).
  bool Flushed() const;
  int local_fd() const { return local_; }
  const Conversation& conversation() const { return conv_; }
  // Why it ended, when it did not end in order.
  const absl::Status& error() const { return error_; }

 private:
  // A received message not yet written out here.
  struct Pending {
    uint64_t id;
    Conversation::Kind kind;
    absl::Span<const uint8_t> payload;
    size_t written = 0;
    bool urgent = false;
  };

  void Pump();
  // Writes what waits for the application; false when the socket is full.
  bool Flush();
  // Reads and sends what credits and the send ring allow; false when done.
  void ReadAndSend();
  // Sends `h` and the first `payload_size` bytes after the header's room in
  // send_buf_ (where data is read from the application; control messages
  // have none).
  void SendMessage(const wire::Bsdh& h, size_t payload_size);
  // Ends the connection abortively, for `why`.
  void Abort(const absl::Status& why, bool tell_peer);
  void CloseLocal(bool reset);
  void DisconnectChannel();

  int local_;
  Conversation conv_;
  MessageChannel* const channel_;
  const std::string name_;
  std::deque<Pending> pending_;
  std::vector<uint8_t> send_buf_;
  bool local_eof_ = false;        // the application's FIN arrived
  bool local_shut_ = false;       // our FIN to the application went
  bool channel_closed_ = false;   // OnClosed came
  bool disconnected_ = false;     // Disconnect was called or the channel is gone
  absl::Status error_;
};

}  // namespace rds::sdp

#endif  // RDS_SDP_RELAY_RELAY_H_
