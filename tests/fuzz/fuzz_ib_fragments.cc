// tests/fuzz/fuzz_ib_fragments.cc — libFuzzer target for the RDS-over-RDMA
// fragment assembler (transports/verbs/ib_wire.h), fed what receive
// completions could deliver.
//
// Input: a sequence of fragments, each [be16 n][n bytes] with n taken modulo
// 48 + 4096 + 2 (a receive buffer holds at most 48 + 4096; one more probes the
// bound); a short tail is one last fragment as it is.
//
// Invariants, against a reference written here from rds-ib.md §2.4–2.5:
//   * Feed fails exactly when the reference says the kernel would drop the
//     connection: shorter than a header; a non-zero checksum that does not
//     verify; more than 4 KiB of data; a first fragment with h_len > 1 MiB;
//     a later fragment whose sequence, length or ports differ from the
//     first's; fewer data bytes than min(remaining, 4096). After a failure
//     both start afresh (the connection is replaced).
//   * an ack-only frame (ports 0, no data) never completes or disturbs a
//     message; every accepted fragment reports its own h_ack;
//   * a message completes exactly when its h_len bytes have arrived, with
//     the first fragment's header and exactly those bytes.
#include <algorithm>
#include <cstring>
#include <vector>

#include "tests/fuzz/fuzz_check.h"
#include "transports/verbs/ib_wire.h"

namespace rds::fuzz {
namespace {

constexpr size_t kHdr = 48;
constexpr size_t kFrag = 4096;

// The kernel's verification: a stored checksum passes when the one's-complement
// sum of all 24 words, h_csum included, is 0xffff (ip_fast_csum(...) == 0).
bool RefChecksumOk(const uint8_t* h) {
  uint64_t sum = 0;
  for (size_t i = 0; i < kHdr; i += 2) sum += static_cast<uint32_t>(h[i] << 8 | h[i + 1]);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >> 16);
  return sum == 0xffff;
}

struct Reference {
  bool active = false;
  uint64_t seq = 0, len = 0, sport = 0, dport = 0;
  std::vector<uint8_t> first_header;
  std::vector<uint8_t> bytes;
};

}  // namespace
}  // namespace rds::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rds::fuzz;
  rds::ib::FragmentAssembler assembler;
  Reference ref;
  size_t off = 0;
  while (off < size) {
    size_t n = size - off;
    if (n >= 2) {
      n = std::min<size_t>(RefBe(data + off, 2) % (kHdr + kFrag + 2), size - off - 2);
      off += 2;
    }
    const uint8_t* f = data + off;
    off += n;
    absl::StatusOr<rds::ib::FragmentAssembler::Result> got = assembler.Feed({f, n});

    // What the kernel would do with it.
    bool fail = n < kHdr;
    bool ack_only = false, complete = false;
    size_t take = 0;
    if (!fail) {
      const uint64_t csum = RefBe(f + 30, 2);
      const uint64_t seq = RefBe(f, 8), len = RefBe(f + 16, 4);
      const uint64_t sport = RefBe(f + 20, 2), dport = RefBe(f + 22, 2);
      const size_t dlen = n - kHdr;
      if (csum != 0 && !RefChecksumOk(f)) {
        fail = true;
      } else if (sport == 0 && dport == 0 && dlen == 0) {
        ack_only = true;
      } else if (dlen > kFrag) {
        fail = true;
      } else if (!ref.active && len > (1u << 20)) {
        fail = true;
      } else if (ref.active && (seq != ref.seq || len != ref.len || sport != ref.sport ||
                                dport != ref.dport)) {
        fail = true;
      } else {
        if (!ref.active) {
          ref = Reference{true, seq, len, sport, dport, std::vector<uint8_t>(f, f + kHdr), {}};
        }
        take = std::min<size_t>(ref.len - ref.bytes.size(), kFrag);
        if (dlen < take) {
          fail = true;
        } else {
          ref.bytes.insert(ref.bytes.end(), f + kHdr, f + kHdr + take);
          complete = ref.bytes.size() == ref.len;
        }
      }
    }
    if (fail) {
      FUZZ_CHECK(!got.ok(), "fragment of %zu bytes accepted, the kernel drops the connection", n);
      assembler.Reset();
      ref = Reference{};
      continue;
    }
    FUZZ_CHECK(got.ok(), "fragment of %zu bytes refused: %s", n,
               std::string(got.status().message()).c_str());
    FUZZ_CHECK(got->ack == RefBe(f + 8, 8), "h_ack %llu reported as %llu",
               static_cast<unsigned long long>(RefBe(f + 8, 8)),
               static_cast<unsigned long long>(got->ack));
    FUZZ_CHECK(got->header.has_value() == complete, "completion %d, the reference says %d",
               got->header.has_value(), complete);
    FUZZ_CHECK(!ack_only || assembler.in_progress() == ref.active,
               "an ack-only frame changed the message in progress");
    if (!complete) continue;
    uint8_t again[kHdr];
    rds::wire::Encode(*got->header, again);
    FUZZ_CHECK(std::memcmp(again, ref.first_header.data(), 26) == 0 &&
                   std::memcmp(again + 30, ref.first_header.data() + 30, kHdr - 30) == 0,
               "the completed message's header is not its first fragment's");
    FUZZ_CHECK(got->payload.size() == ref.bytes.size() &&
                   (ref.bytes.empty() ||
                    std::memcmp(got->payload.data(), ref.bytes.data(), ref.bytes.size()) == 0),
               "payload of %zu bytes differs from the %zu the fragments carried",
               got->payload.size(), ref.bytes.size());
    FUZZ_CHECK(!assembler.in_progress(), "still in progress after a completed message");
    ref = Reference{};
  }
  return 0;
}
