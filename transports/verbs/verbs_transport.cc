// transports/verbs/verbs_transport.cc — see verbs_transport.h.
#include "transports/verbs/verbs_transport.h"

#include <fcntl.h>
#include <unistd.h>
#include <sys/epoll.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/errors.h"
#include "engine/log.h"
#include "engine/stats.h"
#include "engine/sync.h"
#include "engine/sys.h"
#include "transports/verbs/internal_fds.h"
#include "transports/verbs/ib_wire.h"
#include "transports/verbs/protection_domain.h"
#include "transports/verbs/verbs_api.h"

namespace rds::verbs {
namespace {

// The kernel's resolve timeouts (RDS_RDMA_RESOLVE_TIMEOUT_MS).
constexpr int kResolveTimeoutMs = 5000;
// An outgoing connection not up by then is given up (and retried by the
// engine). The CM's own REQ retries can run for a minute, and while ours is
// pending every request of the peer is refused as a race (rds-ib.md §1.8):
// one lost exchange must not keep the two apart that long.
constexpr absl::Duration kConnectDeadline = absl::Seconds(8);
constexpr int kListenBacklog = 128;
// How often an engine that could not listen (the ports held) tries again.
constexpr absl::Duration kRelistenEvery = absl::Seconds(5);
// A peer's request that finds our own connect to it pending: the side with
// the larger address gives way (takes the peer's, drops its own), the other
// refuses it, as a kernel does (rds-ib.md §1.8, §8.5). A connect of ours
// begun this long ago gives way whatever the addresses: the peer's request
// proves the way to us works, while ours may be stuck (seen in vm/verbs_faults
// after a silence: our address resolution timing out again and again while the
// node's requests, refused as a race, came every few milliseconds).
constexpr absl::Duration kUnansweredGivesWay = absl::Milliseconds(500);
// IB CM reject reasons (ib_cm.h) the active side tells apart.
constexpr int kRejectInvalidServiceId = 8;  // nobody listens on that port
constexpr int kRejectConsumerDefined = 28;  // the peer's own reject, with its value

// The API, or why not (logged once per process).
absl::StatusOr<const VerbsApi*> Usable() {
  static const bool logged = [] {
    absl::StatusOr<const VerbsApi*> r = UsableVerbs();
    if (!r.ok()) log::Info("RDS over RDMA (verbs) unavailable: %s", r.status().message());
    return true;
  }();
  (void)logged;
  return UsableVerbs();
}

sockaddr_storage CmAddress(const RdsAddr& a, uint16_t port) {
  sockaddr_storage ss{};
  if (a.IsV4Mapped()) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    sin->sin_family = AF_INET;
    sin->sin_addr = a.V4();
    sin->sin_port = htons(port);
  } else {
    ToSockaddr(a, port, &ss);
  }
  return ss;
}

uint16_t PortOf(const sockaddr& sa) {
  if (sa.sa_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(sa).sin_port);
  if (sa.sa_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(sa).sin6_port);
  return 0;
}

struct AddressPair {
  RdsAddr laddr, faddr;
  friend bool operator==(const AddressPair&, const AddressPair&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const AddressPair& p) {
    return H::combine(std::move(h), p.laddr, p.faddr);
  }
};

// What one CM event says, copied before it is acknowledged (an id's events
// must all be acknowledged before it can be destroyed).
struct CmEvent {
  rdma_cm_event_type type;
  rdma_cm_id* id;
  rdma_cm_id* listen_id;
  int status;
  std::vector<uint8_t> private_data;
  uint8_t responder_resources = 0, initiator_depth = 0;
};

uint64_t PageSize() {
  static const uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// A region registered on the device's shared domain (protection_domain.h),
// which it keeps alive.
class VerbsMemoryRegion final : public MemoryRegion {
 public:
  VerbsMemoryRegion(const VerbsApi& api, SharedPd pd, ibv_mr* mr)
      : api_(api), pd_(std::move(pd)), mr_(mr) {}
  ~VerbsMemoryRegion() override { api_.ibv.dereg_mr(mr_); }
  uint32_t rkey() const override { return mr_->rkey; }
  uint32_t lkey() const override { return mr_->lkey; }

 private:
  const VerbsApi& api_;
  const SharedPd pd_;
  ibv_mr* const mr_;
};

class VerbsTransport final : public Transport {
 public:
  VerbsTransport(const TransportContext& ctx, VerbsLink::Sizes sizes) : ctx_(ctx), sizes_(sizes) {}
  ~VerbsTransport() override { Shutdown(); }

  const char* name() const override { return "verbs"; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.message_oriented = true;
    c.rdma = true;
    return c;
  }

  absl::Status Serve(const std::shared_ptr<NetNs>& ns) override {
    {
      rds::MutexLock lock(&mu_);
      if (!serving_.insert(ns->key()).second) return absl::OkStatus();  // one attempt each
    }
    absl::StatusOr<const VerbsApi*> api = Usable();
    if (!api.ok()) return absl::OkStatus();  // said once; TCP serves
    // Listening is the engine thread's (the ids live on its event channel).
    ctx_.loop->Post([this, ns] {
      if (!EnsureChannel().ok()) return;
      for (const bool v6 : {false, true}) ListenOrRetry(ns, v6, /*first=*/true);
    });
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<Link>> Connect(const LinkTarget& to,
                                                const std::string& what) override {
    absl::StatusOr<const VerbsApi*> usable = Usable();
    if (!usable.ok()) return usable.status();
    api_ = *usable;
    if (absl::Status s = EnsureChannel(); !s.ok()) return s;
    if (to.laddr.IsV4Mapped() != to.faddr.IsV4Mapped()) {
      return absl::InvalidArgumentError("the addresses of a path are of one family");
    }
    const bool v6 = !to.faddr.IsV4Mapped();
    rdma_cm_id* id = nullptr;
    absl::Status s = to.ns->RunIn([&]() -> absl::Status {
      if (api_->cm.create_id(channel_, &id, nullptr, RDMA_PS_TCP) != 0) {
        return absl::ResourceExhaustedError(absl::StrCat("rdma_create_id: ", strerror(errno)));
      }
      sockaddr_storage src = CmAddress(to.laddr, 0);
      sockaddr_storage dst = CmAddress(to.faddr, v6 ? ib::kCmPortV6 : ib::kCmPortV4);
      if (api_->cm.resolve_addr(id, reinterpret_cast<sockaddr*>(&src),
                                reinterpret_cast<sockaddr*>(&dst), kResolveTimeoutMs) != 0) {
        return absl::UnavailableError(absl::StrCat("rdma_resolve_addr: ", strerror(errno)));
      }
      return absl::OkStatus();
    });
    if (!s.ok()) {
      if (id != nullptr) api_->cm.destroy_id(id);
      return s;
    }
    std::shared_ptr<VerbsLink> link = VerbsLink::Make(*api_, *ctx_.loop, id, sizes_,
                                                      "verbs " + what);
    link->mark_outgoing();
    link->set_endpoints(Link::Endpoints{{to.laddr, 0}, {to.faddr, v6 ? ib::kCmPortV6
                                                                        : ib::kCmPortV4}});
    Track(id, link, AddressPair{to.laddr, to.faddr}, v6);
    ids_[id].started = absl::Now();
    std::weak_ptr<VerbsLink> weak = link;
    ctx_.loop->After(kConnectDeadline, [this, weak] {
      std::shared_ptr<VerbsLink> l = weak.lock();
      if (l && !l->closed() && !l->established()) {
        auto it = ids_.find(l->cm_id());
        l->Fail(absl::DeadlineExceededError(absl::StrCat(
            "not connected within the connect deadline (still ",
            it != ids_.end() ? it->second.stage : "connecting", ")")));
      }
    });
    return std::shared_ptr<Link>(link);
  }

  bool Available() override { return Usable().ok(); }

  bool CarriesFrom(const std::shared_ptr<NetNs>& ns, const RdsAddr& laddr) override {
    return DeviceOf(ns, laddr) != nullptr;
  }

  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(const std::shared_ptr<NetNs>& ns,
                                                               const RdsAddr& laddr, void* addr,
                                                               size_t len,
                                                               bool remote_access) override {
    ibv_context* device = DeviceOf(ns, laddr);
    if (device == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat(laddr.ToString(), " is not on an RDMA device"));
    }
    absl::StatusOr<const VerbsApi*> api = Usable();
    if (!api.ok()) return api.status();
    absl::StatusOr<SharedPd> pd = ProtectionDomainFor(**api, device);
    if (!pd.ok()) return pd.status();
    // Zero-based from the first page, as the kernel maps its regions: a
    // peer's address is the cookie's in-page offset plus its own offset.
    const uint64_t iova = reinterpret_cast<uintptr_t>(addr) & (PageSize() - 1);
    const int access = remote_access ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                           IBV_ACCESS_REMOTE_WRITE
                                     : IBV_ACCESS_LOCAL_WRITE;
    // A local region keeps its addresses (our own work requests name them).
    ibv_mr* mr = (*api)->ibv.reg_mr_iova(pd->get(), addr, len,
                                         remote_access ? iova : reinterpret_cast<uintptr_t>(addr),
                                         access);
    if (mr == nullptr) {
      const int err = errno != 0 ? errno : ENOMEM;
      return RdsError(err == EINVAL ? EFAULT : err);  // EINVAL: not mapped (writable)
    }
    return std::unique_ptr<MemoryRegion>(new VerbsMemoryRegion(**api, *std::move(pd), mr));
  }

  void WithdrawAtExit() override {
    withdrawn_ = true;
    for (auto& [id, l] : listeners_) api_->cm.destroy_id(id);
    listeners_.clear();
  }

 private:
  // The device context `laddr` is on in `ns`, or null: the kernel's check
  // (rds_ib_laddr_check), an id bound to the address lands on a device.
  // librdmacm keeps its device contexts open for the process's life.
  ibv_context* DeviceOf(const std::shared_ptr<NetNs>& ns, const RdsAddr& laddr) {
    const auto key = std::make_pair(ns->key(), laddr);
    rds::MutexLock lock(&devices_mu_);
    if (auto it = devices_.find(key); it != devices_.end()) return it->second;
    ibv_context* device = nullptr;
    if (absl::StatusOr<const VerbsApi*> usable = Usable(); usable.ok()) {
      const VerbsApi& api = **usable;
      ns->RunIn([&]() -> absl::Status {
        rdma_cm_id* id = nullptr;
        if (api.cm.create_id(nullptr, &id, nullptr, RDMA_PS_TCP) != 0) return absl::OkStatus();
        sockaddr_storage sa = CmAddress(laddr, 0);
        if (api.cm.bind_addr(id, reinterpret_cast<sockaddr*>(&sa)) == 0) device = id->verbs;
        api.cm.destroy_id(id);
        return absl::OkStatus();
      }).IgnoreError();
      log::Info("%s %s on an RDMA device: its connections to other hosts use %s",
                laddr.ToString(), device ? "is" : "is not", device ? "RDMA verbs" : "TCP");
    }
    devices_[key] = device;
    return device;
  }

  struct Listener {
    std::shared_ptr<NetNs> ns;
    bool v6;
  };
  struct Tracked {
    std::weak_ptr<VerbsLink> link;
    AddressPair pair;
    bool v6;
    absl::Time started = absl::InfiniteFuture();  // when we began connecting (outgoing)
    const char* stage = "resolving the address";  // how far our connect got (outgoing)
  };

  absl::Status EnsureChannel() {
    if (channel_ != nullptr) return absl::OkStatus();
    absl::StatusOr<const VerbsApi*> usable = Usable();
    if (!usable.ok()) return usable.status();
    api_ = *usable;
    absl::StatusOr<rdma_event_channel*> channel = CreateEventChannel(*api_);
    if (!channel.ok()) return channel.status();
    channel_ = *channel;
    ctx_.loop->Add(channel_->fd, EPOLLIN, [this](uint32_t) { OnCmEvents(); });
    return absl::OkStatus();
  }

  // The ports are the host's: a kernel rds_rdma or another engine may hold
  // them. That engine may end (a daemon's parent, say) and nobody else would
  // answer the host's requests: try again now and then, quietly.
  void ListenOrRetry(const std::shared_ptr<NetNs>& ns, bool v6, bool first) {
    absl::StatusOr<rdma_cm_id*> l = Listen(ns, v6);
    if (l.ok()) {
      listeners_[*l] = Listener{ns, v6};
      log::Info("RDS over RDMA: listening on %s port %d%s", v6 ? "IPv6" : "IPv4",
                v6 ? ib::kCmPortV6 : ib::kCmPortV4, first ? "" : " (its holder is gone)");
      return;
    }
    if (first) {
      log::Info("RDS over RDMA: not listening on %s port %d (%s): another engine of this host or "
                "a kernel rds_rdma holds it; trying again every %d s",
                v6 ? "IPv6" : "IPv4", v6 ? ib::kCmPortV6 : ib::kCmPortV4, l.status().message(),
                static_cast<int>(absl::ToInt64Seconds(kRelistenEvery)));
    }
    ctx_.loop->After(kRelistenEvery, [this, ns, v6] {
      if (!withdrawn_) ListenOrRetry(ns, v6, /*first=*/false);
    });
  }

  absl::StatusOr<rdma_cm_id*> Listen(const std::shared_ptr<NetNs>& ns, bool v6) {
    rdma_cm_id* id = nullptr;
    absl::Status s = ns->RunIn([&]() -> absl::Status {
      if (api_->cm.create_id(channel_, &id, nullptr, RDMA_PS_TCP) != 0) {
        return absl::ResourceExhaustedError(absl::StrCat("rdma_create_id: ", strerror(errno)));
      }
      sockaddr_storage any =
          CmAddress(v6 ? RdsAddr{} : RdsAddr::FromV4(in_addr{htonl(INADDR_ANY)}),
                    v6 ? ib::kCmPortV6 : ib::kCmPortV4);
      if (api_->cm.bind_addr(id, reinterpret_cast<sockaddr*>(&any)) != 0 ||
          api_->cm.listen(id, kListenBacklog) != 0) {
        return absl::UnavailableError(strerror(errno));
      }
      return absl::OkStatus();
    });
    if (!s.ok()) {
      if (id != nullptr) api_->cm.destroy_id(id);
      return s;
    }
    return id;
  }

  void Track(rdma_cm_id* id, const std::shared_ptr<VerbsLink>& link, const AddressPair& pair,
             bool v6) {
    // Ids of closed links are gone (the link destroyed its id; no event of it
    // can come): forget them, and reuse of an id's address by a new id.
    absl::erase_if(ids_, [](const auto& kv) {
      std::shared_ptr<VerbsLink> l = kv.second.link.lock();
      return !l || l->closed();
    });
    ids_[id] = Tracked{link, pair, v6};
    pairs_[pair] = link;
  }

  // The live link of an address pair (connecting or up), or null.
  std::shared_ptr<VerbsLink> LinkOf(const AddressPair& pair) {
    auto it = pairs_.find(pair);
    if (it == pairs_.end()) return nullptr;
    std::shared_ptr<VerbsLink> l = it->second.lock();
    if (!l || l->closed()) {
      pairs_.erase(it);
      return nullptr;
    }
    return l;
  }

  std::shared_ptr<VerbsLink> LinkOf(rdma_cm_id* id, Tracked** tracked = nullptr) {
    auto it = ids_.find(id);
    if (it == ids_.end()) return nullptr;
    if (tracked != nullptr) *tracked = &it->second;
    std::shared_ptr<VerbsLink> l = it->second.link.lock();
    return l && !l->closed() ? l : nullptr;
  }

  void OnCmEvents() {
    for (;;) {
      rdma_cm_event* ev = nullptr;
      if (api_->cm.get_cm_event(channel_, &ev) != 0) return;  // EAGAIN: drained
      CmEvent e{ev->event, ev->id, ev->listen_id, ev->status, {}};
      const rdma_conn_param& cp = ev->param.conn;
      if (cp.private_data != nullptr && cp.private_data_len > 0) {
        const auto* p = static_cast<const uint8_t*>(cp.private_data);
        e.private_data.assign(p, p + cp.private_data_len);
      }
      e.responder_resources = cp.responder_resources;
      e.initiator_depth = cp.initiator_depth;
      api_->cm.ack_cm_event(ev);
      Dispatch(e);
    }
  }

  void Dispatch(const CmEvent& e) {
    if (e.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
      OnConnectRequest(e);
      return;
    }
    Tracked* tracked = nullptr;
    std::shared_ptr<VerbsLink> link = LinkOf(e.id, &tracked);
    if (!link) {
      log::Debug("RDMA CM: %s for no live connection", api_->cm.event_str(e.type));
      return;
    }
    switch (e.type) {
      case RDMA_CM_EVENT_ADDR_RESOLVED:
        tracked->stage = "resolving the route";
        if (api_->cm.resolve_route(e.id, kResolveTimeoutMs) != 0) {
          link->Fail(absl::UnavailableError(absl::StrCat("rdma_resolve_route: ", strerror(errno))));
        }
        return;
      case RDMA_CM_EVENT_ROUTE_RESOLVED:
        tracked->stage = "waiting for the peer's answer";
        ConnectResolved(*link, tracked->pair, tracked->v6);
        return;
      case RDMA_CM_EVENT_ESTABLISHED:
        if (link->outgoing() && !e.private_data.empty()) {
          // The passive side's answer: below 3.1 the kernel drops the connection.
          absl::StatusOr<ib::ConnectPrivate> rep = ib::DecodePrivate(e.private_data, tracked->v6);
          if (rep.ok() && (rep->version >> 8) != 0 && rep->version < ib::kProtocol3_1) {
            link->Fail(absl::UnavailableError(
                absl::StrFormat("the peer answered protocol %d.%d", rep->version >> 8,
                                rep->version & 0xff)));
            return;
          }
        }
        link->OnEstablished();
        return;
      case RDMA_CM_EVENT_REJECTED:
        link->Fail(RejectStatus(e));
        return;
      case RDMA_CM_EVENT_ADDR_ERROR:
      case RDMA_CM_EVENT_ROUTE_ERROR:
      case RDMA_CM_EVENT_CONNECT_ERROR:
      case RDMA_CM_EVENT_UNREACHABLE:
        link->Fail(absl::UnavailableError(
            absl::StrFormat("%s (status %d)", api_->cm.event_str(e.type), e.status)));
        return;
      case RDMA_CM_EVENT_DISCONNECTED:
      case RDMA_CM_EVENT_DEVICE_REMOVAL:
      case RDMA_CM_EVENT_ADDR_CHANGE:
        link->OnDisconnected(absl::UnavailableError(api_->cm.event_str(e.type)));
        return;
      default:  // TIMEWAIT_EXIT and the like: nothing to do
        return;
    }
  }

  absl::Status RejectStatus(const CmEvent& e) {
    if (e.status == kRejectInvalidServiceId) {
      return absl::NotFoundError("nobody serves RDS over RDMA at that address");
    }
    if (e.status == kRejectConsumerDefined && e.private_data.size() >= sizeof(int32_t)) {
      int32_t value;
      std::memcpy(&value, e.private_data.data(), sizeof value);  // the kernel's native int
      return absl::UnavailableError(absl::StrFormat("the peer rejected the connection (%d)", value));
    }
    return absl::UnavailableError(absl::StrFormat("the connection was rejected (reason %d)",
                                                  e.status));
  }

  void ConnectResolved(VerbsLink& link, const AddressPair& pair, bool v6) {
    if (absl::Status s = link.Attach(); !s.ok()) {
      link.Fail(s);
      return;
    }
    ib::ConnectPrivate mine;
    mine.saddr = pair.laddr;
    mine.daddr = pair.faddr;
    const std::vector<uint8_t> pdata = ib::EncodePrivate(mine, v6);
    rdma_conn_param cp{};
    cp.private_data = pdata.data();
    cp.private_data_len = static_cast<uint8_t>(pdata.size());
    ReadAtomicDepths(link.cm_id(), &cp.responder_resources, &cp.initiator_depth);
    cp.retry_count = 7;
    cp.rnr_retry_count = 7;  // infinite: a passive kernel posts its receives late (§1.5)
    if (api_->cm.connect(link.cm_id(), &cp) != 0) {
      link.Fail(absl::UnavailableError(absl::StrCat("rdma_connect: ", strerror(errno))));
    }
  }

  // The device's limits for RDMA reads in flight, as the kernel's active
  // side offers them (the passive side takes the smaller of both).
  void ReadAtomicDepths(rdma_cm_id* id, uint8_t* responder, uint8_t* initiator) {
    ibv_device_attr attr{};
    if (id->verbs == nullptr || api_->ibv.query_device(id->verbs, &attr) != 0) {
      *responder = *initiator = 1;
      return;
    }
    *responder = static_cast<uint8_t>(std::clamp(attr.max_qp_rd_atom, 1, 255));
    *initiator = static_cast<uint8_t>(std::clamp(attr.max_qp_init_rd_atom, 1, 255));
  }

  void Reject(rdma_cm_id* id, int32_t value, const std::string& why) {
    log::Info("RDS over RDMA: rejecting a connection (%d): %s", value, why);
    api_->cm.reject(id, &value, sizeof value);  // the kernel's native int (rds-ib.md §1.5)
    api_->cm.destroy_id(id);
  }

  // Whether our pending connect to `pair`'s peer gives way to its request.
  bool GivesWay(const AddressPair& pair, const VerbsLink& ours) {
    if (pair.faddr < pair.laddr) return true;
    auto it = ids_.find(ours.cm_id());
    return it != ids_.end() && absl::Now() - it->second.started > kUnansweredGivesWay;
  }

  void OnConnectRequest(const CmEvent& e) {
    auto lit = listeners_.find(e.listen_id);
    if (lit == listeners_.end()) {
      api_->cm.reject(e.id, nullptr, 0);
      api_->cm.destroy_id(e.id);
      return;
    }
    const Listener listener = lit->second;
    const bool v6 = listener.v6;
    const std::optional<uint16_t> version = ib::NegotiateVersion(e.private_data, v6);
    absl::StatusOr<ib::ConnectPrivate> req = ib::DecodePrivate(e.private_data, v6);
    if (!version || !req.ok()) {
      Reject(e.id, ib::kRejectIncompatible, "incompatible protocol version");
      return;
    }
    // The passive kernel's view: the connection is found by the private
    // data's addresses, not the CM's.
    const AddressPair pair{req->daddr, req->saddr};
    if (std::shared_ptr<VerbsLink> existing = LinkOf(pair)) {
      if (existing->established()) {
        // The peer connects again while ours is up: it restarted; ours is stale.
        existing->Fail(absl::UnavailableError("the peer connected again (stale connection)"));
        stats::Inc(stats::kIbListenClosedStale);
        Reject(e.id, 1, absl::StrCat(pair.faddr.ToString(), " connected again; the old "
                                     "connection is dropped, it retries"));
        return;
      }
      stats::Inc(stats::kIbConnectRaced);
      if (!GivesWay(pair, *existing)) {
        Reject(e.id, 1, absl::StrCat("we are connecting to ", pair.faddr.ToString(),
                                     " ourselves (race; the larger address gives way)"));
        return;
      }
      // Accepted below; the engine closes our pending connect when it adopts
      // this one (the peer's REJ of ours, if any, finds no id).
      log::Info("RDS over RDMA: %s connects to us while our connect to it is pending: "
                "ours gives way", pair.faddr.ToString());
    }
    const std::string what = absl::StrFormat("verbs incoming from %s", pair.faddr.ToString());
    absl::StatusOr<std::shared_ptr<VerbsLink>> made =
        VerbsLink::Create(*api_, *ctx_.loop, e.id, sizes_, what);
    if (!made.ok()) {
      // Create released the link's resources and the id with them.
      log::Info("%s: %s", what, made.status().message());
      return;
    }
    std::shared_ptr<VerbsLink> link = *std::move(made);
    ib::ConnectPrivate answer;
    answer.saddr = pair.laddr;
    answer.daddr = pair.faddr;
    answer.version = *version;
    const std::vector<uint8_t> pdata = ib::EncodePrivate(answer, v6);
    rdma_conn_param cp{};
    cp.private_data = pdata.data();
    cp.private_data_len = static_cast<uint8_t>(pdata.size());
    uint8_t responder = 1, initiator = 1;
    ReadAtomicDepths(e.id, &responder, &initiator);
    cp.responder_resources = std::min(responder, e.responder_resources);
    cp.initiator_depth = std::min(initiator, e.initiator_depth);
    cp.retry_count = 7;
    cp.rnr_retry_count = 7;
    if (api_->cm.accept(e.id, &cp) != 0) {
      log::Info("%s: rdma_accept: %s", what, strerror(errno));
      link->Close();  // destroys the id
      return;
    }
    link->set_endpoints(Link::Endpoints{{pair.laddr, v6 ? ib::kCmPortV6 : ib::kCmPortV4},
                                        {pair.faddr, PortOf(e.id->route.addr.dst_addr)}});
    Track(e.id, link, pair, v6);
    // Now, not at ESTABLISHED: the peer's first message (a kernel's
    // congestion map) may complete on the receive ring before the CM event.
    ctx_.on_accept(link, listener.ns);
  }

  void Shutdown() {
    if (api_ == nullptr) return;
    for (auto& [id, t] : ids_) {
      if (std::shared_ptr<VerbsLink> l = t.link.lock()) l->Close();
    }
    ids_.clear();
    pairs_.clear();
    for (auto& [id, l] : listeners_) api_->cm.destroy_id(id);
    listeners_.clear();
    if (channel_ != nullptr) {
      ctx_.loop->Remove(channel_->fd);
      DestroyEventChannel(*api_, channel_);
      channel_ = nullptr;
    }
  }

  const TransportContext ctx_;
  const VerbsLink::Sizes sizes_;
  rds::Mutex mu_;
  absl::flat_hash_set<NetNsKey> serving_ ABSL_GUARDED_BY(mu_);
  // The rest is the engine thread's.
  const VerbsApi* api_ = nullptr;
  rdma_event_channel* channel_ = nullptr;
  bool withdrawn_ = false;
  absl::flat_hash_map<rdma_cm_id*, Listener> listeners_;
  absl::flat_hash_map<rdma_cm_id*, Tracked> ids_;
  absl::flat_hash_map<AddressPair, std::weak_ptr<VerbsLink>> pairs_;
  rds::Mutex devices_mu_;
  // The device each local address is on (null: none), found once.
  absl::flat_hash_map<std::pair<NetNsKey, RdsAddr>, ibv_context*> devices_
      ABSL_GUARDED_BY(devices_mu_);
};

}  // namespace

absl::Status VerbsUsable() { return Usable().status(); }

std::unique_ptr<Transport> MakeVerbsTransport(const TransportContext& ctx,
                                              VerbsLink::Sizes sizes) {
  return std::make_unique<VerbsTransport>(ctx, sizes);
}

}  // namespace rds::verbs
