// engine/stats.cc — counter storage and names.
#include "engine/stats.h"

#include <pthread.h>

#include <atomic>
#include <vector>

#include "engine/sync.h"

namespace rds::stats {
namespace {

// Per-thread counters, as the kernel keeps them per CPU: an increment is a
// plain load and store on memory only its thread writes (a locked
// read-modify-write on shared counters was 3 % of a 64 B stream on each
// side), and a read sums every shard. Shards are never freed: a thread that
// exits leaves its shard, with its counts, to the next new thread.
struct Shard {
  std::atomic<uint64_t> v[kNumCounters];
  Shard* next_all;  // every shard ever made (set before publication, then constant)
};

std::atomic<Shard*> g_all{nullptr};
// Counts made on a thread after its shard was given back (its later
// thread-exit destructors).
std::atomic<uint64_t> g_late[kNumCounters];

rds::Mutex g_free_mu(absl::kConstInit);
std::vector<Shard*>* g_free ABSL_GUARDED_BY(g_free_mu) = nullptr;

// Trivially destructible: a pthread key's destructor returns the shard.
struct ThreadState {
  Shard* shard;
  bool exited;
};
constinit thread_local ThreadState t_state{};

pthread_key_t g_key;
pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

void OnThreadExit(void* arg) {
  ThreadState* t = static_cast<ThreadState*>(arg);
  Shard* shard = t->shard;
  t->shard = nullptr;
  t->exited = true;
  rds::MutexLock lock(&g_free_mu);
  if (g_free == nullptr) g_free = new std::vector<Shard*>();
  g_free->push_back(shard);
}

Shard* NewShard() {
  {
    rds::MutexLock lock(&g_free_mu);
    if (g_free != nullptr && !g_free->empty()) {
      Shard* s = g_free->back();
      g_free->pop_back();
      return s;
    }
  }
  Shard* s = new Shard();
  s->next_all = g_all.load(std::memory_order_relaxed);
  while (!g_all.compare_exchange_weak(s->next_all, s, std::memory_order_release,
                                      std::memory_order_relaxed)) {
  }
  return s;
}

Shard* ThisThreadShard() {
  ThreadState& t = t_state;
  if (t.shard != nullptr || t.exited) return t.shard;
  t.shard = NewShard();
  pthread_once(&g_key_once, [] { pthread_key_create(&g_key, OnThreadExit); });
  pthread_setspecific(g_key, &t);
  return t.shard;
}

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
    "ib_connect_raced",
    "ib_listen_closed_stale",
    "s_ib_evt_handler_call",
    "ib_tasklet_call",
    "ib_tx_cq_event",
    "ib_tx_ring_full",
    "ib_tx_throttle",
    "ib_tx_sg_mapping_failure",
    "ib_tx_stalled",
    "ib_tx_credit_updates",
    "ib_rx_cq_event",
    "ib_rx_ring_empty",
    "ib_rx_refill_from_cq",
    "ib_rx_refill_from_thread",
    "ib_rx_alloc_limit",
    "ib_rx_credit_updates",
    "ib_ack_sent",
    "ib_ack_send_failure",
    "ib_ack_send_delayed",
    "ib_ack_send_piggybacked",
    "ib_ack_received",
    "ib_rdma_mr_alloc",
    "ib_rdma_mr_free",
    "ib_rdma_mr_used",
    "ib_rdma_mr_pool_flush",
    "ib_rdma_mr_pool_wait",
    "ib_rdma_mr_pool_depleted",
    "ib_atomic_cswp",
    "ib_atomic_fadd",
    "tcp_data_ready_calls",
    "tcp_write_space_calls",
    "tcp_sndbuf_full",
    "tcp_connect_raced",
    "tcp_listen_closed_stale",
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
    "shim_shm_payloads_sent",
    "shim_shm_payloads_received",
    "shim_shm_arena_full",
    "shim_tcp_payloads_spliced",
    "shim_recv_direct",
    "shim_poll_waits_driven",
    "shim_epoll_waits_driven",
    "shim_tcp_waits_for_payload",
    "shim_stale_engines_pruned",
    "shim_stale_ns_dirs_pruned",
    "shim_relayed_to_node",
    "shim_relayed_from_node",
    "shim_node_conn_given_up",
};

}  // namespace

const char* Name(Counter c) { return kNames[c]; }
rds::Mutex& ForkMutex() { return g_free_mu; }

void Add(Counter c, uint64_t n) {
  Shard* s = ThisThreadShard();
  if (s == nullptr) {
    g_late[c].fetch_add(n, std::memory_order_relaxed);
    return;
  }
  // Only this thread writes its shard.
  s->v[c].store(s->v[c].load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

uint64_t Get(Counter c) {
  uint64_t sum = g_late[c].load(std::memory_order_relaxed);
  for (Shard* s = g_all.load(std::memory_order_acquire); s != nullptr; s = s->next_all) {
    sum += s->v[c].load(std::memory_order_relaxed);
  }
  return sum;
}

}  // namespace rds::stats
