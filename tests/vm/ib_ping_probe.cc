// tests/vm/ib_ping_probe.cc — the verbs transport's wire (transports/verbs/ib_wire.h)
// and rdma-core loading (verbs_api.h) against a kernel rds_rdma node, over soft-RoCE
// in two guests of ../shared/vm (tests/vm/test_ib_wire.py runs it): no engine, just
// the bytes a kernel must accept.
//
//   ib_ping_probe connect LOCAL_ADDR PEER_ADDR COUNT
//       Connects through the RDMA CM to PEER_ADDR:18634 with the 32-byte private data
//       (IPv6: port 16385, the 56-byte layout; protocol 3.1), receive ring posted first; sends COUNT pings (empty messages from
//       port 4000 to port 0, checksummed headers, ACK_REQUIRED, SOLICITED) one at a time
//       and waits for each pong. Prints "ok N pongs, acked through S".
//   ib_ping_probe accept LOCAL_ADDR SIZE,SIZE,...
//       Listens on LOCAL_ADDR:18634 (IPv6: 16385); the node connects (it has messages for this host):
//       its request's version and private data are checked and answered; then messages
//       of the given sizes must arrive in order with rds_echo.py's numbered content
//       (fragments reassembled). Prints "ok N messages".
// Both answer ACK_REQUIRED with an ack-only frame, report the node's congestion map
// and the version it proposed or answered, and print "FAIL ..." (exit 1) on any error.
#include <arpa/inet.h>
#include <poll.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "engine/wire.h"
#include "transports/verbs/ib_wire.h"
#include "transports/verbs/verbs_api.h"

namespace {

using rds::verbs::VerbsApi;
namespace ib = rds::ib;
namespace wire = rds::wire;

constexpr int kRecvSlots = 256;
constexpr int kSendSlots = 64;
constexpr uint16_t kOurPort = 4000;
constexpr uint16_t kNodePort = 5000;  // the node's sender in accept mode (tests/vm/ib_wire.sh)

const VerbsApi* api;
rdma_event_channel* events;

[[noreturn]] void Fail(const std::string& why) {
  std::printf("FAIL %s\n", why.c_str());
  std::fflush(stdout);
  std::exit(1);
}

// The next CM event, which must be `want`.
rdma_cm_event* Expect(rdma_cm_event_type want, int timeout_ms) {
  pollfd p{events->fd, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) {
    Fail(std::string("no ") + api->cm.event_str(want) + " within " +
         std::to_string(timeout_ms) + " ms");
  }
  rdma_cm_event* ev = nullptr;
  if (api->cm.get_cm_event(events, &ev) != 0) Fail("rdma_get_cm_event failed");
  if (ev->event != want) {
    std::string detail;
    if (ev->event == RDMA_CM_EVENT_REJECTED && ev->param.conn.private_data_len >= 4) {
      int value;
      std::memcpy(&value, ev->param.conn.private_data, sizeof value);
      detail = " (reject value " + std::to_string(value) + ")";
    }
    Fail(std::string(api->cm.event_str(ev->event)) + ", status " + std::to_string(ev->status) +
         detail + ", waiting for " + api->cm.event_str(want));
  }
  return ev;
}

// An IPv4 or IPv6 address with the RDMA CM port RDS uses for its family
// (18634 for IPv4, 16385 for IPv6), or port 0.
struct Addr {
  sockaddr_storage ss{};
  bool v6 = false;
  rds::RdsAddr rds;
  sockaddr* sa() { return reinterpret_cast<sockaddr*>(&ss); }
};

Addr Parse(const char* text, bool cm_port) {
  Addr a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.ss);
  if (inet_pton(AF_INET, text, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(cm_port ? ib::kCmPortV4 : 0);
    a.rds = rds::RdsAddr::FromV4(v4->sin_addr);
  } else if (inet_pton(AF_INET6, text, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(cm_port ? ib::kCmPortV6 : 0);
    a.v6 = true;
    a.rds = rds::RdsAddr::FromV6(v6->sin6_addr, 0);
  } else {
    Fail(std::string("not an IP address: ") + text);
  }
  return a;
}

// A queue pair on `id` with its receive ring posted and its send headers, all
// in memory registered once.
struct Endpoint {
  rdma_cm_id* id = nullptr;
  ibv_cq* cq = nullptr;
  std::vector<uint8_t> rx, tx;
  ibv_mr* rx_mr = nullptr;
  ibv_mr* tx_mr = nullptr;
  int next_send_slot = 0;

  explicit Endpoint(rdma_cm_id* cm_id) : id(cm_id) {
    ibv_pd* pd = api->ibv.alloc_pd(id->verbs);
    cq = api->ibv.create_cq(id->verbs, kRecvSlots + kSendSlots + 8, nullptr, nullptr, 0);
    if (pd == nullptr || cq == nullptr) Fail("cannot allocate a PD or CQ");
    ibv_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = kSendSlots + 1;
    qa.cap.max_recv_wr = kRecvSlots;
    qa.cap.max_send_sge = 2;
    qa.cap.max_recv_sge = 1;
    if (api->cm.create_qp(id, pd, &qa) != 0) Fail("rdma_create_qp failed");
    // Receives are posted before connecting or accepting: the kernel sends its
    // congestion map as soon as it sees the connection established.
    rx.resize(size_t{kRecvSlots} * ib::kReceiveBufferSize);
    tx.resize(size_t{kSendSlots} * wire::kHeaderSize);
    rx_mr = api->ibv.reg_mr(pd, rx.data(), rx.size(), IBV_ACCESS_LOCAL_WRITE);
    tx_mr = api->ibv.reg_mr(pd, tx.data(), tx.size(), 0);
    if (rx_mr == nullptr || tx_mr == nullptr) Fail("ibv_reg_mr failed");
    for (int s = 0; s < kRecvSlots; ++s) PostRecv(s);
  }

  void PostRecv(int slot) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(&rx[size_t(slot) * ib::kReceiveBufferSize]),
                static_cast<uint32_t>(ib::kReceiveBufferSize), rx_mr->lkey};
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = static_cast<uint64_t>(slot);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(id->qp, &wr, &bad) != 0) Fail("ibv_post_recv failed");
  }

  // A header-only SEND (a ping or an ack-only frame), checksummed, solicited.
  void PostHeader(const wire::Header& h) {
    uint8_t* slot = &tx[size_t(next_send_slot) * wire::kHeaderSize];
    next_send_slot = (next_send_slot + 1) % kSendSlots;
    wire::Encode(h, slot);
    wire::SetHeaderChecksum(slot);
    ibv_sge sge{reinterpret_cast<uintptr_t>(slot), static_cast<uint32_t>(wire::kHeaderSize),
                tx_mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_send(id->qp, &wr, &bad) != 0) Fail("ibv_post_send failed");
  }

  // Polls until `done` says so or `seconds` pass, handing each complete
  // message (congestion maps included) to `on_message`; answers ACK_REQUIRED
  // with an ack-only frame and tracks the highest h_ack.
  template <typename OnMessage, typename Done>
  void Run(int seconds, const char* what, OnMessage on_message, Done done) {
    for (int spins = 0; !done(); ++spins) {
      if (spins > seconds * 2000) Fail(std::string(what) + " within " + std::to_string(seconds) + " s");
      ibv_wc wc[16];
      const int n = ibv_poll_cq(cq, 16, wc);
      if (n < 0) Fail("ibv_poll_cq failed");
      if (n == 0) {
        usleep(500);
        continue;
      }
      for (int k = 0; k < n; ++k) {
        if (wc[k].status != IBV_WC_SUCCESS) {
          Fail(std::string("completion error: ") + api->ibv.wc_status_str(wc[k].status));
        }
        if (!(wc[k].opcode & IBV_WC_RECV)) continue;
        const int slot = static_cast<int>(wc[k].wr_id);
        absl::StatusOr<ib::FragmentAssembler::Result> r = assembler.Feed(
            {&rx[size_t(slot) * ib::kReceiveBufferSize], wc[k].byte_len});
        PostRecv(slot);
        if (!r.ok()) Fail(std::string(r.status().message()));
        if (r->ack > acked) acked = r->ack;
        if (!r->header) continue;
        if (wire::IsCongMap(*r->header)) {
          std::printf("congestion map: %u bytes\n", r->header->len);
          saw_map = true;
          continue;
        }
        last_rx = r->header->sequence;
        if (r->header->flags & wire::kFlagAckRequired) {
          wire::Header ack;  // ack-only: sequence 0, ports 0, no payload
          ack.ack = last_rx;
          PostHeader(ack);
        }
        on_message(*r->header, r->payload);
      }
    }
  }

  ib::FragmentAssembler assembler;
  uint64_t last_rx = 0, acked = 0;
  bool saw_map = false;
};

void PrintTheirs(const rdma_conn_param& conn, bool request, bool v6) {
  absl::StatusOr<ib::ConnectPrivate> theirs = ib::DecodePrivate(
      {static_cast<const uint8_t*>(conn.private_data), conn.private_data_len}, v6);
  if (!theirs.ok()) Fail(std::string(theirs.status().message()));
  std::printf("%s: protocol %d.%d, their credit %u, from %s to %s\n",
              request ? "request" : "established", theirs->version >> 8, theirs->version & 0xff,
              theirs->credit, theirs->saddr.ToString().c_str(),
              theirs->daddr.ToString().c_str());
}

// Active side: COUNT pings to the node's port 0, each answered by a pong.
int Connect(const char* local_addr, const char* peer_addr, int count) {
  Addr local = Parse(local_addr, false), peer = Parse(peer_addr, true);
  if (local.v6 != peer.v6) Fail("the two addresses are of different families");
  rdma_cm_id* id = nullptr;
  if (api->cm.create_id(events, &id, nullptr, RDMA_PS_TCP) != 0) {
    Fail("cannot create an RDMA CM id (is rdma_ucm loaded?)");
  }
  if (api->cm.resolve_addr(id, local.sa(), peer.sa(), 5000) != 0) {
    Fail("rdma_resolve_addr failed");
  }
  api->cm.ack_cm_event(Expect(RDMA_CM_EVENT_ADDR_RESOLVED, 10000));
  if (api->cm.resolve_route(id, 5000) != 0) Fail("rdma_resolve_route failed");
  api->cm.ack_cm_event(Expect(RDMA_CM_EVENT_ROUTE_RESOLVED, 10000));
  Endpoint ep(id);

  ib::ConnectPrivate mine;
  mine.saddr = local.rds;
  mine.daddr = peer.rds;
  const std::vector<uint8_t> pdata = ib::EncodePrivate(mine, local.v6);
  rdma_conn_param cp{};
  cp.private_data = pdata.data();
  cp.private_data_len = static_cast<uint8_t>(pdata.size());
  cp.responder_resources = 1;
  cp.initiator_depth = 1;
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  if (api->cm.connect(id, &cp) != 0) Fail("rdma_connect failed");
  rdma_cm_event* est = Expect(RDMA_CM_EVENT_ESTABLISHED, 15000);
  PrintTheirs(est->param.conn, false, local.v6);
  api->cm.ack_cm_event(est);

  for (int i = 1; i <= count; ++i) {
    wire::Header ping;
    ping.sequence = static_cast<uint64_t>(i);
    ping.ack = ep.last_rx;
    ping.sport = kOurPort;
    ping.flags = wire::kFlagAckRequired;
    ep.PostHeader(ping);
    bool ponged = false;
    ep.Run(10, ("no pong for ping " + std::to_string(i)).c_str(),
           [&](const wire::Header& h, const rds::Payload&) {
             if (h.sport == 0 && h.dport == kOurPort && h.len == 0) {
               ponged = true;
             } else {
               std::printf("message seq %llu %u->%u, %u bytes\n",
                           static_cast<unsigned long long>(h.sequence), h.sport, h.dport, h.len);
             }
           },
           [&] { return ponged; });
  }
  wire::Header ack;  // the node frees what we acknowledge, asked or not
  ack.ack = ep.last_rx;
  ep.PostHeader(ack);
  usleep(200 * 1000);
  std::printf("ok %d pongs, acked through %llu%s\n", count,
              static_cast<unsigned long long>(ep.acked),
              ep.saw_map ? ", congestion map received" : "");
  std::fflush(stdout);
  api->cm.disconnect(id);
  return 0;
}

// rds_echo.py's payload: the message number in 8 digits, repeated.
std::string Expected(int i, size_t size) {
  char head[16];
  std::snprintf(head, sizeof head, "%08d", i);
  std::string out;
  while (out.size() < size) out += head;
  out.resize(size);
  return out;
}

// Passive side: the node connects to us (it has a message for this host) and
// sends messages of the given sizes, numbered from 0, content checked.
int Accept(const char* local_addr, const std::string& sizes_arg) {
  std::vector<size_t> sizes;
  for (size_t pos = 0; pos < sizes_arg.size();) {
    size_t comma = sizes_arg.find(',', pos);
    if (comma == std::string::npos) comma = sizes_arg.size();
    sizes.push_back(std::stoul(sizes_arg.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  Addr local = Parse(local_addr, true);
  rdma_cm_id* listener = nullptr;
  if (api->cm.create_id(events, &listener, nullptr, RDMA_PS_TCP) != 0 ||
      api->cm.bind_addr(listener, local.sa()) != 0 || api->cm.listen(listener, 16) != 0) {
    Fail(std::string("cannot listen on ") + local_addr + "'s RDMA CM port");
  }
  std::printf("listening\n");
  std::fflush(stdout);
  rdma_cm_event* req = Expect(RDMA_CM_EVENT_CONNECT_REQUEST, 60000);
  rdma_cm_id* id = req->id;
  const absl::Span<const uint8_t> theirs(static_cast<const uint8_t*>(req->param.conn.private_data),
                                         req->param.conn.private_data_len);
  PrintTheirs(req->param.conn, true, local.v6);
  std::optional<uint16_t> version = ib::NegotiateVersion(theirs, local.v6);
  if (!version) Fail("the node proposed a version we would reject");
  absl::StatusOr<ib::ConnectPrivate> request = ib::DecodePrivate(theirs, local.v6);
  if (!request.ok()) Fail(std::string(request.status().message()));
  api->cm.ack_cm_event(req);
  Endpoint ep(id);
  ib::ConnectPrivate mine;
  mine.saddr = request->daddr;  // our RDS addresses, from our point of view
  mine.daddr = request->saddr;
  mine.version = *version;
  const std::vector<uint8_t> pdata = ib::EncodePrivate(mine, local.v6);
  rdma_conn_param cp{};
  cp.private_data = pdata.data();
  cp.private_data_len = static_cast<uint8_t>(pdata.size());
  cp.responder_resources = 1;
  cp.initiator_depth = 1;
  cp.rnr_retry_count = 7;
  if (api->cm.accept(id, &cp) != 0) Fail("rdma_accept failed");
  api->cm.ack_cm_event(Expect(RDMA_CM_EVENT_ESTABLISHED, 15000));
  std::printf("established\n");

  size_t next = 0;
  ep.Run(60, "not every message arrived", [&](const wire::Header& h, const rds::Payload& p) {
    if (h.sport != kNodePort || h.dport != kOurPort) {
      // Not the sender's: the node retransmits what the first connection left
      // unacknowledged (pongs), flagged RETRANSMITTED.
      std::printf("other message seq %llu %u->%u, flags %#x, %u bytes\n",
                  static_cast<unsigned long long>(h.sequence), h.sport, h.dport, h.flags, h.len);
      return;
    }
    const std::string got(reinterpret_cast<const char*>(p.data()), p.size());
    if (next >= sizes.size() || p.size() != sizes[next] || got != Expected(int(next), sizes[next])) {
      Fail("message " + std::to_string(next) + " of " + std::to_string(p.size()) +
           " bytes is not what was sent");
    }
    ++next;
  }, [&] { return next == sizes.size(); });
  // The node frees what we acknowledge: acknowledge the last one even unasked.
  wire::Header ack;
  ack.ack = ep.last_rx;
  ep.PostHeader(ack);
  usleep(200 * 1000);
  std::printf("ok %zu messages%s\n", sizes.size(),
              ep.saw_map ? ", congestion map received" : "");
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!((mode == "connect" && argc == 5) || (mode == "accept" && argc == 4))) {
    std::fprintf(stderr,
                 "usage: ib_ping_probe connect LOCAL_ADDR PEER_ADDR COUNT\n"
                 "       ib_ping_probe accept LOCAL_ADDR SIZE,SIZE,...\n");
    return 2;
  }
  absl::StatusOr<const VerbsApi*> loaded = rds::verbs::LoadVerbs();
  if (!loaded.ok()) Fail(std::string(loaded.status().message()));
  api = *loaded;
  std::printf("devices: %s\n", absl::StrJoin(rds::verbs::DeviceNames(*api), " ").c_str());
  events = api->cm.create_event_channel();
  if (events == nullptr) Fail("cannot create an RDMA CM event channel (is rdma_ucm loaded?)");
  return mode == "connect" ? Connect(argv[2], argv[3], std::atoi(argv[4]))
                           : Accept(argv[2], argv[3]);
}
