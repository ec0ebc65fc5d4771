// tools/tool_flags.h — command-line conventions shared by the installed tools.
//
// Every tool (rdsctl, rdsrun, rds-bench, rds-soak, rds-pingpong) answers
// --help / -h and --version as GNU tools do, through HelpOrVersion below; its
// main only describes itself in a ToolHelp.
//
// The absl-flags tools (rdsctl, rdsrun) also check their options before
// parsing: absl::ParseCommandLine exits with status 1 on an unknown option;
// rdsrun passes its command's exit status through and rdsctl documents 1 as "a
// process did not answer", so both fail with their own usage status instead.
// The other tools use only the ToolHelp part; they need absl's headers, not its
// libraries (everything here is inline, and they call nothing of absl).
//
// Thread-safety: call from main() before parsing.
#ifndef RDS_TOOLS_TOOL_FLAGS_H_
#define RDS_TOOLS_TOOL_FLAGS_H_

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"

#ifndef RDS_PRELOAD_VERSION
#error "RDS_PRELOAD_VERSION is defined for every target by the top-level meson.build"
#endif

namespace rds::tools {

// One option in a tool's --help: as typed, with its value ("--count N"), and
// what it does in one line.
struct OptionHelp {
  std::string name;
  std::string text;
};

// What `TOOL --help` prints, in this order.
struct ToolHelp {
  std::string tool;                 // the program's name: "rds-bench"
  std::string synopsis;             // "usage: TOOL ..." line(s), as its usage errors print them
  std::string about;                // what the tool does
  std::vector<OptionHelp> options;  // every option it accepts (HelpOrVersion adds its own)
  std::string notes;                // optional, last: exit status, see also
};

// The GNU standard options. `arg` is --help or -h: prints `help` to stdout;
// --version: prints "<tool> (rds-preload) <version>" to stdout. Returns true
// when it printed: the caller then exits with status 0. Anything else
// (including "--help=x") returns false and prints nothing.
//
// Call it with each of the tool's own options, in the order given and before
// rejecting one as unknown; never with an option's value, nor with arguments
// the tool hands on (a command to run and its arguments, anything after "--"):
// `rdsrun CMD --help` must pass --help to CMD.
inline bool HelpOrVersion(const std::string& arg, const ToolHelp& help) {
  if (arg == "--version") {
    printf("%s (rds-preload) %s\n", help.tool.c_str(), RDS_PRELOAD_VERSION);
    return true;
  }
  if (arg != "--help" && arg != "-h") return false;
  std::vector<OptionHelp> options = help.options;
  options.push_back({"-h, --help", "print this help and exit"});
  options.push_back({"--version", "print the version and exit"});
  size_t width = 0;
  for (const OptionHelp& o : options) width = std::max(width, o.name.size());
  width = std::min<size_t>(width, 28);  // a longer name pushes only its own text right
  std::string out = help.synopsis + "\n" + help.about + "\n\noptions:\n";
  for (const OptionHelp& o : options) {
    out += "  " + o.name + std::string(width + 2 - std::min(width, o.name.size()), ' ') +
           o.text + "\n";
  }
  if (!help.notes.empty()) out += "\n" + help.notes + "\n";
  fputs(out.c_str(), stdout);
  fflush(stdout);
  return true;
}

// The options of an absl-flags tool, for its ToolHelp: the flags defined in
// tools/ source files (not absl's own), sorted by name, each with its help text
// and, for flags that take a value, their default. `dashes`: show
// --keep-stale for keep_stale (for a tool that accepts both spellings).
inline std::vector<OptionHelp> AbslToolOptions(bool dashes) {
  std::vector<OptionHelp> out;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    std::string file = flag->Filename();
    if (!absl::StartsWith(file, "tools/") && !absl::StrContains(file, "/tools/")) continue;
    std::string shown = "--" + std::string(name);
    if (dashes) std::replace(shown.begin(), shown.end(), '_', '-');
    std::string text = flag->Help();
    if (!flag->IsOfType<bool>()) {
      shown += flag->IsOfType<std::string>() ? "=VALUE"
               : flag->IsOfType<double>()    ? "=NUMBER"
                                             : "=N";
      if (!flag->DefaultValue().empty()) text += " (default " + flag->DefaultValue() + ")";
    }
    out.push_back({shown, text});
  }
  std::sort(out.begin(), out.end(),
            [](const OptionHelp& a, const OptionHelp& b) { return a.name < b.name; });
  return out;
}

// The first argument in `args` (argv without argv[0], options only: stop at
// positional arguments yourself) that names no registered flag, if any.
// Accepts --name, -name, --name=value and --noname for booleans.
inline std::optional<std::string> UnknownFlag(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg.size() < 2 || arg[0] != '-' || arg == "--") continue;
    std::string name = arg.substr(arg.find_first_not_of('-'));
    name = name.substr(0, name.find('='));
    if (absl::FindCommandLineFlag(name) != nullptr) continue;
    if (absl::StartsWith(name, "no")) {
      const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name.substr(2));
      if (f != nullptr && f->IsOfType<bool>()) continue;
    }
    return arg;
  }
  return std::nullopt;
}

}  // namespace rds::tools

#endif  // RDS_TOOLS_TOOL_FLAGS_H_
