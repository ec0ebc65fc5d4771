// tests/vm/ib_ping_probe.cc — the verbs transport's wire (transports/verbs/ib_wire.h)
// and rdma-core loading (verbs_api.h) against a kernel rds_rdma node, over soft-RoCE
// in two guests of ../shared/vm (tests/vm/test_ib_wire.py runs it): no engine, just
// the bytes a kernel must accept.
//
//   ib_ping_probe LOCAL_ADDR PEER_ADDR COUNT
//
// Connects through the RDMA CM to PEER_ADDR:18634 with the 32-byte private data
// (protocol 3.1), receive ring posted first; sends COUNT pings (empty messages from
// port 4000 to port 0, checksummed headers, ACK_REQUIRED, SOLICITED) one at a time and
// waits for each pong; answers ACK_REQUIRED with an ack-only frame; reports the
// kernel's congestion map, the protocol version it answered and how far it acked our
// pings. Prints "ok N pongs, acked through S" and exits 0, or "FAIL ..." and exits 1.
#include <arpa/inet.h>
#include <poll.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
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

sockaddr_in V4(const char* addr, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) Fail(std::string("not an IPv4 address: ") + addr);
  return sa;
}

rds::RdsAddr Rds(const sockaddr_in& sa) { return rds::RdsAddr::FromV4(sa.sin_addr); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: ib_ping_probe LOCAL_ADDR PEER_ADDR COUNT\n");
    return 2;
  }
  const int count = std::atoi(argv[3]);
  absl::StatusOr<const VerbsApi*> loaded = rds::verbs::LoadVerbs();
  if (!loaded.ok()) Fail(std::string(loaded.status().message()));
  api = *loaded;
  std::printf("devices: %s\n", absl::StrJoin(rds::verbs::DeviceNames(*api), " ").c_str());

  sockaddr_in local = V4(argv[1], 0), peer = V4(argv[2], ib::kCmPortV4);
  events = api->cm.create_event_channel();
  rdma_cm_id* id = nullptr;
  if (events == nullptr || api->cm.create_id(events, &id, nullptr, RDMA_PS_TCP) != 0) {
    Fail("cannot create an RDMA CM id (is rdma_ucm loaded?)");
  }
  if (api->cm.resolve_addr(id, reinterpret_cast<sockaddr*>(&local),
                           reinterpret_cast<sockaddr*>(&peer), 5000) != 0) {
    Fail("rdma_resolve_addr failed");
  }
  api->cm.ack_cm_event(Expect(RDMA_CM_EVENT_ADDR_RESOLVED, 10000));
  if (api->cm.resolve_route(id, 5000) != 0) Fail("rdma_resolve_route failed");
  api->cm.ack_cm_event(Expect(RDMA_CM_EVENT_ROUTE_RESOLVED, 10000));

  ibv_pd* pd = api->ibv.alloc_pd(id->verbs);
  ibv_cq* cq = api->ibv.create_cq(id->verbs, kRecvSlots + kSendSlots + 8, nullptr, nullptr, 0);
  if (pd == nullptr || cq == nullptr) Fail("cannot allocate a PD or CQ");
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = kSendSlots + 1;
  qa.cap.max_recv_wr = kRecvSlots;
  qa.cap.max_send_sge = 2;
  qa.cap.max_recv_sge = 1;
  if (api->cm.create_qp(id, pd, &qa) != 0) Fail("rdma_create_qp failed");

  // Registered once: the receive ring (a header and a fragment per slot) and the
  // send headers. Receives are posted before connecting: the kernel sends its
  // congestion map as soon as it sees the connection established.
  std::vector<uint8_t> rx(size_t{kRecvSlots} * ib::kReceiveBufferSize);
  std::vector<uint8_t> tx(size_t{kSendSlots + 1} * wire::kHeaderSize);
  ibv_mr* rx_mr = api->ibv.reg_mr(pd, rx.data(), rx.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* tx_mr = api->ibv.reg_mr(pd, tx.data(), tx.size(), 0);
  if (rx_mr == nullptr || tx_mr == nullptr) Fail("ibv_reg_mr failed");
  auto post_recv = [&](int slot) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(&rx[size_t(slot) * ib::kReceiveBufferSize]),
                static_cast<uint32_t>(ib::kReceiveBufferSize), rx_mr->lkey};
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = static_cast<uint64_t>(slot);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(id->qp, &wr, &bad) != 0) Fail("ibv_post_recv failed");
  };
  for (int s = 0; s < kRecvSlots; ++s) post_recv(s);

  ib::ConnectPrivate mine;
  mine.saddr = Rds(local);
  mine.daddr = Rds(peer);
  const std::vector<uint8_t> pdata = ib::EncodePrivate(mine, /*v6=*/false);
  rdma_conn_param cp{};
  cp.private_data = pdata.data();
  cp.private_data_len = static_cast<uint8_t>(pdata.size());
  cp.responder_resources = 1;
  cp.initiator_depth = 1;
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  if (api->cm.connect(id, &cp) != 0) Fail("rdma_connect failed");
  rdma_cm_event* est = Expect(RDMA_CM_EVENT_ESTABLISHED, 15000);
  if (est->param.conn.private_data_len >= ib::kPrivateDataSizeV4) {
    absl::StatusOr<ib::ConnectPrivate> theirs = ib::DecodePrivate(
        {static_cast<const uint8_t*>(est->param.conn.private_data),
         est->param.conn.private_data_len}, false);
    if (theirs.ok()) {
      std::printf("established: protocol %d.%d, their credit %u\n", theirs->version >> 8,
                  theirs->version & 0xff, theirs->credit);
    }
  }
  api->cm.ack_cm_event(est);

  int next_send_slot = 0;
  auto post_send = [&](const wire::Header& h) {
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
  };

  ib::FragmentAssembler assembler;
  uint64_t last_rx = 0, acked = 0;
  bool saw_map = false;
  for (int i = 1; i <= count; ++i) {
    wire::Header ping;
    ping.sequence = static_cast<uint64_t>(i);
    ping.ack = last_rx;
    ping.sport = kOurPort;
    ping.flags = wire::kFlagAckRequired;
    post_send(ping);
    bool ponged = false;
    for (int spins = 0; !ponged; ++spins) {
      if (spins > 20000) Fail("no pong for ping " + std::to_string(i) + " within 10 s");
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
        post_recv(slot);
        if (!r.ok()) Fail(std::string(r.status().message()));
        if (r->ack > acked) acked = r->ack;
        if (!r->header) continue;
        const wire::Header& h = *r->header;
        if (wire::IsCongMap(h)) {
          std::printf("congestion map: %u bytes\n", h.len);
          saw_map = true;
          continue;
        }
        last_rx = h.sequence;
        if (h.flags & wire::kFlagAckRequired) {
          wire::Header ack;  // ack-only: sequence 0, ports 0, no payload
          ack.ack = last_rx;
          post_send(ack);
        }
        if (h.sport == 0 && h.dport == kOurPort && h.len == 0) {
          ponged = true;
        } else {
          std::printf("message seq %llu %u->%u, %u bytes\n",
                      static_cast<unsigned long long>(h.sequence), h.sport, h.dport, h.len);
        }
      }
    }
  }
  std::printf("ok %d pongs, acked through %llu%s\n", count,
              static_cast<unsigned long long>(acked), saw_map ? ", congestion map received" : "");
  std::fflush(stdout);
  api->cm.disconnect(id);
  return 0;
}
