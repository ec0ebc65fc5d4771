// sdp/rules.cc — libsdp's rule grammar and first-match decisions.
#include "sdp/rules.h"

#include <arpa/inet.h>
#include <fnmatch.h>
#include <netinet/in.h>

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace rds::sdp {
namespace {

// "/N" after an address: 0 <= N <= max.
bool ParsePrefix(absl::string_view s, int max, int* out) {
  return absl::SimpleAtoi(s, out) && *out >= 0 && *out <= max;
}

bool ParsePorts(absl::string_view s, Rule* r) {
  if (s == "*") return true;
  std::vector<absl::string_view> range = absl::StrSplit(s, '-');
  uint32_t lo = 0, hi = 0;
  if (range.size() > 2 || !absl::SimpleAtoi(range[0], &lo)) return false;
  hi = lo;
  if (range.size() == 2 && !absl::SimpleAtoi(range[1], &hi)) return false;
  if (lo > 65535 || hi > 65535 || lo > hi) return false;
  r->port_lo = static_cast<uint16_t>(lo);
  r->port_hi = static_cast<uint16_t>(hi);
  return true;
}

// "address[/prefix]:ports", "*:ports", "[v6]/prefix:ports".
bool ParseEndpoint(absl::string_view s, Rule* r, std::string* why) {
  absl::string_view addr, ports;
  if (!s.empty() && s[0] == '[') {
    const size_t close = s.find(']');
    if (close == absl::string_view::npos) return *why = "unclosed '['", false;
    addr = s.substr(1, close - 1);
    absl::string_view rest = s.substr(close + 1);
    absl::string_view prefix;
    if (!rest.empty() && rest[0] == '/') {
      const size_t colon = rest.find(':');
      if (colon == absl::string_view::npos) return *why = "no ':port'", false;
      prefix = rest.substr(1, colon - 1);
      rest = rest.substr(colon);
    }
    if (rest.empty() || rest[0] != ':') return *why = "no ':port'", false;
    ports = rest.substr(1);
    if (inet_pton(AF_INET6, std::string(addr).c_str(), r->addr.data()) != 1) {
      return *why = absl::StrCat("bad IPv6 address '", addr, "'"), false;
    }
    r->family = AF_INET6;
    r->prefix = 128;
    if (!prefix.empty() && !ParsePrefix(prefix, 128, &r->prefix)) {
      return *why = "bad prefix length", false;
    }
  } else {
    const size_t colon = s.rfind(':');
    if (colon == absl::string_view::npos) return *why = "no ':port'", false;
    addr = s.substr(0, colon);
    ports = s.substr(colon + 1);
    if (addr != "*") {
      absl::string_view prefix;
      const size_t slash = addr.find('/');
      if (slash != absl::string_view::npos) {
        prefix = addr.substr(slash + 1);
        addr = addr.substr(0, slash);
      }
      if (inet_pton(AF_INET, std::string(addr).c_str(), r->addr.data()) != 1) {
        return *why = absl::StrCat("bad address '", addr, "' (IPv6 goes in brackets)"), false;
      }
      r->family = AF_INET;
      r->prefix = 32;
      if (!prefix.empty() && !ParsePrefix(prefix, 32, &r->prefix)) {
        return *why = "bad prefix length", false;
      }
    }
  }
  if (!ParsePorts(ports, r)) return *why = absl::StrCat("bad ports '", ports, "'"), false;
  return true;
}

bool ParseUse(const std::vector<absl::string_view>& w, Rule* r, std::string* why) {
  if (w.size() != 5) return *why = "expected: use <sdp|tcp|both> <server|client> <program> <address>:<ports>", false;
  if (w[1] == "sdp") r->use = Use::kSdp;
  else if (w[1] == "tcp") r->use = Use::kTcp;
  else if (w[1] == "both") r->use = Use::kBoth;
  else return *why = absl::StrCat("unknown choice '", w[1], "'"), false;
  if (w[2] == "server" || w[2] == "listen") r->side = Side::kServer;
  else if (w[2] == "client" || w[2] == "connect") r->side = Side::kClient;
  else return *why = absl::StrCat("unknown side '", w[2], "'"), false;
  r->program = std::string(w[3]);
  return ParseEndpoint(w[4], r, why);
}

bool PrefixMatches(const uint8_t* rule, const uint8_t* addr, int prefix) {
  const int bytes = prefix / 8, bits = prefix % 8;
  if (std::memcmp(rule, addr, bytes) != 0) return false;
  if (bits == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - bits));
  return (rule[bytes] & mask) == (addr[bytes] & mask);
}

bool Matches(const Rule& r, absl::string_view program, const sockaddr_storage& ss) {
  if (fnmatch(r.program.c_str(), std::string(program).c_str(), 0) != 0) return false;
  uint16_t port = 0;
  int family = ss.ss_family;
  const uint8_t* bytes = nullptr;
  if (family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(ss);
    port = ntohs(in.sin_port);
    bytes = reinterpret_cast<const uint8_t*>(&in.sin_addr);
  } else if (family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(ss);
    port = ntohs(in6.sin6_port);
    bytes = reinterpret_cast<const uint8_t*>(&in6.sin6_addr);
    if (IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr) && r.family == AF_INET) {
      family = AF_INET;
      bytes += 12;
    }
  } else {
    return false;
  }
  if (port < r.port_lo || port > r.port_hi) return false;
  if (r.family == 0) return true;
  return r.family == family && PrefixMatches(r.addr.data(), bytes, r.prefix);
}

}  // namespace

RuleSet ParseRules(absl::string_view text, std::vector<std::string>* errors) {
  RuleSet set;
  int n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++n;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    std::vector<absl::string_view> w =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (w.empty() || w[0] == "log") continue;
    std::string why;
    Rule r;
    r.line = n;
    r.text = std::string(absl::StripAsciiWhitespace(line));
    if (w[0] != "use") {
      why = absl::StrCat("unknown keyword '", w[0], "'");
    } else if (ParseUse(w, &r, &why)) {
      set.rules.push_back(std::move(r));
      set.has_use_lines = true;
      continue;
    } else {
      set.has_use_lines = true;  // a broken use line still says rules were meant
    }
    if (errors) errors->push_back(absl::StrCat("line ", n, ": ", why));
  }
  return set;
}

Decision Decide(const RuleSet& rules, Side side, absl::string_view program,
                const sockaddr_storage& addr) {
  for (const Rule& r : rules.rules) {
    if (r.side == side && Matches(r, program, addr)) return Decision{r.use, &r};
  }
  return Decision{rules.has_use_lines ? Use::kBoth : Use::kSdp, nullptr};
}

const char* UseName(Use use) {
  switch (use) {
    case Use::kSdp: return "sdp";
    case Use::kTcp: return "tcp";
    case Use::kBoth: return "both";
  }
  return "?";
}

}  // namespace rds::sdp
