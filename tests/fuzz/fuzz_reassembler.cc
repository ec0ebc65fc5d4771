// tests/fuzz/fuzz_reassembler.cc — libFuzzer target for the stream
// reassembler (engine/reassembler), fed arbitrary chunkings.
//
// Input: byte 0 = n (mod 33), the length of a chunking schedule; bytes
// [1, 1+n) = the schedule; the rest = the byte stream. n == 0 feeds the whole
// stream in one call. Otherwise the schedule is applied cyclically until the
// stream is consumed, one step per byte s (k = (s & 63) + 1):
//   s >> 6 == 0  Feed the next k bytes
//   s >> 6 == 1  Feed the next 64*k bytes
//   s >> 6 == 2  DirectTarget(m): m = 16*(k/2) for odd k; for even k, m is the
//                reference's count of missing payload bytes - 1, + 0 or + 1
//                (k/2 % 3), to probe the boundary. If it offers a span, copy up
//                to 64*k stream bytes into it and CommitDirect them; else Feed k
//   s >> 6 == 3  Reset(), then Feed the next k bytes (a new stream starts here)
//
// Invariants, against a reference splitter of the stream ([48-byte header]
// [h_len bytes], stop at the first header with h_len > 1 MiB):
//   * every delivered message re-encodes (Encode(header) + payload) to the
//     next bytes of the input: the deliveries since the last Reset are exactly
//     a prefix of the stream (the header's 4 padding bytes excepted);
//   * nothing is lost or late: after each call, exactly the records that are
//     complete in the bytes given so far have been delivered, in order;
//   * payload.size() == h_len <= 1 MiB for every delivery;
//   * Feed fails iff the bytes it was given complete a header with
//     h_len > 1 MiB (then nothing after it is delivered and feeding stops);
//   * AtBoundary() is true exactly between records;
//   * DirectTarget(m) offers exactly the missing part of the payload being
//     received when that is >= m bytes, and nothing otherwise.
#include <algorithm>
#include <cstring>
#include <vector>

#include "transports/stream/reassembler.h"
#include "tests/fuzz/fuzz_check.h"

namespace rds::fuzz {
namespace {

using wire::kHeaderSize;

struct Frame {
  size_t hdr;       // stream offset of the header
  uint64_t len;     // h_len
  bool valid;       // h_len <= 1 MiB
  size_t end() const { return hdr + kHeaderSize + len; }
};

// The frames whose header is complete in stream[start, size), in order; the
// scan stops after an invalid header.
std::vector<Frame> RefSplit(const std::vector<uint8_t>& s, size_t start) {
  std::vector<Frame> out;
  size_t off = start;
  while (s.size() - off >= kHeaderSize) {
    Frame f{off, RefBe(&s[off + 16], 4), false};
    f.valid = f.len <= wire::kMaxMessageSize;
    out.push_back(f);
    if (!f.valid || f.end() > s.size()) break;
    off = f.end();
  }
  return out;
}

class Harness {
 public:
  explicit Harness(std::vector<uint8_t> stream) : s_(std::move(stream)) { NewSegment(); }

  bool failed() const { return failed_; }
  size_t remaining() const { return s_.size() - fed_; }

  void Feed(size_t n) {
    n = std::min(n, remaining());
    if (n == 0) return;
    size_t before = fed_;
    call_end_ = fed_ + n;
    absl::Status st = r_.Feed({s_.data() + fed_, n}, sink_);
    fed_ += n;
    // Does (before, fed_] complete an invalid header?
    bool expect_error = false;
    for (const Frame& f : frames_) {
      size_t hdr_end = f.hdr + kHeaderSize;
      if (!f.valid && hdr_end > before && hdr_end <= fed_) expect_error = true;
    }
    FUZZ_CHECK(st.ok() == !expect_error, "Feed of [%zu, %zu): status %s, expected %s", before,
               fed_, st.ToString().c_str(), expect_error ? "an error" : "ok");
    if (!st.ok()) {
      failed_ = true;
      // Everything before the invalid header was delivered; nothing after.
      FUZZ_CHECK(next_ + 1 == frames_.size() && !frames_.back().valid,
                 "after the error: %zu of %zu frames delivered", next_, frames_.size());
      return;
    }
    CheckProgress();
  }

  // Payload bytes still missing in the frame being received (0 between frames
  // or inside a header).
  size_t Missing() const {
    for (const Frame& f : frames_) {
      if (f.valid && fed_ >= f.hdr + kHeaderSize && fed_ < f.end()) return f.end() - fed_;
    }
    return 0;
  }

  void Direct(size_t min_size, size_t max_copy) {
    absl::Span<uint8_t> t = r_.DirectTarget(min_size);
    // Expected: inside the payload of a frame with >= min_size bytes missing.
    size_t missing = Missing();
    size_t expect = missing >= min_size ? missing : 0;
    FUZZ_CHECK(t.size() == expect, "DirectTarget(%zu) at %zu: %zu bytes, expected %zu", min_size,
               fed_, t.size(), expect);
    if (t.empty()) return;
    FUZZ_CHECK(t.data() != nullptr, "DirectTarget: null span");
    size_t k = std::min({t.size(), max_copy, remaining()});
    if (k == 0) return;
    std::memcpy(t.data(), s_.data() + fed_, k);
    call_end_ = fed_ + k;
    FUZZ_CHECK(r_.CommitDirect(k, sink_).ok(), "CommitDirect failed without lent storage");
    fed_ += k;
    CheckProgress();
  }

  void Reset() {
    r_.Reset();
    FUZZ_CHECK(r_.AtBoundary(), "not at a boundary after Reset");
    NewSegment();
  }

 private:
  void NewSegment() {
    seg_ = fed_;
    frames_ = RefSplit(s_, seg_);
    next_ = 0;
  }

  void OnMessage(wire::Header&& h, Payload&& p) {
    FUZZ_CHECK(next_ < frames_.size(), "delivery %zu: the stream holds no such record", next_);
    const Frame& f = frames_[next_];
    FUZZ_CHECK(f.valid, "delivered a record with h_len %llu > 1 MiB", (unsigned long long)f.len);
    FUZZ_CHECK(f.end() <= call_end_, "record ending at %zu delivered after only %zu bytes",
               f.end(), call_end_);
    FUZZ_CHECK(p.size() == h.len, "payload size %zu != h_len %u", p.size(), h.len);
    FUZZ_CHECK(p.size() <= wire::kMaxMessageSize, "payload of %zu bytes", p.size());
    // Re-encode: header + payload must be the next bytes of the stream.
    uint8_t enc[kHeaderSize];
    wire::Encode(h, enc);
    for (size_t i = 0; i < kHeaderSize; ++i) {
      if (i >= 26 && i < 30) continue;  // h_padding is written as zero
      FUZZ_CHECK(enc[i] == s_[f.hdr + i], "record %zu: header byte %zu differs", next_, i);
    }
    FUZZ_CHECK(p.size() == 0 || std::memcmp(p.data(), &s_[f.hdr + kHeaderSize], p.size()) == 0,
               "record %zu: payload differs from the stream", next_);
    ++next_;
  }

  void CheckProgress() {
    size_t complete = 0;
    bool boundary = fed_ == seg_;
    for (const Frame& f : frames_) {
      if (f.valid && f.end() <= fed_) ++complete;
      if (f.valid && f.end() == fed_) boundary = true;
    }
    FUZZ_CHECK(next_ == complete, "after %zu bytes: %zu records delivered, %zu complete", fed_,
               next_, complete);
    FUZZ_CHECK(r_.AtBoundary() == boundary, "AtBoundary() %d at %zu, expected %d", r_.AtBoundary(),
               fed_, boundary);
  }

  std::vector<uint8_t> s_;
  Reassembler r_;
  Reassembler::Sink sink_ = [this](wire::Header&& h, Payload&& p) {
    OnMessage(std::move(h), std::move(p));
  };
  size_t fed_ = 0;  // stream bytes given to the reassembler
  size_t call_end_ = 0;  // fed_ once the call in progress has consumed its bytes
  size_t seg_ = 0;  // where the current segment (since the last Reset) starts
  std::vector<Frame> frames_;
  size_t next_ = 0;  // next frame of the segment to be delivered
  bool failed_ = false;
};

}  // namespace
}  // namespace rds::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  size_t n = std::min<size_t>(data[0] % 33, size - 1);
  const uint8_t* sched = data + 1;
  rds::fuzz::Harness h(std::vector<uint8_t>(data + 1 + n, data + size));
  if (n == 0) {
    h.Feed(h.remaining());
    return 0;
  }
  for (size_t i = 0; h.remaining() > 0 && !h.failed(); i = (i + 1) % n) {
    uint8_t s = sched[i];
    size_t k = (s & 63) + 1;
    switch (s >> 6) {
      case 0: h.Feed(k); break;
      case 1: h.Feed(64 * k); break;
      case 2: {
        size_t before = h.remaining();
        size_t m = k % 2 ? 16 * (k / 2) : h.Missing() + (k / 2) % 3;
        if (k % 2 == 0 && m > 0) --m;
        h.Direct(m, 64 * k);
        if (h.remaining() == before) h.Feed(k);
        break;
      }
      default:
        h.Reset();
        h.Feed(k);
        break;
    }
  }
  return 0;
}
