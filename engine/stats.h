// engine/stats.h — the engine's counters: the kernel's RDS_INFO_COUNTERS
// names (net/rds/stats.c, in its order) followed by the shim's own.
//
// Counts are kept per thread and summed when read (stats.cc).
//
// Thread-safety: Inc/Add/Get are safe for concurrent use; Get sees each
// thread's counts made before it with relaxed ordering (counters are not
// synchronisation).
#ifndef RDS_ENGINE_STATS_H_
#define RDS_ENGINE_STATS_H_

#include <cstddef>
#include <cstdint>

#include "engine/sync.h"

namespace rds::stats {

enum Counter : int {
  // Kernel counters (stats.c order).
  kConnReset,
  kRecvDropBadChecksum,
  kRecvDropOldSeq,
  kRecvDropNoSock,
  kRecvDropDeadSock,
  kRecvDeliverRaced,
  kRecvDelivered,
  kRecvQueued,
  kRecvImmediateRetry,
  kRecvDelayedRetry,
  kRecvAckRequired,
  kRecvRdmaBytes,
  kRecvPing,
  kSendQueueEmpty,
  kSendQueueFull,
  kSendLockContention,
  kSendLockQueueRaced,
  kSendImmediateRetry,
  kSendDelayedRetry,
  kSendDropAcked,
  kSendAckRequired,
  kSendQueued,
  kSendRdma,
  kSendRdmaBytes,
  kSendPong,
  kPageRemainderHit,
  kPageRemainderMiss,
  kCopyToUser,
  kCopyFromUser,
  kCongUpdateQueued,
  kCongUpdateReceived,
  kCongSendError,
  kCongSendBlocked,
  kRecvBytesAddedToSock,
  kRecvBytesFreedFromSock,
  kSendStuckRm,
  kNumKernelCounters,
  // rds_rdma's (net/rds/ib_stats.c, names as spelled there), listed by a
  // kernel with rds_rdma loaded before rds_tcp's (transports in id order):
  // listed where RDMA is available (Engine::RdmaAvailable). The shim counts
  // those that mean something for it (commented); the rest stay 0 (no
  // tasklets, credits, refill threads or MR pools).
  kIbConnectRaced = kNumKernelCounters,  // a request refused: our own connect to that peer was pending
  kIbListenClosedStale,  // a request while our connection was up: ours dropped as stale
  kIbEvtHandlerCall,
  kIbTaskletCall,
  kIbTxCqEvent,  // completion events that found send completions
  kIbTxRingFull,  // a message waited for send slots
  kIbTxThrottle,
  kIbTxSgMappingFailure,
  kIbTxStalled,
  kIbTxCreditUpdates,
  kIbRxCqEvent,  // completion events that found receive completions
  kIbRxRingEmpty,
  kIbRxRefillFromCq,
  kIbRxRefillFromThread,
  kIbRxAllocLimit,
  kIbRxCreditUpdates,
  kIbAckSent,  // ack-only frames sent
  kIbAckSendFailure,
  kIbAckSendDelayed,
  kIbAckSendPiggybacked,
  kIbAckReceived,  // headers whose h_ack acknowledged more
  kIbRdmaMrAlloc,  // memory regions registered (RDS_GET_MR, RDMA_MAP)
  kIbRdmaMrFree,  // memory regions released (FREE_MR, use-once, close)
  kIbRdmaMrUsed,  // a peer's RDMA operation named one of our regions
  kIbRdmaMrPoolFlush,
  kIbRdmaMrPoolWait,
  kIbRdmaMrPoolDepleted,
  kIbAtomicCswp,
  kIbAtomicFadd,
  kIbCountersEnd,
  // rds_tcp's (net/rds/tcp_stats.c), listed after those by a kernel with
  // rds_tcp loaded; counted on the TCP links to other hosts only (a
  // same-host link plays the kernel's loopback transport). Linux 6.12 no
  // longer increments the last two; neither does the shim.
  kTcpDataReadyCalls = kIbCountersEnd,  // a link to another host became readable
  kTcpWriteSpaceCalls,                      // it had room to write again
  kTcpSndbufFull,                           // a write found its send buffer full
  kTcpConnectRaced,
  kTcpListenClosedStale,
  // The shim's own.
  kShimSocketsCreated,
  kShimConnDropBadInput,     // a peer sent bytes that are not valid RDS framing
  kShimConnAccepted,
  kShimConnConnected,
  kShimConnFailed,
  kShimHandoffs,             // TCP connections handed to the owning engine
  kShimRouteQueries,
  kShimSendDropNoRoute,      // messages to a port nobody has bound
  kShimSendDropCancelled,    // queued messages dropped because their socket closed
  kShimRetransmitted,        // messages sent again after a link failure
  kShimAcksSent,             // acknowledgement-only messages
  kShimConnDropOverload,     // a peer kept sending to a socket far over its rcvbuf
  kShimFaultInjected,        // test-only fault injection fired
  kShimPeerRestarts,         // a peer engine came back with a new generation
  kShimLinkRefused,          // a same-host link from a user not allowed to link
  kShimRecvWaitsDriven,      // blocking recvmsg waits that ran the event loop themselves
  kShimShmPayloadsSent,      // payloads lent to a same-host peer from the shared arena
  kShimShmPayloadsReceived,  // payloads borrowed from a same-host peer's arena
  kShimShmArenaFull,         // large payloads copied because the arena had no room
  kShimTcpPayloadsSpliced,   // payloads whose pages went into a TCP socket by reference
  kShimRecvDirect,           // messages read straight into the buffer of a waiting recvmsg
  kShimPollWaitsDriven,      // blocking poll/select waits that ran the event loop themselves
  kShimEpollWaitsDriven,     // blocking epoll waits that ran the event loop themselves
  kShimTcpWaitsForPayload,   // a TCP link's reader set to wake only for a large payload's next piece
  kShimStaleEnginesPruned,   // socket files of dead engines removed from the run directory
  kShimStaleNamespaceDirsPruned,  // run-directory folders of namespaces nobody used, removed
  kShimRelayedToNode,        // messages of another engine of the host sent on to a kernel node
  kShimRelayedFromNode,      // a kernel node's messages passed on to another engine of the host
  kShimNodeConnGivenUp,      // a kernel node poked while our connection to it was up: it had
                             // dropped that one, so did we
  kNumCounters,
};

// The RDS_INFO_COUNTERS name (at most 31 characters).
const char* Name(Counter c);

void Add(Counter c, uint64_t n);
inline void Inc(Counter c) { Add(c, 1); }
uint64_t Get(Counter c);

// The lock taken across fork() (engine/fork.cc).
rds::Mutex& ForkMutex();

}  // namespace rds::stats

#endif  // RDS_ENGINE_STATS_H_
