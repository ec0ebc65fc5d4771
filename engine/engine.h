// engine/engine.h — the per-process RDS engine (one thread).
//
// Started by the first AF_RDS call. Owns every transport fd, timer,
// connection, path and route of the process (DESIGN.md §2). Application
// threads hand it messages with Submit(); it routes them (same process:
// delivered in place; another process on this host: a Unix link; another
// host: TCP), transmits them, accepts links from other engines, and delivers
// what arrives into the sockets' receive queues.
//
// Thread-safety: Get(), Serve(), Submit(), CancelSentTo() and ReleaseSender() are safe from
// any thread; everything else runs with the event loop's run lock held: on
// the engine thread, or on an application thread inside Submit's inline fast
// path (EventLoop::TryRunInline).
#ifndef RDS_ENGINE_ENGINE_H_
#define RDS_ENGINE_ENGINE_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "engine/sync.h"
#include "engine/addr.h"
#include "engine/connection.h"
#include "engine/cong.h"
#include "engine/control.h"
#include "engine/event_loop.h"
#include "engine/message.h"
#include "engine/netns.h"
#include "transports/registry.h"

namespace rds {

class DirectReceive;
class RdsSocket;
class Waiter;

// What RDS_INFO and rdsctl show of the engine's connections (a copy taken on
// the engine thread).
struct MessageInfo {
  uint64_t seq = 0;
  uint32_t len = 0;
  RdsAddr laddr, faddr;
  uint16_t lport = 0, fport = 0;
  uint8_t flags = 0;
};
struct PathInfo {
  NetNsKey ns;
  RdsAddr laddr, faddr;
  uint32_t peer_pid = 0;
  bool same_host = false;
  bool in_process = false;  // this process's own loopback deliveries (peer_pid is ours)
  bool kernel_node = false;  // the peer is a kernel RDS node (peer_pid 0)
  uint32_t node_owner = 0;   // kernel_node: relayed through this engine of the host (0: ours)
  int node_path = 0;         // kernel_node: the path's index (one TCP connection each)
  bool relay_peer = false;   // an engine of this host relaying a kernel node's traffic through us
  bool up = false;
  bool connecting = false;
  uint64_t next_tx_seq = 0;
  uint64_t next_rx_seq = 0;
  std::vector<MessageInfo> send;     // not yet written (backlog)
  std::vector<MessageInfo> retrans;  // written, not yet acknowledged
  // The TCP connection under an up remote path.
  std::optional<RdsEndpoint> tcp_local, tcp_peer;
  bool rdma = false;  // a path over RDMA verbs (Connection::rdma), not relayed
  std::optional<Link::RdmaInfo> rdma_info;  // its queue pair, while it has a link
};

class Engine {
 public:
  // The process's engine, started on first call.
  static Engine& Get();
  // This process's engine if it has started one (none yet, or none since a
  // fork), else null: for callers that must not start it.
  static Engine* IfRunning();
  // In a fork child: forget the parent's engine (it has no thread here).
  static void ResetAfterFork();
  // Fork's prepare handler: holds the engine thread between two rounds
  // (EventLoop::HoldRoundsForFork); ReleaseAfterFork, in parent and child,
  // if that returned true.
  bool HoldForFork(absl::Duration limit);
  void ReleaseAfterFork();
  // Its fds were lost (engine/fork.h): the engine is abandoned (its loop
  // stops touching fds; the object is leaked) and forgotten.
  static void AbandonAfterLostFds();

  // Makes this engine reachable for sockets in `ns`: its Unix listener and
  // the namespace's TCP rendezvous listener. Synchronous.
  absl::Status Serve(const std::shared_ptr<NetNs>& ns);
  // The kernel's transport choice at bind (DESIGN.md §2.7): whether RDS over
  // RDMA exists on this host (SO_RDS_TRANSPORT RDS_TRANS_IB), and whether a
  // socket bound to `laddr` in `ns` uses it. Any thread.
  bool RdmaAvailable() const { return transports_.rdma && transports_.rdma->Available(); }
  bool UsesRdma(const std::shared_ptr<NetNs>& ns, const RdsAddr& laddr) const {
    return transports_.UsesRdma(ns, laddr);
  }
  // Memory of this process registered for peers' RDMA from `laddr`
  // (engine/rdma.h; Transport::RegisterMemory). Any thread.
  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(const std::shared_ptr<NetNs>& ns,
                                                               const RdsAddr& laddr, void* addr,
                                                               size_t len,
                                                               bool remote_access) const {
    if (!transports_.rdma) return absl::UnimplementedError("no RDMA transport");
    return transports_.rdma->RegisterMemory(ns, laddr, addr, len, remote_access);
  }

  // Routes and transmits a message admitted by sendmsg: `m->sender` is set
  // and its socket (whose namespace is routed in) outlives the call.
  void Submit(MessagePtr m);

  // Waits for `waiter` as Waiter::Sleep does (same results), running the
  // event loop on this thread meanwhile when it can (EventLoop::Drive): the
  // blocking wait of recvmsg. Call with no locks held. With `direct`, while
  // this thread drives, its buffer is offered to `rs` for the next large
  // message (engine/direct_receive.h).
  absl::Status WaitDriving(Waiter& waiter, std::optional<absl::Time> deadline,
                           RdsSocket* rs = nullptr, DirectReceive* direct = nullptr);
  // The blocking wait of the interposed poll, select and epoll waits:
  // ppoll(2) over `fds`, running the event loop meanwhile when it can;
  // nullopt when it cannot (EventLoop::PollDriving).
  std::optional<int> PollDriving(struct pollfd* fds, nfds_t n, const struct timespec* timeout,
                                 const sigset_t* mask, Waiter& waiter, stats::Counter counter) {
    return loop_.PollDriving(fds, n, timeout, mask, waiter, counter);
  }

  // UEK RDS_CONN_RESET: drop the links of the connections from `src` to
  // `dst`; queued messages go again after the reconnect.
  void ResetConnections(NetNsKey ns, RdsAddr src, RdsAddr dst);
  // The same in every engine of the host (RDS_CONN_RESET from a socket).
  void ResetConnectionsHostWide(NetNsKey ns, RdsAddr src, RdsAddr dst);

  // This process's congestion map of `addr` changed: send it to every peer
  // with a path from that address (kernel rds_cong_queue_updates).
  void SendCongestionUpdates(std::shared_ptr<NetNs> ns, RdsAddr addr);

  // Drops `rs`'s queued messages to `dest` (every destination if nullopt),
  // freeing their send space: RDS_CANCEL_SENT_TO and close. Waits until done.
  void CancelSentTo(std::shared_ptr<RdsSocket> rs, std::optional<RdsEndpoint> dest);
  // close() of `rs` (its last fd): drops its queued messages whose
  // destination cannot be reached now (a path whose reconnection failed, a
  // host whose route queries fail); the others are on their way, as kernel
  // RDS has transmitted them by the time sendmsg returns, and messages left
  // behind are dropped if their destination becomes unreachable later
  // (DESIGN.md §3.3). Waits until done.
  void ReleaseSender(std::shared_ptr<RdsSocket> rs);

  // At process exit: waits (at most `limit`) until every queued message has
  // been written to its transport, as kernel RDS has written it to TCP or
  // delivered it over loopback by the time sendmsg returns; then, up to
  // `shared_limit` from the start, for the messages of sockets other
  // processes may hold (RdsSocket::maybe_shared): their socket lives on, as
  // a kernel socket's queue does, and what this image takes with it is lost.
  static void DrainAtExit(absl::Duration limit, absl::Duration shared_limit);
  // A socket this process lets go of while another holds it (share::Park at
  // a last close): waits (at most `limit`) until its messages queued here
  // are acknowledged. Meanwhile the other holder's calls are served here, so
  // they queue behind them; once the socket is parked they would not.
  static void DrainSocket(const RdsSocket& rs, absl::Duration limit);
  // This process parks a socket bound on `laddr` of `ns` for another
  // process (share::Park) as its image ends, or the last of its sockets on
  // that address: every kernel node connection on that address this engine
  // owns stops being read and goes with the socket, unbroken (at most
  // `max_paths` TCP connections in all), after everything sent on it is
  // written; the engine gives the connection's record up, and relays
  // through whichever engine takes it (WatchHandedOn). What it had read is
  // delivered already (the socket's queue goes with it too). Waits for the
  // engine thread. Empty if there is none, or it could not be detached
  // (then it stays here: logged).
  std::vector<HandedNodeConnection> HandOnNodeConnections(const std::shared_ptr<NetNs>& ns,
                                                          const RdsAddr& laddr, size_t max_paths);
  // The next holder took the socket over with `conns`: this engine claims
  // each node's record (continuing its incarnation) and reads on where the
  // ended image stopped. Takes the fds. Waits for the engine thread.
  void TakeHandedNodeConnections(const std::shared_ptr<NetNs>& ns,
                                 std::vector<HandedNodeConnection> conns);

  // At process exit, after the drain: removes this engine's Unix socket
  // file from the run directory (other engines then find it gone).
  static void WithdrawAtExit();

  // The paths of namespace `ns`. From any thread (waits for the engine
  // thread), or directly on the engine thread.
  std::vector<PathInfo> Snapshot(NetNsKey ns) { return Snapshot(std::optional<NetNsKey>(ns)); }
  // Every namespace's paths.
  std::vector<PathInfo> Snapshot(std::optional<NetNsKey> ns);
  bool OnEngineThread() const;

  uint32_t pid() const { return pid_; }
  uint32_t gen() const { return gen_; }

 private:
  Engine();
  void Start();

  // Engine thread.
  Connection& GetConnection(const std::shared_ptr<NetNs>& ns, const RdsAddr& laddr,
                            const RdsAddr& faddr);
  Path& GetPath(Connection& c, uint32_t pid, bool connect);
  // Routes `m` and queues, transmits, delivers or drops it (taking it).
  // Without `may_set_up` (the inline send path) it declines — returns false,
  // `m` untouched, nothing changed but caches — whenever a connection, route
  // query or link would have to be set up first.
  // `via` (optional) gets the path the message was handed to, if any.
  bool RouteAndQueue(const std::shared_ptr<NetNs>& ns, MessagePtr& m, bool may_set_up,
                     Path** via = nullptr);
  uint32_t LocalOwner(Connection& c, uint16_t port);
  // The owner of a port whose socket is parked (engine/share.h), in route
  // answers: its messages wait and are routed again every kParkedRetry.
  static constexpr uint32_t kParkedPid = 0xffffffffu;
  static constexpr absl::Duration kParkedRetry = absl::Milliseconds(5);
  // Attempts to reach a host that poked us or a node we knew (OnPoke,
  // ReachKnownNodes): a node resets a connection that comes while its own is
  // still closing, and pokes only once.
  static constexpr int kNodeProbes = 10;
  void RetryParkedLater(Connection& c);
  void DeliverLocally(Connection& c, MessagePtr m);
  void PathSend(Path& p, MessagePtr m);
  void Transmit(Path& p, MessagePtr m);
  bool TransmitsRdmaOp(Path& p, Message& m);
  void SendControl(Path& p, MessagePtr m);
  void OnAck(Path& p, uint64_t ack);
  void ScheduleAck(Path& p, bool urgent);
  void SendAck(Path& p);
  void ReturnUnackedToBacklog(Path& p);
  void ConnectPath(Path& p);
  // An outgoing link of `p` (its `connecting`) failed before it was up:
  // dropped if nobody serves the host (NotFound), else tried again later.
  void OnConnectFailed(Path& p, const std::shared_ptr<Link>& link, const absl::Status& why);
  void OnLinkReply(Path& p, const std::shared_ptr<Link>& link, const control::Hello& h);
  void AttachLink(Path& p, std::shared_ptr<Link> link, uint32_t peer_gen, uint64_t peer_ack);
  void OnPathMessage(Path& p, wire::Header&& h, Payload&& payload);
  bool AcceptData(Path& p, const wire::Header& h, Payload& payload);
  void NotForThisProcess(Path& p, const wire::Header& h, Payload&& payload,
                         const absl::StatusOr<pid_t>& owner);
  // The socket a data message for port `dport` goes to, or null (cached per
  // path): valid until the next call for `p` or `p` goes down.
  RdsSocket* Destination(Path& p, uint16_t dport);
  // The peer says message `seq` on `p` found its port's socket moved to
  // another process: it is routed again, ahead of what waits for that port.
  void Resend(Path& p, uint64_t seq);
  // Notes that `port`'s messages went to engine `before` until now and may go
  // elsewhere from now on (Connection::settling).
  void NoteOwnerChange(Connection& c, uint16_t port, uint32_t before, uint32_t now);
  // True while messages for `port` sent to its previous owner may still come
  // back (Connection::settling); forgets the previous owner once none can.
  bool PortSettling(Connection& c, uint16_t port);
  // A link read the header of a large payload: the buffer of a recvmsg
  // waiting for it, if any (engine/direct_receive.h).
  std::optional<Payload> DirectStorage(Path& p, const wire::Header& h, PayloadFiller& filler);
  void OnPathControl(Path& p, const control::Control& ctl);
  void OnPathDown(Path& p, const absl::Status& why);
  void SchedulePathRetry(Path& p);
  void DropPath(Path& p, const char* why);
  void Resolve(Connection& c, uint16_t port);
  void StartQueryLink(Connection& c, uint16_t port);
  void OnRouteAnswer(Connection& c, uint16_t port, uint32_t pid);
  void ResolvePending(Connection& c);
  void NoEngineAt(Connection& c);
  uint32_t AnswerRouteQuery(const std::shared_ptr<NetNs>& ns, const RdsAddr& addr, uint16_t port);
  void DropMessage(const MessagePtr& m, int counter);
  void DropClosedSenders(std::deque<MessagePtr>& q, const RdsSocket* only);
  // Routes the messages Submit queued for the engine thread, in order.
  void RouteSubmitted();

  // Kernel RDS nodes (engine/kernel_peer.cc). A first message that is no
  // shim's (LooksLikeKernelNode) makes `link` the node's path of `c`.
  static bool LooksLikeKernelNode(const wire::Header& h);
  static bool IsKernelPath(const Path& p);
  // Makes `link` the node's path `index`; null if it was refused (closed).
  // The caller passes the link's first message on, if it read one.
  Path* AdoptKernelLink(Connection& c, std::shared_ptr<Link> link, int index);
  // The same with the link's first message, which then goes to the path. For
  // a link's own message callback: the callback is replaced (destroyed) on
  // the way, so the caller touches nothing of it afterwards.
  void AdoptKernelLink(Connection& c, std::shared_ptr<Link> link, int index, wire::Header&& first,
                       Payload&& payload);
  // An RDMA link a peer opened (Link::IsRdma): the node path of its
  // connection at once (both sides speak first over RDMA).
  void AdoptRdmaLink(const std::shared_ptr<Link>& link, const std::shared_ptr<NetNs>& ns);
  // A handshake ping (or, `pong`, its answer): our NPATHS (NpathsToAdvertise),
  // generation and SPORT_IDX. Its answer agrees the number of paths.
  void SendHandshake(Path& p, bool pong);
  void OnKernelHandshake(Path& p, const wire::Header& h);
  // Multipath with a node (kernel-rds.md §C.8, §C.9): the path that carries
  // messages from port `sport` (its key; 0: it waits for the handshake).
  static uint32_t NodePathFor(const Connection& c, uint16_t sport);
  // Every port's path is known: the paths are agreed, or one is forced, or
  // the owner engine chooses (a relayer).
  static bool NodePathsKnown(const Connection& c);
  static int NpathsToAdvertise(const Connection& c);
  // The number of paths is agreed (or changed): waiting messages go, and the
  // smaller address connects the others.
  void SetNodePaths(Connection& c, int n);
  // The path a connection the node opened is (-1: none free; it is closed,
  // as the kernel resets it). `map_first`: it opened with the node's
  // congestion map.
  int NodePathForAccepted(Connection& c, uint16_t peer_port, bool map_first);
  // The connection (laddr, faddr) of `ns` leads to a kernel node, as this
  // engine found or a record of the host says.
  bool IsKnownNode(const std::shared_ptr<NetNs>& ns, const RdsAddr& laddr, const RdsAddr& faddr);
  // This process holds a socket bound on the connection's address that
  // processes before it held (its port kept by an open-file lock): a new
  // owner continues the node's incarnation for it.
  static bool HoldsOlderSocketOn(const Connection& c);
  // Whether this engine may open node path `p` now (ConnectPath): path 0
  // always; the others from the smaller address, after path 0, one at a time.
  static bool MayConnectNodePath(const Path& p);
  void ConnectNodePaths(Connection& c);
  // With a node that numbers paths in order of arrival, reopening them all
  // waits a moment first (true: ConnectPath is called again then).
  bool DelayNodeReopen(Path& p);
  static constexpr absl::Duration kOrderedReopenDelay = absl::Milliseconds(300);
  static constexpr absl::Duration kHandshakeWait = absl::Seconds(2);
  // A node's path went down: one reset right after another says that the
  // node keeps its one connection for this address pair with someone else.
  void NoteKernelPathDown(Path& p);
  // Kernel node connections are host-wide (engine/kernel_relay.cc): one
  // engine of the host owns each, the others relay through it.
  NodeRecord* NodeRecordOf(Connection& c, bool create);
  // Another engine owns the node connection of `c`: relay through it (true).
  bool FindNodeOwner(Connection& c);
  // `c`'s host turned out a kernel node: true if this engine owns its
  // connection now, false if it relays through the engine that does.
  bool ClaimKernelNode(Connection& c);
  // `from_record`: the paths' sequence state comes from the record (a
  // relayer taking over, or a connection handed on by an ended image).
  void BecomeNodeOwner(Connection& c, bool continued, bool from_record = false);
  // After handing a node's connection on (Connection::handed_on): until
  // `until`, looks every kHandedOnPoll for the engine that took it, and
  // relays through it from then on; at `until`, gives up waiting (the next
  // message for the node connects).
  void WatchHandedOn(Connection& c, absl::Time until);
  static constexpr absl::Duration kHandedOnPoll = absl::Milliseconds(10);
  static constexpr absl::Duration kHandedOnWatch = absl::Seconds(30);
  // One handed-on node connection taken (engine/kernel_handon.cc).
  void TakeHandedNodeConnection(const std::shared_ptr<NetNs>& ns, HandedNodeConnection& hc);
  void RelayThrough(Connection& c, uint32_t owner);
  // Taking over from an owner that died: what it had not confirmed, and the
  // node path held closed until every survivor sent it again (Connection::Takeover).
  static constexpr absl::Duration kTakeoverHold = absl::Seconds(2);
  static constexpr absl::Duration kTakeoverMemory = absl::Seconds(60);
  void StartTakeover(Connection& c, uint32_t previous_owner);
  enum class TakeoverResult { kNew, kDelivered, kResend };
  // What becomes of relayer `pid`'s message `relay_seq` sent through the old owner.
  TakeoverResult TakeoverFate(Connection& c, uint32_t pid, uint64_t relay_seq,
                              Connection::Takeover::NodeSeq* at);
  void MaybeEndTakeoverHold(Connection& c);
  bool NodePathHeld(const Connection& c) const;
  // The node path's links go (its unacknowledged messages back to the backlog).
  void CloseNodePathLinks(Path& p);
  // The owner's node path changed sequence state: the record follows it.
  void SyncNodeRecord(Path& p);
  // Our GEN_NUM toward the node of `c` (the host's incarnation's).
  uint32_t NodeGeneration(const Connection& c) const;
  // A relayer's link to the owner failed: a new owner, or ourselves.
  void OnRelayOwnerGone(Path& p);
  // The node's path 0 (at a relayer: the link to the owner), if any.
  Path* NodePathOf(Connection& c);
  // A message for the node of `c` (the owner's or a lone engine's, or
  // relayed): on its port's path, or waiting until the paths are agreed.
  void SendToNode(Connection& c, MessagePtr m);
  // Our congestion map to the node, once (on its first path that is up).
  void SendNodeCongestionMap(Connection& c);
  void RelayToNode(Path& from, const wire::Header& h, Payload&& payload);
  void RelayFromNode(Connection& c, uint32_t pid, const wire::Header& h, Payload&& payload);
  // A node's message for a port whose socket is parked (between processes):
  // kept, in order, until the socket has a process again (ReleaseHeldNodeMessages,
  // every kParkedRetry), then delivered or relayed there; dropped if the
  // socket is gone by then, or beyond kNodeHeldMax bytes (logged).
  void HoldNodeMessage(Connection& c, const wire::Header& h, Payload&& payload);
  // A node's message, at the owner, to its port's socket wherever it is now:
  // here, another engine of the host (relayed), parked (held), or nowhere.
  void DeliverFromNode(Connection& c, MessagePtr m);
  void ReleaseHeldNodeMessages(Connection& c);
  static constexpr size_t kNodeHeldMax = size_t{16} << 20;
  // At the owner: relayer `rp` says the node's message `seq` found its
  // port's socket moved to another process: delivered where it is now.
  void ReturnRelayedFromNode(Path& rp, uint64_t seq);
  // A relayed message is done (the node's TCP has it, or it was dropped).
  void OnRelayedDone(Connection& c, const Message& m);
  void DropNodeMessage(Path& node, const MessagePtr& m);
  void AcceptRelayLink(const std::shared_ptr<Link>& link, const std::shared_ptr<NetNs>& ns,
                       const control::Hello& h);
  // The congestion map `p`'s peer gets (a node: the host's; a relayer: the node's).
  CongBits CongestionMapFor(Path& p);
  void OnRelayCongestionMap(Path& p, const uint8_t* bits);
  // The first time this engine serves `ns`: kernel nodes this host talked
  // to before (their records) and that no engine of the host talks to now
  // are asked again, as a kernel host's always-open listener would be found
  // (a node with the larger address that poked while no shim process ran
  // does not try again by itself).
  void ReachKnownNodes(const std::shared_ptr<NetNs>& ns);
  // ConnectPath for a kernel node: who connects by address order (§C.7).
  void ConnectKernelPath(Path& p, const std::shared_ptr<Link>& link);
  // An incoming TCP connection from `peer` that closed before its first
  // message: a larger-address kernel node's poke; connect back.
  void OnPoke(const std::shared_ptr<NetNs>& ns, const Link::Endpoints& e);

  // A link a peer opened (TransportContext::on_accept): its hello says what
  // it is for. `tcp_ns`: the namespace a link from another host was
  // accepted in; null for same-host links.
  void WatchIncoming(std::shared_ptr<Link> link, std::shared_ptr<NetNs> tcp_ns,
                     bool may_hand_over = true);
  // A connection from a kernel node whose connections another engine of this
  // host owns goes to that engine unread (true: passed on).
  bool HandNodeConnectionToOwner(const std::shared_ptr<Link>& link,
                                 const std::shared_ptr<NetNs>& tcp_ns);
  // A connection from a kernel node whose several paths we use is one of
  // them as soon as it is accepted (true: taken or refused).
  bool AdoptNodePathAtAccept(const std::shared_ptr<Link>& link,
                             const std::shared_ptr<NetNs>& tcp_ns);
  void OnIncomingHello(const std::shared_ptr<Link>& link,
                       const std::shared_ptr<NetNs>& tcp_ns, wire::Header&& h, Payload&& payload);
  void AcceptLink(const std::shared_ptr<Link>& link, const std::shared_ptr<NetNs>& ns,
                  const control::Hello& h);
  void Reply(const std::shared_ptr<Link>& link, control::HelloResult result,
             uint32_t answer_pid, bool close_after, uint64_t ack = 0);
  std::shared_ptr<NetNs> ServedNetNs(const NetNsKey& key);
  void Bury(std::unique_ptr<Path> p);
  // Removes the socket files of engines that died without removing their own
  // (killed): nothing listens there and no process has that pid; and the
  // folders of namespaces nobody uses (HostRegistry::PruneUnusedNamespaceDirs).
  void PruneStaleEngineSockets();
  // Runs `task` on the engine thread and waits for it; if the engine does not
  // answer because its fds were lost behind its back (sys::InternalFdsLost),
  // recovers (HandleLostFds) and returns false without waiting further.
  bool RunOnLoopAndWait(std::function<void()> task);
  void SendCongestionMap(Path& p);
  // Queued messages a process exit waits for (DESIGN.md §4.1); only those of
  // sockets other processes may hold if `shared_only`; or those `counts`
  // says.
  size_t PendingMessages(bool shared_only);
  size_t PendingMessagesWhere(absl::FunctionRef<bool(const Message&)> counts);

  const uint32_t pid_;
  const uint32_t gen_;
  EventLoop loop_;
  std::thread thread_;
  std::atomic<pid_t> loop_tid_{0};
  // Stream detection (Submit): a send that comes sooner than
  // inline_send_stream_us after the last one that read the clock returned, or
  // after the engine thread last emptied the submitted list, is part of a
  // stream, batched by the engine thread instead of written alone; so is one
  // that finds a batch still waiting (submit_pending_), without a clock read.
  std::atomic<int64_t> last_submit_end_ns_{0};
  std::atomic<int64_t> last_drain_ns_{0};
  std::atomic<bool> submit_pending_{false};  // a hint: !submitted_.empty()
  // Messages Submit handed to the engine thread (not sent inline), routed by
  // RouteSubmitted; a task for that is pending exactly while it is non-empty.
  // Messages queued by Submit, each still counted by its sender (whose
  // namespace it is routed in), which keeps the sender alive meanwhile.
  rds::Mutex submit_mu_;
  std::vector<MessagePtr> submitted_ ABSL_GUARDED_BY(submit_mu_);
  std::vector<MessagePtr> submitted_spare_;  // run lock: RouteSubmitted's spare buffer

  // Every transport (transports/registry.h); built with the engine.
  const TransportSet transports_;
  rds::Mutex serve_mu_;
  bool host_served_ ABSL_GUARDED_BY(serve_mu_) = false;  // the same-host transport listens
  absl::flat_hash_map<NetNsKey, std::shared_ptr<NetNs>> served_ ABSL_GUARDED_BY(serve_mu_);

  // Engine thread only.
  absl::flat_hash_map<ConnKey, std::unique_ptr<Connection>> connections_;
  absl::flat_hash_set<std::shared_ptr<Link>> incoming_;
  std::vector<std::unique_ptr<Path>> graveyard_;
  uint32_t next_query_id_ = 1;
};

}  // namespace rds

#endif  // RDS_ENGINE_ENGINE_H_
