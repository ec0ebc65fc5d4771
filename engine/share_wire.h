// engine/share_wire.h — the records of socket sharing (engine/share.h): the
// calls a process forwards to the process that owns a socket, their replies,
// and a socket's parked state. The one codec of that protocol; it never
// leaves the host (a Unix stream between two engines of one user, or a
// memfd queued on the socket's own backing fd).
//
// Frames on a stream: be32 length, then the body. Bodies are bytes::Writer
// layouts; every decoder rejects truncated or oversized input.
//
// Thread-safety: value types and functions on caller-owned fds.
#ifndef RDS_ENGINE_SHARE_WIRE_H_
#define RDS_ENGINE_SHARE_WIRE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/addr.h"
#include "engine/kernel_node.h"
#include "engine/message.h"

namespace rds::share_wire {

enum class Op : uint8_t {
  kSend = 1,     // arg0 flags; blobs: name, data, control
  kRecv = 2,     // arg0 flags, arg1 data room, arg2 name room, arg3 control room
  kBind = 3,     // blob: sockaddr
  kConnect = 4,  // blob: sockaddr
  kGetName = 5,  // arg0: 1 for the peer's name
  kSetOpt = 6,   // arg0 level, arg1 name; blob: value
  kGetOpt = 7,   // arg0 level, arg1 name, arg2 length
  kPoll = 8,     // the rds_poll mask
  kIoctl = 9,    // arg0 request; blob: the argument's bytes (in and out)
};

struct Request {
  Op op = Op::kPoll;
  int32_t arg[4] = {0, 0, 0, 0};
  std::vector<std::vector<uint8_t>> blobs;
};

// `result` is the call's value, or -errno. kRecv: out[0] msg_flags, out[1]
// msg_namelen, out[2] msg_controllen; blobs data, name, control. kGetName:
// blob sockaddr. kGetOpt: out[0] the length written back; blob the value.
// kSend and kRecv: `timeout_us` is the socket's SO_SNDTIMEO / SO_RCVTIMEO
// (-1: none), for the caller's own wait.
struct Reply {
  int64_t result = 0;
  int32_t out[3] = {0, 0, 0};
  int64_t timeout_us = -1;
  std::vector<std::vector<uint8_t>> blobs;
};

std::vector<uint8_t> EncodeRequest(const Request& r);
absl::StatusOr<Request> DecodeRequest(absl::Span<const uint8_t> body);
std::vector<uint8_t> EncodeReply(const Reply& r);
absl::StatusOr<Reply> DecodeReply(absl::Span<const uint8_t> body);

// Blocking frame I/O on a connected stream (EINTR retried, no SIGPIPE).
inline constexpr size_t kMaxFrame = 4u << 20;
absl::Status WriteFrame(int fd, const std::vector<uint8_t>& body);
absl::StatusOr<std::vector<uint8_t>> ReadFrame(int fd);

// At most this many node connections' paths ride with one parked socket.
inline constexpr size_t kMaxHandedNodePaths = 16;

// A socket handed on by the process that owned it (engine/share.h Park):
// everything the kernel's struct rds_sock would still hold.
struct ParkedState {
  uint64_t id = 0;
  std::optional<RdsEndpoint> bound;
  std::optional<RdsEndpoint> connected;
  int32_t transport = 0;
  int32_t sk_sndbuf = 0;
  int32_t sk_rcvbuf = 0;
  int64_t sndtimeo_us = -1;  // -1: infinite
  int64_t rcvtimeo_us = -1;
  bool recverr = false;
  bool cong_monitor = false;
  uint64_t cong_mask = 0;
  uint64_t cong_notify = 0;
  uint8_t timestamp = 0;
  uint8_t rx_trace_count = 0;
  uint8_t rx_trace_pos[3] = {0, 0, 0};
  uint8_t tos = 0;
  bool zerocopy = false;
  bool inq = false;
  bool has_sent = false;
  std::vector<uint32_t> zcookies;
  std::vector<MessagePtr> queue;  // received, not yet read (header, addresses, payload)
  // Kernel nodes' connections that ride with the socket (their fds follow
  // the state's and precede the port's in the SCM_RIGHTS, in this order).
  std::vector<HandedNodeConnection> nodes;
  size_t NodeFds() const {
    size_t n = 0;
    for (const HandedNodeConnection& c : nodes) n += c.paths.size();
    return n;
  }
};

std::vector<uint8_t> EncodeParked(const ParkedState& s);
absl::StatusOr<ParkedState> DecodeParked(absl::Span<const uint8_t> body);

// The datagram that announces a parked socket on its backing fd (the state
// and the port's lock ride along as SCM_RIGHTS): magic and socket id.
inline constexpr char kParkedMagic[8] = {'R', 'D', 'S', 'P', 'A', 'R', 'K', '1'};
inline constexpr size_t kParkedNoteSize = 16;

int64_t DurationToMicros(absl::Duration d);  // -1 for infinite
absl::Duration MicrosToDuration(int64_t us);

}  // namespace rds::share_wire

#endif  // RDS_ENGINE_SHARE_WIRE_H_
