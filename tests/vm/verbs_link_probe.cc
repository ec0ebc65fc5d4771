// tests/vm/verbs_link_probe.cc — transports/verbs/verbs_link.h against a kernel rds_rdma
// node (tests/vm/test_ib_wire.py runs it in two guests with soft-RoCE): the link in an
// event loop of its own, without the engine.
//
//   verbs_link_probe LOCAL_ADDR PEER_ADDR PEER_PORT
//
// Connects to PEER_ADDR (RDMA CM, port 18634), hands the connection to a VerbsLink and
// sends, all queued at once, messages from port 4000 to PEER_PORT where the node's
// rds_echo.py server echoes each: sizes around the 4 KiB fragment up to 1 MiB, then a burst
// of 200 small ones. Every echo must come back whole and in order, and the node's
// acknowledgements (h_ack, through on_transport_acked) must reach the last message.
// Prints "ok N echoed, acked through S" or "FAIL ..." (exit 1).
#include <arpa/inet.h>
#include <poll.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/event_loop.h"
#include "engine/message.h"
#include "transports/verbs/ib_wire.h"
#include "transports/verbs/verbs_api.h"
#include "transports/verbs/verbs_link.h"

namespace {

using rds::verbs::VerbsApi;
using rds::verbs::VerbsLink;
namespace ib = rds::ib;
namespace wire = rds::wire;

constexpr uint16_t kOurPort = 4000;

[[noreturn]] void Fail(const std::string& why) {
  std::printf("FAIL %s\n", why.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

std::string Payload(size_t i, size_t size) {
  char head[16];
  std::snprintf(head, sizeof head, "%08zu", i);
  std::string out;
  while (out.size() < size) out += head;
  out.resize(size);
  return out;
}

rdma_cm_event* NextEvent(const VerbsApi& api, rdma_event_channel* ch, int timeout_ms) {
  pollfd p{ch->fd, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) return nullptr;
  rdma_cm_event* ev = nullptr;
  return api.cm.get_cm_event(ch, &ev) == 0 ? ev : nullptr;
}

void Expect(const VerbsApi& api, rdma_event_channel* ch, rdma_cm_event_type want) {
  rdma_cm_event* ev = NextEvent(api, ch, 10000);
  if (ev == nullptr) Fail(std::string("no ") + api.cm.event_str(want));
  if (ev->event != want) {
    Fail(std::string(api.cm.event_str(ev->event)) + " waiting for " + api.cm.event_str(want));
  }
  api.cm.ack_cm_event(ev);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: verbs_link_probe LOCAL_ADDR PEER_ADDR PEER_PORT\n");
    return 2;
  }
  absl::StatusOr<const VerbsApi*> loaded = rds::verbs::LoadVerbs();
  if (!loaded.ok()) Fail(std::string(loaded.status().message()));
  const VerbsApi& api = **loaded;
  const uint16_t peer_port = static_cast<uint16_t>(std::atoi(argv[3]));

  std::vector<size_t> sizes = {0, 1, 48, 4095, 4096, 4097, 8192, 10000, 65536, 1 << 20};
  for (int i = 0; i < 200; ++i) sizes.push_back(64);

  rds::EventLoop loop;
  rdma_event_channel* events = api.cm.create_event_channel();
  if (events == nullptr) Fail("cannot create an RDMA CM event channel");
  std::shared_ptr<VerbsLink> link;
  rdma_cm_id* id = nullptr;
  size_t echoed = 0;
  uint64_t acked = 0;
  bool map = false;

  loop.Post([&] {
    sockaddr_in local{}, peer{};
    local.sin_family = peer.sin_family = AF_INET;
    peer.sin_port = htons(ib::kCmPortV4);
    if (inet_pton(AF_INET, argv[1], &local.sin_addr) != 1 ||
        inet_pton(AF_INET, argv[2], &peer.sin_addr) != 1) {
      Fail("addresses must be IPv4");
    }
    if (api.cm.create_id(events, &id, nullptr, RDMA_PS_TCP) != 0 ||
        api.cm.resolve_addr(id, reinterpret_cast<sockaddr*>(&local),
                            reinterpret_cast<sockaddr*>(&peer), 5000) != 0) {
      Fail("cannot resolve the address");
    }
    Expect(api, events, RDMA_CM_EVENT_ADDR_RESOLVED);
    if (api.cm.resolve_route(id, 5000) != 0) Fail("cannot resolve the route");
    Expect(api, events, RDMA_CM_EVENT_ROUTE_RESOLVED);
    absl::StatusOr<std::shared_ptr<VerbsLink>> made =
        VerbsLink::Create(api, loop, id, {}, "probe->node");
    if (!made.ok()) Fail(std::string(made.status().message()));
    link = *made;
    link->ReportTransportAcks();
    rds::Link::Callbacks cb;
    cb.on_message = [&](wire::Header&& h, rds::Payload&& p) {
      if (wire::IsCongMap(h)) {
        map = true;
        return;
      }
      if (h.sport != peer_port || h.dport != kOurPort) {
        std::printf("other message %u->%u, %u bytes\n", h.sport, h.dport, h.len);
        return;
      }
      const std::string got(reinterpret_cast<const char*>(p.data()), p.size());
      if (echoed >= sizes.size() || got != Payload(echoed, sizes[echoed])) {
        Fail("echo " + std::to_string(echoed) + " (" + std::to_string(p.size()) +
             " bytes) is not what was sent");
      }
      ++echoed;
    };
    cb.on_transport_acked = [&](uint64_t seq) { acked = seq; };
    cb.on_closed = [&](const absl::Status& why) { Fail("link closed: " + why.ToString()); };
    link->SetCallbacks(std::move(cb));
    // Everything queued before the connection is up: sent once it is.
    for (size_t i = 0; i < sizes.size(); ++i) {
      rds::MessagePtr m = rds::NewMessage();
      m->header.sequence = i + 1;
      m->header.sport = kOurPort;
      m->header.dport = peer_port;
      m->header.len = static_cast<uint32_t>(sizes[i]);
      const std::string body = Payload(i, sizes[i]);
      m->payload = rds::Payload(body.data(), body.size());
      link->Send(std::move(m));
    }
    ib::ConnectPrivate mine;
    mine.saddr = rds::RdsAddr::FromV4(local.sin_addr);
    mine.daddr = rds::RdsAddr::FromV4(peer.sin_addr);
    const std::vector<uint8_t> pdata = ib::EncodePrivate(mine, false);
    rdma_conn_param cp{};
    cp.private_data = pdata.data();
    cp.private_data_len = static_cast<uint8_t>(pdata.size());
    cp.responder_resources = cp.initiator_depth = 1;
    cp.retry_count = 7;
    cp.rnr_retry_count = 7;
    if (api.cm.connect(id, &cp) != 0) Fail("rdma_connect failed");
    loop.Add(events->fd, EPOLLIN, [&](uint32_t) {
      rdma_cm_event* ev = NextEvent(api, events, 0);
      if (ev == nullptr) return;
      const rdma_cm_event_type type = ev->event;
      api.cm.ack_cm_event(ev);
      if (type == RDMA_CM_EVENT_ESTABLISHED) {
        link->OnEstablished();
      } else {
        Fail(std::string("connection event ") + api.cm.event_str(type));
      }
    });
  });
  // Done when every echo came and the node acknowledged our last message.
  std::function<void()> check;
  int waited_ms = 0;
  check = [&] {
    if (echoed == sizes.size() && acked >= sizes.size()) {
      std::printf("ok %zu echoed, acked through %llu%s\n", echoed,
                  static_cast<unsigned long long>(acked), map ? ", congestion map received" : "");
      std::fflush(stdout);
      std::_Exit(0);
    }
    if ((waited_ms += 100) > 60000) {
      Fail("after 60 s: " + std::to_string(echoed) + " of " + std::to_string(sizes.size()) +
           " echoed, acked through " + std::to_string(acked));
    }
    loop.After(absl::Milliseconds(100), check);
  };
  loop.Post([&] { loop.After(absl::Milliseconds(100), check); });
  loop.Run();
  return 1;
}
