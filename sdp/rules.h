// sdp/rules.h — which ordinary TCP sockets become SDP: libsdp's configuration
// (sdp.md §2.2), decided at connect() against the destination and at listen()
// against the bound address.
//
//   # comment
//   log ...                                   (accepted and ignored: the shim logs its own way)
//   use <sdp|tcp|both> <server|listen|client|connect> <program|*> <address[/prefix]|*>:<port[-port]|*>
//
// An IPv6 address is written in brackets ("[fe80::1]/64:5000"). Program names
// match the short program name with fnmatch(3) globs. First match wins, in the
// order written, separately for servers and clients. As libsdp: a file with no
// `use` line means SDP for everything; with `use` lines of which none matches,
// "both". A line that does not parse is reported and skipped.
//
// Pure functions: no state, safe anywhere.
#ifndef RDS_SDP_RULES_H_
#define RDS_SDP_RULES_H_

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace rds::sdp {

enum class Use { kSdp, kTcp, kBoth };
enum class Side { kServer, kClient };

struct Rule {
  Use use = Use::kBoth;
  Side side = Side::kClient;
  std::string program = "*";
  int family = 0;                    // 0: any address; AF_INET or AF_INET6
  std::array<uint8_t, 16> addr = {};  // network byte order (IPv4 in the first 4 bytes)
  int prefix = 0;
  uint16_t port_lo = 0, port_hi = 65535;
  int line = 0;
  std::string text;                  // the line as written
};

struct RuleSet {
  std::vector<Rule> rules;       // in the order written
  bool has_use_lines = false;
};

// Parses a configuration; each line that does not parse adds "line N: why"
// to `errors` and is skipped.
RuleSet ParseRules(absl::string_view text, std::vector<std::string>* errors);

struct Decision {
  Use use = Use::kSdp;
  const Rule* rule = nullptr;  // null: libsdp's default (see above)
};

// The decision for `side` of program `program` at `addr` (AF_INET or
// AF_INET6; an IPv4-mapped IPv6 address also matches IPv4 rules).
Decision Decide(const RuleSet& rules, Side side, absl::string_view program,
                const sockaddr_storage& addr);

const char* UseName(Use use);

}  // namespace rds::sdp

#endif  // RDS_SDP_RULES_H_
