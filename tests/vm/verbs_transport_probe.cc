// tests/vm/verbs_transport_probe.cc — transports/verbs/verbs_transport.h in an event loop of its
// own, without the engine (tests/vm/test_ib_wire.py runs it in two guests with soft-RoCE).
//
//   verbs_transport_probe connect LOCAL_ADDR PEER_ADDR PEER_PORT COUNT
//       Connects through the transport (address and route resolution, REQ with the private
//       data) and sends COUNT messages from port 4100 to PEER_PORT, sizes cycling through
//       0 B .. 64 KiB around the 4 KiB fragment, where an echo server (rds_echo.py on a kernel
//       node, or this probe's `serve` on a shim host) sends each back. Every echo must come back
//       whole and in order and the peer must acknowledge (h_ack) the last message. A connect
//       refused before it is up (a race with the node's own reconnect) is tried again, at most
//       5 times. Prints "ok N echoed, acked through S" or "FAIL ...".
//   verbs_transport_probe serve LOCAL_ADDR SECONDS
//       Serves (the kernel's two listeners), accepts, and echoes every message back to its
//       sender (numbered per connection), for SECONDS or until killed. Prints "listening", then
//       "accepted FROM" per connection and "served N" at the end.
//
// Exit status 0 on success, 1 on failure.
#include <arpa/inet.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/event_loop.h"
#include "engine/message.h"
#include "engine/netns.h"
#include "transports/transport.h"
#include "transports/verbs/verbs_transport.h"

namespace {

namespace wire = rds::wire;
constexpr uint16_t kOurPort = 4100;

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

rds::RdsAddr Parse(const char* text) {
  in_addr v4{};
  if (inet_pton(AF_INET, text, &v4) == 1) return rds::RdsAddr::FromV4(v4);
  rds::RdsAddr a;
  if (inet_pton(AF_INET6, text, &a) != 1) Fail(std::string("not an address: ") + text);
  return a;
}

rds::MessagePtr Message(uint64_t seq, uint16_t sport, uint16_t dport, const std::string& body) {
  rds::MessagePtr m = rds::NewMessage();
  m->header.sequence = seq;
  m->header.sport = sport;
  m->header.dport = dport;
  m->header.len = static_cast<uint32_t>(body.size());
  m->payload = rds::Payload(body.data(), body.size());
  return m;
}

int Connect(rds::EventLoop& loop, rds::Transport& t, const rds::RdsAddr& local,
            const rds::RdsAddr& peer, uint16_t peer_port, size_t count) {
  static const size_t kSizes[] = {0, 1, 48, 4095, 4096, 4097, 8192, 10000, 65536, 64};
  std::shared_ptr<rds::Link> link;
  size_t echoed = 0;
  uint64_t acked = 0;
  bool connected = false;
  int attempts = 0;
  std::function<void()> attempt;
  attempt = [&] {
    ++attempts;
    absl::StatusOr<std::shared_ptr<rds::NetNs>> ns = rds::NetNs::OfCurrentThread();
    if (!ns.ok()) Fail("no namespace");
    absl::StatusOr<std::shared_ptr<rds::Link>> made =
        t.Connect(rds::LinkTarget{*ns, local, peer, 0}, "probe");
    if (!made.ok()) Fail("connect: " + made.status().ToString());
    link = *made;
    link->ReportTransportAcks();
    rds::Link::Callbacks cb;
    cb.on_connected = [&] { connected = true; };
    cb.on_message = [&](wire::Header&& h, rds::Payload&& p) {
      if (wire::IsCongMap(h)) return;
      if (h.sport != peer_port || h.dport != kOurPort) {
        std::printf("other message %u->%u, %u bytes\n", h.sport, h.dport, h.len);
        return;
      }
      const std::string got(reinterpret_cast<const char*>(p.data()), p.size());
      const size_t size = kSizes[echoed % std::size(kSizes)];
      if (echoed >= count || got != Payload(echoed, size)) {
        Fail("echo " + std::to_string(echoed) + " (" + std::to_string(p.size()) +
             " bytes) is not what was sent");
      }
      ++echoed;
    };
    cb.on_transport_acked = [&](uint64_t seq) { acked = seq; };
    cb.on_closed = [&](const absl::Status& why) {
      // Refused before it was up: a race with the node's own reconnect (both sides of an RDS/IB
      // connection reconnect after a drop, rds-ib.md §1.8) — tried again after a random
      // while, as the engine does.
      if (!connected && attempts < 5) {
        std::printf("attempt %d: %s; again\n", attempts, why.ToString().c_str());
        std::fflush(stdout);
        loop.After(absl::Milliseconds(100 + std::rand() % 500), attempt);
        return;
      }
      Fail("link closed: " + why.ToString());
    };
    link->SetCallbacks(std::move(cb));
    for (size_t i = 0; i < count; ++i) {
      link->Send(Message(i + 1, kOurPort, peer_port, Payload(i, kSizes[i % std::size(kSizes)])));
    }
  };
  loop.Post([&] { attempt(); });
  std::function<void()> check;
  int waited_ms = 0;
  check = [&] {
    if (connected && echoed == count && acked >= count) {
      std::printf("ok %zu echoed, acked through %llu\n", echoed,
                  static_cast<unsigned long long>(acked));
      std::fflush(stdout);
      std::_Exit(0);
    }
    if ((waited_ms += 100) > 60000) {
      Fail("after 60 s: " + std::string(connected ? "connected, " : "not connected, ") +
           std::to_string(echoed) + " of " + std::to_string(count) + " echoed, acked through " +
           std::to_string(acked));
    }
    loop.After(absl::Milliseconds(100), check);
  };
  loop.Post([&] { loop.After(absl::Milliseconds(100), check); });
  loop.Run();
  return 1;
}

int Serve(rds::EventLoop& loop, rds::TransportContext ctx, int seconds) {
  size_t served = 0;
  struct Accepted {
    std::shared_ptr<rds::Link> link;
    uint64_t next_seq = 1;
  };
  std::vector<std::shared_ptr<Accepted>> accepted;
  ctx.on_accept = [&](std::shared_ptr<rds::Link> link, std::shared_ptr<rds::NetNs>) {
    auto a = std::make_shared<Accepted>();
    a->link = link;
    accepted.push_back(a);
    std::printf("accepted %s\n", link->Describe().c_str());
    std::fflush(stdout);
    link->ReportTransportAcks();
    rds::Link::Callbacks cb;
    std::weak_ptr<Accepted> weak = a;
    cb.on_message = [&, weak](wire::Header&& h, rds::Payload&& p) {
      auto a = weak.lock();
      if (!a || wire::IsCongMap(h) || h.dport == 0) return;
      const std::string body(reinterpret_cast<const char*>(p.data()), p.size());
      a->link->Send(Message(a->next_seq++, h.dport, h.sport, body));
      ++served;
    };
    cb.on_closed = [&, weak](const absl::Status& why) {
      std::printf("closed: %s\n", why.ToString().c_str());
      std::fflush(stdout);
    };
    link->SetCallbacks(std::move(cb));
  };
  std::unique_ptr<rds::Transport> t = rds::verbs::MakeVerbsTransport(ctx);
  absl::StatusOr<std::shared_ptr<rds::NetNs>> ns = rds::NetNs::OfCurrentThread();
  if (!ns.ok()) Fail("no namespace");
  if (absl::Status s = rds::verbs::VerbsUsable(); !s.ok()) Fail(std::string(s.message()));
  if (absl::Status s = t->Serve(*ns); !s.ok()) Fail("serve: " + s.ToString());
  loop.Post([&] {
    std::printf("listening\n");
    std::fflush(stdout);
  });
  loop.After(absl::Seconds(seconds), [&] {
    std::printf("served %zu\n", served);
    std::fflush(stdout);
    std::_Exit(0);
  });
  loop.Run();
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  rds::EventLoop loop;
  rds::TransportContext ctx;
  ctx.loop = &loop;
  ctx.own_pid = static_cast<uint32_t>(getpid());
  ctx.on_accept = [](std::shared_ptr<rds::Link> link, std::shared_ptr<rds::NetNs>) {
    link->Close();  // connect mode: the peer connects to us only in a race, lost here
  };
  if (mode == "connect" && argc == 6) {
    std::unique_ptr<rds::Transport> t = rds::verbs::MakeVerbsTransport(ctx);
    return Connect(loop, *t, Parse(argv[2]), Parse(argv[3]),
                   static_cast<uint16_t>(std::atoi(argv[4])), std::strtoul(argv[5], nullptr, 10));
  }
  if (mode == "serve" && argc == 4) return Serve(loop, ctx, std::atoi(argv[3]));
  std::fprintf(stderr,
               "usage: verbs_transport_probe connect LOCAL PEER PEER_PORT COUNT\n"
               "       verbs_transport_probe serve LOCAL SECONDS\n");
  return 2;
}
