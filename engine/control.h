// engine/control.h — the shim-to-shim extensions of the wire protocol
// (DESIGN.md §3.1): hellos that open a link and control messages on it.
//
// Both travel as ordinary RDS messages (48-byte header + payload, encoded by
// engine/wire). A hello is shaped as a kernel handshake ping (sport 1,
// dport 0) or pong (sport 0, dport 1) carrying NPATHS and GEN_NUM, plus the
// shim's extension type 0x20; its payload says who is speaking and what it
// wants. Control messages go from port 1 to port 1 with extension 0x21 and an
// opcode; a kernel would drop them, but they are only sent after a hello
// proved the peer is a shim.
//
// Thread-safety: value types and pure functions.
#ifndef RDS_ENGINE_CONTROL_H_
#define RDS_ENGINE_CONTROL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/addr.h"
#include "engine/message.h"
#include "engine/registry.h"
#include "engine/wire.h"

namespace rds::control {

enum class HelloKind : uint16_t {
  kLink = 1,     // open a path to engine `target_pid`
  kQuery = 2,    // who owns `query_port` at `to_addr`? (answered, then closed)
  kReply = 3,    // answer to kLink or kQuery
  kHandoff = 4,  // same-host: "take this accepted TCP connection" (+ SCM_RIGHTS)
  kInfo = 5,     // same-host: "send me your RDS_INFO items for `info_option` in `ns`"
  kReset = 6,    // same-host: "drop your links from `from_addr` to `to_addr` in `ns`"
  kShareClient = 7,  // same-host: "serve my calls on your socket `socket_id`" (+ SCM_RIGHTS:
                     // the connection to serve them on; engine/share.h)
};

enum class HelloResult : uint16_t {
  kAccept = 0,           // link open
  kRejectCollision = 1,  // both sides opened the same path; the other one wins
  kNoEngine = 2,         // the target engine does not run on this host
  kRefused = 3,          // malformed or not allowed
  kAnswer = 4,           // reply to kQuery: answer_pid owns the port (0: nobody)
  kNotNodeOwner = 5,     // a relay link to an engine that does not own the node connection
};

// A same-host kLink that carries a kernel node's traffic (DESIGN.md §3.5):
// both ends have the same (from_addr, to_addr), to_addr being the node's.
enum class Relay : uint8_t {
  kNone = 0,
  kToOwner = 1,    // from a relayer to the engine that owns the node connection
  kFromOwner = 2,  // from the owner to an engine that has a port the node sends to
  // A kHandoff: a TCP connection from the node that another engine of this
  // host accepted, passed to the owner before anything was read from it.
  kNodeConnection = 3,
};

struct Hello {
  HelloKind kind = HelloKind::kLink;
  HelloResult result = HelloResult::kAccept;
  uint32_t pid = 0;   // the sender's engine
  uint32_t gen = 0;   // the sender's engine generation (GEN_NUM)
  uint32_t uid = 0;
  NetNsKey ns;        // same-host links and handoffs: the namespace of the addresses
  RdsAddr from_addr;  // the initiator's local RDS address
  RdsAddr to_addr;    // the initiator's destination RDS address
  uint32_t target_pid = 0;
  uint16_t query_port = 0;
  uint32_t answer_pid = 0;
  // kLink and its kAccept reply: the highest sequence the sender has
  // delivered on this path (its cumulative acknowledgement), so a reconnect
  // resumes without retransmitting what already arrived. Optional on the
  // wire (absent means 0).
  uint64_t ack = 0;
  // kInfo: the RDS_INFO option asked for. Optional on the wire.
  uint32_t info_option = 0;
  // kShareClient: the socket whose calls are forwarded. Optional on the wire.
  uint64_t socket_id = 0;
  // kLink on the same host: a relay link of a kernel node connection.
  // Optional on the wire.
  Relay relay = Relay::kNone;
};

// A hello as a message ready for a link (header + payload).
MessagePtr EncodeHello(const Hello& h);
// Decodes a hello. Fails for anything that is not a well-formed shim hello.
absl::StatusOr<Hello> DecodeHello(const wire::Header& header, const Payload& payload);
bool IsHello(const wire::Header& header);

enum class Op : uint8_t {
  kRouteQuery = 1,       // who owns `port` at your address?
  kRouteReply = 2,       // `owner_pid` owns `port` (0: nobody)
  kPortUnreachable = 3,  // a message to `port` found no socket here: re-resolve
  kAck = 4,              // acknowledgement only: everything up to header.ack is delivered
  kInfoData = 5,         // answer to a kInfo hello: items of `query_id` bytes each in `data`
  kInfoDataPart = 6,     // a leading part of an answer longer than one message; the
                         // kInfoData that follows the parts carries the rest
  // Same-host links only, handled by the link itself (docs/perf/history.md §9.6):
  kArenaAnnounce = 7,    // the sender's payload arena: its memfd rides along (SCM_RIGHTS),
                         // `data` is its size (be64)
  kArenaRelease = 8,     // the receiver is done with these arena blocks: `data` is their
                         // offsets (be64 each)
  kMoved = 9,            // these data messages (`data`: their sequences, be64 each) found
                         // their port's socket handed to another process (engine/share.h):
                         // not delivered here; the sender sends them again, to its new owner
};

struct Control {
  Op op = Op::kRouteQuery;
  uint32_t query_id = 0;
  uint16_t port = 0;
  uint32_t owner_pid = 0;
  std::vector<uint8_t> data;  // kInfoData only
};

MessagePtr EncodeControl(const Control& c);
absl::StatusOr<Control> DecodeControl(const wire::Header& header, const Payload& payload);

// A kArenaAnnounce / kArenaRelease body: a list of be64 values.
MessagePtr EncodeU64List(Op op, absl::Span<const uint64_t> values);
absl::StatusOr<std::vector<uint64_t>> DecodeU64List(const Control& c);
// The most values one kArenaRelease carries (well within one message).
inline constexpr size_t kMaxU64ListValues = 8192;

// The answer to a kInfo hello: `bytes` (items of `each` bytes; an engine's
// JSON state for option 0) in as many messages as it needs — kInfoDataPart
// controls, then one kInfoData — each within the RDS message size limit.
std::vector<MessagePtr> EncodeInfoAnswer(uint32_t each, std::vector<uint8_t> bytes);
inline constexpr size_t kInfoPartBytes = 512 * 1024;

// Collects an answer sent by EncodeInfoAnswer from its controls, in order.
class InfoAnswerReader {
 public:
  // Takes the next control of the answer. An error for anything but a part
  // or the final kInfoData (or for a control after the final one).
  absl::Status Add(Control&& c);
  bool complete() const { return complete_; }
  uint32_t each() const { return each_; }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  bool complete_ = false;
  uint32_t each_ = 0;
  std::vector<uint8_t> bytes_;
};

}  // namespace rds::control

#endif  // RDS_ENGINE_CONTROL_H_
