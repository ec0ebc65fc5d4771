// engine/wire.h — the RDS wire format: the only code that knows header bytes.
//
// Every transport carries RDS messages as Linux rds_tcp does (kernel-rds.md
// §C): a 48-byte big-endian header followed by exactly h_len payload bytes.
// This file encodes and decodes that header, reads and writes its extension
// headers (§C.4) with the kernel's parsing rules, and names the header shapes
// with special meaning (congestion map, handshake ping/pong, ping/pong).
// Transports never interpret header bytes themselves.
//
// Thread-safety: value types and pure functions.
#ifndef RDS_ENGINE_WIRE_H_
#define RDS_ENGINE_WIRE_H_

#include <array>
#include <vector>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace rds::wire {

inline constexpr size_t kHeaderSize = 48;
inline constexpr uint32_t kMaxMessageSize = 1u << 20;  // RDS_MAX_MSG_SIZE
inline constexpr uint32_t kCongMapBytes = 8192;        // RDS_CONG_MAP_BYTES
inline constexpr size_t kExtHeaderSpace = 16;           // RDS_HEADER_EXT_SPACE
inline constexpr uint16_t kProbePort = 1;               // RDS_FLAG_PROBE_PORT
inline constexpr uint16_t kNpathsAdvertised = 1;        // we use one path per peer

// h_flags bits (§C.3).
inline constexpr uint8_t kFlagCongBitmap = 0x01;
inline constexpr uint8_t kFlagAckRequired = 0x02;
inline constexpr uint8_t kFlagRetransmitted = 0x04;

// Extension header types (§C.4) and the shim's own, which a kernel never
// parses (it stops at a type >= 16).
enum ExtType : uint8_t {
  kExtNone = 0,
  kExtVersion = 1,   // be32
  kExtRdma = 2,      // be32 rkey
  kExtRdmaDest = 3,  // be32 rkey, be32 offset
  kExtRdmaBytes = 4, // 8 bytes (7.0+)
  kExtNpaths = 5,    // be16
  kExtGenNum = 6,    // be32
  kExtSportIdx = 8,  // 1 dummy byte (7.0+)
  kExtShimHello = 0x20,    // no data: the payload is a shim hello (engine/control.h)
  kExtShimControl = 0x21,  // 1 byte: control opcode; the payload is its body
  // be64 offset: the payload is not on the stream but in the sending engine's
  // shared-memory arena at this offset (same-host links only, docs/perf/history.md §9.6).
  kExtShimPayloadRef = 0x22,
};

// A decoded header. Field names follow struct rds_header.
struct Header {
  uint64_t sequence = 0;
  uint64_t ack = 0;
  uint32_t len = 0;
  uint16_t sport = 0;
  uint16_t dport = 0;
  uint8_t flags = 0;
  uint8_t credit = 0;
  uint16_t csum = 0;
  std::array<uint8_t, kExtHeaderSpace> exthdr{};

  friend bool operator==(const Header&, const Header&) = default;
};

void Encode(const Header& h, uint8_t out[kHeaderSize]);
Header Decode(const uint8_t in[kHeaderSize]);
// The header checksum of RDS over RDMA (rds-ib.md §2.4; unused on TCP, where
// h_csum is 0): the RFC 1071 one's-complement sum of the 48 header bytes
// with h_csum (offset 30) taken as 0, stored at offset 30 big-endian.
uint16_t HeaderChecksum(const uint8_t in[kHeaderSize]);
// Computes the checksum of an encoded header and writes it into h_csum.
void SetHeaderChecksum(uint8_t header[kHeaderSize]);
// A received header passes if h_csum is 0 ("none") or the sum verifies.
bool HeaderChecksumValid(const uint8_t in[kHeaderSize]);

// One record as a stream carries it: the encoded header, then `len` payload
// bytes (for one-off writes: a request, a hand-off; links write in place).
std::vector<uint8_t> EncodeRecord(const Header& h, const uint8_t* payload, size_t len);

// The largest h_len a receiver accepts: a data message is at most 1 MiB; a
// congestion map is exactly 8 KiB (< 1 MiB). Anything larger is a protocol
// violation and the stream cannot be trusted any more.
absl::Status ValidateLength(const Header& h);

// Extension headers found in a header, parsed as the kernel does: records of
// [type][data] where the data size is implied by the type, ended by type 0,
// a type >= 16 that is not the shim's, or the end of the 16-byte area.
// Types below 16 with no known size are skipped as zero-length.
struct ExtHeaders {
  std::optional<uint32_t> version;
  std::optional<uint32_t> rdma_rkey;  // the region an RDMA operation before this message used
  std::optional<uint64_t> rdma_dest;  // rkey | offset << 32 (the RDMA_DEST cookie)
  std::optional<uint16_t> npaths;
  std::optional<uint32_t> gen_num;
  bool sport_idx = false;
  bool shim_hello = false;
  std::optional<uint8_t> shim_control;
  std::optional<uint64_t> shim_payload_ref;
};
ExtHeaders ParseExtHeaders(const Header& h);

// Appends extension records to a header's area, in order. Returns false (and
// leaves the area unchanged) if the record does not fit.
class ExtWriter {
 public:
  explicit ExtWriter(Header* h) : h_(h) {}
  bool Npaths(uint16_t n);
  bool GenNum(uint32_t gen);
  // An RDMA_DEST cookie (rkey | offset << 32) offered to the peer.
  bool RdmaDest(uint64_t cookie);
  // The peer's region an RDMA operation before this message used.
  bool Rdma(uint32_t rkey);
  bool SportIdx();  // "my client connections put the path index in their source port"
  bool ShimHello();
  bool ShimControl(uint8_t opcode);

 private:
  friend bool AddShimPayloadRef(Header* h, uint64_t offset);
  bool Append(uint8_t type, absl::Span<const uint8_t> data);
  Header* h_;
  size_t used_ = 0;
};

// True if the header has any extension record (the common data header has
// none: callers skip ParseExtHeaders).
inline bool HasExtHeaders(const Header& h) { return h.exthdr[0] != kExtNone; }

// Appends a kExtShimPayloadRef record after the records already in `h`.
// False (header unchanged) when it does not fit.
bool AddShimPayloadRef(Header* h, uint64_t offset);
// Removes a kExtShimPayloadRef record and everything after it (the sender
// appends it last).
void StripShimPayloadRef(Header* h);

// Header shapes with special meaning.
inline bool IsCongMap(const Header& h) { return h.flags == kFlagCongBitmap; }
inline bool IsHandshakePing(const Header& h) { return h.sport == kProbePort && h.dport == 0; }
inline bool IsHandshakePong(const Header& h) { return h.sport == 0 && h.dport == kProbePort; }
// Shim control traffic (port 1 to port 1: a kernel drops it, nothing binds 1).
inline bool IsShimControl(const Header& h) { return h.sport == kProbePort && h.dport == kProbePort; }
inline bool IsPing(const Header& h) { return h.dport == 0 && !IsHandshakePing(h); }

}  // namespace rds::wire

#endif  // RDS_ENGINE_WIRE_H_
