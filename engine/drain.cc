// engine/drain.cc — messages a closing socket or an ending process left:
// the exit drain, RDS_CANCEL_SENT_TO, a closed sender's messages, and the
// engine's socket file at exit.
//
// Members of Engine (engine/engine.h); engine.cc owns the thread and its state.
#include "engine/engine.h"

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
#include "transports/host_channel.h"
#include "engine/engine_internal.h"

namespace rds {

namespace {

bool Matches(const MessagePtr& m, const RdsSocket* rs, const std::optional<RdsEndpoint>& dest) {
  if (m->sender != rs) return false;
  if (!dest) return true;
  return m->daddr.bytes == dest->addr.bytes && m->header.dport == dest->port;
}

}  // namespace

// ---------------------------------------------------------------------------
// Exit.

size_t Engine::PendingMessages(bool shared_only) {
  if (!shared_only) return PendingMessagesWhere([](const Message&) { return true; });
  // The sender lives while it counts the message (Message::sender).
  return PendingMessagesWhere([](const Message& m) {
    return m.sender != nullptr && m.sender->maybe_shared.load();
  });
}

size_t Engine::PendingMessagesWhere(absl::FunctionRef<bool(const Message&)> counts) {
  // A path that is down and whose reconnection has failed since (its
  // back-off grew past the first step), or a route query whose connection
  // failed, has no reachable peer: nothing to wait for at exit, where kernel
  // RDS drops a closed socket's messages anyway (DESIGN.md §4.1). A kernel
  // node's messages for a socket between processes wait for its next one.
  size_t n = 0;
  auto count = [&n, counts](const std::deque<MessagePtr>& q) {
    for (const MessagePtr& m : q) n += counts(*m) ? 1 : 0;
  };
  for (auto& [key, c] : connections_) {
    const bool queries_fail = QueriesFail(*c);
    for (auto& [port, q] : c->unresolved) {
      if (!queries_fail) count(q);
    }
    for (auto& [port, q] : c->node_held) count(q);  // a kernel node's, for a parked socket
    for (auto& [pid, p] : c->paths) {
      if (PathUnreachable(*p)) continue;
      count(p->backlog);
      count(p->unacked);
    }
  }
  return n;
}

void Engine::PruneStaleEngineSockets() {
  const int dirs = HostRegistry::Get().PruneUnusedNamespaceDirs();
  if (dirs > 0) stats::Add(stats::kShimStaleNamespaceDirsPruned, static_cast<uint64_t>(dirs));
  for (const auto& [pid, path] : HostRegistry::Get().OtherEngines()) {
    absl::Status probe = host_channel::Probe(path);
    if (probe.ok()) continue;  // an engine listens there
    // Refused (or gone): nobody listens. The pid is checked after the connect,
    // so a new process with that pid would have bound a listening file first.
    if (absl::IsNotFound(probe) && kill(pid, 0) != 0 && errno == ESRCH) {
      unlink(path.c_str());
      stats::Inc(stats::kShimStaleEnginesPruned);
    }
  }
}

void Engine::WithdrawAtExit() {
  Engine* e = IfRunning();
  if (e == nullptr) return;
  rds::MutexLock lock(&e->serve_mu_);
  for (Transport* t : e->transports_.All()) t->WithdrawAtExit();
}

void Engine::DrainAtExit(absl::Duration limit, absl::Duration shared_limit) {
  Engine* e = IfRunning();
  if (e == nullptr) return;
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + limit;
  const absl::Time shared_deadline = start + std::max(limit, shared_limit);
  struct Pending {
    size_t all = 0, shared = 0;
  };
  for (;;) {
    auto pending = std::make_shared<Pending>();
    auto done = std::make_shared<rds::Notification>();
    e->loop_.Post([e, pending, done] {
      pending->all = e->PendingMessages(/*shared_only=*/false);
      pending->shared = pending->all == 0 ? 0 : e->PendingMessages(/*shared_only=*/true);
      done->Notify();
    });
    // An answer that comes just after the first deadline still counts: only
    // an engine that does not answer at all ends the wait at once.
    const absl::Time answer_by = std::max(deadline, absl::Now() + absl::Milliseconds(500));
    if (!done->WaitForNotificationWithDeadline(std::min(answer_by, shared_deadline))) return;
    const absl::Time now = absl::Now();
    if (pending->all == 0) return;
    if (now >= deadline && pending->shared == 0) return;
    if (now >= shared_deadline) {
      if (pending->shared > 0) {
        log::Warn("exit: %u messages of sockets another process holds were not acknowledged "
                  "within RDS_PRELOAD_EXIT_FLUSH_SHARED_MS; they are lost with this process",
                  static_cast<unsigned>(pending->shared));
      }
      return;
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
}

void Engine::DrainSocket(const RdsSocket& rs, absl::Duration limit) {
  Engine* e = IfRunning();
  if (e == nullptr) return;
  const absl::Time deadline = absl::Now() + limit;
  const RdsSocket* sender = &rs;
  for (bool first = true;; first = false) {
    auto pending = std::make_shared<std::atomic<size_t>>(0);
    auto done = std::make_shared<rds::Notification>();
    e->loop_.Post([e, pending, done, sender] {
      pending->store(
          e->PendingMessagesWhere([sender](const Message& m) { return m.sender == sender; }));
      done->Notify();
    });
    if (!done->WaitForNotificationWithDeadline(deadline)) return;
    if (pending->load() == 0) return;
    if (absl::Now() >= deadline) {
      log::Warn("socket %016x goes on in another process with %u of its messages not yet "
                "acknowledged here (RDS_PRELOAD_EXIT_FLUSH_SHARED_MS passed): they may arrive "
                "after the other process's", rs.id, static_cast<unsigned>(pending->load()));
      return;
    }
    if (first) log::Debug("socket %016x: waiting for %u of its messages before letting it go",
                          rs.id, static_cast<unsigned>(pending->load()));
    absl::SleepFor(absl::Milliseconds(1));
  }
}

// ---------------------------------------------------------------------------
// Cancellation.

void Engine::CancelSentTo(std::shared_ptr<RdsSocket> rs, std::optional<RdsEndpoint> dest) {
  RunOnLoopAndWait([this, rs, dest] {
    auto cancel = [&](std::deque<MessagePtr>& q) {
      for (MessagePtr& m : q) {
        if (Matches(m, rs.get(), dest) && !m->cancelled.exchange(true)) {
          DropMessage(m, stats::kShimSendDropCancelled);
        }
      }
    };
    for (auto& [key, c] : connections_) {
      for (auto& [port, q] : c->unresolved) cancel(q);
      for (auto& [pid, p] : c->paths) {
        cancel(p->backlog);
        cancel(p->unacked);
      }
    }
  });
}

void Engine::ReleaseSender(std::shared_ptr<RdsSocket> rs) {
  RunOnLoopAndWait([this, rs] {
    for (auto& [key, c] : connections_) {
      if (QueriesFail(*c)) {
        for (auto& [port, q] : c->unresolved) DropClosedSenders(q, rs.get());
      }
      for (auto& [pid, p] : c->paths) {
        if (PathUnreachable(*p)) DropClosedSenders(p->backlog, rs.get());
      }
    }
  });
}

// Drops the messages of `only` (of every closed socket if null) from `q`:
// their destination cannot be reached now, and their sender is gone.
void Engine::DropClosedSenders(std::deque<MessagePtr>& q, const RdsSocket* only) {
  for (MessagePtr& m : q) {
    if (m->cancelled.load()) continue;
    if (only != nullptr ? m->sender != only : !SenderClosed(*m)) continue;
    if (!m->cancelled.exchange(true)) DropMessage(m, stats::kShimSendDropCancelled);
  }
}

}  // namespace rds
