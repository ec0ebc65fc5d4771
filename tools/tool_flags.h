// tools/tool_flags.h — option checking shared by rdsctl and rdsrun.
//
// absl::ParseCommandLine exits with status 1 on an unknown option; rdsrun
// passes its command's exit status through and rdsctl documents 1 as "a
// process did not answer", so both check their options first and fail with
// their own usage status instead.
//
// Thread-safety: call from main() before parsing.
#ifndef RDS_TOOLS_TOOL_FLAGS_H_
#define RDS_TOOLS_TOOL_FLAGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/flags/reflection.h"
#include "absl/strings/match.h"

namespace rds::tools {

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
