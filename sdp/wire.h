// sdp/wire.h — SDP's wire format (IBA Vol 1 Annex A4 as OFED's gen2 stack and
// FreeBSD implemented it; ../shared/reference/sdp.md §1): the 16-byte BSDH
// that starts every message, the Hello (CM REQ private data) and HelloAck (CM
// REP private data) headers, and the credit rule. The only code that knows
// SDP's bytes; all fields big-endian.
//
// Carried over the RDMA CM's TCP port space (the SDP port space is gone from
// upstream kernels, sdp.md §0), a REQ's private data holds at most 56 bytes:
// a Hello is then sent truncated (its leading bytes: BSDH, version, sizes,
// port and the source address) and the rest is taken from the CM; decoding
// accepts any length from kHelloMinSize.
//
// Pure functions: no state, safe anywhere.
#ifndef RDS_SDP_WIRE_H_
#define RDS_SDP_WIRE_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace rds::sdp::wire {

// Message identifiers (sdp.md §1.3). Control messages have a zero top nibble.
enum Mid : uint8_t {
  kHello = 0x00,
  kHelloAck = 0x01,
  kDisConn = 0x02,
  kAbortConn = 0x03,
  kSendSm = 0x04,
  kRdmaWrCompl = 0x05,
  kRdmaRdCompl = 0x06,
  kModeChange = 0x07,
  kSrcAvailCancel = 0x08,
  kSinkAvailCancel = 0x09,
  kSinkCancelAck = 0x0A,
  kChRcvBuf = 0x0B,
  kChRcvBufAck = 0x0C,
  kSuspComm = 0x0D,
  kSuspCommAck = 0x0E,
  kSinkAvail = 0xFD,
  kSrcAvail = 0xFE,
  kData = 0xFF,
};

// BSDH flags.
inline constexpr uint8_t kFlagOobPres = 0x01;  // this message carries the urgent byte (its last)
inline constexpr uint8_t kFlagOobPend = 0x02;  // urgent data is pending: the receiver signals SIGURG
inline constexpr uint8_t kFlagReqPipe = 0x04;  // request to switch to pipelined mode

inline constexpr size_t kBsdhSize = 16;
inline constexpr size_t kHelloSize = 92;       // BSDH + HH: the whole IB CM REQ private data
inline constexpr size_t kHelloAckSize = 196;   // BSDH + HAH: the whole IB CM REP private data
inline constexpr size_t kHelloMinSize = 32;    // through the source port
inline constexpr size_t kHelloAckMinSize = 24; // through ActRcvSz
inline constexpr uint8_t kVersion = 0x22;      // gen2: major 2, minor 2
inline constexpr uint8_t kMajorVersion = 2;

struct Bsdh {
  uint8_t mid = kData;
  uint8_t flags = 0;
  uint16_t bufs = 0;      // receive buffers the sender has posted for the peer (its credits)
  uint32_t len = 0;       // the whole message, BSDH and extended header included
  uint32_t mseq = 0;      // the sender's sequence number (Hello/HelloAck 0, then 1, 2, …)
  uint32_t mseq_ack = 0;  // the last sequence number the sender received from the peer
};

void EncodeBsdh(const Bsdh& h, uint8_t* out);  // kBsdhSize bytes
Bsdh DecodeBsdh(const uint8_t* in);            // kBsdhSize bytes

// A 16-byte address field: IPv4 in the last 4 bytes, the first 12 zero (not v4-mapped).
using IpField = std::array<uint8_t, 16>;

struct Hello {
  Bsdh bsdh;                  // mid kHello, len kHelloSize, bufs: initial credits for the peer
  uint8_t version = kVersion;
  uint8_t ip_version = 4;     // 4 or 6 (the high nibble of byte 17)
  uint8_t caps = 0;           // the low nibble of byte 17
  uint8_t max_adverts = 1;    // outstanding zero-copy advertisements; never 0
  uint32_t desired_remote_rcv_size = 0;
  uint32_t local_rcv_size = 0;  // the sender's receive buffers: the peer's largest message
  uint16_t src_port = 0;
  IpField src_ip = {};
  IpField dst_ip = {};
  uint16_t ext_max_adverts = 0;
};

struct HelloAck {
  Bsdh bsdh;                  // mid kHelloAck, len kHelloAckSize
  uint8_t version = kVersion;
  uint8_t ip_version = 4;
  uint8_t caps = 0;
  uint8_t max_adverts = 1;
  uint32_t actual_rcv_size = 0;  // the acceptor's receive buffers
};

std::array<uint8_t, kHelloSize> EncodeHello(const Hello& h);
std::array<uint8_t, kHelloAckSize> EncodeHelloAck(const HelloAck& h);
// Errors (InvalidArgument): shorter than the minimum, another MID, a major
// version other than 2, an IP version other than 4 or 6, MaxAdverts 0 (gen2
// refuses it), receive sizes too small for one BSDH. Bytes beyond `in` read as zero.
absl::StatusOr<Hello> DecodeHello(absl::Span<const uint8_t> in);
absl::StatusOr<HelloAck> DecodeHelloAck(absl::Span<const uint8_t> in);

// The messages the peer's receive buffers can still take (gen2's rule, applied
// to the peer's latest BSDH): its posted buffers minus our messages it has not
// acknowledged. `next_mseq` is the sequence number of our next message.
int64_t TxCredits(uint32_t peer_bufs, uint32_t peer_mseq_ack, uint32_t next_mseq);

// A received in-band message (not Hello/HelloAck): its BSDH's length must be
// what arrived, at least a BSDH, and its MID one that may come in band.
absl::Status CheckInBand(const Bsdh& h, size_t received);

}  // namespace rds::sdp::wire

#endif  // RDS_SDP_WIRE_H_
