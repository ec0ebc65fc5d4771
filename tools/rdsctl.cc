// tools/rdsctl.cc — what every rds-preload process on this host is doing.
//
// Each shim engine listens on <rundir>/engine-<pid>.sock (DESIGN.md §4). rdsctl
// connects to every one of them, sends a hello of kind kInfo with option 0 and
// reads the engine's state as one JSON object (engine/info.cc EngineDumpJson),
// using the project's own codec (engine/control, engine/wire, Reassembler).
// The engines are asked in parallel with one overall deadline, so a process
// that does not answer costs at most --timeout and never stalls the others;
// the engine answers from its event loop, one small request per refresh.
//
// Output: tables (default), --json, --prometheus; --watch refreshes like top;
// `rdsctl config [PID]` prints every setting of running processes.
// See rdsctl(8) (docs/man/rdsctl.8.in).
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "conf/settings.h"
#include "engine/control.h"
#include "transports/stream/reassembler.h"
#include "engine/wire.h"
#include "sdp/status_table.h"
#include "tools/tool_flags.h"

ABSL_FLAG(bool, json, false, "print JSON: {rundir, engines: [...], unreachable: [...], totals}");
ABSL_FLAG(bool, prometheus, false, "print the Prometheus text exposition format");
ABSL_FLAG(std::string, watch, "",
          "refresh every SECONDS (default 2) until interrupted, like top; --watch alone is "
          "--watch=2");
ABSL_FLAG(int64_t, iterations, 0, "with --watch: stop after this many refreshes (0: never)");
ABSL_FLAG(std::string, rundir, "",
          "registry directory to inspect (default: RDS_PRELOAD_RUNDIR, or /tmp/rds-preload)");
ABSL_FLAG(double, timeout, 1.0, "seconds to wait for all processes to answer");
ABSL_FLAG(bool, all, false, "tables: also show counters that are zero in every process");
ABSL_FLAG(bool, keep_stale, false,
          "do not remove engine sockets left behind by processes that no longer exist");

namespace {

using json = nlohmann::ordered_json;

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

// ---------------------------------------------------------------------------
// Small helpers for reading the engines' JSON defensively (a newer or older
// engine may lack a field; nothing here may throw).

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_null()) return "";
  return it->dump();
}

uint64_t Num(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer()) return static_cast<uint64_t>(std::max<int64_t>(0, it->get<int64_t>()));
  if (it->is_number_float()) return static_cast<uint64_t>(std::max(0.0, it->get<double>()));
  if (it->is_boolean()) return it->get<bool>() ? 1 : 0;
  return 0;
}

bool Bool(const json& j, const char* key) { return Num(j, key) != 0; }

const json& Arr(const json& j, const char* key) {
  static const json empty = json::array();
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : empty;
}

const json& Obj(const json& j, const char* key) {
  static const json empty = json::object();
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : empty;
}

double NowSeconds() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// ---------------------------------------------------------------------------
// Network namespaces: "dev:ino" as the engine names them, shown by name.

std::string NsKeyOfPath(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return "";
  return absl::StrCat(static_cast<uint64_t>(st.st_dev), ":", static_cast<uint64_t>(st.st_ino));
}

class NsNames {
 public:
  NsNames() {
    init_ = NsKeyOfPath("/proc/1/ns/net");
    // Namespaces made with `ip netns add NAME`.
    if (DIR* d = opendir("/run/netns")) {
      while (struct dirent* e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        std::string key = NsKeyOfPath(absl::StrCat("/run/netns/", e->d_name));
        if (!key.empty()) names_.emplace(key, e->d_name);
      }
      closedir(d);
    }
  }
  // The `ip netns` name, if any.
  std::optional<std::string> Name(const std::string& key) const {
    auto it = names_.find(key);
    if (it != names_.end()) return it->second;
    if (!key.empty() && key == init_) return std::string("init");
    return std::nullopt;
  }
  // For tables: the name, or net:[inode] as /proc/PID/ns/net reads.
  std::string Label(const std::string& key) const {
    if (key.empty()) return "?";
    if (auto n = Name(key)) return *n;
    size_t colon = key.find(':');
    return absl::StrCat("net:[", colon == std::string::npos ? key : key.substr(colon + 1), "]");
  }

 private:
  std::string init_;
  std::map<std::string, std::string> names_;
};

// ---------------------------------------------------------------------------
// Asking the engines.

struct Engine {
  pid_t pid = 0;
  std::string path;
  json state;              // the engine's JSON (valid when error is empty)
  std::string error;       // why it did not answer
  std::string netns;       // the process's namespace, "dev:ino" ("" if unreadable)
  std::string user;        // owner of the process
};

// A process's SDP sockets, read from its <rundir>/sdp-<pid>.status (an
// SDP-only process runs no engine to ask).
struct SdpSocket {
  int fd = -1;
  rds::sdp::status::SlotView view;
};
struct SdpProcess {
  pid_t pid = 0;
  std::string comm, user, path;
  uint64_t beyond = 0;  // SDP fds the table has no slot for
  std::vector<SdpSocket> sockets;
};

struct Snapshot {
  std::string rundir;
  bool rundir_exists = true;
  std::vector<Engine> engines;      // answered, sorted by pid
  std::vector<Engine> unreachable;  // live processes that did not answer
  std::vector<SdpProcess> sdp;      // sorted by pid
  NsNames ns;
};

struct Query {
  Engine engine;
  int fd = -1;
  bool done = false;
  bool got_answer = false;
  std::vector<uint8_t> out;
  size_t out_off = 0;
  rds::Reassembler reader;
  rds::control::InfoAnswerReader answer;
};

bool ProcessAlive(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

std::string CommOf(pid_t pid) {
  std::string comm;
  if (FILE* f = fopen(absl::StrCat("/proc/", pid, "/comm").c_str(), "re")) {
    char buf[64] = {};
    if (fgets(buf, sizeof buf, f) != nullptr) comm = buf;
    fclose(f);
  }
  while (!comm.empty() && comm.back() == '\n') comm.pop_back();
  return comm;
}

std::string UserOf(pid_t pid) {
  struct stat st;
  if (stat(absl::StrCat("/proc/", pid).c_str(), &st) != 0) return "?";
  if (struct passwd* pw = getpwuid(st.st_uid)) return pw->pw_name;
  return absl::StrCat(st.st_uid);
}

std::vector<uint8_t> InfoRequest() {
  rds::control::Hello h;
  h.kind = rds::control::HelloKind::kInfo;
  h.pid = static_cast<uint32_t>(getpid());
  h.uid = getuid();
  h.info_option = 0;  // the whole engine state as JSON
  rds::MessagePtr m = rds::control::EncodeHello(h);
  return rds::wire::EncodeRecord(m->header, m->payload.data(), m->payload.size());
}

// Starts the exchange with one engine: non-blocking connect and request.
// Returns false when the query is already finished (failed or stale).
// `stale`: the socket file has no engine behind it; `remove`: and its process
// is gone, so the file can go.
bool Start(Query& q, const std::vector<uint8_t>& request, bool* stale, bool* remove) {
  *stale = false;
  *remove = false;
  sockaddr_un sun = {};
  sun.sun_family = AF_UNIX;
  if (q.engine.path.size() >= sizeof(sun.sun_path)) {
    q.engine.error = "socket path too long";
    return false;
  }
  std::memcpy(sun.sun_path, q.engine.path.data(), q.engine.path.size());
  q.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (q.fd < 0) {
    q.engine.error = absl::StrCat("socket: ", strerror(errno));
    return false;
  }
  if (connect(q.fd, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)) != 0) {
    int err = errno;
    if (err == EAGAIN) {
      // The listener's backlog is full: that process is not accepting (busy
      // or stuck). Reported as unreachable, retried at the next refresh.
      q.engine.error = "not accepting connections (listen backlog full)";
    } else if (err == ECONNREFUSED || err == ENOENT) {
      // Nobody listens: the process is gone, or the pid now belongs to a
      // process without an engine (reused, or exec'd without the shim). An
      // engine binds and listens at once, so it is never seen half-made for
      // long; only a dead process's file is removed.
      *stale = true;
      *remove = !ProcessAlive(q.engine.pid);
      q.engine.error = "nobody listens on its engine socket";
    } else {
      q.engine.error = absl::StrCat("connect: ", strerror(err));
    }
    return false;
  }
  q.out = request;
  return true;
}

// The engine copies strings such as /proc/PID/comm into its JSON as bytes;
// JSON must be UTF-8, so each invalid byte becomes U+FFFD. (Every JSON
// structural character is ASCII, so this never changes the structure.)
std::string ValidUtf8(const std::vector<uint8_t>& in) {
  std::string out;
  out.reserve(in.size());
  size_t i = 0;
  while (i < in.size()) {
    uint8_t c = in[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = len > 0 && i + len <= in.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (in[i + k] & 0xc0) == 0x80;
    if (ok && len > 1) {
      uint32_t cp = c & (0x7f >> len);
      for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (in[i + k] & 0x3f);
      static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= kMin[len] && cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff);
    }
    if (ok) {
      out.append(reinterpret_cast<const char*>(&in[i]), len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

// An engine closes a connection it does not accept: it checks the peer's uid
// (SO_PEERCRED) against its own and RDS_PRELOAD_LINK_UIDS.
constexpr char kClosedWithoutAnswer[] =
    "closed the connection without answering (another user's process? see "
    "RDS_PRELOAD_LINK_UIDS)";

// Handles readiness on a query's socket.
void Step(Query& q, short revents) {
  if (q.out_off < q.out.size() && (revents & (POLLOUT | POLLERR | POLLHUP))) {
    ssize_t n = send(q.fd, q.out.data() + q.out_off, q.out.size() - q.out_off,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      q.engine.error = errno == EPIPE || errno == ECONNRESET ? kClosedWithoutAnswer
                                                             : absl::StrCat("send: ", strerror(errno));
      q.done = true;
      return;
    }
    if (n > 0) q.out_off += static_cast<size_t>(n);
  }
  if (!(revents & (POLLIN | POLLERR | POLLHUP))) return;
  uint8_t buf[64 * 1024];
  for (;;) {
    ssize_t n = recv(q.fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      if (!q.done) {
        if (n == 0 || errno == ECONNRESET) {
          q.engine.error = q.got_answer ? "closed before sending its state" : kClosedWithoutAnswer;
        } else {
          q.engine.error = absl::StrCat("recv: ", strerror(errno));
        }
        q.done = true;
      }
      return;
    }
    auto sink = [&q](rds::wire::Header&& hdr, rds::Payload&& payload) {
      if (q.done) return;
      if (rds::control::IsHello(hdr)) {
        absl::StatusOr<rds::control::Hello> reply = rds::control::DecodeHello(hdr, payload);
        if (!reply.ok()) {
          q.engine.error = absl::StrCat("bad reply: ", reply.status().message());
          q.done = true;
        } else if (reply->kind != rds::control::HelloKind::kReply ||
                   reply->result != rds::control::HelloResult::kAnswer) {
          q.engine.error = absl::StrFormat("refused the request (result %d)",
                                           static_cast<int>(reply->result));
          q.done = true;
        } else {
          q.got_answer = true;
        }
        return;
      }
      absl::StatusOr<rds::control::Control> c = rds::control::DecodeControl(hdr, payload);
      if (!c.ok() || !q.answer.Add(std::move(*c)).ok()) {
        q.engine.error = "unexpected message instead of its state";
        q.done = true;
        return;
      }
      if (!q.answer.complete()) return;  // more parts follow
      std::string text = ValidUtf8(q.answer.bytes());
      json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) {
        q.engine.error = "its state is not a JSON object";
      } else {
        q.engine.state = std::move(j);
      }
      q.done = true;
    };
    if (absl::Status s = q.reader.Feed({buf, static_cast<size_t>(n)}, sink); !s.ok()) {
      q.engine.error = absl::StrCat("invalid framing: ", s.message());
      q.done = true;
    }
    if (q.done) return;
  }
}

// The SDP table of `pid` at `path` (sdp/status_table.h), or nullopt: not a
// table, or its writer is gone (the file is then removed if `remove_stale`,
// unless a new image of that pid replaced it meanwhile).
std::optional<SdpProcess> ReadSdpTable(const std::string& path, pid_t pid, bool remove_stale) {
  namespace status = rds::sdp::status;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return std::nullopt;
  }
  // The writer holds a shared lock while it lives (and made the file whole
  // before renaming it into place).
  const bool gone = flock(fd, LOCK_EX | LOCK_NB) == 0 || !ProcessAlive(pid);
  if (gone) {
    struct stat now;
    if (remove_stale && stat(path.c_str(), &now) == 0 && now.st_ino == st.st_ino &&
        now.st_dev == st.st_dev) {
      unlink(path.c_str());
    }
    close(fd);
    return std::nullopt;
  }
  std::optional<SdpProcess> out;
  void* map = static_cast<size_t>(st.st_size) >= status::kFileSize
                  ? mmap(nullptr, status::kFileSize, PROT_READ, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
  close(fd);
  if (map == MAP_FAILED) return out;
  const auto* header = static_cast<const status::Header*>(map);
  if (std::memcmp(header->magic, status::kMagic, sizeof header->magic) == 0 &&
      header->version == status::kVersion && header->pid == pid) {
    SdpProcess p;
    p.pid = pid;
    p.path = path;
    p.comm = CommOf(pid);
    p.user = UserOf(pid);
    p.beyond = header->beyond.load(std::memory_order_relaxed);
    const auto* slots = reinterpret_cast<const status::Slot*>(header + 1);
    const uint32_t n = std::min(header->slots, status::kSlots);
    for (uint32_t fd_no = 0; fd_no < n; ++fd_no) {
      if (std::optional<status::SlotView> v = status::Read(slots[fd_no])) {
        p.sockets.push_back({static_cast<int>(fd_no), *std::move(v)});
      }
    }
    out = std::move(p);
  }
  munmap(map, status::kFileSize);
  return out;
}

std::vector<SdpProcess> GatherSdp(const std::string& rundir, const std::set<pid_t>& pids,
                                  bool remove_stale) {
  std::vector<SdpProcess> out;
  DIR* d = opendir(rundir.c_str());
  if (d == nullptr) return out;
  std::vector<std::pair<pid_t, std::string>> files;
  while (struct dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (!absl::StartsWith(name, "sdp-") || !absl::EndsWith(name, ".status")) continue;
    int pid;
    if (!absl::SimpleAtoi(name.substr(4, name.size() - 11), &pid) || pid <= 0) continue;
    if (!pids.empty() && !pids.contains(pid)) continue;
    files.emplace_back(pid, absl::StrCat(rundir, "/", name));
  }
  closedir(d);
  for (const auto& [pid, path] : files) {
    if (std::optional<SdpProcess> p = ReadSdpTable(path, pid, remove_stale)) {
      out.push_back(*std::move(p));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const SdpProcess& a, const SdpProcess& b) { return a.pid < b.pid; });
  return out;
}

// Asks every engine under `rundir` (or only `pids`), in parallel, within
// `timeout` seconds in total.
Snapshot Gather(const std::string& rundir, const std::set<pid_t>& pids, double timeout,
                bool remove_stale) {
  Snapshot snap;
  snap.rundir = rundir;
  std::vector<Query> queries;
  DIR* d = opendir(rundir.c_str());
  if (d == nullptr) {
    snap.rundir_exists = false;
    return snap;
  }
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (!absl::StartsWith(name, "engine-") || !absl::EndsWith(name, ".sock")) continue;
    int pid;
    if (!absl::SimpleAtoi(name.substr(7, name.size() - 12), &pid) || pid <= 0) continue;
    if (!pids.empty() && !pids.contains(pid)) continue;
    Query q;
    q.engine.pid = pid;
    q.engine.path = absl::StrCat(rundir, "/", name);
    queries.push_back(std::move(q));
  }
  closedir(d);

  const std::vector<uint8_t> request = InfoRequest();
  for (Query& q : queries) {
    bool stale = false, remove = false;
    if (!Start(q, request, &stale, &remove)) {
      q.done = true;
      // Nobody will ever answer on a stale socket: not reported. A dead
      // process's file is removed (the pid was checked after the refused
      // connect, so a new process with that pid would have replaced the
      // file with a listening one first).
      if (stale) {
        if (remove && remove_stale) unlink(q.engine.path.c_str());
        q.engine.pid = 0;
      }
    }
  }
  const double deadline = NowSeconds() + timeout;
  for (;;) {
    std::vector<pollfd> pfds;
    std::vector<Query*> owners;
    for (Query& q : queries) {
      if (q.done) continue;
      short events = POLLIN;
      if (q.out_off < q.out.size()) events |= POLLOUT;
      pfds.push_back({q.fd, events, 0});
      owners.push_back(&q);
    }
    if (pfds.empty()) break;
    double left = deadline - NowSeconds();
    if (left <= 0) {
      for (Query* q : owners) q->engine.error = absl::StrFormat("no answer within %.1f s", timeout);
      break;
    }
    int n = poll(pfds.data(), pfds.size(), static_cast<int>(left * 1000) + 1);
    if (n < 0 && errno != EINTR) break;
    for (size_t i = 0; n > 0 && i < pfds.size(); ++i) {
      if (pfds[i].revents) Step(*owners[i], pfds[i].revents);
    }
  }
  for (Query& q : queries) {
    if (q.fd >= 0) close(q.fd);
    if (q.engine.pid == 0) continue;
    q.engine.netns = NsKeyOfPath(absl::StrCat("/proc/", q.engine.pid, "/ns/net"));
    q.engine.user = UserOf(q.engine.pid);
    if (q.engine.error.empty() && q.engine.state.is_object()) {
      snap.engines.push_back(std::move(q.engine));
    } else {
      if (q.engine.error.empty()) q.engine.error = "no answer";
      snap.unreachable.push_back(std::move(q.engine));
    }
  }
  auto by_pid = [](const Engine& a, const Engine& b) { return a.pid < b.pid; };
  std::sort(snap.engines.begin(), snap.engines.end(), by_pid);
  std::sort(snap.unreachable.begin(), snap.unreachable.end(), by_pid);
  snap.sdp = GatherSdp(rundir, pids, remove_stale);
  return snap;
}

// ---------------------------------------------------------------------------
// Totals and counter names.

// Counter names in the engines' order (kernel names first, then shim_*),
// plus any name only some engines report.
std::vector<std::string> CounterNames(const Snapshot& s) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const Engine& e : s.engines) {
    for (const auto& [name, value] : Obj(e.state, "counters").items()) {
      if (seen.insert(name).second) names.push_back(name);
    }
  }
  return names;
}

struct Totals {
  uint64_t sockets = 0, bound = 0, paths = 0, snd_bytes = 0, rcv_bytes = 0, recv_queue = 0;
  uint64_t congested = 0, backlog = 0, unacked = 0;
  std::map<std::string, uint64_t> counters;
};

Totals Sum(const json& state) {
  Totals t;
  for (const json& s : Arr(state, "sockets")) {
    ++t.sockets;
    if (!Str(s, "bound").empty()) ++t.bound;
    t.snd_bytes += Num(s, "snd_bytes");
    t.rcv_bytes += Num(s, "rcv_bytes");
    t.recv_queue += Num(s, "recv_queue");
    t.congested += Bool(s, "congested");
  }
  for (const json& p : Arr(state, "paths")) {
    ++t.paths;
    t.backlog += Num(p, "backlog");
    t.unacked += Num(p, "unacked");
  }
  const json& counters = Obj(state, "counters");
  for (const auto& [name, value] : counters.items()) t.counters[name] += Num(counters, name.c_str());
  return t;
}

Totals HostTotals(const Snapshot& s) {
  Totals all;
  for (const Engine& e : s.engines) {
    Totals t = Sum(e.state);
    all.sockets += t.sockets;
    all.bound += t.bound;
    all.paths += t.paths;
    all.snd_bytes += t.snd_bytes;
    all.rcv_bytes += t.rcv_bytes;
    all.recv_queue += t.recv_queue;
    all.congested += t.congested;
    all.backlog += t.backlog;
    all.unacked += t.unacked;
    for (const auto& [k, v] : t.counters) all.counters[k] += v;
  }
  return all;
}

// ---------------------------------------------------------------------------
// Tables.

class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  void Row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  bool empty() const { return rows_.empty(); }
  std::string Render() const {
    std::vector<size_t> width(headers_.size());
    std::vector<bool> numeric(headers_.size(), true);
    for (size_t c = 0; c < headers_.size(); ++c) width[c] = headers_[c].size();
    for (const auto& r : rows_) {
      for (size_t c = 0; c < r.size() && c < width.size(); ++c) {
        width[c] = std::max(width[c], r[c].size());
        if (!r[c].empty() && !IsNumber(r[c])) numeric[c] = false;
      }
    }
    std::string out;
    auto line = [&](const std::vector<std::string>& cells) {
      std::string l;
      for (size_t c = 0; c < headers_.size(); ++c) {
        const std::string cell = c < cells.size() ? cells[c] : "";
        std::string pad(width[c] - std::min(width[c], cell.size()), ' ');
        if (c) l += "  ";
        l += numeric[c] ? pad + cell : cell + (c + 1 < headers_.size() ? pad : "");
      }
      while (!l.empty() && l.back() == ' ') l.pop_back();
      out += l + "\n";
    };
    line(headers_);
    for (const auto& r : rows_) line(r);
    return out;
  }

 private:
  static bool IsNumber(const std::string& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  }
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

std::string Dash(const std::string& s) { return s.empty() ? "-" : s; }

std::string ProcessTable(const Snapshot& s) {
  Table t({"PID", "COMM", "USER", "NETNS", "GEN", "SOCKETS", "BOUND", "PATHS", "SNDQ_BYTES",
           "RCVQ_BYTES", "RCVQ_MSGS", "CONGESTED"});
  for (const Engine& e : s.engines) {
    Totals x = Sum(e.state);
    t.Row({absl::StrCat(e.pid), Str(e.state, "comm"), e.user, s.ns.Label(e.netns),
           Str(e.state, "generation"), absl::StrCat(x.sockets), absl::StrCat(x.bound),
           absl::StrCat(x.paths), absl::StrCat(x.snd_bytes), absl::StrCat(x.rcv_bytes),
           absl::StrCat(x.recv_queue), absl::StrCat(x.congested)});
  }
  if (s.engines.size() > 1) {
    Totals x = HostTotals(s);
    t.Row({"total", "", "", "", "", absl::StrCat(x.sockets), absl::StrCat(x.bound),
           absl::StrCat(x.paths), absl::StrCat(x.snd_bytes), absl::StrCat(x.rcv_bytes),
           absl::StrCat(x.recv_queue), absl::StrCat(x.congested)});
  }
  return t.Render();
}

std::string SocketTable(const Snapshot& s) {
  Table t({"PID", "COMM", "NETNS", "BOUND", "CONNECTED", "TRANSPORT", "SNDQ_BYTES", "SNDBUF",
           "RCVQ_BYTES", "RCVBUF", "RCVQ_MSGS", "CONG", "FDS", "FLAGS"});
  for (const Engine& e : s.engines) {
    for (const json& k : Arr(e.state, "sockets")) {
      std::vector<std::string> flags;
      if (Bool(k, "nonblocking")) flags.push_back("nonblock");
      if (Bool(k, "epoll")) flags.push_back("epoll");
      if (Bool(k, "cong_monitor")) flags.push_back("cong_monitor");
      t.Row({absl::StrCat(e.pid), Str(e.state, "comm"), s.ns.Label(Str(k, "netns")),
             Dash(Str(k, "bound")), Dash(Str(k, "connected")), Str(k, "transport"),
             absl::StrCat(Num(k, "snd_bytes")), absl::StrCat(Num(k, "sndbuf")),
             absl::StrCat(Num(k, "rcv_bytes")), absl::StrCat(Num(k, "rcvbuf")),
             absl::StrCat(Num(k, "recv_queue")), Bool(k, "congested") ? "yes" : "no",
             absl::StrCat(Num(k, "fds")), Dash(absl::StrJoin(flags, ","))});
    }
  }
  return t.empty() ? "(no sockets)\n" : t.Render();
}

// A path's peer: an engine's pid, "kernel" (a kernel RDS node whose
// connection this engine owns; "kernel/N" its path N > 0), "kernel via PID"
// (relayed through the engine that owns it) or "PID relays" (an engine
// relaying a node's traffic through us).
std::string PeerColumn(const json& p) {
  if (Bool(p, "kernel_node")) {
    if (Num(p, "node_owner") != 0) return absl::StrCat("kernel via ", Num(p, "node_owner"));
    return Num(p, "node_path") > 0 ? absl::StrCat("kernel/", Num(p, "node_path"))
                                   : std::string("kernel");
  }
  if (Bool(p, "relay_peer")) return absl::StrCat(Num(p, "peer_pid"), " relays");
  return absl::StrCat(Num(p, "peer_pid"));
}

std::string PathTable(const Snapshot& s) {
  Table t({"PID", "COMM", "NETNS", "LADDR", "FADDR", "PEER_PID", "STATE", "NEXT_TX", "NEXT_RX",
           "UNACKED", "BACKLOG", "TRANSPORT", "LINK"});
  for (const Engine& e : s.engines) {
    for (const json& p : Arr(e.state, "paths")) {
      // A TCP connection's addresses, or an RDMA queue pair: its number,
      // receives posted, completions received and sent, CQ events.
      std::string tcp = Str(p, "tcp_local").empty()
                            ? "-"
                            : absl::StrCat(Str(p, "tcp_local"), "->", Str(p, "tcp_peer"));
      if (p.contains("rdma") && p["rdma"].is_object()) {
        const json& r = p["rdma"];
        tcp = absl::StrCat("qp ", Num(r, "qp_num"), " rx_posted ", Num(r, "posted_receives"),
                           " cqe rx/tx ", Num(r, "recv_completions"), "/",
                           Num(r, "send_completions"), " events ", Num(r, "cq_events"),
                           " ack_frames ", Num(r, "ack_frames"));
      }
      t.Row({absl::StrCat(e.pid), Str(e.state, "comm"), s.ns.Label(Str(p, "netns")),
             Str(p, "laddr"), Str(p, "faddr"),
             PeerColumn(p),
             Str(p, "state"),
             absl::StrCat(Num(p, "next_tx_seq")), absl::StrCat(Num(p, "next_rx_seq")),
             absl::StrCat(Num(p, "unacked")), absl::StrCat(Num(p, "backlog")),
             Str(p, "transport"), tcp});
    }
  }
  return t.empty() ? "(no paths)\n" : t.Render();
}

std::string CounterTable(const Snapshot& s, bool all) {
  constexpr size_t kMaxColumns = 8;  // more processes: totals only
  bool per_process = s.engines.size() <= kMaxColumns;
  std::vector<std::string> headers = {"COUNTER"};
  if (per_process) {
    for (const Engine& e : s.engines) headers.push_back(absl::StrCat(e.pid));
  }
  headers.push_back("TOTAL");
  Table t(headers);
  Totals host = HostTotals(s);
  size_t hidden = 0;
  for (const std::string& name : CounterNames(s)) {
    uint64_t total = host.counters[name];
    bool nonzero = false;
    for (const Engine& e : s.engines) nonzero |= Num(Obj(e.state, "counters"), name.c_str()) != 0;
    if (!nonzero && !all) {
      ++hidden;
      continue;
    }
    std::vector<std::string> row = {name};
    if (per_process) {
      for (const Engine& e : s.engines) {
        row.push_back(absl::StrCat(Num(Obj(e.state, "counters"), name.c_str())));
      }
    }
    row.push_back(absl::StrCat(total));
    t.Row(std::move(row));
  }
  std::string out = t.empty() ? "(every counter is zero)\n" : t.Render();
  if (hidden && !t.empty()) {
    absl::StrAppend(&out, "(", hidden, " counters are zero in every process; --all shows them)\n");
  }
  if (!per_process) {
    absl::StrAppend(&out, "(", s.engines.size(),
                    " processes: host-wide totals only; rdsctl counters PID... for one)\n");
  }
  return out;
}

std::string SdpTable(const Snapshot& s) {
  namespace status = rds::sdp::status;
  Table t({"PID", "COMM", "FD", "STATE", "TRANSPORT", "LOCAL", "PEER", "WHY"});
  std::string more;
  for (const SdpProcess& p : s.sdp) {
    for (const SdpSocket& k : p.sockets) {
      t.Row({absl::StrCat(p.pid), p.comm, absl::StrCat(k.fd), status::StateName(k.view.state),
             status::TransportName(k.view.transport), Dash(status::Show(k.view.local)),
             Dash(status::Show(k.view.peer)), Dash(k.view.note)});
    }
    if (p.beyond > 0) {
      absl::StrAppendFormat(&more, "pid %d: %u more SDP socket(s) on fds >= %u, not shown\n", p.pid,
                            p.beyond, status::kSlots);
    }
  }
  return t.Render() + more;
}

std::string Unreachable(const Snapshot& s) {
  std::string out;
  for (const Engine& e : s.unreachable) {
    absl::StrAppendFormat(&out, "pid %d did not answer: %s\n", e.pid, e.error);
  }
  return out;
}

std::string NoEngines(const Snapshot& s) {
  if (!s.unreachable.empty()) {
    return absl::StrFormat("no rds-preload process under %s answered (%zu did not)\n", s.rundir,
                           s.unreachable.size());
  }
  if (!s.rundir_exists) {
    return absl::StrFormat("no rds-preload processes: %s does not exist\n", s.rundir);
  }
  return absl::StrFormat("no rds-preload processes under %s\n", s.rundir);
}

std::string RenderTables(const Snapshot& s, const std::string& what, bool all) {
  std::string out;
  if (what == "sdp") {
    out = s.sdp.empty() ? absl::StrFormat("no SDP sockets under %s\n", s.rundir) : SdpTable(s);
  } else if (s.engines.empty()) {
    out = s.sdp.empty() || what != "show" ? NoEngines(s)
                                          : absl::StrCat("SDP SOCKETS\n", SdpTable(s));
  } else if (what == "processes") {
    out = ProcessTable(s);
  } else if (what == "sockets") {
    out = SocketTable(s);
  } else if (what == "paths") {
    out = PathTable(s);
  } else if (what == "counters") {
    out = CounterTable(s, all);
  } else {
    out = absl::StrCat("PROCESSES\n", ProcessTable(s), "\nSOCKETS\n", SocketTable(s),
                       "\nPATHS\n", PathTable(s), "\nCOUNTERS\n", CounterTable(s, all));
    if (!s.sdp.empty()) absl::StrAppend(&out, "\nSDP SOCKETS\n", SdpTable(s));
  }
  return out;
}

// ---------------------------------------------------------------------------
// JSON.

json EngineJson(const Snapshot& s, const Engine& e) {
  json j = e.state;
  j["process_netns"] = e.netns;
  if (auto name = s.ns.Name(e.netns)) {
    j["process_netns_name"] = *name;
  } else {
    j["process_netns_name"] = nullptr;
  }
  j["user"] = e.user;
  j["socket_path"] = e.path;
  return j;
}

std::string RenderJson(const Snapshot& s) {
  json out = json::object();
  out["rundir"] = s.rundir;
  out["engines"] = json::array();
  for (const Engine& e : s.engines) out["engines"].push_back(EngineJson(s, e));
  out["unreachable"] = json::array();
  for (const Engine& e : s.unreachable) {
    out["unreachable"].push_back({{"pid", e.pid}, {"error", e.error}, {"socket_path", e.path}});
  }
  out["sdp"] = json::array();
  for (const SdpProcess& p : s.sdp) {
    namespace status = rds::sdp::status;
    json sockets = json::array();
    for (const SdpSocket& k : p.sockets) {
      sockets.push_back({{"fd", k.fd},
                         {"state", status::StateName(k.view.state)},
                         {"transport", status::TransportName(k.view.transport)},
                         {"local", status::Show(k.view.local)},
                         {"peer", status::Show(k.view.peer)},
                         {"why", k.view.note},
                         {"socket", k.view.id},
                         {"changed_unix_ns", k.view.changed_ns}});
    }
    out["sdp"].push_back({{"pid", p.pid},
                          {"comm", p.comm},
                          {"user", p.user},
                          {"status_path", p.path},
                          {"not_shown", p.beyond},
                          {"sockets", std::move(sockets)}});
  }
  Totals t = HostTotals(s);
  out["totals"] = {{"engines", s.engines.size()},
                   {"sockets", t.sockets},
                   {"bound_sockets", t.bound},
                   {"paths", t.paths},
                   {"snd_bytes", t.snd_bytes},
                   {"rcv_bytes", t.rcv_bytes},
                   {"recv_queue", t.recv_queue},
                   {"congested_sockets", t.congested},
                   {"backlog", t.backlog},
                   {"unacked", t.unacked},
                   {"counters", t.counters}};
  return out.dump(2) + "\n";
}

// ---------------------------------------------------------------------------
// Prometheus text exposition format (version 0.0.4).

std::string PromName(absl::string_view raw) {
  std::string out;
  for (char c : raw) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == ':';
    out += ok ? c : '_';
  }
  if (out.empty() || (out[0] >= '0' && out[0] <= '9')) out = "_" + out;
  return out;
}

std::string PromLabelValue(absl::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string PromHelp(absl::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

using Labels = std::vector<std::pair<std::string, std::string>>;

class Exposition {
 public:
  void Sample(const std::string& name, const char* type, const std::string& help,
              const Labels& labels, uint64_t value) {
    auto it = index_.find(name);
    if (it == index_.end()) {
      it = index_.emplace(name, families_.size()).first;
      families_.push_back({name, type, help, {}, {}});
    }
    Family& f = families_[it->second];
    std::string l;
    for (const auto& [k, v] : labels) {
      absl::StrAppend(&l, l.empty() ? "" : ",", k, "=\"", PromLabelValue(v), "\"");
    }
    if (!f.seen.insert(l).second) return;  // one sample per label set
    f.samples.push_back(absl::StrCat(name, l.empty() ? "" : absl::StrCat("{", l, "}"), " ", value));
  }
  std::string Render() const {
    std::string out;
    for (const Family& f : families_) {
      absl::StrAppend(&out, "# HELP ", f.name, " ", PromHelp(f.help), "\n");
      absl::StrAppend(&out, "# TYPE ", f.name, " ", f.type, "\n");
      for (const std::string& s : f.samples) absl::StrAppend(&out, s, "\n");
    }
    return out;
  }

 private:
  struct Family {
    std::string name;
    const char* type;
    std::string help;
    std::vector<std::string> samples;
    std::set<std::string> seen;
  };
  std::vector<Family> families_;
  std::map<std::string, size_t> index_;
};

std::string RenderPrometheus(const Snapshot& s) {
  Exposition x;
  x.Sample("rds_preload_engines", "gauge",
           "rds-preload processes that answered (their engines listen under the rundir)", {},
           s.engines.size());
  x.Sample("rds_preload_engines_unreachable", "gauge",
           "rds-preload processes that are alive but did not answer (busy, stuck, or another user's)", {},
           s.unreachable.size());
  for (const Engine& e : s.engines) {
    const std::string comm = Str(e.state, "comm");
    const Labels base = {{"pid", absl::StrCat(e.pid)}, {"comm", comm}};
    Labels info = base;
    info.push_back({"generation", Str(e.state, "generation")});
    info.push_back({"netns", s.ns.Label(e.netns)});
    info.push_back({"user", e.user});
    x.Sample("rds_preload_engine_info", "gauge",
             "one per rds-preload process: its engine generation, network namespace and user",
             info, 1);
    Totals t = Sum(e.state);
    x.Sample("rds_preload_sockets", "gauge", "RDS sockets open in the process", base, t.sockets);
    x.Sample("rds_preload_paths", "gauge", "paths (links to peer engines) of the process", base,
             t.paths);
    // The shared-memory payload arena, once the process has one (docs/perf/history.md §9.6).
    auto arena = e.state.find("arena");
    if (arena != e.state.end() && arena->is_object()) {
      x.Sample("rds_preload_shm_arena_bytes", "gauge",
               "size of the shared-memory arena for large same-host payloads", base,
               Num(*arena, "size"));
      x.Sample("rds_preload_shm_arena_used_bytes", "gauge",
               "arena blocks holding payloads (sent and not yet released by every reader)", base,
               Num(*arena, "bytes_in_use"));
      x.Sample("rds_preload_shm_arena_loans", "gauge",
               "arena blocks lent to same-host peers and not yet given back", base,
               Num(*arena, "loans"));
    }
  }
  for (const Engine& e : s.engines) {
    const Labels base = {{"pid", absl::StrCat(e.pid)}, {"comm", Str(e.state, "comm")}};
    for (const auto& [name, value] : Obj(e.state, "counters").items()) {
      bool shim = absl::StartsWith(name, "shim_");
      std::string help = shim ? absl::StrCat("rds-preload counter ", name)
                              : absl::StrCat("RDS counter ", name, " (kernel RDS_INFO_COUNTERS name)");
      x.Sample(absl::StrCat("rds_preload_", PromName(name), "_total"), "counter", help, base,
               Num(Obj(e.state, "counters"), name.c_str()));
    }
  }
  struct Gauge {
    const char* name;
    const char* field;
    const char* help;
  };
  static const Gauge kSocketGauges[] = {
      {"rds_preload_socket_send_queued_bytes", "snd_bytes",
       "bytes queued for sending and not yet acknowledged (counted against SO_SNDBUF)"},
      {"rds_preload_socket_recv_queued_bytes", "rcv_bytes", "bytes queued for recvmsg"},
      {"rds_preload_socket_recv_queued_messages", "recv_queue", "messages queued for recvmsg"},
      {"rds_preload_socket_congested", "congested",
       "1 when the socket's receive queue is over its RDS rcvbuf (port congested)"},
      {"rds_preload_socket_sndbuf_bytes", "sndbuf", "RDS send buffer of the socket"},
      {"rds_preload_socket_rcvbuf_bytes", "rcvbuf", "RDS receive buffer of the socket"},
  };
  for (const Gauge& g : kSocketGauges) {
    for (const Engine& e : s.engines) {
      for (const json& k : Arr(e.state, "sockets")) {
        Labels l = {{"pid", absl::StrCat(e.pid)},
                    {"comm", Str(e.state, "comm")},
                    {"socket", Str(k, "id")},
                    {"netns", s.ns.Label(Str(k, "netns"))},
                    {"bound", Str(k, "bound")},
                    {"connected", Str(k, "connected")},
                    {"transport", Str(k, "transport")}};
        x.Sample(g.name, "gauge", g.help, l, Num(k, g.field));
      }
    }
  }
  for (const SdpProcess& p : s.sdp) {
    std::map<std::pair<std::string, std::string>, uint64_t> counts;
    for (const SdpSocket& k : p.sockets) {
      ++counts[{rds::sdp::status::TransportName(k.view.transport),
                rds::sdp::status::StateName(k.view.state)}];
    }
    for (const auto& [key, n] : counts) {
      x.Sample("rds_preload_sdp_sockets", "gauge",
               "SDP sockets of the process by transport (verbs, tcp, ...) and state",
               {{"pid", absl::StrCat(p.pid)}, {"comm", p.comm}, {"transport", key.first},
                {"state", key.second}},
               n);
    }
  }
  static const Gauge kPathGauges[] = {
      {"rds_preload_path_up", "", "1 when the path's link is up"},
      {"rds_preload_path_backlog_messages", "backlog", "messages queued on the path, not yet written"},
      {"rds_preload_path_unacked_messages", "unacked",
       "messages written on the path and not yet acknowledged"},
      {"rds_preload_path_next_tx_seq", "next_tx_seq", "next sequence number to send on the path"},
      {"rds_preload_path_next_rx_seq", "next_rx_seq", "next sequence number expected on the path"},
  };
  for (const Gauge& g : kPathGauges) {
    for (const Engine& e : s.engines) {
      for (const json& p : Arr(e.state, "paths")) {
        Labels l = {{"pid", absl::StrCat(e.pid)},
                    {"comm", Str(e.state, "comm")},
                    {"netns", s.ns.Label(Str(p, "netns"))},
                    {"laddr", Str(p, "laddr")},
                    {"faddr", Str(p, "faddr")},
                    {"peer_pid", absl::StrCat(Num(p, "peer_pid"))},
                    {"transport", Str(p, "transport")}};
        uint64_t v = *g.field ? Num(p, g.field) : (Str(p, "state") == "up" ? 1 : 0);
        x.Sample(g.name, "gauge", g.help, l, v);
      }
    }
  }
  return x.Render();
}

// ---------------------------------------------------------------------------
// rdsctl config.

std::string RenderConfig(const Snapshot& s, bool as_json) {
  if (as_json) {
    json out = json::array();
    for (const Engine& e : s.engines) {
      out.push_back({{"pid", e.pid}, {"comm", Str(e.state, "comm")}, {"config", Obj(e.state, "config")}});
    }
    return out.dump(2) + "\n";
  }
  std::map<std::string, std::string> defaults;
  for (const rds::conf::SettingInfo& info : rds::conf::Describe()) {
    defaults[absl::StrCat(rds::conf::kEnvPrefix, info.name)] = info.default_value;
  }
  std::string out;
  for (const Engine& e : s.engines) {
    if (!out.empty()) out += "\n";
    absl::StrAppendFormat(&out, "pid %d (%s), network namespace %s\n", e.pid, Str(e.state, "comm"),
                          s.ns.Label(e.netns));
    const json& config = Obj(e.state, "config");
    size_t width = 0;
    for (const auto& [name, value] : config.items()) width = std::max(width, name.size());
    for (const auto& [name, value] : config.items()) {
      std::string v = value.is_string() ? value.get<std::string>() : value.dump();
      auto d = defaults.find(name);
      std::string note;
      if (d != defaults.end() && d->second != v) {
        note = absl::StrCat("   (set; default ", d->second.empty() ? "empty" : d->second, ")");
      }
      absl::StrAppendFormat(&out, "  %-*s  %s%s\n", static_cast<int>(width), name,
                            v.empty() ? "(empty)" : v, note);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// main.

volatile sig_atomic_t g_stop = 0;
void OnStop(int) { g_stop = 1; }

// absl flags need a value; `--watch` alone means every 2 seconds. Dashes in
// flag names are accepted for underscores (--keep-stale).
std::vector<std::string> Normalize(int argc, char** argv) {
  std::vector<std::string> out;
  bool positional = false;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (i > 0 && !positional && absl::StartsWith(a, "--") && a.size() > 2) {
      size_t eq = a.find('=');
      std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      std::replace(name.begin(), name.end(), '-', '_');
      a = "--" + name + (eq == std::string::npos ? "" : a.substr(eq));
      if (a == "--watch") a = "--watch=2";
    } else if (a == "--") {
      positional = true;
    }
    out.push_back(a);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const rds::tools::ToolHelp help = {
      "rdsctl",
      "usage: rdsctl [show|processes|sockets|paths|counters|sdp] [PID...] [--json|--prometheus] "
      "[--watch[=SECONDS]]\n"
      "       rdsctl config [PID...] [--json]",
      "Shows the RDS sockets, paths, counters and settings of every rds-preload process.",
      rds::tools::AbslToolOptions(/*dashes=*/true),  // Normalize() accepts both spellings
      "commands: show (the default: every table), processes, sockets, paths, counters, sdp\n"
      "(the SDP sockets of every process and the transport each is on);\n"
      "config: every setting of each process. PID arguments restrict the output to them.\n"
      "exit status: 0; 1 if a PID is not an rds-preload process or did not answer, or config\n"
      "found no process; 2 for usage errors. See rdsctl(8).",
  };
  std::vector<std::string> normalized = Normalize(argc, argv);
  std::vector<std::string> options;
  for (size_t i = 1; i < normalized.size() && normalized[i] != "--"; ++i) {
    if (absl::StartsWith(normalized[i], "-")) options.push_back(normalized[i]);
  }
  for (const std::string& option : options) {
    if (rds::tools::HelpOrVersion(option, help)) return kExitOk;
    if (rds::tools::UnknownFlag({option})) {
      fprintf(stderr, "rdsctl: unknown option %s (see --help)\n", option.c_str());
      return kExitUsage;
    }
  }
  std::vector<char*> args;
  for (std::string& a : normalized) args.push_back(a.data());
  std::vector<char*> positional = absl::ParseCommandLine(static_cast<int>(args.size()), args.data());

  std::string command = "show";
  std::set<pid_t> pids;
  static const std::set<std::string> kCommands = {"show",     "processes", "sockets", "paths",
                                                  "counters", "sdp",       "config"};
  for (size_t i = 1; i < positional.size(); ++i) {
    std::string a = positional[i];
    int pid;
    if (absl::SimpleAtoi(a, &pid) && pid > 0) {
      pids.insert(pid);
    } else if (i == 1 && kCommands.contains(a)) {
      command = a;
    } else {
      fprintf(stderr, "rdsctl: unknown command or pid '%s' (try --help)\n", a.c_str());
      return kExitUsage;
    }
  }
  const bool as_json = absl::GetFlag(FLAGS_json);
  const bool as_prom = absl::GetFlag(FLAGS_prometheus);
  if (as_json && as_prom) {
    fprintf(stderr, "rdsctl: --json and --prometheus are exclusive\n");
    return kExitUsage;
  }
  if (command == "config" && as_prom) {
    fprintf(stderr, "rdsctl: config has no Prometheus form (use --json)\n");
    return kExitUsage;
  }
  double interval = 0;
  const std::string watch = absl::GetFlag(FLAGS_watch);
  if (!watch.empty() && (!absl::SimpleAtod(watch, &interval) || interval < 0.1 || interval > 86400)) {
    fprintf(stderr, "rdsctl: --watch=%s: expected seconds between 0.1 and 86400\n", watch.c_str());
    return kExitUsage;
  }
  const double timeout = absl::GetFlag(FLAGS_timeout);
  if (!(timeout > 0 && timeout <= 60)) {
    fprintf(stderr, "rdsctl: --timeout must be in (0, 60] seconds\n");
    return kExitUsage;
  }
  std::string rundir = absl::GetFlag(FLAGS_rundir);
  if (rundir.empty()) rundir = rds::conf::Get().rundir;

  if (interval > 0) {
    // Ctrl-C ends the watch after the current refresh (bounded by --timeout).
    struct sigaction sa = {};
    sa.sa_handler = OnStop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
  }
  signal(SIGPIPE, SIG_IGN);

  const bool tty = isatty(STDOUT_FILENO);
  const int64_t iterations = absl::GetFlag(FLAGS_iterations);
  int status = kExitOk;
  for (int64_t round = 1;; ++round) {
    Snapshot snap = Gather(rundir, pids, timeout, !absl::GetFlag(FLAGS_keep_stale));
    std::string out;
    std::string err = Unreachable(snap);
    if (command == "config") {
      out = RenderConfig(snap, as_json);
      if (snap.engines.empty() && !as_json) {
        out = NoEngines(snap);
        if (err.empty()) status = kExitError;
      }
    } else if (as_json) {
      out = RenderJson(snap);
    } else if (as_prom) {
      out = RenderPrometheus(snap);
    } else {
      out = RenderTables(snap, command, absl::GetFlag(FLAGS_all));
    }
    for (pid_t p : pids) {
      bool found = std::any_of(snap.engines.begin(), snap.engines.end(),
                               [p](const Engine& e) { return e.pid == p; }) ||
                   std::any_of(snap.unreachable.begin(), snap.unreachable.end(),
                               [p](const Engine& e) { return e.pid == p; }) ||
                   std::any_of(snap.sdp.begin(), snap.sdp.end(),
                               [p](const SdpProcess& e) { return e.pid == p; });
      if (!found) {
        absl::StrAppendFormat(&err, "pid %d: not an rds-preload process (no %s/engine-%d.sock)\n",
                              p, rundir, p);
        status = kExitError;
      }
    }
    if (!snap.unreachable.empty() && !pids.empty()) status = kExitError;
    if (interval > 0) {
      char when[64];
      time_t now = time(nullptr);
      strftime(when, sizeof(when), "%H:%M:%S", localtime(&now));
      std::string head = tty ? "\x1b[H\x1b[2J" : (round > 1 ? "\n" : "");
      if (!as_json && !as_prom) {
        absl::StrAppendFormat(&head, "rdsctl %s  every %gs  %s  %zu process(es)\n\n", when,
                              interval, rundir, snap.engines.size());
      }
      out = head + out + (err.empty() || !tty ? "" : "\n" + err);
      if (tty) err.clear();
    }
    fputs(out.c_str(), stdout);
    fflush(stdout);
    if (!err.empty()) fputs(err.c_str(), stderr);
    if (interval <= 0 || g_stop || (iterations > 0 && round >= iterations)) break;
    // Sleep until the next refresh or a signal (SIGINT, SIGTERM).
    double wake = NowSeconds() + interval;
    while (!g_stop) {
      double left = wake - NowSeconds();
      if (left <= 0) break;
      poll(nullptr, 0, static_cast<int>(std::min(left, 0.25) * 1000) + 1);
    }
    if (g_stop) break;
  }
  return status;
}
