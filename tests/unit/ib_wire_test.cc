// The RDS-over-RDMA wire (transports/verbs/ib_wire.h, and the header checksum
// of engine/wire.h), against the layouts and worked examples of
// ../shared/reference/rds-ib.md §1.3–1.4, §2.2–2.5 and §3.
#include "transports/verbs/ib_wire.h"

#include <arpa/inet.h>

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace rds::ib {
namespace {

std::vector<uint8_t> Hex(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

RdsAddr V4(const char* s) {
  in_addr a{};
  inet_pton(AF_INET, s, &a);
  return RdsAddr::FromV4(a);
}

RdsAddr V6(const char* s) {
  in6_addr a{};
  inet_pton(AF_INET6, s, &a);
  return RdsAddr::FromV6(a, 0);
}

TEST(HeaderChecksum, MatchesTheKernelsWorkedExamples) {
  const std::string zeros16(32, '0');
  struct Case {
    std::string header;
    uint16_t csum;
  } cases[] = {
      // ack-only, h_ack 5
      {"00000000000000000000000000000005" "000000000000000000000000" "0000fffa" + zeros16, 0xfffa},
      // seq 1, len 5, sport 4000, dport 5000, ACK_REQUIRED
      {"00000000000000010000000000000000" "000000050fa0138802000000" "0000dad1" + zeros16, 0xdad1},
      // seq 7, ack 3, len 10000, RDMA_DEST rkey 0x1234 offset 0x10
      {"00000000000000070000000000000003" "000027100fa0138800000000" "00006eab"
       "03000012340000001000000000000000", 0x6eab},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> h = Hex(c.header);
    ASSERT_EQ(h.size(), wire::kHeaderSize);
    EXPECT_EQ(wire::HeaderChecksum(h.data()), c.csum) << c.header;
    EXPECT_TRUE(wire::HeaderChecksumValid(h.data()));
    std::vector<uint8_t> again = h;
    again[30] = again[31] = 0;
    wire::SetHeaderChecksum(again.data());
    EXPECT_EQ(again, h);
    h[5] ^= 0x40;  // one bit off
    EXPECT_FALSE(wire::HeaderChecksumValid(h.data()));
    h[30] = h[31] = 0;  // "no checksum" always passes
    EXPECT_TRUE(wire::HeaderChecksumValid(h.data()));
  }
}

TEST(HeaderChecksum, AcceptsWhatTheKernelAcceptsWhereTheSumIsAllOnes) {
  // The other words sum to 0xffff: the checksum computes to 0 ("none"), and a
  // stored 0xffff verifies too, as the kernel's whole-header sum says.
  uint8_t h[wire::kHeaderSize] = {0xff, 0xff};
  EXPECT_EQ(wire::HeaderChecksum(h), 0u);
  h[30] = h[31] = 0xff;
  EXPECT_TRUE(wire::HeaderChecksumValid(h));
  h[31] = 0xfe;
  EXPECT_FALSE(wire::HeaderChecksumValid(h));
}

TEST(PrivateData, Ipv4LayoutIsTheKernels32Bytes) {
  ConnectPrivate p;
  p.saddr = V4("10.77.0.1");
  p.daddr = V4("10.77.0.2");
  p.tos = 3;
  p.ack_seq = 0x0102030405060708;
  p.credit = 0x11223344;
  const std::vector<uint8_t> b = EncodePrivate(p, /*v6=*/false);
  EXPECT_EQ(b, Hex("0a4d00010a4d0002" "0301" "0003" "03" "00" "0000" "0102030405060708" "11223344"
                   "00000000"));
  EXPECT_EQ(b.size(), kPrivateDataSizeV4);
  absl::StatusOr<ConnectPrivate> back = DecodePrivate(b, false);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, p);
}

TEST(PrivateData, Ipv6LayoutIsTheKernels56BytesWithTheCommonBlockAt32) {
  ConnectPrivate p;
  p.saddr = V6("fd00::1");
  p.daddr = V6("fd00::2");
  const std::vector<uint8_t> b = EncodePrivate(p, /*v6=*/true);
  ASSERT_EQ(b.size(), kPrivateDataSizeV6);
  EXPECT_EQ(b[15], 1);
  EXPECT_EQ(b[31], 2);
  EXPECT_EQ(b[32], 3);     // major
  EXPECT_EQ(b[33], 1);     // minor
  EXPECT_EQ(b[35], 0x03);  // minor mask, big-endian
  absl::StatusOr<ConnectPrivate> back = DecodePrivate(b, true);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, p);
}

TEST(PrivateData, IsReadFromTheWholeAreaTheCmDeliversButNotFromLess) {
  ConnectPrivate p;
  p.saddr = V4("192.168.1.5");
  p.daddr = V4("192.168.1.9");
  std::vector<uint8_t> rep = EncodePrivate(p, false);
  rep.resize(196, 0);  // a REP's private data area
  absl::StatusOr<ConnectPrivate> back = DecodePrivate(rep, false);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->daddr, p.daddr);
  EXPECT_FALSE(DecodePrivate(absl::MakeConstSpan(rep).first(31), false).ok());
  EXPECT_FALSE(DecodePrivate(absl::MakeConstSpan(rep).first(55), true).ok());
}

TEST(NegotiateVersion, AnswersAsTheKernelsPassiveSide) {
  auto with = [](uint8_t major, uint8_t minor, uint16_t mask) {
    ConnectPrivate p;
    p.version = static_cast<uint16_t>(major << 8 | minor);
    p.minor_mask = mask;
    return EncodePrivate(p, false);
  };
  EXPECT_EQ(NegotiateVersion({}, false), std::nullopt);  // no private data: reject
  EXPECT_EQ(NegotiateVersion(with(3, 1, 3), false), kProtocol3_1);
  EXPECT_EQ(NegotiateVersion(with(3, 0, 3), false), std::nullopt);  // 3.0 is refused
  EXPECT_EQ(NegotiateVersion(with(4, 1, 3), false), kProtocol4_1);
  EXPECT_EQ(NegotiateVersion(with(4, 0, 1), false), kProtocol4_0);
  EXPECT_EQ(NegotiateVersion(with(4, 0, 2), false), kProtocol4_1);
  EXPECT_EQ(NegotiateVersion(with(4, 1, 0), false), std::nullopt);
  EXPECT_EQ(NegotiateVersion(with(5, 0, 3), false), std::nullopt);  // only 4.x and 3.1
  EXPECT_EQ(NegotiateVersion(with(0, 0, 0), false), kProtocol4_0);  // major 0: 4.0
  std::vector<uint8_t> shorter = with(3, 1, 3);
  shorter.resize(20);
  EXPECT_EQ(NegotiateVersion(shorter, false), kProtocol4_0);  // too short: 4.0
}

TEST(Fragments, CountAsTheKernelCutsMessages) {
  EXPECT_EQ(FragmentCount(0), 1u);
  EXPECT_EQ(FragmentCount(1), 1u);
  EXPECT_EQ(FragmentCount(4096), 1u);
  EXPECT_EQ(FragmentCount(4097), 2u);
  EXPECT_EQ(FragmentCount(10000), 3u);
  EXPECT_EQ(FragmentCount(wire::kCongMapBytes), 2u);
  EXPECT_EQ(FragmentCount(wire::kMaxMessageSize), 256u);
}

// The SENDs a kernel posts for one message: the full header (checksummed)
// before each 4 KiB slice of the payload.
std::vector<std::vector<uint8_t>> Cut(const wire::Header& h, const std::vector<uint8_t>& data) {
  std::vector<std::vector<uint8_t>> out;
  for (uint32_t k = 0; k < FragmentCount(h.len); ++k) {
    std::vector<uint8_t> f(wire::kHeaderSize);
    wire::Encode(h, f.data());
    wire::SetHeaderChecksum(f.data());
    const size_t off = size_t{k} * kFragmentSize;
    const size_t n = std::min<size_t>(kFragmentSize, data.size() - std::min(off, data.size()));
    f.insert(f.end(), data.begin() + off, data.begin() + off + n);
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<uint8_t> Numbered(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + i / 251);
  return v;
}

TEST(FragmentAssembler, ReassemblesAMessageWithAckOnlyFramesBetweenItsFragments) {
  wire::Header h;
  h.sequence = 7;
  h.ack = 3;
  h.len = 10000;
  h.sport = 4000;
  h.dport = 5000;
  h.flags = wire::kFlagAckRequired;
  const std::vector<uint8_t> data = Numbered(h.len);
  std::vector<std::vector<uint8_t>> frags = Cut(h, data);
  ASSERT_EQ(frags.size(), 3u);
  EXPECT_EQ(frags[0].size(), 48u + 4096);
  EXPECT_EQ(frags[2].size(), 48u + 1808);
  FragmentAssembler a;
  uint8_t ack[wire::kHeaderSize];
  EncodeAckOnly(42, ack);
  for (size_t i = 0; i < frags.size(); ++i) {
    absl::StatusOr<FragmentAssembler::Result> r = a.Feed(frags[i]);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->ack, 3u);
    if (i + 1 < frags.size()) {
      EXPECT_FALSE(r->header.has_value());
      absl::StatusOr<FragmentAssembler::Result> between = a.Feed({ack, sizeof ack});
      ASSERT_TRUE(between.ok()) << between.status();
      EXPECT_EQ(between->ack, 42u);
      EXPECT_FALSE(between->header.has_value());
      EXPECT_TRUE(a.in_progress());
      continue;
    }
    ASSERT_TRUE(r->header.has_value());
    EXPECT_EQ(r->header->sequence, 7u);
    EXPECT_EQ(r->header->flags, wire::kFlagAckRequired);
    ASSERT_EQ(r->payload.size(), data.size());
    EXPECT_EQ(std::memcmp(r->payload.data(), data.data(), data.size()), 0);
  }
  EXPECT_FALSE(a.in_progress());
}

TEST(FragmentAssembler, AnEmptyMessageIsOneHeaderOnlyFragment) {
  wire::Header ping;
  ping.sequence = 1;
  ping.sport = 4000;  // to port 0: a ping
  FragmentAssembler a;
  absl::StatusOr<FragmentAssembler::Result> r = a.Feed(Cut(ping, {})[0]);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->header.has_value());
  EXPECT_EQ(r->payload.size(), 0u);
}

TEST(FragmentAssembler, RefusesWhatTheKernelDropsTheConnectionFor) {
  wire::Header h;
  h.sequence = 9;
  h.len = 9000;
  h.sport = 1;
  h.dport = 2;
  std::vector<std::vector<uint8_t>> frags = Cut(h, Numbered(h.len));
  {  // a fragment of another message in the middle of one
    FragmentAssembler a;
    ASSERT_TRUE(a.Feed(frags[0]).ok());
    wire::Header other = h;
    other.sequence = 10;
    EXPECT_FALSE(a.Feed(Cut(other, Numbered(h.len))[1]).ok());
  }
  {  // a bad checksum
    FragmentAssembler a;
    frags[0][3] ^= 1;
    EXPECT_FALSE(a.Feed(frags[0]).ok());
    frags[0][3] ^= 1;
  }
  {  // a middle fragment short of 4 KiB
    FragmentAssembler a;
    ASSERT_TRUE(a.Feed(frags[0]).ok());
    std::vector<uint8_t> cut = frags[1];
    cut.resize(cut.size() - 1);
    EXPECT_FALSE(a.Feed(cut).ok());
  }
  {  // less than a header, and a length over 1 MiB
    FragmentAssembler a;
    EXPECT_FALSE(a.Feed(absl::MakeConstSpan(frags[0]).first(47)).ok());
    wire::Header big = h;
    big.len = wire::kMaxMessageSize + 1;
    std::vector<uint8_t> f(wire::kHeaderSize);
    wire::Encode(big, f.data());
    f.resize(f.size() + kFragmentSize);
    EXPECT_FALSE(a.Feed(f).ok());
  }
  {  // after Reset, a new message starts cleanly
    FragmentAssembler a;
    ASSERT_TRUE(a.Feed(frags[0]).ok());
    a.Reset();
    for (size_t i = 0; i < frags.size(); ++i) {
      absl::StatusOr<FragmentAssembler::Result> r = a.Feed(frags[i]);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->header.has_value(), i + 1 == frags.size());
    }
  }
}

}  // namespace
}  // namespace rds::ib
