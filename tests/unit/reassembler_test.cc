// Unit tests for engine/reassembler: stream bytes back into messages.
#include "transports/stream/reassembler.h"

#include <gtest/gtest.h>

#include <vector>

namespace rds {
namespace {

std::vector<uint8_t> Frame(uint16_t dport, const std::string& payload) {
  wire::Header h;
  h.dport = dport;
  h.len = static_cast<uint32_t>(payload.size());
  std::vector<uint8_t> out(wire::kHeaderSize);
  wire::Encode(h, out.data());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

TEST(ReassemblerTest, SplitsBackToBackMessagesFedOneByteAtATime) {
  std::vector<uint8_t> stream = Frame(1, "hello");
  auto second = Frame(2, "");
  auto third = Frame(3, std::string(3000, 'x'));
  stream.insert(stream.end(), second.begin(), second.end());
  stream.insert(stream.end(), third.begin(), third.end());
  Reassembler r;
  std::vector<std::pair<uint16_t, std::string>> got;
  auto sink = [&](wire::Header&& h, Payload&& p) {
    got.emplace_back(h.dport, std::string(reinterpret_cast<const char*>(p.data()), p.size()));
  };
  for (uint8_t b : stream) ASSERT_TRUE(r.Feed({&b, 1}, sink).ok());
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], std::make_pair(uint16_t{1}, std::string("hello")));
  EXPECT_EQ(got[1], std::make_pair(uint16_t{2}, std::string()));
  EXPECT_EQ(got[2].second.size(), 3000u);
  EXPECT_TRUE(r.AtBoundary());
}

// A stream handed on to another reader mid-message: the bytes of the message
// begun (header, part of the payload; or part of a header) go first into the
// next reader, and the message arrives there whole.
TEST(ReassemblerTest, APartialMessageTakenOutContinuesInAnotherReassembler) {
  const std::vector<uint8_t> frame = Frame(9, std::string(3000, 'q'));
  for (size_t cut : {size_t{0}, size_t{1}, wire::kHeaderSize - 1, wire::kHeaderSize,
                     wire::kHeaderSize + 1, frame.size() - 1}) {
    SCOPED_TRACE(cut);
    std::vector<std::string> got;
    auto sink = [&](wire::Header&& h, Payload&& p) {
      got.emplace_back(reinterpret_cast<const char*>(p.data()), p.size());
    };
    Reassembler first;
    const std::vector<uint8_t> whole = Frame(1, "before");
    ASSERT_TRUE(first.Feed(whole, sink).ok());
    ASSERT_TRUE(first.Feed({frame.data(), cut}, sink).ok());
    ASSERT_EQ(got.size(), 1u);
    absl::StatusOr<std::vector<uint8_t>> partial = first.TakePartial();
    ASSERT_TRUE(partial.ok());
    EXPECT_EQ(*partial, std::vector<uint8_t>(frame.begin(), frame.begin() + cut));
    EXPECT_TRUE(first.AtBoundary());
    Reassembler next;
    ASSERT_TRUE(next.Feed(*partial, sink).ok());
    EXPECT_EQ(got.size(), 1u);
    ASSERT_TRUE(next.Feed({frame.data() + cut, frame.size() - cut}, sink).ok());
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[1], std::string(3000, 'q'));
  }
}

TEST(ReassemblerTest, OversizedLengthIsRejected) {
  wire::Header h;
  h.len = wire::kMaxMessageSize + 1;
  uint8_t b[wire::kHeaderSize];
  wire::Encode(h, b);
  Reassembler r;
  int calls = 0;
  EXPECT_FALSE(r.Feed({b, sizeof(b)}, [&](wire::Header&&, Payload&&) { ++calls; }).ok());
  EXPECT_EQ(calls, 0);
}

TEST(ReassemblerTest, DirectReadsFillLargePayloads) {
  auto frame = Frame(9, std::string(200000, 'z'));
  Reassembler r;
  int calls = 0;
  size_t size = 0;
  auto sink = [&](wire::Header&&, Payload&& p) {
    ++calls;
    size = p.size();
  };
  ASSERT_TRUE(r.Feed({frame.data(), 100}, sink).ok());
  absl::Span<uint8_t> target = r.DirectTarget(1024);
  ASSERT_EQ(target.size(), frame.size() - 100);
  std::copy(frame.begin() + 100, frame.end(), target.begin());
  ASSERT_TRUE(r.CommitDirect(target.size(), sink).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(size, 200000u);
}

// Storage lent for a payload (a waiting recvmsg's buffer): filled in place,
// handed to the sink, given back when the payload goes.
class Lender : public PayloadOwner {
 public:
  void ReleasePayload(uint8_t*, size_t) override { ++released; }
  int released = 0;
};

// Storage that lends `buffer` for every payload.
Reassembler::Storage LendAll(std::vector<uint8_t>& buffer, std::shared_ptr<Lender> lender) {
  return [&buffer, lender](const wire::Header& h, PayloadFiller&) -> std::optional<Payload> {
    return Payload::Borrowed(buffer.data(), h.len, lender);
  };
}

TEST(ReassemblerTest, LentStorageIsFilledInPlace) {
  auto lender = std::make_shared<Lender>();
  std::vector<uint8_t> buffer(300000, 0);
  Reassembler r;
  int asked = 0;
  r.SetPayloadStorage(
      [&](const wire::Header& h, PayloadFiller&) -> std::optional<Payload> {
        ++asked;
        if (h.dport != 9) return std::nullopt;  // declined: a buffer of its own
        return Payload::Borrowed(buffer.data(), h.len, lender);
      },
      1024);
  std::vector<uint8_t> stream = Frame(9, std::string(200000, 'z'));
  auto small = Frame(8, "tiny");  // under the minimum: never asked
  auto declined = Frame(7, std::string(5000, 'd'));
  stream.insert(stream.end(), small.begin(), small.end());
  stream.insert(stream.end(), declined.begin(), declined.end());
  std::vector<Payload> got;
  auto sink = [&](wire::Header&&, Payload&& p) { got.push_back(std::move(p)); };
  // Part through Feed, the rest straight into the target, then the others.
  ASSERT_TRUE(r.Feed({stream.data(), 1000}, sink).ok());
  absl::Span<uint8_t> target = r.DirectTarget(1024);
  ASSERT_EQ(target.data(), buffer.data() + 1000 - wire::kHeaderSize) << "the lent buffer";
  std::copy(stream.begin() + 1000, stream.begin() + 1000 + target.size(), target.begin());
  ASSERT_TRUE(r.CommitDirect(target.size(), sink).ok());
  EXPECT_TRUE(r.TakeLentCompleted());
  EXPECT_FALSE(r.TakeLentCompleted()) << "once";
  const size_t rest = wire::kHeaderSize + 200000;
  ASSERT_TRUE(r.Feed({stream.data() + rest, stream.size() - rest}, sink).ok());
  EXPECT_FALSE(r.TakeLentCompleted());
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(got[0].data(), buffer.data());
  EXPECT_EQ(buffer[0], 'z');
  EXPECT_EQ(buffer[199999], 'z');
  EXPECT_EQ(buffer[200000], 0) << "nothing past the payload";
  EXPECT_EQ(got[2].owner(), nullptr);
  EXPECT_EQ(lender->released, 0);
  got.clear();
  EXPECT_EQ(lender->released, 1);
}

// The tail of a lent payload is read straight into it however short it is:
// through the read buffer it would bring the next header along.
TEST(ReassemblerTest, LentStorageIsATargetToItsLastByte) {
  auto lender = std::make_shared<Lender>();
  std::vector<uint8_t> buffer(100000, 0);
  Reassembler r;
  r.SetPayloadStorage(LendAll(buffer, lender), 1024);
  std::vector<uint8_t> stream = Frame(9, std::string(100000, 'q'));
  auto sink = [&](wire::Header&&, Payload&&) {};
  ASSERT_TRUE(r.Feed({stream.data(), stream.size() - 10}, sink).ok());
  EXPECT_EQ(r.DirectTarget(1024).size(), 10u);
  // Not for storage of its own: under the minimum, no target.
  Reassembler own;
  ASSERT_TRUE(own.Feed({stream.data(), stream.size() - 10}, sink).ok());
  EXPECT_TRUE(own.DirectTarget(1024).empty());
}

TEST(ReassemblerTest, LentStorageIsTakenBackMidPayload) {
  auto lender = std::make_shared<Lender>();
  std::vector<uint8_t> buffer(100000, 0);
  Reassembler r;
  r.SetPayloadStorage(LendAll(buffer, lender), 1024);
  std::string body(100000, 'a');
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>('a' + i % 26);
  std::vector<uint8_t> stream = Frame(9, body);
  std::vector<Payload> got;
  auto sink = [&](wire::Header&&, Payload&& p) { got.push_back(std::move(p)); };
  ASSERT_TRUE(r.Feed({stream.data(), 30000}, sink).ok());
  // The recvmsg that lent it leaves: the bytes so far move to own storage.
  r.MovePayloadToOwnStorage();
  EXPECT_EQ(lender->released, 1);
  std::fill(buffer.begin(), buffer.end(), 0);  // the application reuses its buffer
  ASSERT_TRUE(r.Feed({stream.data() + 30000, stream.size() - 30000}, sink).ok());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].owner(), nullptr);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(got[0].data()), got[0].size()), body);
  EXPECT_FALSE(r.TakeLentCompleted());
}

}  // namespace
}  // namespace rds

namespace rds {
namespace {

std::vector<uint8_t> RefFrame(uint16_t dport, uint32_t len, uint64_t offset) {
  wire::Header h;
  h.dport = dport;
  h.len = len;
  EXPECT_TRUE(wire::AddShimPayloadRef(&h, offset));
  std::vector<uint8_t> out(wire::kHeaderSize);
  wire::Encode(h, out.data());
  return out;
}

TEST(ReassemblerTest, PayloadReferencesCarryNoStreamBytesWhereAllowed) {
  std::vector<uint8_t> stream = RefFrame(1, 500000, 1 << 20);
  auto next = Frame(2, "after");
  stream.insert(stream.end(), next.begin(), next.end());
  Reassembler r;
  r.AllowPayloadRefs(true);
  std::vector<std::pair<wire::Header, size_t>> got;
  auto sink = [&](wire::Header&& h, Payload&& p) { got.emplace_back(h, p.size()); };
  ASSERT_TRUE(r.Feed(stream, sink).ok());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first.len, 500000u);
  EXPECT_EQ(got[0].second, 0u) << "the link resolves the payload";
  EXPECT_EQ(wire::ParseExtHeaders(got[0].first).shim_payload_ref, uint64_t{1} << 20);
  EXPECT_EQ(got[1].first.dport, 2);
  EXPECT_EQ(got[1].second, 5u);
  EXPECT_TRUE(r.AtBoundary());
}

TEST(ReassemblerTest, PayloadReferencesAreOrdinaryHeadersElsewhere) {
  // A TCP link never honours the record: h_len payload bytes follow as always.
  std::vector<uint8_t> stream = RefFrame(1, 3, 0);
  stream.insert(stream.end(), {'a', 'b', 'c'});
  Reassembler r;
  std::vector<size_t> sizes;
  ASSERT_TRUE(r.Feed(stream, [&](wire::Header&&, Payload&& p) { sizes.push_back(p.size()); }).ok());
  EXPECT_EQ(sizes, std::vector<size_t>{3});
}

}  // namespace
}  // namespace rds
