// engine/kernel_node.cc — the host-wide record of a kernel node connection
// (engine/kernel_node.h).
#include "engine/kernel_node.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_format.h"
#include "engine/registry.h"
#include "engine/sys.h"

namespace rds {
namespace {

constexpr uint32_t kMagic = 0x4b4e4f32;  // "KNO2": per-path state
constexpr off_t kOwnerByte = 0;
constexpr off_t kMemberByte = 1;

std::string Hex(const RdsAddr& a) {
  std::string s;
  for (uint8_t b : a.bytes) absl::StrAppend(&s, absl::Hex(b, absl::kZeroPad2));
  return absl::StrCat(s, "_", a.scope_id);
}

// The inverse of Hex.
bool FromHex(absl::string_view s, RdsAddr* a) {
  const size_t us = s.find('_');
  if (us != 32) return false;
  for (size_t i = 0; i < 16; ++i) {
    int v = 0;
    if (!absl::SimpleHexAtoi(s.substr(2 * i, 2), &v)) return false;
    a->bytes[i] = static_cast<uint8_t>(v);
  }
  return absl::SimpleAtoi(s.substr(us + 1), &a->scope_id);
}

int Lock(int fd, int cmd, short type, off_t at, pid_t* holder = nullptr) {
  struct flock fl = {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = at;
  fl.l_len = 1;
  int r = sys::FcntlLock(fd, cmd, &fl);
  if (r == 0 && holder != nullptr) *holder = fl.l_type == F_UNLCK ? 0 : fl.l_pid;
  return r;
}

// Another process holds a lock on `at` that conflicts with `type`: its pid
// (1 if it is in another pid namespace), else 0.
pid_t Conflicting(int fd, short type, off_t at) {
  pid_t holder = 0;
  if (Lock(fd, F_GETLK, type, at, &holder) != 0) return 0;
  return holder > 0 ? holder : (holder == 0 ? 0 : 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<NodeRecord>> NodeRecord::Open(const std::string& dir,
                                                             const RdsAddr& laddr,
                                                             const RdsAddr& faddr, bool create) {
  std::string path = absl::StrCat(dir, "/knode.", Hex(laddr), ".", Hex(faddr));
  int fd = -1;
  if (create) {
    fd = HostRegistry::OpenSharedFile(path);
  } else {
    fd = sys::Open(path.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd >= 0) fd = sys::MakeInternal(fd);
  }
  if (fd < 0) {
    if (errno == ENOENT && !create) return absl::NotFoundError(path);
    return absl::InternalError(absl::StrFormat("%s: %s", path, strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) == 0 && st.st_size < static_cast<off_t>(sizeof(State)) &&
      ftruncate(fd, sizeof(State)) != 0) {
    const int e = errno;
    sys::CloseInternal(fd);
    return absl::InternalError(absl::StrFormat("cannot size %s: %s", path, strerror(e)));
  }
  void* map = mmap(nullptr, sizeof(State), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    const int e = errno;
    sys::CloseInternal(fd);
    return absl::InternalError(absl::StrFormat("cannot map %s: %s", path, strerror(e)));
  }
  return std::unique_ptr<NodeRecord>(new NodeRecord(path, fd, static_cast<State*>(map)));
}

std::vector<std::pair<RdsAddr, RdsAddr>> NodeRecord::List(const std::string& dir) {
  std::vector<std::pair<RdsAddr, RdsAddr>> out;
  std::vector<std::string> names;
  if (!sys::ListDir(dir.c_str(), &names)) return out;
  for (const std::string& name : names) {
    if (!absl::StartsWith(name, "knode.")) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(name, '.');
    RdsAddr laddr, faddr;
    if (parts.size() == 3 && FromHex(parts[1], &laddr) && FromHex(parts[2], &faddr)) {
      out.emplace_back(laddr, faddr);
    }
  }
  return out;
}

NodeRecord::~NodeRecord() {
  munmap(state_, sizeof(State));
  sys::CloseInternal(fd_);  // drops this process's locks on the record
}

pid_t NodeRecord::OtherOwner() const { return Conflicting(fd_, F_WRLCK, kOwnerByte); }

bool NodeRecord::TryClaim(bool* continued, bool users_here) {
  if (owned_) {
    *continued = true;
    return true;
  }
  if (Lock(fd_, F_SETLK, F_WRLCK, kOwnerByte) != 0) return false;
  owned_ = true;
  // Anyone else using the record holds byte 1 shared (our own read lock
  // never conflicts with us, so we count ourselves if we joined before).
  *continued = (member_ || users_here || Conflicting(fd_, F_WRLCK, kMemberByte) != 0) &&
               state_->magic.load(std::memory_order_acquire) == kMagic;
  Join();
  previous_owner_ = state_->owner_pid.load(std::memory_order_acquire);
  state_->owner_pid.store(static_cast<uint32_t>(getpid()), std::memory_order_release);
  return true;
}

void NodeRecord::Join() {
  if (!member_) member_ = Lock(fd_, F_SETLK, F_RDLCK, kMemberByte) == 0;
}

void NodeRecord::Release() {
  if (!owned_) return;
  Lock(fd_, F_SETLK, F_UNLCK, kOwnerByte);
  owned_ = false;
}

void NodeRecord::NewIncarnation(uint32_t gen) {
  State& s = *state_;
  s.magic.store(0, std::memory_order_release);
  s.gen.store(gen, std::memory_order_relaxed);
  s.node_gen.store(0, std::memory_order_relaxed);
  s.npaths.store(0, std::memory_order_relaxed);
  s.node_sport_idx.store(0, std::memory_order_relaxed);
  for (PathState& p : s.paths) {
    // A path never used has untouched (zero) pages: it is left so.
    if (p.next_tx_seq.load(std::memory_order_relaxed) == 0) continue;
    p.next_tx_seq.store(1, std::memory_order_relaxed);
    p.next_rx_seq.store(0, std::memory_order_relaxed);
    p.acked_seq.store(0, std::memory_order_relaxed);
    for (Slot& slot : p.slots) {
      if (slot.node_seq.load(std::memory_order_relaxed) != 0) {
        slot.node_seq.store(0, std::memory_order_relaxed);
      }
    }
  }
  s.magic.store(kMagic, std::memory_order_release);
}

void NodeRecord::NoteSlot(int index, uint64_t seq, uint32_t pid, uint64_t relay_seq) {
  Slot& slot = state_->paths[index].slots[seq % kSlots];
  slot.node_seq.store(0, std::memory_order_relaxed);
  slot.pid.store(pid, std::memory_order_relaxed);
  slot.relay_seq.store(relay_seq, std::memory_order_relaxed);
  slot.node_seq.store(seq, std::memory_order_release);
}

std::optional<std::pair<uint32_t, uint64_t>> NodeRecord::SlotOf(int index, uint64_t seq) const {
  const Slot& slot = state_->paths[index].slots[seq % kSlots];
  if (slot.node_seq.load(std::memory_order_acquire) != seq) return std::nullopt;
  return std::make_pair(slot.pid.load(std::memory_order_relaxed),
                        slot.relay_seq.load(std::memory_order_relaxed));
}

}  // namespace rds
