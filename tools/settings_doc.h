// tools/settings_doc.h — the settings schema (conf::Describe()) as
// documentation: the ENVIRONMENT section of rds-preload(7) and
// docs/settings.md. Used by tools/gen_settings_doc.cc, at build time.
//
// Thread-safety: pure functions.
#ifndef RDS_TOOLS_SETTINGS_DOC_H_
#define RDS_TOOLS_SETTINGS_DOC_H_

#include <optional>
#include <string>
#include <vector>

#include "conf/settings.h"

namespace rds::tools {

// One setting as documented: the schema entry with a default that does not
// depend on the machine the documentation was generated on.
struct DocEntry {
  std::string variable;       // RDS_PRELOAD_NAME
  std::string type;           // int, bool, string
  std::string default_value;  // as text; "" means empty
  bool host_default = false;  // default_value describes where the default comes from
  std::string doc;
};

// The schema as documentation entries, in declaration order.
std::vector<DocEntry> DocEntries(const std::vector<conf::SettingInfo>& schema);

// Settings whose default is read from the host: their text for the docs.
// (The schema does not say so yet; see the names' doc lines.)
const std::vector<std::pair<std::string, std::string>>& HostDefaults();

// Escapes text for a roff line (backslashes, and a leading '.' or '\'').
std::string RoffEscape(const std::string& text);

// The settings as roff paragraphs (.TP entries) for a man page.
std::string ManSettings(const std::vector<DocEntry>& entries);

// The settings as a Markdown document with one table.
std::string MarkdownSettings(const std::vector<DocEntry>& entries);

// `tmpl` with the line consisting of `marker` replaced by `text`; nullopt if
// the marker line is missing.
std::optional<std::string> FillTemplate(const std::string& tmpl, const std::string& marker,
                                        const std::string& text);

}  // namespace rds::tools

#endif  // RDS_TOOLS_SETTINGS_DOC_H_
