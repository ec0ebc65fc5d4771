// engine/stats.cc — counter storage and names.
#include "engine/stats.h"

#include <atomic>

namespace rds::stats {
namespace {

std::atomic<uint64_t> counters[kNumCounters];

constexpr const char* kNames[kNumCounters] = {
    "conn_reset",
    "recv_drop_bad_checksum",
    "recv_drop_old_seq",
    "recv_drop_no_sock",
    "recv_drop_dead_sock",
    "recv_deliver_raced",
    "recv_delivered",
    "recv_queued",
    "recv_immediate_retry",
    "recv_delayed_retry",
    "recv_ack_required",
    "recv_rdma_bytes",
    "recv_ping",
    "send_queue_empty",
    "send_queue_full",
    "send_lock_contention",
    "send_lock_queue_raced",
    "send_immediate_retry",
    "send_delayed_retry",
    "send_drop_acked",
    "send_ack_required",
    "send_queued",
    "send_rdma",
    "send_rdma_bytes",
    "send_pong",
    "page_remainder_hit",
    "page_remainder_miss",
    "copy_to_user",
    "copy_from_user",
    "cong_update_queued",
    "cong_update_received",
    "cong_send_error",
    "cong_send_blocked",
    "recv_bytes_added_to_sock",
    "recv_bytes_freed_fromsock",
    "send_stuck_rm",
    "shim_sockets_created",
    "shim_conn_drop_bad_input",
    "shim_conn_accepted",
    "shim_conn_connected",
    "shim_conn_failed",
    "shim_handoffs",
    "shim_route_queries",
    "shim_send_drop_no_route",
    "shim_send_drop_cancelled",
    "shim_retransmitted",
    "shim_acks_sent",
    "shim_conn_drop_overload",
    "shim_fault_injected",
    "shim_peer_restarts",
    "shim_link_refused",
    "shim_recv_waits_driven",
};

}  // namespace

const char* Name(Counter c) { return kNames[c]; }
void Add(Counter c, uint64_t n) { counters[c].fetch_add(n, std::memory_order_relaxed); }
uint64_t Get(Counter c) { return counters[c].load(std::memory_order_relaxed); }

}  // namespace rds::stats
