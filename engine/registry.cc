// engine/registry.cc — port, socket and engine registry on the filesystem.
#include "engine/registry.h"

#include <sys/file.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "conf/settings.h"
#include "engine/errors.h"
#include "engine/fork.h"
#include "engine/log.h"
#include "engine/sys.h"

namespace rds {
namespace {

// Socket ids are random 64-bit values; lock offsets must be non-negative.
off_t SocketOffset(uint64_t id) { return static_cast<off_t>(id & 0x3fffffffffffffffULL); }

int SetLock(int fd, short type, off_t offset) {
  struct flock fl = {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = offset;
  fl.l_len = 1;
  return sys::FcntlLock(fd, F_SETLK, &fl);
}

// Port locks are open-file-description locks (F_OFD_*): POSIX record locks
// are all released when the process closes *any* descriptor of the file,
// and a process closes descriptors of a ports file (a shared socket's lock,
// engine/share.h) while it holds other ports there.
int SetOfdLock(int fd, short type, off_t offset) {
  struct flock fl = {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = offset;
  fl.l_len = 1;
  return sys::FcntlLock(fd, F_OFD_SETLK, &fl);
}

// 1 if another open file description has a lock on `offset`, 0 if none,
// -1 on error.
int OfdLocked(int fd, off_t offset) {
  struct flock fl = {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = offset;
  fl.l_len = 1;
  if (sys::FcntlLock(fd, F_OFD_GETLK, &fl) != 0) return -1;
  return fl.l_type == F_UNLCK ? 0 : 1;
}

// Pid of another process's lock on `offset`, 0 if none, -1 on error.
pid_t LockHolder(int fd, off_t offset) {
  struct flock fl = {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = offset;
  fl.l_len = 1;
  if (sys::FcntlLock(fd, F_GETLK, &fl) != 0) return -1;
  if (fl.l_type == F_UNLCK) return 0;
  // An open-file lock: a parked socket's port (PortRegistry::ParkPort).
  if (fl.l_pid == -1) return -3;
  // A holder in another pid namespace is reported as 0; it still holds it.
  return fl.l_pid > 0 ? fl.l_pid : -2;
}

int OpenShared(const std::string& path) {
  // Open an existing file without O_CREAT: with fs.protected_regular, O_CREAT
  // on another user's file in a sticky directory fails even if it is 0666.
  int fd = sys::Open(path.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0 && errno == ENOENT) {
    fd = sys::Open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      fchmod(fd, 0666);  // another user's engines must be able to lock ports too
    } else if (errno == EEXIST) {
      fd = sys::Open(path.c_str(), O_RDWR | O_CLOEXEC, 0);  // created meanwhile
    }
  }
  if (fd < 0) return fd;
  return sys::MakeInternal(fd);
}

std::string AddrFileName(const RdsAddr& a) {
  std::string hex;
  for (uint8_t b : a.bytes) absl::StrAppend(&hex, absl::Hex(b, absl::kZeroPad2));
  return absl::StrCat("ports.", hex, ".", a.scope_id);
}

}  // namespace

absl::Status HostRegistry::EnsureDir(const std::string& path) {
  if (mkdir(path.c_str(), 01777) == 0) {
    chmod(path.c_str(), 01777);  // mkdir applies the umask
    return absl::OkStatus();
  }
  if (errno == EEXIST) return absl::OkStatus();
  if (errno == ENOENT) {
    size_t slash = path.find_last_of('/');
    if (slash != std::string::npos && slash > 0) {
      if (absl::Status s = EnsureDir(path.substr(0, slash)); !s.ok()) return s;
      return EnsureDir(path);
    }
  }
  return absl::InternalError(absl::StrFormat("cannot create %s: %s", path, strerror(errno)));
}

int HostRegistry::OpenSharedFile(const std::string& path) { return OpenShared(path); }

rds::Mutex& HostRegistryMutex() { return HostRegistry::Get().mu_; }

HostRegistry& HostRegistry::Get() {
  static HostRegistry* r = new HostRegistry(conf::Get().rundir);
  return *r;
}

HostRegistry::HostRegistry(std::string rundir) : rundir_(std::move(rundir)) {}

std::string HostRegistry::EngineSocketPath(pid_t pid) const {
  return absl::StrCat(rundir_, "/engine-", pid, ".sock");
}

void HostRegistry::ResetAfterFork() { sockets_fd_ = -1; }

std::vector<std::pair<pid_t, std::string>> HostRegistry::OtherEngines() const {
  std::vector<std::pair<pid_t, std::string>> out;
  std::vector<std::string> names;
  if (!sys::ListDir(rundir_.c_str(), &names)) return out;
  uint32_t self = static_cast<uint32_t>(getpid());
  for (const std::string& name : names) {
    if (!absl::StartsWith(name, "engine-") || !absl::EndsWith(name, ".sock")) continue;
    uint32_t pid;
    if (!absl::SimpleAtoi(name.substr(7, name.size() - 12), &pid) || pid == self) continue;
    out.emplace_back(static_cast<pid_t>(pid), absl::StrCat(rundir_, "/", name));
  }
  return out;
}

std::vector<std::string> HostRegistry::OtherEngineSockets() const {
  std::vector<std::string> out;
  for (auto& [pid, path] : OtherEngines()) out.push_back(std::move(path));
  return out;
}

int HostRegistry::SocketsFd() {
  rds::MutexLock lock(&mu_);
  if (sockets_fd_ < 0) {
    if (EnsureDir(rundir_).ok()) sockets_fd_ = OpenShared(rundir_ + "/sockets.lock");
  }
  return sockets_fd_;
}

absl::Status HostRegistry::ClaimSocket(uint64_t id) {
  int fd = SocketsFd();
  if (fd < 0) return absl::InternalError("socket registry unavailable");
  if (SetLock(fd, F_WRLCK, SocketOffset(id)) != 0) {
    return absl::FailedPreconditionError("socket is owned by another process");
  }
  return absl::OkStatus();
}

void HostRegistry::ReleaseSocket(uint64_t id) {
  int fd = SocketsFd();
  if (fd >= 0) SetLock(fd, F_UNLCK, SocketOffset(id));
}

pid_t HostRegistry::SocketOwner(uint64_t id) {
  int fd = SocketsFd();
  if (fd < 0) return 0;
  pid_t p = LockHolder(fd, SocketOffset(id));
  return p == -2 ? 1 : (p < 0 ? 0 : p);
}

int HostRegistry::PruneUnusedNamespaceDirs() const {
  int pruned = 0;
  std::vector<std::string> names;
  if (!sys::ListDir(rundir_.c_str(), &names)) return 0;
  for (const std::string& name : names) {
    if (!absl::StartsWith(name, "ns-")) continue;
    const std::string dir = absl::StrCat(rundir_, "/", name);
    int fd = sys::Open((dir + "/bindgen").c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) continue;  // not a folder of ours, or being made right now
    if (sys::Flock(fd, LOCK_EX | LOCK_NB) == 0) {
      // Nobody uses it, and nobody can start to until the lock goes: its users
      // re-check that the file is still linked once they hold their lock.
      std::vector<std::string> files;
      bool gone = sys::ListDir(dir.c_str(), &files);
      for (const std::string& f : files) {
        if (unlink(absl::StrCat(dir, "/", f).c_str()) != 0) gone = false;  // another user's file
      }
      if (gone && rmdir(dir.c_str()) == 0) ++pruned;
    }
    sys::Close(fd);
  }
  return pruned;
}

absl::StatusOr<std::unique_ptr<PortRegistry>> PortRegistry::Open(const std::string& rundir,
                                                                 NetNsKey key) {
  std::string dir = absl::StrCat(rundir, "/ns-", key.dev, "-", key.ino);
  int gen_fd = -1;
  for (int attempt = 0;; ++attempt) {
    if (absl::Status s = HostRegistry::EnsureDir(dir); !s.ok()) return s;
    gen_fd = OpenShared(dir + "/bindgen");
    if (gen_fd < 0) {
      return absl::InternalError(absl::StrFormat("cannot open %s/bindgen: %s", dir, strerror(errno)));
    }
    // In use while this registry lives (HostRegistry::PruneUnusedNamespaceDirs);
    // a folder pruned between the open and the lock is made again.
    struct stat linked;
    if (sys::Flock(gen_fd, LOCK_SH) == 0 && fstat(gen_fd, &linked) == 0 && linked.st_nlink > 0) break;
    sys::CloseInternal(gen_fd);
    if (attempt == 8) return absl::InternalError(absl::StrFormat("cannot hold %s", dir));
  }
  struct stat st;
  if (fstat(gen_fd, &st) == 0 && st.st_size < static_cast<off_t>(sizeof(uint64_t))) {
    if (ftruncate(gen_fd, sizeof(uint64_t)) != 0) {
      sys::CloseInternal(gen_fd);
      return absl::InternalError("cannot size bindgen");
    }
  }
  void* map = mmap(nullptr, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, gen_fd, 0);
  if (map == MAP_FAILED) {
    sys::CloseInternal(gen_fd);
    return absl::InternalError("cannot map bindgen");
  }
  return std::unique_ptr<PortRegistry>(
      new PortRegistry(std::move(dir), gen_fd, static_cast<std::atomic<uint64_t>*>(map)));
}

PortRegistry::PortRegistry(std::string dir, int gen_fd, std::atomic<uint64_t>* gen)
    : dir_(std::move(dir)), gen_fd_(gen_fd), gen_(gen) {}

constexpr size_t kPortGensBytes = 65536 * sizeof(uint32_t);
// After the generations: per port, the socket whose open-file lock holds it
// (a shared socket's, engine/share.h), to find that socket's owner.
constexpr size_t kPortSocketsBytes = 65536 * sizeof(uint64_t);
constexpr size_t kPortsFileBytes = kPortGensBytes + kPortSocketsBytes;

PortRegistry::~PortRegistry() {
  munmap(gen_, sizeof(uint64_t));
  sys::CloseInternal(gen_fd_);
  for (auto& [addr, f] : files_) {
    if (f.port_gens) munmap(f.port_gens, f.mapped);
    sys::CloseInternal(f.fd);
  }
}

absl::StatusOr<PortRegistry::AddrFile> PortRegistry::File(const RdsAddr& addr) {
  rds::MutexLock lock(&mu_);
  auto it = files_.find(addr);
  if (it != files_.end()) return it->second;
  AddrFile f;
  f.fd = OpenShared(absl::StrCat(dir_, "/", AddrFileName(addr)));
  if (f.fd < 0) {
    return absl::InternalError(absl::StrFormat("cannot open port registry in %s: %s", dir_,
                                               strerror(errno)));
  }
  struct stat st;
  if (fstat(f.fd, &st) == 0 && st.st_size < static_cast<off_t>(kPortsFileBytes)) {
    if (ftruncate(f.fd, kPortsFileBytes) != 0) {
      // Another user's file we may not grow: fine once its owner did.
    }
  }
  // A file made by an older version may hold the generations only.
  const bool full = fstat(f.fd, &st) == 0 && st.st_size >= static_cast<off_t>(kPortsFileBytes);
  f.mapped = full ? kPortsFileBytes : kPortGensBytes;
  void* map = mmap(nullptr, f.mapped, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, 0);
  if (map != MAP_FAILED) {
    f.port_gens = static_cast<std::atomic<uint32_t>*>(map);
    if (full) {
      f.port_sockets = reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(map) +
                                                                kPortGensBytes);
    }
  }
  files_[addr] = f;
  return f;
}

absl::StatusOr<int> PortRegistry::PortsFd(const RdsAddr& addr) {
  absl::StatusOr<AddrFile> f = File(addr);
  if (!f.ok()) return f.status();
  return f->fd;
}

absl::StatusOr<uint32_t> PortRegistry::PortGeneration(const RdsAddr& addr, uint16_t port) {
  const RecentGens* r = recent_.load(std::memory_order_acquire);
  if (r != nullptr && r->addr == addr) return r->gens[port].load(std::memory_order_acquire);
  absl::StatusOr<AddrFile> f = File(addr);
  if (!f.ok()) return f.status();
  if (f->port_gens == nullptr) return absl::UnavailableError("port generations not mapped");
  {
    rds::MutexLock lock(&mu_);
    std::unique_ptr<RecentGens>& entry = recents_[addr];
    if (!entry) entry.reset(new RecentGens{addr, f->port_gens});
    recent_.store(entry.get(), std::memory_order_release);
  }
  return f->port_gens[port].load(std::memory_order_acquire);
}

void PortRegistry::BumpPortGeneration(const RdsAddr& addr, uint16_t port) {
  absl::StatusOr<AddrFile> f = File(addr);
  if (f.ok() && f->port_gens) f->port_gens[port].fetch_add(1, std::memory_order_acq_rel);
}

absl::Status PortRegistry::Lock(const RdsAddr& addr, uint16_t port, uint64_t id) {
  absl::StatusOr<int> fd = PortsFd(addr);
  if (!fd.ok()) return fd.status();
  if (SetOfdLock(*fd, F_WRLCK, port) == 0) {
    SetPortSocket(addr, port, id);
    return absl::OkStatus();
  }
  if (errno == EAGAIN || errno == EACCES) return RdsError(EADDRINUSE);
  return absl::InternalError(absl::StrFormat("port lock: %s", strerror(errno)));
}

void PortRegistry::Unlock(const RdsAddr& addr, uint16_t port) {
  absl::StatusOr<int> fd = PortsFd(addr);
  if (fd.ok()) SetOfdLock(*fd, F_UNLCK, port);
}

absl::StatusOr<pid_t> PortRegistry::Owner(const RdsAddr& addr, uint16_t port) {
  absl::StatusOr<AddrFile> f = File(addr);
  if (!f.ok()) return f.status();
  const int locked = OfdLocked(f->fd, port);
  if (locked < 0) return absl::InternalError(absl::StrFormat("F_OFD_GETLK: %s", strerror(errno)));
  if (locked == 0) return 0;
  if (f->port_sockets == nullptr) return absl::UnavailableError("port sockets not mapped");
  // The lock names no process: the socket recorded for the port does, through
  // its ownership lock. A socket between owners (parked), or one whose
  // binder has not recorded it yet, has none for the moment.
  const uint64_t id = f->port_sockets[port].load();
  const pid_t owner = id == kNoSocket ? 0 : HostRegistry::Get().SocketOwner(id);
  return owner > 0 ? owner : kParkedPortOwner;
}

absl::StatusOr<int> PortRegistry::ParkPort(const RdsAddr& addr, uint16_t port, uint64_t id) {
  absl::StatusOr<int> fd = PortsFd(addr);
  if (!fd.ok()) return fd.status();
  SetPortSocket(addr, port, id);
  // Shared locks do not conflict with each other and a bind's exclusive one
  // conflicts with both: the port stays taken at every step.
  if (SetOfdLock(*fd, F_RDLCK, port) != 0) {
    return absl::InternalError(absl::StrFormat("port lock: %s", strerror(errno)));
  }
  int ofd = sys::Open(absl::StrCat(dir_, "/", AddrFileName(addr)).c_str(), O_RDWR | O_CLOEXEC, 0);
  if (ofd < 0) {
    SetOfdLock(*fd, F_WRLCK, port);
    return absl::InternalError(absl::StrFormat("cannot open port file: %s", strerror(errno)));
  }
  ofd = sys::MakeInternal(ofd);
  struct flock fl = {};
  fl.l_type = F_RDLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = port;
  fl.l_len = 1;
  if (sys::FcntlLock(ofd, F_OFD_SETLK, &fl) != 0) {
    const int err = errno;
    sys::CloseInternal(ofd);
    SetOfdLock(*fd, F_WRLCK, port);
    return absl::InternalError(absl::StrFormat("open-file port lock: %s", strerror(err)));
  }
  SetOfdLock(*fd, F_UNLCK, port);
  return ofd;
}

void PortRegistry::SetPortSocket(const RdsAddr& addr, uint16_t port, uint64_t id) {
  absl::StatusOr<AddrFile> f = File(addr);
  if (f.ok() && f->port_sockets) f->port_sockets[port].store(id);
}

}  // namespace rds
