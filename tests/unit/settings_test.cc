// Unit tests for conf/settings: parsing, bad values, unknown names.
#include "conf/settings.h"

#include <gtest/gtest.h>

#include <map>

namespace rds::conf {
namespace {

Settings ParseMap(const std::map<std::string, std::string>& env, std::vector<std::string>* problems) {
  std::vector<std::string> names;
  for (auto& [k, v] : env) names.push_back(k);
  return Parse(
      [&](const std::string& k) -> std::optional<std::string> {
        auto it = env.find(k);
        if (it == env.end()) return std::nullopt;
        return it->second;
      },
      names, problems);
}

TEST(SettingsTest, DefaultsMatchTheKernel) {
  std::vector<std::string> problems;
  Settings s = ParseMap({}, &problems);
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(s.tcp_port, 16385);
  EXPECT_TRUE(s.ping_enable);
  EXPECT_EQ(s.reconnect_min_delay_ms, 1);
  EXPECT_EQ(s.reconnect_max_delay_ms, 1000);
  EXPECT_EQ(s.log_level, 0);
}

TEST(SettingsTest, ValuesAreParsed) {
  std::vector<std::string> problems;
  Settings s = ParseMap({{"RDS_PRELOAD_TCP_PORT", "17000"}, {"RDS_PRELOAD_PING_ENABLE", "no"},
                         {"RDS_PRELOAD_RUNDIR", "/x"}},
                        &problems);
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(s.tcp_port, 17000);
  EXPECT_FALSE(s.ping_enable);
  EXPECT_EQ(s.rundir, "/x");
}

TEST(SettingsTest, InvalidValueKeepsDefaultAndIsReported) {
  std::vector<std::string> problems;
  Settings s = ParseMap({{"RDS_PRELOAD_TCP_PORT", "70000"}}, &problems);
  EXPECT_EQ(s.tcp_port, 16385);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("RDS_PRELOAD_TCP_PORT"), std::string::npos);
}

TEST(SettingsTest, UnknownNameSuggestsTheClosest) {
  std::vector<std::string> problems;
  ParseMap({{"RDS_PRELOAD_TCP_PROT", "1"}}, &problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("RDS_PRELOAD_TCP_PORT"), std::string::npos);
}

}  // namespace
}  // namespace rds::conf
