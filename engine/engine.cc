// engine/engine.cc — the engine object: its thread and lifetime, the
// listeners it serves, introspection. Its other members live in transmit.cc,
// connection.cc, route.cc, path_receive.cc, accept.cc and drain.cc.
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "engine/abandon.h"
#include "engine/waiter.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/sync.h"
#include "absl/time/clock.h"
#include "conf/settings.h"
#include "engine/bind.h"
#include "engine/cong.h"
#include "engine/direct_receive.h"
#include "engine/errors.h"
#include "engine/fault.h"
#include "engine/info.h"
#include "engine/fork.h"
#include "engine/log.h"
#include "engine/recv.h"
#include "engine/registry.h"
#include "engine/send.h"
#include "engine/share.h"
#include "engine/socket.h"
#include "engine/stats.h"
#include "engine/sys.h"

namespace rds {

namespace {
rds::Mutex engine_mu(absl::kConstInit);
std::atomic<Engine*> engine_ptr{nullptr};

// GEN_NUM: differs between a process and its fork children's engines.
uint32_t RandomGen() {
  uint32_t g;
  do {
    g = static_cast<uint32_t>(sys::RandomU64());
  } while (g == 0);
  return g;
}

}  // namespace

rds::Mutex& EngineStartMutex() { return engine_mu; }

Engine& Engine::Get() {
  Engine* e = engine_ptr.load(std::memory_order_acquire);
  if (e != nullptr) return *e;
  rds::MutexLock lock(&engine_mu);
  e = engine_ptr.load(std::memory_order_relaxed);
  if (e == nullptr) {
    e = new Engine();
    e->Start();
    engine_ptr.store(e, std::memory_order_release);
  }
  return *e;
}

Engine* Engine::IfRunning() { return engine_ptr.load(std::memory_order_acquire); }

bool Engine::HoldForFork(absl::Duration limit) { return loop_.HoldRoundsForFork(limit); }

void Engine::ReleaseAfterFork() { loop_.ReleaseRoundsAfterFork(); }

void Engine::ResetAfterFork() {
  // The parent's engine object is abandoned (leaked): its thread does not
  // exist here and its locks may be held by threads that do not exist here.
  Abandon(engine_ptr.exchange(nullptr, std::memory_order_acq_rel));
}

void Engine::AbandonAfterLostFds() {
  Engine* e = engine_ptr.exchange(nullptr, std::memory_order_acq_rel);
  if (e != nullptr) e->loop_.Abandon();
  Abandon(e);
}

bool Engine::RunOnLoopAndWait(std::function<void()> task) {
  // Shared with the task: should the wait give up, the task may still run.
  auto done = std::make_shared<rds::Notification>();
  loop_.Post([task = std::move(task), done] {
    task();
    done->Notify();
  });
  // An engine answers within microseconds; a wait this long means its thread
  // is gone or its fds are (a raw close_range system call): look, and go on
  // waiting only while they are intact.
  constexpr absl::Duration kLook = absl::Milliseconds(200);
  while (!done->WaitForNotificationWithDeadline(absl::Now() + kLook)) {
    if (loop_.abandoned()) return false;
    if (sys::InternalFdsLost()) {
      log::Warn("the engine's descriptors were closed behind its back; starting afresh");
      HandleLostFds();
      return false;
    }
  }
  return true;
}

Engine::Engine()
    : pid_(static_cast<uint32_t>(getpid())),
      gen_(RandomGen()),
      transports_(MakeTransports(TransportContext{
          .loop = &loop_,
          .own_pid = pid_,
          .engine_address =
              [](uint32_t pid) {
                return HostRegistry::Get().EngineSocketPath(static_cast<pid_t>(pid));
              },
          .on_accept =
              [this](std::shared_ptr<Link> link, std::shared_ptr<NetNs> from_ns) {
                WatchIncoming(std::move(link), std::move(from_ns));
              },
      })) {}

void Engine::Start() {
  // The engine thread must never run the application's signal handlers.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  // Start returns once the thread runs its own code (the C library's and a
  // sanitizer's set-up of a thread allocate): fork, which waits for
  // engine_mu, then never finds the new thread half-way through (fork.h).
  rds::Notification running;
  thread_ = std::thread([this, &running] {
    loop_tid_.store(gettid());
    running.Notify();
    loop_.Run();
  });
  thread_.detach();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  running.WaitForNotification();
  log::Debug("engine started (pid %d, generation %08x)", pid_, gen_);
}

// ---------------------------------------------------------------------------
// Serving: listeners.

absl::Status Engine::Serve(const std::shared_ptr<NetNs>& ns) {
  rds::MutexLock lock(&serve_mu_);
  if (!host_served_) {
    HostRegistry& reg = HostRegistry::Get();
    if (absl::Status s = HostRegistry::EnsureDir(reg.rundir()); !s.ok()) return s;
    if (absl::Status s = transports_.same_host->Serve(ns); !s.ok()) return s;
    host_served_ = true;
    loop_.Post([this] { PruneStaleEngineSockets(); });
  }
  const bool first = served_.try_emplace(ns->key(), ns).second;
  for (Transport* t : transports_.All()) {
    if (t == transports_.same_host.get()) continue;
    if (absl::Status s = t->Serve(ns); !s.ok()) return s;
  }
  if (first) loop_.Post([this, ns] { ReachKnownNodes(ns); });
  return absl::OkStatus();
}

std::shared_ptr<NetNs> Engine::ServedNetNs(const NetNsKey& key) {
  rds::MutexLock lock(&serve_mu_);
  auto it = served_.find(key);
  return it == served_.end() ? nullptr : it->second;
}

// ---------------------------------------------------------------------------
// Introspection.

// A thread running the loop (the engine thread, or one sending inline or
// driving) owns the loop's state just as the engine thread does.
bool Engine::OnEngineThread() const {
  return EventLoop::InLoop() || gettid() == loop_tid_.load();
}

absl::Status Engine::WaitDriving(Waiter& waiter, std::optional<absl::Time> deadline,
                                 RdsSocket* rs, DirectReceive* direct) {
  absl::Status result;
  if (direct == nullptr) {
    if (loop_.Drive(waiter, deadline, &result)) return result;
    return waiter.Sleep(deadline);
  }
  // The offer stands while this thread drives (so the run lock is held
  // whenever it changes), and only with nothing queued.
  auto offer = [rs, direct] {
    rds::MutexLock lock(&rs->mu);
    if (!rs->released && rs->direct == nullptr && rs->recv_queue.empty()) rs->direct = direct;
  };
  auto withdraw = [rs, direct] {
    {
      rds::MutexLock lock(&rs->mu);
      if (rs->direct == direct) rs->direct = nullptr;
    }
    direct->Withdraw();
  };
  if (loop_.Drive(waiter, deadline, &result, offer, withdraw)) return result;
  direct->Withdraw();
  return waiter.Sleep(deadline);
}

std::vector<PathInfo> Engine::Snapshot(std::optional<NetNsKey> ns) {
  auto collect = [this, ns] {
    std::vector<PathInfo> out;
    auto describe = [](const MessagePtr& m, const Connection& c) {
      MessageInfo mi;
      mi.seq = m->header.sequence;
      mi.len = m->header.len;
      mi.laddr = c.key.laddr;
      mi.faddr = c.key.faddr;
      mi.lport = m->header.sport;
      mi.fport = m->header.dport;
      mi.flags = m->header.flags;
      return mi;
    };
    for (auto& [key, c] : connections_) {
      if (ns && key.ns != *ns) continue;
      if (c->local && c->loop_delivered > 0) {
        PathInfo self;
        self.ns = key.ns;
        self.laddr = key.laddr;
        self.faddr = key.faddr;
        self.peer_pid = pid_;
        self.same_host = true;
        self.in_process = true;
        self.up = true;
        self.next_tx_seq = self.next_rx_seq = c->loop_delivered + 1;
        out.push_back(std::move(self));
      }
      for (auto& [pid, p] : c->paths) {
        PathInfo pi;
        pi.ns = key.ns;
        pi.laddr = key.laddr;
        pi.faddr = key.faddr;
        pi.kernel_node = p->node_index >= 0;
        pi.node_path = std::max(p->node_index, 0);
        pi.peer_pid = pi.kernel_node ? 0 : pid;
        pi.node_owner = pi.kernel_node ? c->node_owner : 0;
        pi.relay_peer = p->relay_peer;
        pi.same_host = c->local || p->relay_peer || c->relaying();
        pi.up = p->link != nullptr;
        pi.connecting = p->connecting != nullptr;
        pi.next_tx_seq = p->next_tx_seq;
        pi.next_rx_seq = p->next_rx_seq;
        for (const MessagePtr& m : p->backlog) pi.send.push_back(describe(m, *c));
        for (const MessagePtr& m : p->unacked) pi.retrans.push_back(describe(m, *c));
        pi.rdma = c->rdma && !c->relaying() && !p->relay_peer;
        if (p->link && pi.rdma) {
          pi.rdma_info = p->link->rdma_info();
        } else if (p->link && !c->local) {
          if (std::optional<Link::Endpoints> e = p->link->endpoints()) {
            pi.tcp_local = e->local;
            pi.tcp_peer = e->peer;
          }
        }
        out.push_back(std::move(pi));
      }
    }
    return out;
  };
  if (OnEngineThread()) return collect();
  auto result = std::make_shared<std::vector<PathInfo>>();
  RunOnLoopAndWait([result, collect] { *result = collect(); });
  return std::move(*result);
}

}  // namespace rds
