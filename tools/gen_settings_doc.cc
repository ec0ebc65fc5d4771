// tools/gen_settings_doc.cc — writes the settings documentation from the
// schema (conf::Describe()); run by meson (docs/man/meson.build).
//
//   gen_settings_doc --man TEMPLATE OUT [VERSION]
//                                         rds-preload(7): TEMPLATE with its
//                                         @SETTINGS@ line replaced (and
//                                         @VERSION@ by VERSION)
//   gen_settings_doc --markdown OUT       docs/settings.md
//   gen_settings_doc --check FILE         exit 1 unless FILE is what
//                                         --markdown would write
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_replace.h"
#include "conf/settings.h"
#include "tools/settings_doc.h"

namespace {

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return static_cast<bool>(out.flush());
}

int Usage() {
  fprintf(stderr,
          "usage: gen_settings_doc --man TEMPLATE OUT [VERSION] | --markdown OUT | --check FILE\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return Usage();
  const std::string mode = argv[1];
  const auto entries = rds::tools::DocEntries(rds::conf::Describe());
  if (mode == "--man" && (argc == 4 || argc == 5)) {
    std::string tmpl;
    if (!ReadFile(argv[2], &tmpl)) {
      fprintf(stderr, "gen_settings_doc: cannot read %s\n", argv[2]);
      return 1;
    }
    auto page = rds::tools::FillTemplate(tmpl, "@SETTINGS@", rds::tools::ManSettings(entries));
    if (!page) {
      fprintf(stderr, "gen_settings_doc: %s has no @SETTINGS@ line\n", argv[2]);
      return 1;
    }
    if (argc == 5) *page = absl::StrReplaceAll(*page, {{"@VERSION@", argv[4]}});
    return WriteFile(argv[3], *page) ? 0 : 1;
  }
  if (mode == "--markdown" && argc == 3) {
    return WriteFile(argv[2], rds::tools::MarkdownSettings(entries)) ? 0 : 1;
  }
  if (mode == "--check" && argc == 3) {
    std::string have;
    if (ReadFile(argv[2], &have) && have == rds::tools::MarkdownSettings(entries)) return 0;
    fprintf(stderr,
            "%s is not what conf/settings.cc describes (a setting was added or changed).\n"
            "Regenerate it: ninja -C build update-settings-doc\n",
            argv[2]);
    return 1;
  }
  return Usage();
}
