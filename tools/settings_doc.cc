// tools/settings_doc.cc — rendering the settings schema as documentation.
#include "tools/settings_doc.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace rds::tools {

const std::vector<std::pair<std::string, std::string>>& HostDefaults() {
  static const auto* host = new std::vector<std::pair<std::string, std::string>>{
      {"WMEM_DEFAULT", "the host's net.core.wmem_default"},
      {"RMEM_DEFAULT", "the host's net.core.rmem_default"},
  };
  return *host;
}

std::vector<DocEntry> DocEntries(const std::vector<conf::SettingInfo>& schema) {
  std::vector<DocEntry> out;
  for (const conf::SettingInfo& s : schema) {
    DocEntry e;
    e.variable = absl::StrCat(conf::kEnvPrefix, s.name);
    e.type = s.type;
    e.default_value = s.default_value;
    e.doc = s.doc;
    for (const auto& [name, text] : HostDefaults()) {
      if (name == s.name) {
        e.default_value = text;
        e.host_default = true;
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

std::string RoffEscape(const std::string& text) {
  std::string out = absl::StrReplaceAll(text, {{"\\", "\\e"}});
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out = "\\&" + out;
  return out;
}

namespace {

// A literal (variable name, default value): hyphens are minus signs, so the
// text can be copied from the rendered page.
std::string RoffLiteral(const std::string& text) {
  return absl::StrReplaceAll(RoffEscape(text), {{"-", "\\-"}});
}

std::string MarkdownCell(const std::string& text) {
  return absl::StrReplaceAll(text, {{"|", "\\|"}, {"\n", " "}});
}

std::string MarkdownCode(const std::string& text) {
  std::string fence = text.find('`') == std::string::npos ? "`" : "``";
  std::string pad = fence.size() > 1 ? " " : "";
  return absl::StrCat(fence, pad, MarkdownCell(text), pad, fence);
}

}  // namespace

std::string ManSettings(const std::vector<DocEntry>& entries) {
  std::string out;
  for (const DocEntry& e : entries) {
    absl::StrAppend(&out, ".TP\n.B ", RoffLiteral(e.variable), "\n");
    std::string def;
    if (e.host_default) {
      def = RoffEscape(e.default_value);
    } else if (e.default_value.empty()) {
      def = "empty";
    } else {
      def = absl::StrCat("\\fB", RoffLiteral(e.default_value), "\\fR");
    }
    absl::StrAppend(&out, RoffEscape(absl::StrCat("(", e.type, ", default ")), def, ")\n");
    absl::StrAppend(&out, ".br\n", RoffEscape(e.doc), "\n");
  }
  return out;
}

std::string MarkdownSettings(const std::vector<DocEntry>& entries) {
  std::string out =
      "<!-- Generated from conf/settings.cc by tools/gen_settings_doc; do not edit.\n"
      "     Regenerate with: ninja -C build update-settings-doc -->\n"
      "# rds-preload settings\n"
      "\n"
      "Every setting is read once per process from its environment variable (see\n"
      "rds-preload(7)). An invalid value is reported on standard error and the default is\n"
      "used; so is an unknown `RDS_PRELOAD_*` name. A running process's values are shown\n"
      "by `rdsctl config PID`.\n"
      "\n"
      "| Variable | Type | Default | Description |\n"
      "|---|---|---|---|\n";
  for (const DocEntry& e : entries) {
    std::string def = e.host_default           ? MarkdownCell(e.default_value)
                      : e.default_value.empty() ? std::string("*(empty)*")
                                                : MarkdownCode(e.default_value);
    absl::StrAppend(&out, "| ", MarkdownCode(e.variable), " | ", e.type, " | ", def, " | ",
                    MarkdownCell(e.doc), " |\n");
  }
  return out;
}

std::optional<std::string> FillTemplate(const std::string& tmpl, const std::string& marker,
                                        const std::string& text) {
  std::string line = marker + "\n";
  size_t at = 0;
  for (;;) {
    at = tmpl.find(line, at);
    if (at == std::string::npos) return std::nullopt;
    if (at == 0 || tmpl[at - 1] == '\n') break;
    at += line.size();
  }
  return absl::StrCat(tmpl.substr(0, at), text, tmpl.substr(at + line.size()));
}

}  // namespace rds::tools
