// engine/kernel_node.h — the host-wide record of one connection to a kernel
// RDS node: (network namespace, local address, node address). A node keeps
// one connection per address pair for every port of this host, so exactly
// one engine of the host — the record's owner — talks to it; the others
// relay through the owner (DESIGN.md §3.5).
//
// The record is the file `knode.<laddr>.<faddr>` in the namespace's folder:
//   byte 0   write-locked (POSIX record lock) by the owning engine: the lock
//            dies with the process, F_GETLK names it;
//   byte 1   read-locked by every engine that has used the record while it
//            had an owner (owner and relayers): a new owner that finds such
//            users continues the connection's incarnation, one that finds
//            none starts a new one;
//   content  the incarnation (our GEN_NUM toward the node, the node's last
//            GEN_NUM, how many paths — TCP connections — it has and, per
//            path, both sequence spaces and what the node has acknowledged)
//            and, per node sequence not yet acknowledged, which relayer's
//            message took it — what a new owner needs after a kill -9 to
//            send every survivor's message exactly once.
// POSIX locks go when their process closes *any* descriptor of the file, so
// a process opens each record once (the engine's Connection holds it).
//
// Thread-safety: the owner alone writes the shared state; one NodeRecord
// object is used by the engine thread only.
#ifndef RDS_ENGINE_KERNEL_NODE_H_
#define RDS_ENGINE_KERNEL_NODE_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/addr.h"

namespace rds {

class NodeRecord {
 public:
  // Which relayer's message took a node sequence (0 pid: nobody's or the
  // owner's own). Written before the message goes to the node.
  struct Slot {
    std::atomic<uint64_t> node_seq;  // written last: the slot is valid for this sequence
    std::atomic<uint64_t> relay_seq;
    std::atomic<uint32_t> pid;
    uint32_t pad;
  };
  static constexpr uint32_t kSlots = 65536;
  static constexpr int kPaths = 8;  // RDS_MPATH_WORKERS
  struct PathState {
    std::atomic<uint64_t> next_tx_seq;
    std::atomic<uint64_t> next_rx_seq;
    std::atomic<uint64_t> acked_seq;   // every node sequence up to this is acknowledged by TCP
    Slot slots[kSlots];                // by node sequence modulo kSlots
  };
  struct State {
    std::atomic<uint32_t> magic;
    std::atomic<uint32_t> owner_pid;   // the last owner (a new one knows whose messages died)
    std::atomic<uint32_t> gen;         // our GEN_NUM toward the node in this incarnation
    std::atomic<uint32_t> node_gen;    // the node's GEN_NUM as last seen (0: not yet)
    std::atomic<uint32_t> npaths;      // paths in use with the node (0: not agreed yet)
    std::atomic<uint32_t> node_sport_idx;  // the node maps our connections by source port
    PathState paths[kPaths];           // sparse: a path's pages are touched once it is used
  };

  // The record of (laddr, faddr) in namespace folder `dir`: created if
  // `create`, else NotFound when nobody made it yet.
  static absl::StatusOr<std::unique_ptr<NodeRecord>> Open(const std::string& dir,
                                                         const RdsAddr& laddr,
                                                         const RdsAddr& faddr, bool create);
  // The (laddr, faddr) of every record in namespace folder `dir`.
  static std::vector<std::pair<RdsAddr, RdsAddr>> List(const std::string& dir);
  ~NodeRecord();
  NodeRecord(const NodeRecord&) = delete;
  NodeRecord& operator=(const NodeRecord&) = delete;

  // The engine that owns the connection, other than this process; 0 if none
  // (or this process).
  pid_t OtherOwner() const;
  // Takes ownership if nobody has it. On success, `continued` says whether
  // other engines use the record, or `users_here` (this process holds
  // sockets older than itself): the incarnation goes on (same generation and
  // sequence spaces) — if not, the caller starts a new one (NewIncarnation).
  bool TryClaim(bool* continued, bool users_here = false);
  bool owned() const { return owned_; }
  // The owner before our claim (from the record; 0 if none was recorded).
  uint32_t previous_owner() const { return previous_owner_; }
  // Uses the record from now on (a relayer of a live owner; TryClaim joins
  // too): a new owner after this one's death continues the incarnation.
  void Join();
  // Gives ownership up (the process keeps using the record as a relayer).
  void Release();
  // A new incarnation: generation `gen`, every path's sequence spaces from
  // the start, no slots, the number of paths not agreed.
  void NewIncarnation(uint32_t gen);

  State& state() { return *state_; }
  PathState& path(int index) { return state_->paths[index]; }
  // Records that relayer `pid`'s message `relay_seq` takes sequence `seq` of
  // node path `index`.
  void NoteSlot(int index, uint64_t seq, uint32_t pid, uint64_t relay_seq);
  // The slot of sequence `seq` of node path `index`, if still recorded.
  std::optional<std::pair<uint32_t, uint64_t>> SlotOf(int index, uint64_t seq) const;

  const std::string& path() const { return path_; }

 private:
  NodeRecord(std::string path, int fd, State* state)
      : path_(std::move(path)), fd_(fd), state_(state) {}
  const std::string path_;
  const int fd_;
  State* const state_;
  bool owned_ = false;
  bool member_ = false;
  uint32_t previous_owner_ = 0;
};

// A node's connection handed on by an image that ends while its engine owns
// it (Engine::HandOnNodeConnections), riding with a socket bound on its local
// address that the image parks for the next process (engine/share.h): the
// connection goes on unbroken, so nothing the node's TCP acknowledged is
// lost. Per TCP connection (node path): its socket and the bytes of a
// message read only in part.
struct HandedNodeConnection {
  struct Path {
    int32_t index = 0;
    int fd = -1;  // internal; travels as SCM_RIGHTS beside the encoding
    std::vector<uint8_t> partial;
  };
  RdsAddr laddr, faddr;
  std::vector<Path> paths;
};

}  // namespace rds

#endif  // RDS_ENGINE_KERNEL_NODE_H_
