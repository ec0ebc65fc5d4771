// transports/tcp/tcp_transport.cc — the TCP transport: listeners per
// namespace, outgoing connections, adopted connections.
#include "transports/tcp/tcp_transport.h"

#include <sys/epoll.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "conf/settings.h"
#include "engine/stats.h"
#include "engine/sync.h"
#include "transports/stream/stream_link.h"
#include "transports/tcp/tcp.h"

namespace rds {
namespace {

// An outgoing connection not established within this is given up and the
// engine tries again with a fresh SYN (and source port) at once: the kernel's
// own SYN back-off (1, 3, 7, 15 … s) kept a path down for many seconds after
// a peer became reachable again (a SYN lost while a kernel node still held
// our old connection, DESIGN.md §3.5). Long enough for one lost SYN's
// retransmission to be answered.
constexpr absl::Duration kConnectDeadline = absl::Seconds(3);

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(const TransportContext& ctx) : ctx_(ctx) {}

  const char* name() const override { return "tcp"; }
  Capabilities capabilities() const override { return {}; }

  absl::Status Serve(const std::shared_ptr<NetNs>& ns) override {
    {
      rds::MutexLock lock(&mu_);
      if (!listening_.insert(ns->key()).second) return absl::OkStatus();  // one attempt each
    }
    int fd = -1;
    absl::Status s = ns->RunIn([&]() -> absl::Status {
      absl::StatusOr<int> l = tcp::Listen(static_cast<uint16_t>(conf::Get().tcp_port));
      if (!l.ok()) return l.status();
      fd = *l;
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    EventLoop* loop = ctx_.loop;
    loop->Post([this, loop, ns, fd] {
      loop->Add(fd, EPOLLIN, [this, ns, fd](uint32_t) { OnAccept(ns, fd); });
    });
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<Link>> Connect(const LinkTarget& to,
                                                const std::string& what) override {
    int fd = -1;
    absl::Status s = to.ns->RunIn([&]() -> absl::Status {
      absl::StatusOr<int> r =
          tcp::Connect(to.laddr, to.faddr, static_cast<uint16_t>(conf::Get().tcp_port),
                       to.node_path, to.source_port);
      if (!r.ok()) return r.status();
      fd = *r;
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    std::shared_ptr<StreamLink> link = StreamLink::Create(*ctx_.loop, fd, /*connecting=*/true,
                                                          /*accept_fds=*/false, "tcp " + what);
    link->ArmConnectDeadline(kConnectDeadline);
    return std::shared_ptr<Link>(std::move(link));
  }

  std::shared_ptr<Link> Adopt(int fd, const std::string& what) override {
    return StreamLink::Create(*ctx_.loop, fd, false, false, what);
  }

 private:
  void OnAccept(const std::shared_ptr<NetNs>& ns, int listen_fd) {
    while (std::shared_ptr<Link> link = AcceptTcpLink(*ctx_.loop, listen_fd)) {
      stats::Inc(stats::kShimConnAccepted);
      ctx_.on_accept(std::move(link), ns);
    }
  }

  const TransportContext ctx_;
  rds::Mutex mu_;
  absl::flat_hash_set<NetNsKey> listening_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::shared_ptr<Link> AcceptTcpLink(EventLoop& loop, int listen_fd) {
  RdsEndpoint peer, local;
  int fd = tcp::Accept(listen_fd, &peer, &local);
  if (fd < 0) return nullptr;
  std::shared_ptr<StreamLink> link = StreamLink::Create(
      loop, fd, false, false,
      absl::StrFormat("tcp incoming from %s:%d", peer.addr.ToString(), peer.port));
  link->set_endpoints(Link::Endpoints{local, peer});
  return link;
}

std::unique_ptr<Transport> MakeTcpTransport(const TransportContext& ctx) {
  return std::make_unique<TcpTransport>(ctx);
}

}  // namespace rds
