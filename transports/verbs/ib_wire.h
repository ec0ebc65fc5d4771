// transports/verbs/ib_wire.h — the wire of RDS over RDMA (kernel rds_rdma) beyond
// the RDS header itself (engine/wire.h): the RDMA CM private data that opens a
// connection, protocol-version negotiation, how a message is cut into 4 KiB
// fragments (each a SEND carrying the full header), ack-only frames, and
// reassembly with the kernel's receive-side checks. Facts from
// ../shared/reference/rds-ib.md (§1.3–1.4, §2.2–2.5, §3); no verbs calls here.
//
// Thread-safety: value types and pure functions; a FragmentAssembler belongs
// to one connection.
#ifndef RDS_TRANSPORTS_VERBS_IB_WIRE_H_
#define RDS_TRANSPORTS_VERBS_IB_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/addr.h"
#include "engine/message.h"
#include "engine/wire.h"

namespace rds::ib {

// RDMA CM ports the kernel listens on (rds-ib.md §1.2).
inline constexpr uint16_t kCmPortV4 = 18634;  // RDS_PORT (rds.h): IPv4, the 32-byte layout
// RDS_CM_PORT (rdma_transport.h): IPv6, the 56-byte layout. Its wildcard listener also takes
// IPv4 requests, but reads them with the IPv6 layout: IPv4 must go to 18634.
inline constexpr uint16_t kCmPortV6 = 16385;

// Payload bytes per fragment: every fragment but a message's last carries
// exactly this many (the receiver advances by it, never by byte_len).
inline constexpr uint32_t kFragmentSize = 4096;  // RDS_FRAG_SIZE
// A receive buffer: one header and one fragment.
inline constexpr size_t kReceiveBufferSize = wire::kHeaderSize + kFragmentSize;

// Protocol versions as the CM private data carries them (major << 8 | minor).
inline constexpr uint16_t kProtocol3_1 = 0x0301;
inline constexpr uint16_t kProtocol4_0 = 0x0400;
inline constexpr uint16_t kProtocol4_1 = 0x0401;
inline constexpr uint16_t kSupportedMinorMask = 0x0003;  // RDS_IB_SUPPORTED_PROTOCOLS

// The RDS value of a CM reject for an incompatible version (RDS_RDMA_REJ_INCOMPAT).
inline constexpr uint8_t kRejectIncompatible = 1;

// Private data sizes: struct rds_ib_connect_private (IPv4) and
// rds6_ib_connect_private (IPv6), unpacked, as x86_64 lays them out.
inline constexpr size_t kPrivateDataSizeV4 = 32;
inline constexpr size_t kPrivateDataSizeV6 = 56;

// The connection's private data (REQ from the active side, REP from the
// passive one). Addresses are the sender's RDS addresses: the passive kernel
// finds the connection by them, not by the CM's addresses.
struct ConnectPrivate {
  RdsAddr saddr;  // the sender's local RDS address
  RdsAddr daddr;  // the sender's peer
  uint16_t version = kProtocol3_1;
  uint16_t minor_mask = kSupportedMinorMask;
  uint8_t tos = 0;
  uint64_t ack_seq = 0;  // dp_ack_seq: in practice 0 (rds-ib.md §1.9)
  uint32_t credit = 0;   // dp_credit: non-zero would turn flow control on; we send 0

  friend bool operator==(const ConnectPrivate&, const ConnectPrivate&) = default;
};

// The 32-byte (both addresses IPv4-mapped) or 56-byte layout.
std::vector<uint8_t> EncodePrivate(const ConnectPrivate& p, bool v6);
// Reads the layout `v6` names from what the CM delivered (a REQ's 56 bytes
// after the CMA header, a REP's 196: never the sender's length). Fails if
// shorter than the layout.
absl::StatusOr<ConnectPrivate> DecodePrivate(absl::Span<const uint8_t> data, bool v6);

// The passive side's version check (rds_ib_protocol_compatible): the version
// to answer with, or nullopt for "incompatible" (reject with
// kRejectIncompatible). No private data at all is incompatible; data shorter
// than the layout, or major 0, counts as 4.0.
std::optional<uint16_t> NegotiateVersion(absl::Span<const uint8_t> data, bool v6);

// How many SENDs carry a message of `len` payload bytes (at least one).
inline uint32_t FragmentCount(uint32_t len) {
  return len == 0 ? 1 : (len + kFragmentSize - 1) / kFragmentSize;
}

// The header of an ack-only frame: sequence 0, ports 0, no payload, `ack`
// in h_ack; encoded with its checksum.
void EncodeAckOnly(uint64_t ack, uint8_t out[wire::kHeaderSize]);
inline bool IsAckOnly(const wire::Header& h, size_t data_len) {
  return h.sport == 0 && h.dport == 0 && data_len == 0;
}

// Reassembles messages from received fragments as the kernel does
// (rds_ib_process_recv): checks each fragment's checksum, takes every
// fragment's h_ack, skips ack-only frames (they may come between a
// message's fragments), and requires later fragments to repeat the first
// one's sequence, length and ports. An error means the connection must be
// dropped (the peer broke the protocol).
class FragmentAssembler {
 public:
  struct Result {
    // The h_ack of this fragment (0: nothing).
    uint64_t ack = 0;
    // Credits this fragment granted (h_credit).
    uint8_t credit = 0;
    // Set when this fragment completed a message (its first fragment's
    // header; h_csum and h_credit as that fragment had them).
    std::optional<wire::Header> header;
    Payload payload;
  };
  // `fragment` is what one receive completion delivered: header and data.
  absl::StatusOr<Result> Feed(absl::Span<const uint8_t> fragment);
  bool in_progress() const { return active_; }
  // Forgets a message in progress (the connection went down).
  void Reset();

 private:
  bool active_ = false;
  wire::Header first_;
  Payload payload_;
  uint32_t filled_ = 0;
};

}  // namespace rds::ib

#endif  // RDS_TRANSPORTS_VERBS_IB_WIRE_H_
