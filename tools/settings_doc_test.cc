// tools/settings_doc_test.cc — the settings documentation generator.
#include "tools/settings_doc.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "conf/settings.h"
#include "gtest/gtest.h"

namespace rds::tools {
namespace {

TEST(SettingsDoc, EverySettingIsDocumentedInBothForms) {
  const auto schema = conf::Describe();
  ASSERT_FALSE(schema.empty());
  const auto entries = DocEntries(schema);
  ASSERT_EQ(entries.size(), schema.size());
  const std::string man = ManSettings(entries);
  const std::string md = MarkdownSettings(entries);
  for (const conf::SettingInfo& s : schema) {
    std::string var = absl::StrCat("RDS_PRELOAD_", s.name);
    std::string man_name = var;  // the man page writes '-' as '\-'; names have none
    EXPECT_TRUE(absl::StrContains(man, ".B " + man_name + "\n")) << var;
    EXPECT_TRUE(absl::StrContains(md, "| `" + var + "` | " + s.type + " | ")) << var;
  }
}

TEST(SettingsDoc, HostDerivedDefaultsAreNamedInTheSchema) {
  // The override list must not go stale: each name is a real setting.
  const auto schema = conf::Describe();
  for (const auto& [name, text] : HostDefaults()) {
    bool found = false;
    for (const conf::SettingInfo& s : schema) found |= name == s.name;
    EXPECT_TRUE(found) << name << " is not a setting any more";
  }
  // ... and the generated text does not depend on this machine's /proc.
  for (const DocEntry& e : DocEntries(schema)) {
    if (e.host_default) {
      EXPECT_TRUE(absl::StartsWith(e.default_value, "the host's")) << e.variable;
    }
  }
}

TEST(SettingsDoc, MarkdownIsOneWellFormedTable) {
  std::vector<DocEntry> entries = {
      {"RDS_PRELOAD_A", "string", "", false, "empty default"},
      {"RDS_PRELOAD_B", "int", "5", false, "a | pipe"},
      {"RDS_PRELOAD_C", "string", "x`y", false, "backtick default"},
      {"RDS_PRELOAD_D", "int", "the host's foo", true, "from the host"},
  };
  const std::string md = MarkdownSettings(entries);
  std::vector<std::string> rows;
  for (absl::string_view line : absl::StrSplit(md, '\n')) {
    if (absl::StartsWith(line, "|")) rows.emplace_back(line);
  }
  ASSERT_EQ(rows.size(), entries.size() + 2);
  EXPECT_EQ(rows[0], "| Variable | Type | Default | Description |");
  EXPECT_EQ(rows[2], "| `RDS_PRELOAD_A` | string | *(empty)* | empty default |");
  EXPECT_EQ(rows[3], "| `RDS_PRELOAD_B` | int | `5` | a \\| pipe |");
  EXPECT_EQ(rows[4], "| `RDS_PRELOAD_C` | string | `` x`y `` | backtick default |");
  EXPECT_EQ(rows[5], "| `RDS_PRELOAD_D` | int | the host's foo | from the host |");
  // Each row has exactly 5 unescaped '|'.
  for (const std::string& r : rows) {
    int bars = 0;
    for (size_t i = 0; i < r.size(); ++i) bars += r[i] == '|' && (i == 0 || r[i - 1] != '\\');
    EXPECT_EQ(bars, 5) << r;
  }
}

TEST(SettingsDoc, RoffEscaping) {
  EXPECT_EQ(RoffEscape("plain"), "plain");
  EXPECT_EQ(RoffEscape("a\\b"), "a\\eb");
  EXPECT_EQ(RoffEscape(".starts with a dot"), "\\&.starts with a dot");
  EXPECT_EQ(RoffEscape("'quote"), "\\&'quote");
  std::vector<DocEntry> entries = {
      {"RDS_PRELOAD_X", "int", "-1", false, ".leading dot and a \\ backslash"},
      {"RDS_PRELOAD_Y", "string", "", false, "empty"},
  };
  const std::string man = ManSettings(entries);
  EXPECT_EQ(man,
            ".TP\n.B RDS_PRELOAD_X\n(int, default \\fB\\-1\\fR)\n.br\n"
            "\\&.leading dot and a \\e backslash\n"
            ".TP\n.B RDS_PRELOAD_Y\n(string, default empty)\n.br\nempty\n");
  // No generated line may start with a control character other than our own
  // requests (.TP, .B, .br).
  for (absl::string_view line : absl::StrSplit(man, '\n')) {
    if (line.empty() || (line[0] != '.' && line[0] != '\'')) continue;
    EXPECT_TRUE(line == ".TP" || line == ".br" || absl::StartsWith(line, ".B ")) << line;
  }
}

TEST(SettingsDoc, FillTemplate) {
  EXPECT_EQ(*FillTemplate("a\n@SETTINGS@\nb\n", "@SETTINGS@", "X\nY\n"), "a\nX\nY\nb\n");
  EXPECT_EQ(*FillTemplate("@SETTINGS@\n", "@SETTINGS@", "Z\n"), "Z\n");
  EXPECT_FALSE(FillTemplate("a\nb\n", "@SETTINGS@", "X\n").has_value());
  // Only a whole line is a marker.
  EXPECT_FALSE(FillTemplate("see @SETTINGS@\n", "@SETTINGS@", "X\n").has_value());
  EXPECT_EQ(*FillTemplate("x @SETTINGS@\n@SETTINGS@\n", "@SETTINGS@", "X\n"),
            "x @SETTINGS@\nX\n");
}

}  // namespace
}  // namespace rds::tools
