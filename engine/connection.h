// engine/connection.h — connections and paths (kernel connection.c).
//
// A Connection is the kernel's rds_connection: (network namespace, local
// address, foreign address). Its Paths are links to the engines that own
// ports at the foreign address, one per peer engine (DESIGN.md §3.2).
// Sequence numbers are per path, from 1 (kernel-rds.md §C.5). A Connection
// also caches which engine owns each destination port (its routes) and holds
// messages whose route is not known yet, in order.
//
// Thread-safety: engine thread only.
#ifndef RDS_ENGINE_CONNECTION_H_
#define RDS_ENGINE_CONNECTION_H_

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "engine/addr.h"
#include "engine/event_loop.h"
#include "engine/kernel_node.h"
#include "engine/message.h"
#include "engine/netns.h"
#include "transports/transport.h"

namespace rds {

class Connection;

struct ConnKey {
  NetNsKey ns;
  RdsAddr laddr;
  RdsAddr faddr;
  friend bool operator==(const ConnKey&, const ConnKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const ConnKey& k) {
    return H::combine(std::move(h), k.ns, k.laddr, k.faddr);
  }
};

// A kernel RDS node's paths (engine/kernel_peer.cc) are keyed by pseudo-pids
// no process has: path i (one TCP connection; a node has up to 8,
// RDS_MPATH_WORKERS) is NodePathKey(i). At a relayer, NodePathKey(0) is its
// link to the engine that owns the node's connections.
inline constexpr uint32_t kKernelNodePid = 0xfffffffeu;
inline constexpr int kNodePathsMax = 8;
constexpr uint32_t NodePathKey(int index) { return kKernelNodePid - static_cast<uint32_t>(index); }
constexpr int NodePathIndex(uint32_t key) {
  return key <= kKernelNodePid && key > kKernelNodePid - kNodePathsMax
             ? static_cast<int>(kKernelNodePid - key)
             : -1;
}

class Path {
 public:
  Path(Connection& conn, uint32_t peer_pid)
      : conn(conn), peer_pid(peer_pid), node_index(NodePathIndex(peer_pid)) {}

  bool up() const { return link != nullptr; }

  Connection& conn;
  const uint32_t peer_pid;
  const int node_index;  // a kernel node's path: its index; else -1
  uint32_t peer_gen = 0;
  std::shared_ptr<Link> link;        // established (hello exchanged)
  std::shared_ptr<Link> connecting;  // our outgoing attempt, until its reply
  // A kernel node's path that went down: the source port of its connection,
  // tried first by the next connects until one from it is answered or the
  // path is up again (LinkTarget::source_port); 0: none.
  uint16_t last_source_port = 0;
  absl::Time connecting_since = absl::InfinitePast();  // when `connecting` was opened
  // Sending: sequenced messages waiting for a link (retransmissions first),
  // and messages handed to a link but not yet acknowledged by the peer. A
  // message's send-buffer space is released when it is acknowledged.
  std::deque<MessagePtr> backlog;
  std::deque<MessagePtr> unacked;
  uint64_t next_tx_seq = 1;
  uint32_t tx_since_ack_required = 0;   // messages since we last set ACK_REQUIRED
  uint64_t tx_bytes_since_ack_required = 0;
  // Receiving: duplicates of what was already delivered are dropped; the
  // highest delivered sequence is the cumulative acknowledgement.
  uint64_t next_rx_seq = 0;
  uint64_t rx_delivered = 0;
  uint64_t rx_acked = 0;               // last acknowledgement sent
  uint32_t rx_unacked_packets = 0;
  uint64_t rx_unacked_bytes = 0;
  EventLoop::TimerId ack_timer = 0;
  bool ack_posted = false;
  uint64_t rx_messages = 0;            // on the current link (fault injection)
  // A kernel node's path in a new incarnation of ours, until the node answers
  // our handshake (with our new GEN_NUM) or sends a message it had never sent
  // (its retransmissions go first): a message it flags RETRANSMITTED was
  // first sent to our previous incarnation, whose sockets are gone.
  bool stale_until_pong = false;
  // A node path during a takeover's hold (Connection::Takeover): messages
  // wait in the backlog — sorted by sequence when the hold ends — and what
  // the node sends is received.
  bool tx_held = false;
  // At a kernel node connection's owner: a path to another engine of this
  // host that relays the node's traffic through us (keyed by its pid).
  bool relay_peer = false;
  // The socket the last message was delivered to, while the bind table's
  // epoch is unchanged (BindTableEpoch): a stream skips the table lookup and
  // the reference count per message (docs/perf/history.md §9.9). The reference may keep
  // a closed socket's object (its queues and fds are gone, Release) until the
  // path's next message, or until the path goes down.
  struct {
    uint16_t port = 0;
    uint64_t epoch = 0;
    std::shared_ptr<RdsSocket> socket;
  } last_destination;
  bool connect_delayed = false;        // fault injection: the delay was served
  bool reopen_waited = false;          // Engine::DelayNodeReopen was served
  absl::Duration backoff = absl::ZeroDuration();
  // A kernel node's path: when it last came up, and how many times in a row
  // it went down within a second of that (Engine::NoteKernelPathDown).
  absl::Time up_since = absl::InfinitePast();
  int quick_resets = 0;
  EventLoop::TimerId retry_timer = 0;
};

class Connection {
 public:
  Connection(ConnKey key, std::shared_ptr<NetNs> ns, bool local)
      : key(key), ns(std::move(ns)), local(local) {}

  struct Route {
    uint32_t pid = 0;      // owning engine; 0: nobody
    uint64_t bindgen = 0;  // local routes: the bind generation it was read at
  };

  const ConnKey key;
  const std::shared_ptr<NetNs> ns;
  const bool local;  // faddr is an address of this host (namespace)
  // faddr is a kernel RDS node (engine/kernel_peer.cc): its paths
  // (NodePathKey) carry every port, each port's messages on one path, and the
  // node acknowledges by TCP only.
  bool kernel_peer = false;
  // Its links go over RDMA verbs (transports/verbs; the local address is on
  // an RDMA device): the peer, kernel rds_rdma or a shim engine, is spoken to
  // as a kernel node from the start — one path, no handshake, no address
  // rule, acknowledged by the h_ack of the medium (DESIGN.md §2.7).
  bool rdma = false;
  // How many paths the node and we use (0: not agreed yet — the handshake
  // says), the NPATHS of our last handshake message and of the ones not
  // answered yet, and whether the node numbers its own connections' paths in
  // their TCP source ports (it sent SPORT_IDX: Linux 7.0+).
  int node_npaths = 0;
  int npaths_advertised = 0;
  std::deque<int> pings_unanswered;
  bool node_sport_idx = false;
  EventLoop::TimerId handshake_timer = 0;
  // Connections the node opened before the number of paths was agreed that
  // sent nothing yet (a further path has no first message of its own): they
  // become paths when it is (Engine::SetNodePaths).
  std::vector<std::weak_ptr<Link>> unclaimed;
  // The node connection is host-wide (engine/kernel_node.h): with the record
  // owned, the node's path is our TCP connection to it; otherwise it is a
  // same-host link to `node_owner`, the engine that owns it (a relay).
  std::unique_ptr<NodeRecord> node_record;
  uint32_t node_owner = 0;
  // The node connection went on with a socket this process parked
  // (Engine::HandOnNodeConnections): neither connected nor claimed here
  // until another engine has it (then relayed through it) or a while passed.
  bool handed_on = false;
  // After taking the node connection over from an owner that died
  // (engine/kernel_relay.cc): which relayed message took which node
  // sequence, and the sequences nobody can tell whether the node got — each
  // goes again under its own sequence, flagged RETRANSMITTED, and the node
  // path stays closed until all have come (in sequence order) or a deadline.
  struct Takeover {
    // A message's place with the node: (path index, sequence on that path).
    using NodeSeq = std::pair<int, uint64_t>;
    std::array<uint64_t, kNodePathsMax> acked{};  // per path: sequences up to this are delivered
    absl::flat_hash_map<std::pair<uint32_t, uint64_t>, NodeSeq> slots;  // (pid, relay seq)
    absl::flat_hash_set<NodeSeq> waiting;
    bool holding = false;
    EventLoop::TimerId timer = 0;
  };
  std::unique_ptr<Takeover> takeover;
  bool relaying() const { return node_owner != 0; }
  // A poke (Engine::OnPoke) asks the host what it is, until it answers or
  // this many more attempts have failed: a node pokes only once.
  int probes_left = 0;
  uint64_t loop_delivered = 0;  // messages delivered within this process (loopback)
  absl::flat_hash_map<uint32_t, std::unique_ptr<Path>> paths;
  absl::flat_hash_map<uint16_t, Route> routes;
  absl::flat_hash_map<uint16_t, std::deque<MessagePtr>> unresolved;
  // Per port: how many messages a kMoved notice put back at the front of
  // `unresolved` (they precede everything queued there since), until it empties.
  absl::flat_hash_map<uint16_t, size_t> moved_front;
  // Per port whose owner changed: the engine its messages went to before.
  // Until that path holds none of them (acknowledged, or handed back by
  // kMoved), the port's next messages wait in `unresolved`: one sent to the
  // new owner first would overtake those the old one hands back.
  absl::flat_hash_map<uint16_t, uint32_t> settling;
  absl::flat_hash_set<uint16_t> querying;       // route queries in flight
  std::shared_ptr<Link> query_link;             // a route query to the host in flight
  uint16_t query_link_port = 0;
  absl::Duration query_backoff = absl::ZeroDuration();
  // A kernel node's messages for a port whose socket is between processes
  // (parked, engine/share.h), in arrival order, until a process adopts it —
  // then delivered or relayed there: the node counted them delivered.
  absl::flat_hash_map<uint16_t, std::deque<MessagePtr>> node_held;
  size_t node_held_bytes = 0;
  EventLoop::TimerId node_held_timer = 0;
  // The last route query could not reach the host (no connection; not one
  // its listener took and closed, as a kernel node does with a poke).
  bool query_unreachable = false;
  EventLoop::TimerId query_timer = 0;

  // A kernel node's path `index` (NodePathKey), if it was made.
  Path* NodePath(int index) const {
    auto it = paths.find(NodePathKey(index));
    return it == paths.end() ? nullptr : it->second.get();
  }

  Path* AnyUpPath() {
    for (auto& [pid, p] : paths) {
      if (p->up()) return p.get();
    }
    return nullptr;
  }
};

}  // namespace rds

#endif  // RDS_ENGINE_CONNECTION_H_
