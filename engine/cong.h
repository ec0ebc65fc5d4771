// engine/cong.h — congestion maps (kernel cong.c; kernel-rds.md §B).
//
// The kernel keeps one 8 KiB bitmap (one bit per port, little-endian bit
// order) per IP address. In user space every engine knows only its own ports,
// so the map of an address is kept per owner: this process's own bits for
// its bound ports, and one map per peer engine as last received on the wire.
// Only a port's owner ever sets its bit, so the effective state of a port is
// the OR of those maps. Senders read the effective map lock-free; every
// change bumps a generation (the kernel's rds_cong_generation, here per
// process), wakes senders blocked on congestion and pollers that saw it, and
// feeds RDS_CONG_MONITOR notifications.
//
// Thread-safety: safe for concurrent use. Lock order: a socket's mutex may be
// held when calling in; the table never calls out while holding its own.
#ifndef RDS_ENGINE_CONG_H_
#define RDS_ENGINE_CONG_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/sync.h"
#include "engine/addr.h"
#include "engine/registry.h"
#include "engine/wire.h"

namespace rds {

class Waiter;

using CongBits = std::array<uint8_t, wire::kCongMapBytes>;

class CongestionTable {
 public:
  static CongestionTable& Get();
  // Fork child: forget everything (the parent's state is not ours).
  static void ResetAfterFork();

  // Is (addr, port) congested in namespace `ns`? The sender's test.
  bool IsCongested(NetNsKey ns, const RdsAddr& addr, uint16_t port);

  // This process's own port changed state: sets or clears its bit in our
  // map. Returns true if the bit changed; the caller then announces it
  // (Updated(), map updates to the peers). Nothing is woken or sent here, so
  // it may be called with the port's socket mutex held — as receive
  // accounting does, so that the bit changes in the order the socket's state
  // does (ReceiveCongestionChangeLocked).
  bool SetLocal(NetNsKey ns, const RdsAddr& addr, uint16_t port, bool congested);
  // This process's own map of `addr`, as sent on the wire.
  CongBits LocalMap(NetNsKey ns, const RdsAddr& addr);
  // A peer engine's map of `addr` as last received (all clear if none).
  CongBits PeerMap(NetNsKey ns, const RdsAddr& addr, uint32_t peer);
  // A peer engine's map of `addr` arrived (null: the peer is gone).
  void SetPeerMap(NetNsKey ns, const RdsAddr& addr, uint32_t peer, const uint8_t* bits);

  // A map changed: generation, monitor notifications, wake-ups (§B.3).
  void Updated();
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

  // Threads sleeping until a map update (blocked congested senders; pollers
  // of sockets that saw congestion).
  void AddWaiter(Waiter* w);
  void RemoveWaiter(Waiter* w);

 private:
  struct AddrMaps {
    std::array<std::atomic<uint8_t>, wire::kCongMapBytes> effective{};
    CongBits local{};
    absl::flat_hash_map<uint32_t, CongBits> peers;
    // Sets effective[byte] from the owners' maps, keeping `congested_ports`
    // (the table's count of set effective bits) right.
    void Recompute(size_t byte, std::atomic<int64_t>& congested_ports);
  };
  struct Key {
    NetNsKey ns;
    RdsAddr addr;
    friend bool operator==(const Key&, const Key&) = default;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.ns, k.addr);
    }
  };
  AddrMaps* Find(const Key& k) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  AddrMaps& FindOrCreate(const Key& k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  rds::Mutex mu_;
  absl::flat_hash_map<Key, std::unique_ptr<AddrMaps>> maps_ ABSL_GUARDED_BY(mu_);
  std::vector<Waiter*> waiters_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> generation_{0};
  // Effective bits set in all maps: 0 lets IsCongested answer without the lock.
  std::atomic<int64_t> congested_ports_{0};
};

// Receive-side accounting changed for a socket (kernel rds_recv_rcvbuf_delta):
// marks or clears its port's bit and tells the peers. Call without rs.mu.
class RdsSocket;
void UpdateReceiveCongestion(RdsSocket& rs);

// The same in two steps, for callers that already hold rs.mu to change the
// accounting: the decision with the lock held — it records the socket's new
// state *and* sets or clears the port's bit in this process's map, inside
// the same lock hold (nullopt when the bit does not change) — then, after
// unlocking, the announcement of a change: the generation, wake-ups,
// RDS_CONG_MONITOR notifications and map updates to the peers, which send
// whatever the map holds by then.
//
// (The bit is not left to the second step: two threads can decide in one
// order and publish in the other. A delivery that made the socket congested
// and a recvmsg that emptied its queue just after once published "clear"
// first — a no-op — and then "congested", leaving the bit set under a socket
// that believed itself uncongested and would never clear it again: the
// blocked sender waited forever, integration/soak test 6.)
struct ReceiveCongestionChange {
  RdsEndpoint port;
  bool congested;
};
std::optional<ReceiveCongestionChange> ReceiveCongestionChangeLocked(RdsSocket& rs);
void PublishReceiveCongestion(RdsSocket& rs, const ReceiveCongestionChange& change);

}  // namespace rds

#endif  // RDS_ENGINE_CONG_H_
