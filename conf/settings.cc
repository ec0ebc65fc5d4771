// conf/settings.cc — the one table of settings, and its parser.
#include "conf/settings.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string_view>
#include <variant>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "engine/sys.h"

extern char** environ;

namespace rds::conf {
namespace {

// Reads an integer from a /proc/sys file; `fallback` if unreadable.
int64_t ReadSysctl(const char* path, int64_t fallback) {
  std::ifstream in(path);
  int64_t v = 0;
  if (in >> v) return v;
  return fallback;
}

struct IntRange {
  int64_t min, max;
};

using Field = std::variant<int64_t Settings::*, bool Settings::*, std::string Settings::*>;

struct Spec {
  const char* name;
  Field field;
  std::function<std::string()> default_text;  // resolved lazily (may read /proc)
  IntRange range;
  const char* doc;
};

const std::vector<Spec>& Schema() {
  static const auto* schema = new std::vector<Spec>{
      {"RUNDIR", &Settings::rundir, [] { return std::string("/tmp/rds-preload"); }, {0, 0},
       "directory of the host registry shared by every shim process (ports, engine sockets)"},
      {"LINK_UIDS", &Settings::link_uids, [] { return std::string(); }, {0, 0},
       "other users whose processes may open same-host links to this one: empty (only the "
       "same user), a comma-separated uid list, or 'all' for a shared multi-user host"},
      {"TCP_PORT", &Settings::tcp_port, [] { return std::string("16385"); }, {1, 65535},
       "TCP port every shim engine listens on for other hosts (kernel RDS_TCP_PORT)"},
      {"WMEM_DEFAULT", &Settings::wmem_default,
       [] { return absl::StrCat(ReadSysctl("/proc/sys/net/core/wmem_default", 212992)); },
       {4608, int64_t{1} << 31}, "default SO_SNDBUF of a new socket (net.core.wmem_default)"},
      {"RMEM_DEFAULT", &Settings::rmem_default,
       [] { return absl::StrCat(ReadSysctl("/proc/sys/net/core/rmem_default", 212992)); },
       {2304, int64_t{1} << 31}, "default SO_RCVBUF of a new socket (net.core.rmem_default)"},
      {"PING_ENABLE", &Settings::ping_enable, [] { return std::string("1"); }, {0, 1},
       "answer messages to port 0 with a pong (net.rds.ping_enable)"},
      {"RECONNECT_MIN_DELAY_MS", &Settings::reconnect_min_delay_ms,
       [] { return std::string("1"); }, {0, 3600000},
       "smallest reconnect back-off (net.rds.reconnect_min_delay_ms)"},
      {"RECONNECT_MAX_DELAY_MS", &Settings::reconnect_max_delay_ms,
       [] { return std::string("1000"); }, {1, 3600000},
       "largest reconnect back-off (net.rds.reconnect_max_delay_ms)"},
      {"MAX_UNACKED_PACKETS", &Settings::max_unacked_packets, [] { return std::string("8"); },
       {1, 1 << 20}, "acknowledge at least every this many messages (net.rds.max_unacked_packets)"},
      {"MAX_UNACKED_BYTES", &Settings::max_unacked_bytes, [] { return std::string("16777216"); },
       {1, int64_t{1} << 40},
       "acknowledge at least every this many bytes (net.rds.max_unacked_bytes)"},
      {"SHM_ARENA_MB", &Settings::shm_arena_mb, [] { return std::string("32"); }, {0, 1024},
       "shared memory (MiB) that carries payloads of 64 KiB and more to engines on this host "
       "(0: copy them through the link)"},
      {"TCP_SPLICE_MIN_KB", &Settings::tcp_splice_min_kb, [] { return std::string("64"); },
       {0, 1024},
       "payloads of at least this many KiB go to other hosts by reference to their pages "
       "(vmsplice and splice into the TCP socket) instead of being copied into it (0: always "
       "copied)"},
      {"TCP_CONGESTION", &Settings::tcp_congestion, [] { return std::string(); }, {0, 0},
       "congestion control of TCP links to other hosts (TCP_CONGESTION, e.g. cubic or bbr); "
       "empty: the host's default (net.ipv4.tcp_congestion_control), as kernel rds_tcp uses"},
      {"VERBS", &Settings::verbs, [] { return std::string("1"); }, {0, 1},
       "RDS over RDMA verbs (InfiniBand, RoCE) to other hosts, wire-compatible with kernel "
       "rds_rdma: a connection from a local address on an RDMA device uses it, as the kernel "
       "does with rds_rdma loaded; 0: TCP only. rdma-core is loaded only on a host with an "
       "RDMA device"},
      {"KERNEL_PATHS", &Settings::kernel_paths, [] { return std::string("0"); }, {0, 8},
       "TCP connections to each kernel RDS node (NPATHS): 1, 8, or 0 for automatic — 8 with a "
       "node that numbers its connections' paths by source port (SPORT_IDX, Linux 7.0+), 1 with "
       "older ones, which number them by arrival and after a reconnect may pair one path's "
       "retransmissions with another's sequence numbers (a message lost or duplicated)"},
      {"EXIT_FLUSH_MS", &Settings::exit_flush_ms, [] { return std::string("2000"); },
       {0, 600000},
       "at exit(), wait up to this long for the messages sendmsg accepted to be acknowledged "
       "by their receivers (written, and retransmitted over a new link if one drops; a peer "
       "whose reconnection failed is not waited for)"},
      {"EXIT_FLUSH_SHARED_MS", &Settings::exit_flush_shared_ms,
       [] { return std::string("10000"); }, {0, 600000},
       "at exit(), wait up to this long (from the start of the flush) for the messages of "
       "sockets that another process may hold (a forked child): the socket lives on there, "
       "and what the exiting process had not written would be lost with it"},
      {"FAULT_RESET_EVERY", &Settings::fault_reset_every, [] { return std::string("0"); },
       {0, int64_t{1} << 40}, "tests only: reset a link after every N messages it receives"},
      {"FAULT_RESET_PERMILLE", &Settings::fault_reset_permille, [] { return std::string("0"); },
       {0, 1000}, "tests only: reset a link with this probability (per mille) per message"},
      {"FAULT_CONNECT_FAIL_PERMILLE", &Settings::fault_connect_fail_permille,
       [] { return std::string("0"); }, {0, 1000},
       "tests only: fail this share (per mille) of connection attempts"},
      {"FAULT_CONNECT_DELAY_MS", &Settings::fault_connect_delay_ms,
       [] { return std::string("0"); }, {0, 60000}, "tests only: delay every connection attempt"},
      {"FAULT_CUT_PERMILLE", &Settings::fault_cut_permille, [] { return std::string("0"); },
       {0, 1000},
       "tests only: cut a link in the middle of a data message (per mille of the writes that "
       "start with one)"},
      {"INLINE_SEND", &Settings::inline_send, [] { return std::string("1"); }, {0, 1},
       "sendmsg writes to an established link on the calling thread when the engine is idle "
       "(0: every message goes through the engine thread)"},
      {"INLINE_SEND_STREAM_US", &Settings::inline_send_stream_us,
       [] { return std::string("5"); }, {0, 1000000},
       "a sendmsg that comes within this many microseconds after this process's previous one "
       "returned is part of a stream: it goes through the engine thread, which writes such "
       "messages in batches, instead of being written alone on the calling thread (0: never)"},
      {"RECV_DRIVE_LEASE_US", &Settings::recv_drive_lease_us,
       [] { return std::string("500"); }, {0, 100000},
       "a thread blocked in recvmsg (or in poll/select on an RDS socket) reads the links itself "
       "instead of being woken by the engine thread, which stays parked for this many "
       "microseconds after such a thread returns (so other traffic may wait that long while no "
       "thread is blocked); 0: off"},
      {"LOG_LEVEL", &Settings::log_level, [] { return std::string("0"); }, {0, 5},
       "0 silent, 1 error, 2 warn, 3 info, 4 debug, 5 trace"},
      {"SHOW_CONFIG", &Settings::show_config, [] { return std::string("0"); }, {0, 1},
       "print the version and every non-default setting when the first RDS socket is made"},
      {"BACKTRACE", &Settings::backtrace, [] { return std::string("0"); }, {0, 1},
       "on SIGSEGV/SIGBUS/SIGFPE/SIGILL/SIGABRT print a backtrace (libunwind); installs "
       "handlers only for signals the program left at their default"},
      {"LOG_FILE", &Settings::log_file, [] { return std::string(); }, {0, 0},
       "log destination; empty means stderr; %p is replaced by the pid"},
      {"SDP_CONFIG", &Settings::sdp_config, [] { return std::string(); }, {0, 0},
       "a file of libsdp rules (`use sdp|tcp|both server|client PROGRAM ADDRESS[/PREFIX]:PORTS`) "
       "by which ordinary TCP sockets become SDP sockets at connect() and listen(); empty: "
       "none are converted"},
  };
  return *schema;
}

bool ParseBool(std::string_view text, bool* out) {
  std::string t = absl::AsciiStrToLower(absl::string_view(text.data(), text.size()));
  if (t == "1" || t == "true" || t == "yes" || t == "on") return *out = true, true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return *out = false, true;
  return false;
}

// Applies `text` to the field; false if it does not parse or is out of range.
bool Apply(const Spec& spec, const std::string& text, Settings* s) {
  if (auto p = std::get_if<int64_t Settings::*>(&spec.field)) {
    int64_t v;
    if (!absl::SimpleAtoi(text, &v) || v < spec.range.min || v > spec.range.max) return false;
    s->**p = v;
    return true;
  }
  if (auto p = std::get_if<bool Settings::*>(&spec.field)) return ParseBool(text, &(s->**p));
  s->*std::get<std::string Settings::*>(spec.field) = text;
  return true;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t prev = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cur = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] != b[j - 1])});
      prev = cur;
    }
  }
  return row[b.size()];
}

}  // namespace

Settings Parse(const std::function<std::optional<std::string>(const std::string&)>& lookup,
               const std::vector<std::string>& all_env_names,
               std::vector<std::string>* problems) {
  Settings s;
  for (const Spec& spec : Schema()) {
    std::string def = spec.default_text();
    Apply(spec, def, &s);
    std::string var = absl::StrCat(kEnvPrefix, spec.name);
    if (auto value = lookup(var)) {
      if (!Apply(spec, *value, &s)) {
        if (std::holds_alternative<int64_t Settings::*>(spec.field)) {
          problems->push_back(absl::StrFormat(
              "%s=%s is invalid (expected an integer in [%d, %d]); using the default %s", var,
              *value, spec.range.min, spec.range.max, def));
        } else {
          problems->push_back(
              absl::StrFormat("%s=%s is invalid (expected 0/1); using the default %s", var, *value, def));
        }
        Apply(spec, def, &s);
      }
    }
  }
  for (const std::string& name : all_env_names) {
    if (!absl::StartsWith(name, kEnvPrefix)) continue;
    std::string_view bare = std::string_view(name).substr(sizeof(kEnvPrefix) - 1);
    const Spec* best = nullptr;
    size_t best_distance = ~size_t{0};
    bool known = false;
    for (const Spec& spec : Schema()) {
      if (bare == spec.name) known = true;
      size_t d = EditDistance(bare, spec.name);
      if (d < best_distance) best_distance = d, best = &spec;
    }
    // Internal variables (used by rdsrun and tests) start with an underscore.
    if (known || (!bare.empty() && bare[0] == '_')) continue;
    problems->push_back(absl::StrFormat("unknown setting %s (did you mean %s%s?)", name,
                                        kEnvPrefix, best ? best->name : ""));
  }
  if (s.kernel_paths != 0 && s.kernel_paths != 1 && s.kernel_paths != 8) {
    // A kernel hashes ports modulo 8 before it learns the number: any other
    // count can choose a path that is never connected (kernel-rds.md §E.5).
    problems->push_back(absl::StrFormat(
        "RDS_PRELOAD_KERNEL_PATHS=%d: only 0 (automatic), 1 or 8; using automatic",
        s.kernel_paths));
    s.kernel_paths = 0;
  }
  if (s.reconnect_max_delay_ms < s.reconnect_min_delay_ms) {
    problems->push_back("RDS_PRELOAD_RECONNECT_MAX_DELAY_MS is below the minimum; using the minimum");
    s.reconnect_max_delay_ms = s.reconnect_min_delay_ms;
  }
  return s;
}

const Settings& Get() {
  static const Settings* settings = [] {
    std::vector<std::string> names;
    for (char** e = environ; e && *e; ++e) {
      std::string_view kv(*e);
      names.emplace_back(kv.substr(0, kv.find('=')));
    }
    std::vector<std::string> problems;
    auto* s = new Settings(Parse(
        [](const std::string& var) -> std::optional<std::string> {
          const char* v = getenv(var.c_str());
          if (v == nullptr) return std::nullopt;
          return std::string(v);
        },
        names, &problems));
    // Configuration problems are reported even when logging is off: a typo in
    // a setting must never pass silently.
    for (const std::string& p : problems) {
      std::string line = absl::StrCat("rds-preload: ", p, "\n");
      sys::WriteAll(2, line.data(), line.size());
    }
    return s;
  }();
  return *settings;
}

std::vector<std::pair<std::string, std::string>> Effective() {
  const Settings& s = Get();
  std::vector<std::pair<std::string, std::string>> out;
  for (const Spec& spec : Schema()) {
    std::string value;
    if (auto p = std::get_if<int64_t Settings::*>(&spec.field)) {
      value = absl::StrCat(s.**p);
    } else if (auto p = std::get_if<bool Settings::*>(&spec.field)) {
      value.push_back(s.**p ? '1' : '0');
    } else {
      value = s.*std::get<std::string Settings::*>(spec.field);
    }
    out.emplace_back(spec.name, std::move(value));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> NonDefault() {
  std::vector<std::pair<std::string, std::string>> out;
  std::vector<std::pair<std::string, std::string>> effective = Effective();
  const std::vector<Spec>& schema = Schema();
  for (size_t i = 0; i < schema.size(); ++i) {
    Settings defaults;
    Apply(schema[i], schema[i].default_text(), &defaults);
    Settings one;
    Apply(schema[i], effective[i].second, &one);
    bool same = std::visit(
        [&](auto field) { return defaults.*field == one.*field; }, schema[i].field);
    if (!same) out.push_back(effective[i]);
  }
  return out;
}

std::vector<SettingInfo> Describe() {
  std::vector<SettingInfo> out;
  for (const Spec& spec : Schema()) {
    const char* type = std::holds_alternative<int64_t Settings::*>(spec.field)  ? "int"
                       : std::holds_alternative<bool Settings::*>(spec.field) ? "bool"
                                                                             : "string";
    out.push_back({spec.name, type, spec.default_text(), spec.doc});
  }
  return out;
}

}  // namespace rds::conf
