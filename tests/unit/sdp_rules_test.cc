// Unit tests for sdp/rules: libsdp's grammar (and what it skips), first-match
// decisions per side, prefixes, port ranges, program globs, IPv6 and
// v4-mapped addresses, and libsdp's two defaults.
#include "sdp/rules.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rds::sdp {
namespace {

sockaddr_storage V4(const char* ip, int port) {
  sockaddr_storage ss = {};
  auto& in = reinterpret_cast<sockaddr_in&>(ss);
  in.sin_family = AF_INET;
  in.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip, &in.sin_addr);
  return ss;
}

sockaddr_storage V6(const char* ip, int port) {
  sockaddr_storage ss = {};
  auto& in6 = reinterpret_cast<sockaddr_in6&>(ss);
  in6.sin6_family = AF_INET6;
  in6.sin6_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET6, ip, &in6.sin6_addr);
  return ss;
}

constexpr char kConfig[] = R"(# a comment
log min-level 7 destination file libsdp.log
use tcp client * 10.1.2.3:22            # ssh stays TCP
use sdp client java* 10.0.0.0/8:5000-5010
use both client * [fd00::]/8:*
use sdp server * 10.0.0.0/8:*
use tcp server * *:*
)";

TEST(SdpRules, FirstMatchWinsPerSide) {
  std::vector<std::string> errors;
  RuleSet set = ParseRules(kConfig, &errors);
  EXPECT_TRUE(errors.empty());
  ASSERT_EQ(set.rules.size(), 5u);
  Decision d = Decide(set, Side::kClient, "java", V4("10.1.2.3", 22));
  EXPECT_EQ(d.use, Use::kTcp);
  ASSERT_NE(d.rule, nullptr);
  EXPECT_EQ(d.rule->line, 3);
  EXPECT_EQ(Decide(set, Side::kClient, "java", V4("10.9.9.9", 5005)).use, Use::kSdp);
  EXPECT_EQ(Decide(set, Side::kClient, "javac", V4("10.9.9.9", 5010)).use, Use::kSdp);
  // Not java, or out of the port range: no client rule matches → "both".
  Decision none = Decide(set, Side::kClient, "python3", V4("10.9.9.9", 5005));
  EXPECT_EQ(none.use, Use::kBoth);
  EXPECT_EQ(none.rule, nullptr);
  EXPECT_EQ(Decide(set, Side::kClient, "java", V4("10.9.9.9", 5011)).use, Use::kBoth);
  EXPECT_EQ(Decide(set, Side::kServer, "x", V4("10.200.0.1", 80)).use, Use::kSdp);
  EXPECT_EQ(Decide(set, Side::kServer, "x", V4("192.168.0.1", 80)).use, Use::kTcp);
}

TEST(SdpRules, Ipv6AndMappedAddresses) {
  RuleSet set = ParseRules(kConfig, nullptr);
  EXPECT_EQ(Decide(set, Side::kClient, "x", V6("fd12::1", 7)).rule->line, 5);
  EXPECT_EQ(Decide(set, Side::kClient, "x", V6("fe80::1", 7)).rule, nullptr);
  // A v4-mapped destination matches the IPv4 rules.
  EXPECT_EQ(Decide(set, Side::kClient, "x", V6("::ffff:10.1.2.3", 22)).use, Use::kTcp);
}

TEST(SdpRules, NoUseLinesMeansSdpForEverything) {
  RuleSet set = ParseRules("# nothing but\nlog min-level 9\n", nullptr);
  EXPECT_FALSE(set.has_use_lines);
  EXPECT_EQ(Decide(set, Side::kClient, "x", V4("1.2.3.4", 1)).use, Use::kSdp);
  EXPECT_EQ(Decide(set, Side::kServer, "x", V4("1.2.3.4", 1)).use, Use::kSdp);
}

TEST(SdpRules, BadLinesAreReportedAndSkipped) {
  std::vector<std::string> errors;
  RuleSet set = ParseRules(
      "use sdp client * 10.0.0.1:80\n"
      "use maybe client * *:*\n"
      "use sdp sideways * *:*\n"
      "use sdp client * 10.0.0.1\n"
      "use sdp client * 10.0.0.0/33:1\n"
      "use sdp client * 300.0.0.1:1\n"
      "use sdp client * *:9-3\n"
      "use sdp client * [fe80::1:1\n"
      "use sdp client *\n"
      "prefer sdp\n",
      &errors);
  EXPECT_EQ(set.rules.size(), 1u);
  ASSERT_EQ(errors.size(), 9u);
  EXPECT_EQ(errors[0].rfind("line 2: ", 0), 0u) << errors[0];
  EXPECT_EQ(errors[8].rfind("line 10: ", 0), 0u) << errors[8];
  EXPECT_TRUE(set.has_use_lines);
}

TEST(SdpRules, PrefixesCutInsideAByte) {
  RuleSet set = ParseRules("use tcp client * 192.168.4.0/22:*\n", nullptr);
  EXPECT_EQ(Decide(set, Side::kClient, "x", V4("192.168.7.255", 1)).use, Use::kTcp);
  EXPECT_EQ(Decide(set, Side::kClient, "x", V4("192.168.8.0", 1)).use, Use::kBoth);
  set = ParseRules("use tcp client * 0.0.0.0/0:443\n", nullptr);
  EXPECT_EQ(Decide(set, Side::kClient, "x", V4("8.8.8.8", 443)).use, Use::kTcp);
  EXPECT_EQ(Decide(set, Side::kClient, "x", V6("::1", 443)).use, Use::kBoth) << "IPv4 rule";
}

}  // namespace
}  // namespace rds::sdp
