// conf/settings.h — the configuration schema of rds-preload.
//
// Every setting is declared exactly once, in settings.cc's table (name, type,
// default, range, one-line doc), and read from an environment variable named
// RDS_PRELOAD_<NAME>. Settings are parsed once per process, on first use.
//
// Thread-safety: Get() is safe for concurrent use; the returned object is
// immutable after the first call.
#ifndef RDS_CONF_SETTINGS_H_
#define RDS_CONF_SETTINGS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace rds::conf {

inline constexpr const char kEnvPrefix[] = "RDS_PRELOAD_";

struct Settings {
  std::string rundir;          // host registry directory (shared by all shim processes)
  std::string link_uids;       // extra uids whose engines may link to ours ("all" or "1000,1001")
  int64_t tcp_port;            // rendezvous TCP port (kernel RDS_TCP_PORT)
  // Default SO_SNDBUF/SO_RCVBUF of a new socket, as stored (net.core.[wr]mem_default).
  // The caps (net.core.[wr]mem_max) are the host's own: the kernel applies
  // them to the fd that backs every RDS socket, exactly as to kernel RDS.
  int64_t wmem_default;
  int64_t rmem_default;
  bool ping_enable;            // net.rds.ping_enable
  bool inline_send;            // sendmsg transmits on the calling thread when it can
  // ... unless it follows the previous send within this many µs (a stream: batch instead).
  int64_t inline_send_stream_us;
  // A thread blocked in recvmsg runs the engine's event loop itself; the engine thread stays
  // parked this long after such a thread returns (0: blocked threads only sleep).
  int64_t recv_drive_lease_us;
  int64_t reconnect_min_delay_ms;  // net.rds.reconnect_min_delay_ms
  int64_t reconnect_max_delay_ms;  // net.rds.reconnect_max_delay_ms
  int64_t max_unacked_packets;  // net.rds.max_unacked_packets
  int64_t max_unacked_bytes;    // net.rds.max_unacked_bytes
  // Shared-memory arena for large payloads to same-host engines (MiB; 0: off).
  int64_t shm_arena_mb;
  // TCP links: payloads of at least this many KiB go into the socket by reference (0: copied).
  int64_t tcp_splice_min_kb;
  // TCP links: congestion control (TCP_CONGESTION); empty: the host's default.
  std::string tcp_congestion;
  // RDS over RDMA verbs from addresses on an RDMA device (as with rds_rdma loaded).
  bool verbs;
  // Paths (TCP connections) to a kernel RDS node: 0 automatic, 1 or 8.
  int64_t kernel_paths;
  int64_t exit_flush_ms;       // at exit, wait this long for sent messages to be acknowledged
  int64_t exit_flush_shared_ms;  // ... and this long for those of sockets another process holds
  // Fault injection, for tests only (all off by default).
  int64_t fault_reset_every;        // reset a link after every N messages it receives
  int64_t fault_reset_permille;     // ... or with this probability per received message
  int64_t fault_connect_fail_permille;  // fail this share of connection attempts
  int64_t fault_connect_delay_ms;   // delay every connection attempt
  int64_t fault_cut_permille;       // cut a link in the middle of writing a message
  int64_t log_level;           // 0 off, 1 error, 2 warn, 3 info, 4 debug, 5 trace
  bool show_config;            // print the non-default settings when the shim starts
  bool backtrace;              // print a backtrace on a fatal signal (installs handlers)
  std::string log_file;        // empty: stderr; "%p" is replaced by the pid
  std::string sdp_config;      // libsdp-style rules converting TCP sockets to SDP (DESIGN.md §11)
};

// One entry of the schema, for documentation and the parser.
struct SettingInfo {
  const char* name;            // without the prefix, e.g. "TCP_PORT"
  const char* type;            // "int", "bool", "string"
  std::string default_value;   // as text (host-derived defaults are resolved)
  const char* doc;
};

// The process's settings (parsed from the environment on first call).
const Settings& Get();

// Parses settings from an arbitrary lookup function (for tests). Problems
// (invalid values, unknown RDS_PRELOAD_* names) are appended to `problems`;
// an invalid value keeps the default.
Settings Parse(const std::function<std::optional<std::string>(const std::string&)>& lookup,
               const std::vector<std::string>& all_env_names,
               std::vector<std::string>* problems);

// The schema with resolved defaults, in declaration order.
std::vector<SettingInfo> Describe();

// This process's effective value of every setting, as text, in declaration
// order: (name without prefix, value).
std::vector<std::pair<std::string, std::string>> Effective();
// The settings whose effective value differs from the default.
std::vector<std::pair<std::string, std::string>> NonDefault();

}  // namespace rds::conf

#endif  // RDS_CONF_SETTINGS_H_
