// sdp/status_table.h — a process's SDP sockets as rdsctl shows them
// (DESIGN.md §11): the layout of <rundir>/sdp-<pid>.status, a file the
// process maps shared and updates in place — no system call per change —
// and rdsctl maps read-only.
//
// The file is a header and kSlots fixed slots indexed by fd (an fd at or
// above kSlots is counted in the header, not shown). A slot is written under
// a sequence lock: `seq` odd while the writer changes it; a reader copies the
// slot and keeps the copy only if `seq` was even and unchanged around it.
// Writers within the process are serialized by the process (one writer at a
// time); readers never write.
//
// Liveness: the process holds a shared flock(2) on the file while it lives;
// a reader that can take an exclusive one knows the writer is gone.
//
// Contract: the layout is versioned (kVersion); a reader ignores files of
// another version or magic.
#ifndef RDS_SDP_STATUS_TABLE_H_
#define RDS_SDP_STATUS_TABLE_H_

#include <sys/socket.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace rds::sdp::status {

inline constexpr char kMagic[8] = {'R', 'D', 'S', 'S', 'D', 'P', 'S', 'T'};
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kSlots = 16384;

enum class State : uint8_t {
  kFree = 0,
  kOpen = 1,        // made, not connected or listening
  kListening = 2,
  kConnecting = 3,  // a non-blocking connect under way
  kConnected = 4,
  kFailed = 5,      // a connect that failed (its error in SO_ERROR)
};

enum class Transport : uint8_t {
  kNone = 0,     // not decided yet (decided at connect and listen)
  kVerbs = 1,    // SDP over an RDMA RC queue pair (relayed to the fd)
  kTcp = 2,      // TCP on the fd itself (why: the slot's note)
  kTcpRelayed = 3,  // "both": TCP made by the relay and relayed to the fd
  kVerbsAndTcp = 4,  // a listener served over both
};

const char* StateName(State s);
const char* TransportName(Transport t);

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t slots;
  int32_t pid;
  uint32_t reserved;
  std::atomic<uint64_t> beyond;  // SDP fds at or above `slots`, not shown
  uint8_t pad[32];
};
static_assert(sizeof(Header) == 64);

struct Slot {
  std::atomic<uint32_t> seq;
  State state;
  Transport transport;
  uint8_t family;  // AF_INET or AF_INET6
  uint8_t reserved;
  uint64_t id;           // which socket (a new one per SDP socket)
  uint64_t changed_ns;   // CLOCK_REALTIME of the last change
  uint16_t local_port;   // host order
  uint16_t peer_port;
  uint32_t reserved2;
  uint8_t local[16];  // IPv4 in the first 4 bytes
  uint8_t peer[16];
  char note[64];      // why this transport (NUL-terminated)
};
static_assert(sizeof(Slot) == 128);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

inline constexpr size_t kFileSize = sizeof(Header) + size_t{kSlots} * sizeof(Slot);

// What a slot says, copied out consistently.
struct SlotView {
  State state = State::kFree;
  Transport transport = Transport::kNone;
  int family = 0;
  uint64_t id = 0;
  uint64_t changed_ns = 0;
  sockaddr_storage local{}, peer{};
  std::string note;
};

// The slot's content, or nullopt if it is free or kept changing (a few tries).
std::optional<SlotView> Read(const Slot& slot);

// Writes `v` into `slot` under its sequence lock (the caller serializes writers).
void Write(Slot& slot, const SlotView& v);
// Frees `slot` (an fd closed).
void Clear(Slot& slot);

// "10.0.0.1:5000", "[fe80::1]:5000" (empty for an unset address).
std::string Show(const sockaddr_storage& a);

}  // namespace rds::sdp::status

#endif  // RDS_SDP_STATUS_TABLE_H_
