// transports/unix/unix_transport.cc — the same-host transport: the engine's
// listener, admission by uid, outgoing links to other engines.
#include "transports/unix/unix_transport.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "conf/settings.h"
#include "engine/log.h"
#include "engine/stats.h"
#include "engine/sync.h"
#include "engine/sys.h"
#include "transports/stream/stream_link.h"
#include "transports/unix/unix.h"

namespace rds {
namespace {

// Same-host links come only from our own user unless RDS_PRELOAD_LINK_UIDS
// names others (or "all").
bool LinkAllowedFrom(uid_t uid) {
  if (uid == getuid()) return true;
  const std::string& allowed = conf::Get().link_uids;
  if (allowed == "all") return true;
  for (absl::string_view item : absl::StrSplit(allowed, ',', absl::SkipWhitespace())) {
    uint32_t u;
    if (absl::SimpleAtoi(item, &u) && u == uid) return true;
  }
  return false;
}

class UnixTransport final : public Transport {
 public:
  explicit UnixTransport(const TransportContext& ctx) : ctx_(ctx) {}

  const char* name() const override { return "unix"; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.same_host = true;
    c.passes_fds = true;
    return c;
  }

  absl::Status Serve(const std::shared_ptr<NetNs>&) override {
    rds::MutexLock lock(&mu_);
    if (listener_ >= 0) return absl::OkStatus();
    absl::StatusOr<int> fd = unix_link::Listen(ctx_.engine_address(ctx_.own_pid));
    if (!fd.ok()) return fd.status();
    listener_ = *fd;
    EventLoop* loop = ctx_.loop;
    loop->Post([this, loop, fd = *fd] {
      loop->Add(fd, EPOLLIN, [this, fd](uint32_t) { OnAccept(fd); });
    });
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<Link>> Connect(const LinkTarget& to,
                                                const std::string& what) override {
    absl::StatusOr<int> fd = unix_link::Connect(ctx_.engine_address(to.peer_pid));
    if (!fd.ok()) return fd.status();
    return std::shared_ptr<Link>(StreamLink::Create(*ctx_.loop, *fd, /*connecting=*/true,
                                                    /*accept_fds=*/false, "unix " + what));
  }

  void WithdrawAtExit() override {
    rds::MutexLock lock(&mu_);
    if (listener_ >= 0) unlink(ctx_.engine_address(ctx_.own_pid).c_str());
  }

 private:
  void OnAccept(int listener) {
    for (;;) {
      int fd = unix_link::Accept(listener);
      if (fd < 0) return;
      absl::StatusOr<uid_t> uid = unix_link::PeerUid(fd);
      if (!uid.ok() || !LinkAllowedFrom(*uid)) {
        log::Warn("refusing a same-host link from uid %d (see RDS_PRELOAD_LINK_UIDS)",
                  uid.ok() ? static_cast<int>(*uid) : -1);
        stats::Inc(stats::kShimLinkRefused);
        sys::CloseInternal(fd);
        continue;
      }
      stats::Inc(stats::kShimConnAccepted);
      ctx_.on_accept(StreamLink::Create(*ctx_.loop, fd, false, /*accept_fds=*/true, "unix incoming"),
                     nullptr);
    }
  }

  const TransportContext ctx_;
  rds::Mutex mu_;
  int listener_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace

std::unique_ptr<Transport> MakeUnixTransport(const TransportContext& ctx) {
  return std::make_unique<UnixTransport>(ctx);
}

}  // namespace rds
