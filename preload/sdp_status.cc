// preload/sdp_status.cc — see sdp_status.h.
#include "preload/sdp_status.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "conf/settings.h"
#include "engine/log.h"
#include "engine/registry.h"
#include "engine/sys.h"
#include "preload/memory_owner.h"

namespace rds::preload::sdp_status {
namespace {

pid_t owner = 0;           // the process image whose table `header` is
int file = -1;             // internal; holds the shared flock
struct stat file_id {};    // which file `file` is (a fork child's RDS reset closes it)
sdp::status::Header* header = nullptr;
bool failed_logged = false;

std::string PathOf(pid_t pid) { return absl::StrCat(conf::Get().rundir, "/sdp-", pid, ".status"); }

// Drops the table this process holds (its own, or a fork parent's).
void Drop() {
  if (header != nullptr) munmap(header, sdp::status::kFileSize);
  header = nullptr;
  // In a fork child the RDS engine's reset may have closed it already (and
  // the number been reused): closed only if it still is the table's file.
  struct stat now {};
  if (file >= 0 && sys::IsInternal(file) && fstat(file, &now) == 0 &&
      now.st_dev == file_id.st_dev && now.st_ino == file_id.st_ino) {
    sys::CloseInternal(file);
  }
  file = -1;
  owner = 0;
}

// Made under a temporary name and renamed into place once locked and
// initialized: a reader never finds it half-made, nor unlocked while its
// writer lives (an earlier image's file of this pid, after exec, is replaced
// whole).
bool Make(pid_t pid) {
  const std::string path = PathOf(pid);
  const std::string made = path + ".new";
  const char* step = "the run directory";
  int fd = -1;
  void* map = MAP_FAILED;
  if (HostRegistry::EnsureDir(conf::Get().rundir).ok()) {
    step = "open";
    unlink(made.c_str());  // left by an image of this pid that died making it
    fd = sys::MakeInternal(sys::Open(made.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd >= 0) {
      step = "flock";
      if (sys::Flock(fd, LOCK_SH | LOCK_NB) == 0) {
        step = "ftruncate";
        if (ftruncate(fd, static_cast<off_t>(sdp::status::kFileSize)) == 0) {
          step = "mmap";
          map = mmap(nullptr, sdp::status::kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        }
      }
    }
  }
  if (map != MAP_FAILED) {
    auto* h = static_cast<sdp::status::Header*>(map);
    h->version = sdp::status::kVersion;
    h->slots = sdp::status::kSlots;
    h->pid = pid;
    std::memcpy(h->magic, sdp::status::kMagic, sizeof h->magic);
    step = "rename";
    if (rename(made.c_str(), path.c_str()) != 0) {
      munmap(map, sdp::status::kFileSize);
      map = MAP_FAILED;
    }
  }
  if (map == MAP_FAILED) {
    const int err = errno;
    if (!failed_logged) {
      log::Info("SDP sockets not published for rdsctl: %s %s: %s", step, path, strerror(err));
      failed_logged = true;
    }
    if (fd >= 0) {
      unlink(made.c_str());
      sys::CloseInternal(fd);
    }
    return false;
  }
  header = static_cast<sdp::status::Header*>(map);
  file = fd;
  fstat(fd, &file_id);
  owner = pid;
  return true;
}

}  // namespace

sdp::status::Slot* SlotFor(int fd, bool* fresh) {
  *fresh = false;
  // A vfork child shares the parent's memory (and mapping): never touched.
  if (InVforkChild()) return nullptr;
  const pid_t pid = sys::GetPid();
  if (owner != pid) {
    Drop();  // a fork parent's table is not this process's to write
    if (!Make(pid)) return nullptr;
    *fresh = true;
  }
  if (fd < 0 || static_cast<uint32_t>(fd) >= sdp::status::kSlots) return nullptr;
  auto* slots = reinterpret_cast<sdp::status::Slot*>(header + 1);
  return &slots[fd];
}

void SetBeyond(uint64_t n) {
  if (header != nullptr && owner == sys::GetPid()) {
    header->beyond.store(n, std::memory_order_relaxed);
  }
}

void Withdraw() {
  if (InVforkChild()) return;
  if (owner != 0 && owner == sys::GetPid()) unlink(PathOf(owner).c_str());
  Drop();
}

}  // namespace rds::preload::sdp_status
