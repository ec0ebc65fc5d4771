// preload/module_paths.cc — the files a host with the RDS kernel module has, as
// programs probe them: /sys/module/rds and /sys/module/rds_tcp (is RDS there?),
// /proc/sys/net/rds/* (the net.rds sysctls; rds-tools reads pf_rds and sol_rds
// there, which upstream kernels do not have), and ftok("/sys/module/rds").
//
// Where such a path does not exist (no module), the path calls below see a
// generated view instead: <rundir>/module-view-<hash>/{sys/module/rds,
// sys/module/rds_tcp, proc/sys/net/rds}, whose sysctl files hold this
// process's settings (RDS_PRELOAD_PING_ENABLE and the others that stand for
// net.rds.*; DESIGN.md §6) and whose module directories say "live", as a
// Linux 6.12 host with rds and rds_tcp loaded shows them. The view is named
// after a hash of its contents: processes with the same settings share one,
// and it never changes once made. Writing a sysctl fails with EACCES (the
// settings come from the environment; a log line says which variable). Every
// other path goes straight to libc after a two-character test.
//
// ftok of a path under /sys/module/rds* is computed on a fixed stand-in,
// <rundir>/sys/module/<path>, not on the view: every rds-stress process of a
// host must get the same key whatever its settings (rds-stress 2.3.11 keys
// its burst-mode semaphore so and exits when ftok fails).
//
// Thread-safety: safe for concurrent use; usable before main.
// Both the plain and the 64-bit names are defined here: without this, glibc's headers
// would rename open to open64 (large-file build) and the two would clash.
#undef _FILE_OFFSET_BITS
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/ipc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "conf/settings.h"
#include "engine/log.h"
#include "engine/registry.h"
#include "engine/sys.h"
#include "preload/real.h"

namespace {

// The roots that exist only with the module, and the files of the view under
// them (path relative to "/", contents).
constexpr absl::string_view kRoots[] = {"/sys/module/rds", "/sys/module/rds_tcp",
                                        "/proc/sys/net/rds"};

std::vector<std::pair<std::string, std::string>> ViewFiles() {
  const rds::conf::Settings& c = rds::conf::Get();
  auto line = [](int64_t v) { return absl::StrCat(v, "\n"); };
  return {
      {"sys/module/rds/initstate", "live\n"},
      {"sys/module/rds/refcnt", "1\n"},  // rds_tcp uses it
      {"sys/module/rds_tcp/initstate", "live\n"},
      {"sys/module/rds_tcp/refcnt", "0\n"},
      {"proc/sys/net/rds/max_unacked_bytes", line(c.max_unacked_bytes)},
      {"proc/sys/net/rds/max_unacked_packets", line(c.max_unacked_packets)},
      {"proc/sys/net/rds/ping_enable", line(c.ping_enable ? 1 : 0)},
      {"proc/sys/net/rds/reconnect_max_delay_ms", line(c.reconnect_max_delay_ms)},
      {"proc/sys/net/rds/reconnect_min_delay_ms", line(c.reconnect_min_delay_ms)},
      {"proc/sys/net/rds/tcp/rds_tcp_rcvbuf", "0\n"},  // 0: TCP autotuning, as the shim does
      {"proc/sys/net/rds/tcp/rds_tcp_sndbuf", "0\n"},
  };
}

// Under one of kRoots (the root itself or below it)?
bool UnderRoot(const char* path) {
  // Cheap first: every root starts "/s" or "/p".
  if (path == nullptr || path[0] != '/' || (path[1] != 's' && path[1] != 'p')) return false;
  const absl::string_view p(path);
  for (absl::string_view root : kRoots) {
    if (p.substr(0, root.size()) == root && (p.size() == root.size() || p[root.size()] == '/')) {
      return true;
    }
  }
  return false;
}

bool MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      std::string prefix = path.substr(0, i);
      if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return false;
    }
  }
  return true;
}

// The view's directory, made on first use; empty if it cannot be made.
const std::string& ViewDir() {
  static std::once_flag once;
  static std::string* dir = new std::string();
  std::call_once(once, [] {
    const std::vector<std::pair<std::string, std::string>> files = ViewFiles();
    size_t h = absl::HashOf(files);
    const std::string& rundir = rds::HostRegistry::Get().rundir();
    std::string final_dir = absl::StrFormat("%s/module-view-%016x", rundir, h);
    struct stat st;
    if (stat(final_dir.c_str(), &st) == 0) {
      *dir = final_dir;
      return;
    }
    if (!rds::HostRegistry::EnsureDir(rundir).ok()) return;
    // Made aside and renamed into place: a reader never sees half a view.
    std::string tmp = absl::StrFormat("%s/.module-view-%d-%016x", rundir, rds::sys::GetPid(),
                                      rds::sys::RandomU64());
    bool ok = true;
    for (const auto& [rel, text] : files) {
      std::string path = absl::StrCat(tmp, "/", rel);
      ok = ok && MakeDirs(path.substr(0, path.rfind('/')));
      int fd = ok ? rds::sys::Open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444) : -1;
      ok = ok && fd >= 0 && rds::sys::WriteAll(fd, text.data(), text.size());
      if (fd >= 0) rds::sys::Close(fd);
    }
    // Directories readable by every user, as /sys and /proc are.
    for (const char* sub : {"", "/sys", "/sys/module", "/sys/module/rds", "/sys/module/rds_tcp",
                            "/proc", "/proc/sys", "/proc/sys/net", "/proc/sys/net/rds",
                            "/proc/sys/net/rds/tcp"}) {
      chmod(absl::StrCat(tmp, sub).c_str(), 0755);
    }
    if (ok && (rename(tmp.c_str(), final_dir.c_str()) == 0 || stat(final_dir.c_str(), &st) == 0)) {
      *dir = final_dir;
    } else {
      rds::log::Warn("cannot make the RDS module view in %s: %s", rundir, strerror(errno));
    }
    // What is left of the draft (another process renamed its own first).
    std::string rm = absl::StrCat("rm -rf '", tmp, "'");
    if (stat(tmp.c_str(), &st) == 0) {
      for (const auto& [rel, text] : files) unlink(absl::StrCat(tmp, "/", rel).c_str());
      for (const char* sub : {"/proc/sys/net/rds/tcp", "/proc/sys/net/rds", "/proc/sys/net",
                              "/proc/sys", "/proc", "/sys/module/rds_tcp", "/sys/module/rds",
                              "/sys/module", "/sys", ""}) {
        rmdir(absl::StrCat(tmp, sub).c_str());
      }
    }
  });
  return *dir;
}

// The path a call should use: the view's file where `path` is one of the
// module's and does not exist on this host; nullopt for every other path.
std::optional<std::string> Translate(const char* path) {
  if (!UnderRoot(path)) return std::nullopt;
  int saved = errno;
  struct stat st;
  if (rds::real::stat(path, &st) == 0 || errno != ENOENT) {
    errno = saved;
    return std::nullopt;  // the module is loaded: its own files
  }
  errno = saved;
  const std::string& view = ViewDir();
  if (view.empty()) return std::nullopt;
  return absl::StrCat(view, path);
}

// The view is read-only: a sysctl is set with its RDS_PRELOAD_ variable.
bool RefuseWrite(const char* path, bool writes) {
  if (!writes) return false;
  rds::log::Warn("%s: the RDS settings come from RDS_PRELOAD_* environment variables "
                 "(docs/settings.md); this file cannot be written", path);
  errno = EACCES;
  return true;
}

bool OpenWrites(int flags) {
  return (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC));
}

bool FopenWrites(const char* mode) {
  return mode != nullptr && (std::strpbrk(mode, "wa+") != nullptr);
}

// open(2)'s optional mode argument.
mode_t ModeArg(int flags, va_list ap) {
  return (flags & (O_CREAT | O_TMPFILE)) ? static_cast<mode_t>(va_arg(ap, int)) : 0;
}

}  // namespace

// The path in effect for a call: `p` itself, or its view (kept alive by `t`).
#define RDS_VIEW_PATH(p, t) ((t) ? (t)->c_str() : (p))

extern "C" {

key_t ftok(const char* path, int proj_id) {
  struct stat st;
  if (!UnderRoot(path) || std::strncmp(path, "/sys/module/", 12) != 0 ||
      rds::real::stat(path, &st) == 0) {
    return rds::real::ftok(path, proj_id);
  }
  const std::string stand_in = absl::StrCat(rds::HostRegistry::Get().rundir(), path);
  if (!rds::HostRegistry::EnsureDir(stand_in).ok()) return rds::real::ftok(path, proj_id);
  return rds::real::ftok(stand_in.c_str(), proj_id);
}

int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = ModeArg(flags, ap);
  va_end(ap);
  std::optional<std::string> t = Translate(path);
  if (t && RefuseWrite(path, OpenWrites(flags))) return -1;
  return rds::real::open(RDS_VIEW_PATH(path, t), flags, mode);
}

int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = ModeArg(flags, ap);
  va_end(ap);
  std::optional<std::string> t = Translate(path);
  if (t && RefuseWrite(path, OpenWrites(flags))) return -1;
  return rds::real::open64(RDS_VIEW_PATH(path, t), flags, mode);
}

int openat(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = ModeArg(flags, ap);
  va_end(ap);
  std::optional<std::string> t = Translate(path);
  if (t && RefuseWrite(path, OpenWrites(flags))) return -1;
  return rds::real::openat(dirfd, RDS_VIEW_PATH(path, t), flags, mode);
}

int openat64(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = ModeArg(flags, ap);
  va_end(ap);
  std::optional<std::string> t = Translate(path);
  if (t && RefuseWrite(path, OpenWrites(flags))) return -1;
  return rds::real::openat64(dirfd, RDS_VIEW_PATH(path, t), flags, mode);
}

// _FORTIFY_SOURCE's checked forms (no mode: O_CREAT is refused by their callers).
int __open_2(const char* path, int flags) {
  std::optional<std::string> t = Translate(path);
  if (t && RefuseWrite(path, OpenWrites(flags))) return -1;
  return rds::real::open_2(RDS_VIEW_PATH(path, t), flags);
}

int __open64_2(const char* path, int flags) {
  std::optional<std::string> t = Translate(path);
  if (t && RefuseWrite(path, OpenWrites(flags))) return -1;
  return rds::real::open64_2(RDS_VIEW_PATH(path, t), flags);
}

int __openat_2(int dirfd, const char* path, int flags) {
  std::optional<std::string> t = Translate(path);
  if (t && RefuseWrite(path, OpenWrites(flags))) return -1;
  return rds::real::openat_2(dirfd, RDS_VIEW_PATH(path, t), flags);
}

int __openat64_2(int dirfd, const char* path, int flags) {
  std::optional<std::string> t = Translate(path);
  if (t && RefuseWrite(path, OpenWrites(flags))) return -1;
  return rds::real::openat64_2(dirfd, RDS_VIEW_PATH(path, t), flags);
}

FILE* fopen(const char* path, const char* mode) {
  std::optional<std::string> t = Translate(path);
  if (t && RefuseWrite(path, FopenWrites(mode))) return nullptr;
  return rds::real::fopen(RDS_VIEW_PATH(path, t), mode);
}

FILE* fopen64(const char* path, const char* mode) {
  std::optional<std::string> t = Translate(path);
  if (t && RefuseWrite(path, FopenWrites(mode))) return nullptr;
  return rds::real::fopen64(RDS_VIEW_PATH(path, t), mode);
}

int stat(const char* path, struct stat* st) {
  std::optional<std::string> t = Translate(path);
  return rds::real::stat(RDS_VIEW_PATH(path, t), st);
}

int stat64(const char* path, struct stat64* st) {
  std::optional<std::string> t = Translate(path);
  return rds::real::stat64(RDS_VIEW_PATH(path, t), st);
}

int lstat(const char* path, struct stat* st) {
  std::optional<std::string> t = Translate(path);
  return rds::real::lstat(RDS_VIEW_PATH(path, t), st);
}

int lstat64(const char* path, struct stat64* st) {
  std::optional<std::string> t = Translate(path);
  return rds::real::lstat64(RDS_VIEW_PATH(path, t), st);
}

int fstatat(int dirfd, const char* path, struct stat* st, int flags) {
  std::optional<std::string> t = Translate(path);
  return rds::real::fstatat(dirfd, RDS_VIEW_PATH(path, t), st, flags);
}

int fstatat64(int dirfd, const char* path, struct stat64* st, int flags) {
  std::optional<std::string> t = Translate(path);
  return rds::real::fstatat64(dirfd, RDS_VIEW_PATH(path, t), st, flags);
}

// The pre-2.33 stat entry points, which older binaries call.
int __xstat(int ver, const char* path, struct stat* st) {
  std::optional<std::string> t = Translate(path);
  return rds::real::xstat(ver, RDS_VIEW_PATH(path, t), st);
}

int __xstat64(int ver, const char* path, struct stat64* st) {
  std::optional<std::string> t = Translate(path);
  return rds::real::xstat64(ver, RDS_VIEW_PATH(path, t), st);
}

int __lxstat(int ver, const char* path, struct stat* st) {
  std::optional<std::string> t = Translate(path);
  return rds::real::lxstat(ver, RDS_VIEW_PATH(path, t), st);
}

int __lxstat64(int ver, const char* path, struct stat64* st) {
  std::optional<std::string> t = Translate(path);
  return rds::real::lxstat64(ver, RDS_VIEW_PATH(path, t), st);
}

int __fxstatat(int ver, int dirfd, const char* path, struct stat* st, int flags) {
  std::optional<std::string> t = Translate(path);
  return rds::real::fxstatat(ver, dirfd, RDS_VIEW_PATH(path, t), st, flags);
}

int __fxstatat64(int ver, int dirfd, const char* path, struct stat64* st, int flags) {
  std::optional<std::string> t = Translate(path);
  return rds::real::fxstatat64(ver, dirfd, RDS_VIEW_PATH(path, t), st, flags);
}

int statx(int dirfd, const char* path, int flags, unsigned int mask, struct statx* st) {
  std::optional<std::string> t = Translate(path);
  return rds::real::statx(dirfd, RDS_VIEW_PATH(path, t), flags, mask, st);
}

int access(const char* path, int how) {
  std::optional<std::string> t = Translate(path);
  if (t && RefuseWrite(path, how & W_OK)) return -1;
  return rds::real::access(RDS_VIEW_PATH(path, t), how);
}

int faccessat(int dirfd, const char* path, int how, int flags) {
  std::optional<std::string> t = Translate(path);
  if (t && RefuseWrite(path, how & W_OK)) return -1;
  return rds::real::faccessat(dirfd, RDS_VIEW_PATH(path, t), how, flags);
}

DIR* opendir(const char* path) {
  std::optional<std::string> t = Translate(path);
  return rds::real::opendir(RDS_VIEW_PATH(path, t));
}

}  // extern "C"
