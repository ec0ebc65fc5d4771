// engine/cong.cc — congestion maps, per owner, ORed for senders.
#include "engine/cong.h"
#include "engine/abandon.h"

#include <bit>

#include "engine/engine.h"
#include "engine/socket.h"
#include "engine/stats.h"
#include "engine/waiter.h"

namespace rds {
namespace {

CongestionTable* table = new CongestionTable();

bool TestBit(const CongBits& bits, uint16_t port) { return (bits[port >> 3] >> (port & 7)) & 1; }

}  // namespace

CongestionTable& CongestionTable::Get() { return *table; }

void CongestionTable::ResetAfterFork() {
  Abandon(table);
  table = new CongestionTable();
}

void CongestionTable::AddrMaps::Recompute(size_t byte, std::atomic<int64_t>& congested_ports) {
  uint8_t v = local[byte];
  for (auto& [pid, bits] : peers) v |= bits[byte];
  const uint8_t old = effective[byte].load(std::memory_order_relaxed);
  effective[byte].store(v, std::memory_order_release);
  if (v != old) congested_ports.fetch_add(std::popcount(v) - std::popcount(old), std::memory_order_release);
}

CongestionTable::AddrMaps* CongestionTable::Find(const Key& k) {
  auto it = maps_.find(k);
  return it == maps_.end() ? nullptr : it->second.get();
}

CongestionTable::AddrMaps& CongestionTable::FindOrCreate(const Key& k) {
  auto& slot = maps_[k];
  if (!slot) slot = std::make_unique<AddrMaps>();
  return *slot;
}

bool CongestionTable::IsCongested(NetNsKey ns, const RdsAddr& addr, uint16_t port) {
  // The usual case, without the lock: no port anywhere is congested.
  if (congested_ports_.load(std::memory_order_acquire) == 0) return false;
  rds::ReaderMutexLock lock(&mu_);
  AddrMaps* m = Find({ns, addr});
  if (m == nullptr) return false;
  return (m->effective[port >> 3].load(std::memory_order_acquire) >> (port & 7)) & 1;
}

bool CongestionTable::SetLocal(NetNsKey ns, const RdsAddr& addr, uint16_t port, bool congested) {
  {
    rds::MutexLock lock(&mu_);
    AddrMaps& m = FindOrCreate({ns, addr});
    if (TestBit(m.local, port) == congested) return false;
    uint8_t bit = static_cast<uint8_t>(1u << (port & 7));
    if (congested) {
      m.local[port >> 3] |= bit;
    } else {
      m.local[port >> 3] &= static_cast<uint8_t>(~bit);
    }
    m.Recompute(port >> 3, congested_ports_);
  }
  return true;
}

CongBits CongestionTable::LocalMap(NetNsKey ns, const RdsAddr& addr) {
  rds::ReaderMutexLock lock(&mu_);
  AddrMaps* m = Find({ns, addr});
  return m ? m->local : CongBits{};
}

CongBits CongestionTable::PeerMap(NetNsKey ns, const RdsAddr& addr, uint32_t peer) {
  rds::ReaderMutexLock lock(&mu_);
  AddrMaps* m = Find({ns, addr});
  if (m == nullptr) return CongBits{};
  auto it = m->peers.find(peer);
  return it == m->peers.end() ? CongBits{} : it->second;
}

void CongestionTable::SetPeerMap(NetNsKey ns, const RdsAddr& addr, uint32_t peer,
                                 const uint8_t* bits) {
  {
    rds::MutexLock lock(&mu_);
    AddrMaps& m = FindOrCreate({ns, addr});
    if (bits == nullptr) {
      if (m.peers.erase(peer) == 0) return;
    } else {
      std::memcpy(m.peers[peer].data(), bits, wire::kCongMapBytes);
    }
    for (size_t i = 0; i < wire::kCongMapBytes; ++i) m.Recompute(i, congested_ports_);
  }
  Updated();
}

void CongestionTable::Updated() {
  generation_.fetch_add(1, std::memory_order_acq_rel);
  std::vector<Waiter*> wake;
  {
    rds::MutexLock lock(&mu_);
    wake = waiters_;
  }
  for (Waiter* w : wake) w->Wake();
  // RDS_CONG_MONITOR: every monitoring socket's mask becomes its pending
  // notification (the kernel passes an all-ones port mask).
  for (const std::shared_ptr<RdsSocket>& rs : AllLiveSockets()) {
    rds::MutexLock lock(&rs->mu);
    if (rs->cong_monitor && rs->cong_mask != 0) {
      rs->cong_notify |= rs->cong_mask;
      rs->cong_mask = 0;
      rs->NotifyLocked(/*arrival=*/true);
    }
  }
}

void CongestionTable::AddWaiter(Waiter* w) {
  rds::MutexLock lock(&mu_);
  waiters_.push_back(w);
}

void CongestionTable::RemoveWaiter(Waiter* w) {
  rds::MutexLock lock(&mu_);
  auto it = std::find(waiters_.begin(), waiters_.end(), w);
  if (it != waiters_.end()) waiters_.erase(it);
}

std::optional<ReceiveCongestionChange> ReceiveCongestionChangeLocked(RdsSocket& rs) {
  // Sockets on the loopback transport never mark congestion (§B.2).
  if (!rs.bound || rs.transport == kTransLoop) return std::nullopt;
  size_t rcvbuf = static_cast<size_t>(rs.RdsRcvbuf());
  if (!rs.released && rs.rcv_bytes > rcvbuf) {
    if (rs.congested) return std::nullopt;
    rs.congested = true;
  } else if (rs.congested && (rs.released || rs.rcv_bytes < rcvbuf / 2)) {
    rs.congested = false;
  } else {
    return std::nullopt;
  }
  // The bit follows the socket's state in this same lock hold: decisions
  // are applied in the order they are taken, whatever order their
  // announcements run in (cong.h).
  if (!CongestionTable::Get().SetLocal(rs.ns->key(), rs.bound->addr, rs.bound->port,
                                       rs.congested)) {
    return std::nullopt;
  }
  return ReceiveCongestionChange{*rs.bound, rs.congested};
}

void PublishReceiveCongestion(RdsSocket& rs, const ReceiveCongestionChange& change) {
  // The bit was set or cleared with the decision (ReceiveCongestionChangeLocked):
  // announce it. The peers are sent the map as it is when the engine sends it,
  // so a later change's update never goes out before an earlier one's.
  stats::Inc(stats::kCongUpdateQueued);
  CongestionTable::Get().Updated();
  Engine::Get().SendCongestionUpdates(rs.ns, change.port.addr);
}

void UpdateReceiveCongestion(RdsSocket& rs) {
  std::optional<ReceiveCongestionChange> change;
  {
    rds::MutexLock lock(&rs.mu);
    change = ReceiveCongestionChangeLocked(rs);
  }
  if (change) PublishReceiveCongestion(rs, *change);
}

}  // namespace rds
