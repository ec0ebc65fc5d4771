// engine/info.cc — RDS_INFO producers, the host-wide merge, and length
// negotiation.
#include "engine/info.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <linux/rds.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "conf/settings.h"
#include "absl/strings/numbers.h"
#include "engine/control.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/log.h"
#include "transports/host_channel.h"
#include "engine/registry.h"
#include "engine/shm_arena.h"
#include "engine/socket.h"
#include "engine/stats.h"
#include "engine/sys.h"
#include "engine/usercopy.h"

namespace rds {
namespace {

template <typename T>
void Append(InfoItems* items, const T& item) {
  const auto* p = reinterpret_cast<const uint8_t*>(&item);
  items->bytes.insert(items->bytes.end(), p, p + sizeof(T));
}

// The rds6_info_* structures are packed: their in6_addr fields may be misaligned.
void Copy16(const RdsAddr& a, void* out) {
  const in6_addr v6 = a.V6();
  std::memcpy(out, &v6, sizeof(v6));
}

InfoItems Counters() {
  InfoItems items{sizeof(rds_info_counter), {}};
  const bool ib = Engine::Get().RdmaAvailable();  // as a kernel without rds_rdma lists none
  for (int c = 0; c < stats::kNumCounters; ++c) {
    if (!ib && c >= stats::kNumKernelCounters && c < stats::kIbCountersEnd) continue;
    rds_info_counter ctr = {};
    std::strncpy(reinterpret_cast<char*>(ctr.name), stats::Name(static_cast<stats::Counter>(c)),
                 sizeof(ctr.name) - 1);
    ctr.value = stats::Get(static_cast<stats::Counter>(c));
    Append(&items, ctr);
  }
  return items;
}

InfoItems Sockets(const std::shared_ptr<NetNs>& ns, bool v6) {
  InfoItems items{v6 ? sizeof(rds6_info_socket) : sizeof(rds_info_socket), {}};
  for (const std::shared_ptr<RdsSocket>& s : LiveSockets(ns->key())) {
    rds::MutexLock lock(&s->mu);
    if (v6) {
      rds6_info_socket info = {};
      info.sndbuf = s->RdsSndbuf();
      info.rcvbuf = s->RdsRcvbuf();
      if (s->bound) {
        Copy16(s->bound->addr, &info.bound_addr);
        info.bound_port = htons(s->bound->port);
      }
      if (s->connected) {
        Copy16(s->connected->addr, &info.connected_addr);
        info.connected_port = htons(s->connected->port);
      }
      info.inum = s->inode;
      Append(&items, info);
    } else {
      if (!s->bound || !s->bound->addr.IsV4Mapped()) continue;
      rds_info_socket info = {};
      info.sndbuf = s->RdsSndbuf();
      info.rcvbuf = s->RdsRcvbuf();
      info.bound_addr = s->bound->addr.V4().s_addr;
      info.bound_port = htons(s->bound->port);
      if (s->connected && s->connected->addr.IsV4Mapped()) {
        info.connected_addr = s->connected->addr.V4().s_addr;
        info.connected_port = htons(s->connected->port);
      }
      info.inum = s->inode;
      Append(&items, info);
    }
  }
  return items;
}

bool BothV4(const RdsAddr& a, const RdsAddr& b) { return a.IsV4Mapped() && b.IsV4Mapped(); }

// Kernel RDS has one loopback connection per same-host address pair, used in
// both directions, whose NextRX equals its NextTX (rds_loop_xmit delivers on
// the sending connection). Same-host paths are reported that way: the row's
// sequences count what this engine sent; rows of the same pair from several
// engines are merged by the asking process (MergeLoopbackRows).
InfoItems Connections(const std::vector<PathInfo>& paths, bool v6) {
  InfoItems items{v6 ? sizeof(rds6_info_connection) : sizeof(rds_info_connection), {}};
  for (PathInfo p : paths) {
    if (!v6 && !BothV4(p.laddr, p.faddr)) continue;
    // A kernel node's connection is the owner's row (DESIGN.md §3.5), and
    // shows its first path only, as the kernel's (rds_walk_conn_path_info).
    if (p.relay_peer || (p.kernel_node && (p.node_owner != 0 || p.node_path != 0))) continue;
    if (p.same_host) p.next_rx_seq = p.next_tx_seq;
    uint8_t flags = (p.up ? RDS_INFO_CONNECTION_FLAG_CONNECTED : 0) |
                    (p.connecting ? RDS_INFO_CONNECTION_FLAG_CONNECTING : 0) |
                    (!p.send.empty() ? RDS_INFO_CONNECTION_FLAG_SENDING : 0);
    // Same-host links play the kernel's loopback connections.
    const char* transport = p.same_host ? "loopback" : "tcp";
    if (v6) {
      rds6_info_connection c = {};
      c.next_tx_seq = p.next_tx_seq;
      c.next_rx_seq = p.next_rx_seq;
      Copy16(p.laddr, &c.laddr);
      Copy16(p.faddr, &c.faddr);
      std::strncpy(reinterpret_cast<char*>(c.transport), transport, TRANSNAMSIZ - 1);
      c.flags = flags;
      Append(&items, c);
    } else {
      rds_info_connection c = {};
      c.next_tx_seq = p.next_tx_seq;
      c.next_rx_seq = p.next_rx_seq;
      c.laddr = p.laddr.V4().s_addr;
      c.faddr = p.faddr.V4().s_addr;
      std::strncpy(reinterpret_cast<char*>(c.transport), transport, TRANSNAMSIZ - 1);
      c.flags = flags;
      Append(&items, c);
    }
  }
  return items;
}

template <typename Info>
void FillMessage(Info* out, const MessageInfo& m) {
  out->seq = m.seq;
  out->len = m.len;
  out->lport = htons(m.lport);
  out->fport = htons(m.fport);
  out->flags = m.flags;
}

InfoItems SendOrRetrans(const std::vector<PathInfo>& paths, bool retrans, bool v6) {
  InfoItems items{v6 ? sizeof(rds6_info_message) : sizeof(rds_info_message), {}};
  for (const PathInfo& p : paths) {
    if (!v6 && !BothV4(p.laddr, p.faddr)) continue;
    // Relay links: what they carry is in the owner's node queues, or was.
    if (p.relay_peer || (retrans && p.kernel_node && p.node_owner != 0)) continue;
    for (const MessageInfo& m : retrans ? p.retrans : p.send) {
      if (v6) {
        rds6_info_message info = {};
        FillMessage(&info, m);
        Copy16(m.laddr, &info.laddr);
        Copy16(m.faddr, &info.faddr);
        Append(&items, info);
      } else {
        rds_info_message info = {};
        FillMessage(&info, m);
        info.laddr = m.laddr.V4().s_addr;
        info.faddr = m.faddr.V4().s_addr;
        Append(&items, info);
      }
    }
  }
  return items;
}

InfoItems RecvQueues(const std::shared_ptr<NetNs>& ns, bool v6) {
  InfoItems items{v6 ? sizeof(rds6_info_message) : sizeof(rds_info_message), {}};
  for (const std::shared_ptr<RdsSocket>& s : LiveSockets(ns->key())) {
    rds::MutexLock lock(&s->mu);
    if (!s->bound || (!v6 && !s->bound->addr.IsV4Mapped())) continue;
    for (const MessagePtr& m : s->recv_queue) {
      MessageInfo mi;
      mi.seq = m->header.sequence;
      mi.len = m->header.len;
      mi.laddr = s->bound->addr;
      mi.faddr = m->saddr;
      mi.lport = s->bound->port;
      mi.fport = m->header.sport;
      if (v6) {
        rds6_info_message info = {};
        FillMessage(&info, mi);
        Copy16(mi.laddr, &info.laddr);
        Copy16(mi.faddr, &info.faddr);
        Append(&items, info);
      } else {
        rds_info_message info = {};
        FillMessage(&info, mi);
        info.laddr = mi.laddr.V4().s_addr;
        info.faddr = mi.faddr.V4().s_addr;
        Append(&items, info);
      }
    }
  }
  return items;
}

InfoItems TcpSockets(const std::vector<PathInfo>& paths, bool v6) {
  InfoItems items{v6 ? sizeof(rds6_info_tcp_socket) : sizeof(rds_info_tcp_socket), {}};
  for (const PathInfo& p : paths) {
    if (!p.tcp_local || !p.tcp_peer) continue;
    if (v6) {
      rds6_info_tcp_socket t = {};
      Copy16(p.tcp_local->addr, &t.local_addr);
      t.local_port = htons(p.tcp_local->port);
      Copy16(p.tcp_peer->addr, &t.peer_addr);
      t.peer_port = htons(p.tcp_peer->port);
      Append(&items, t);
    } else {
      if (!BothV4(p.tcp_local->addr, p.tcp_peer->addr)) continue;
      rds_info_tcp_socket t = {};
      t.local_addr = p.tcp_local->addr.V4().s_addr;
      t.local_port = htons(p.tcp_local->port);
      t.peer_addr = p.tcp_peer->addr.V4().s_addr;
      t.peer_port = htons(p.tcp_peer->port);
      Append(&items, t);
    }
  }
  return items;
}

// RDS_INFO_IB_CONNECTIONS / RDS6_: one row per connection over RDMA (rds_ib_ic_info);
// GIDs and ring sizes only while it is up. No memory-registration pool (the
// RDMA API is not built): rdma_mr_max and rdma_mr_size 0.
InfoItems IbConnections(const std::vector<PathInfo>& paths, bool v6) {
  InfoItems items{v6 ? sizeof(rds6_info_rdma_connection) : sizeof(rds_info_rdma_connection), {}};
  for (const PathInfo& p : paths) {
    if (!p.rdma || p.node_path != 0) continue;
    const Link::RdmaInfo r = p.rdma_info.value_or(Link::RdmaInfo{});
    auto fill = [&r](auto& row) {
      std::memcpy(row.src_gid, r.src_gid, sizeof row.src_gid);
      std::memcpy(row.dst_gid, r.dst_gid, sizeof row.dst_gid);
      row.max_send_wr = r.max_send_wr;
      row.max_recv_wr = r.max_recv_wr;
      row.max_send_sge = r.max_send_sge;
    };
    if (v6) {
      rds6_info_rdma_connection row = {};
      Copy16(p.laddr, &row.src_addr);
      Copy16(p.faddr, &row.dst_addr);
      fill(row);
      Append(&items, row);
    } else {
      if (!BothV4(p.laddr, p.faddr)) continue;
      rds_info_rdma_connection row = {};
      row.src_addr = p.laddr.V4().s_addr;
      row.dst_addr = p.faddr.V4().s_addr;
      fill(row);
      Append(&items, row);
    }
  }
  return items;
}

// Counters are summed by name across engines; everything else concatenates.
void Merge(int option, InfoItems* into, const InfoItems& other) {
  if (other.each != into->each) return;  // a different layout: not comparable
  if (option != RDS_INFO_COUNTERS) {
    into->bytes.insert(into->bytes.end(), other.bytes.begin(), other.bytes.end());
    return;
  }
  for (size_t off = 0; off + sizeof(rds_info_counter) <= other.bytes.size();
       off += sizeof(rds_info_counter)) {
    rds_info_counter theirs;
    std::memcpy(&theirs, other.bytes.data() + off, sizeof(theirs));
    bool found = false;
    for (size_t mine = 0; mine + sizeof(rds_info_counter) <= into->bytes.size();
         mine += sizeof(rds_info_counter)) {
      rds_info_counter ours;
      std::memcpy(&ours, into->bytes.data() + mine, sizeof(ours));
      if (std::memcmp(ours.name, theirs.name, sizeof(ours.name)) == 0) {
        ours.value += theirs.value;
        std::memcpy(into->bytes.data() + mine, &ours, sizeof(ours));
        found = true;
        break;
      }
    }
    if (!found) Append(into, theirs);
  }
}

template <typename Row>
void MergeLoopbackRowsOf(InfoItems* items) {
  std::vector<Row> rows(items->bytes.size() / sizeof(Row));
  if (!rows.empty()) std::memcpy(rows.data(), items->bytes.data(), rows.size() * sizeof(Row));
  std::vector<Row> merged;
  for (const Row& r : rows) {
    bool loop = std::strncmp(reinterpret_cast<const char*>(r.transport), "loopback", TRANSNAMSIZ) == 0;
    Row* same = nullptr;
    for (Row& m : merged) {
      if (loop && std::strncmp(reinterpret_cast<const char*>(m.transport), "loopback", TRANSNAMSIZ) == 0 &&
          std::memcmp(&m.laddr, &r.laddr, sizeof(r.laddr)) == 0 &&
          std::memcmp(&m.faddr, &r.faddr, sizeof(r.faddr)) == 0) {
        same = &m;
        break;
      }
    }
    if (same == nullptr) {
      merged.push_back(r);
      continue;
    }
    uint64_t tx = same->next_tx_seq + r.next_tx_seq - 1;
    same->next_tx_seq = same->next_rx_seq = tx;
    same->flags |= r.flags;
  }
  items->bytes.assign(reinterpret_cast<const uint8_t*>(merged.data()),
                      reinterpret_cast<const uint8_t*>(merged.data() + merged.size()));
}

void MergeLoopbackRows(int option, InfoItems* items) {
  if (option == RDS_INFO_CONNECTIONS) {
    MergeLoopbackRowsOf<rds_info_connection>(items);
  } else {
    MergeLoopbackRowsOf<rds6_info_connection>(items);
  }
}

// Asks the engine listening at `path` for its items (bounded: 1 s a read).
std::optional<InfoItems> QueryEngine(const std::string& path, int option, NetNsKey ns) {
  control::Hello h;
  h.kind = control::HelloKind::kInfo;
  h.pid = static_cast<uint32_t>(getpid());
  h.uid = getuid();
  h.ns = ns;
  h.info_option = static_cast<uint32_t>(option);
  std::optional<InfoItems> result;
  control::InfoAnswerReader answer;
  bool answered = false;  // the engine accepted the query
  std::string failure;
  auto sink = [&](wire::Header&& hdr, Payload&& payload) {
    absl::StatusOr<control::Control> c = control::DecodeControl(hdr, payload);
    if (c.ok()) {
      if (absl::Status added = answer.Add(std::move(*c)); !added.ok()) {
        failure = std::string(added.message());
        return true;
      }
      if (!answer.complete()) return false;
      result = InfoItems{answer.each(), std::move(answer.bytes())};
      return true;
    }
    if (control::IsHello(hdr)) {
      absl::StatusOr<control::Hello> reply = control::DecodeHello(hdr, payload);
      if (!reply.ok() || reply->result != control::HelloResult::kAnswer) return true;
      answered = true;
    }
    return false;
  };
  absl::Status s = host_channel::Ask(path, control::EncodeHello(h), sink, absl::Seconds(1));
  // Nobody there (an engine that has just exited): no rows to give.
  if (absl::IsNotFound(s)) return std::nullopt;
  if (!s.ok() && failure.empty()) failure = std::string(s.message());
  // An engine that refuses (it does not serve this namespace) has no rows to
  // give; one that fails to answer has, and they are missing from the result.
  if (!failure.empty() && (answered || !answer.bytes().empty())) {
    log::Warn("RDS_INFO option %d: the engine at %s did not answer in full (%s); its rows "
              "are left out",
              option, path, failure);
  }
  return result;
}

bool Registered(int option) {
  switch (option) {
    case RDS_INFO_COUNTERS:
    case RDS_INFO_CONNECTIONS:
    case RDS_INFO_SEND_MESSAGES:
    case RDS_INFO_RETRANS_MESSAGES:
    case RDS_INFO_RECV_MESSAGES:
    case RDS_INFO_SOCKETS:
    case RDS_INFO_TCP_SOCKETS:
    case RDS6_INFO_CONNECTIONS:
    case RDS6_INFO_SEND_MESSAGES:
    case RDS6_INFO_RETRANS_MESSAGES:
    case RDS6_INFO_RECV_MESSAGES:
    case RDS6_INFO_SOCKETS:
    case RDS6_INFO_TCP_SOCKETS:
      return true;
    case RDS_INFO_IB_CONNECTIONS:
    case RDS6_INFO_IB_CONNECTIONS:
      // Registered by rds_rdma: here where RDS over RDMA exists.
      return Engine::Get().RdmaAvailable();
    default:
      // 10002 (retired FLOWS), 10009/10010 (never registered).
      return false;
  }
}

// A minimal JSON writer: objects, arrays, strings, numbers, booleans.
class Json {
 public:
  void Open(char c) { Sep(); out_ += c; first_ = true; }
  void Close(char c) { out_ += c; first_ = false; }
  void Key(absl::string_view k) { Sep(); Str(k); out_ += ':'; first_ = true; }
  void String(absl::string_view v) { Sep(); Str(v); }
  void Number(uint64_t v) { Sep(); absl::StrAppend(&out_, v); }
  void Bool(bool v) { Sep(); out_ += v ? "true" : "false"; }
  void Null() { Sep(); out_ += "null"; }
  template <typename V>
  void Field(absl::string_view k, V v) {
    Key(k);
    if constexpr (std::is_same_v<V, bool>) {
      Bool(v);
    } else if constexpr (std::is_arithmetic_v<V>) {
      Number(static_cast<uint64_t>(v));
    } else {
      String(v);
    }
  }
  std::string Take() { return std::move(out_); }

 private:
  void Sep() {
    if (!first_) out_ += ',';
    first_ = false;
  }
  void Str(absl::string_view v) {
    out_ += '"';
    for (char ch : v) {
      if (ch == '"' || ch == '\\') {
        out_ += '\\';
        out_ += ch;
      } else if (static_cast<unsigned char>(ch) < 0x20) {
        absl::StrAppend(&out_, absl::StrFormat("\\u%04x", ch));
      } else {
        out_ += ch;
      }
    }
    out_ += '"';
  }
  std::string out_;
  bool first_ = true;
};

std::string Endpoint(const std::optional<RdsEndpoint>& e) {
  if (!e) return "";
  if (e->addr.IsV4Mapped()) return absl::StrCat(e->addr.ToString(), ":", e->port);
  return absl::StrCat("[", e->addr.ToString(), "]:", e->port);
}

std::string NsName(NetNsKey k) { return absl::StrCat(k.dev, ":", k.ino); }

const char* TransportName(int t) {
  switch (t) {
    case kTransTcp: return "tcp";
    case kTransLoop: return "loopback";
    case kTransIb: return "infiniband";
    default: return "none";
  }
}

}  // namespace

std::string EngineDumpJson() {
  Json j;
  j.Open('{');
  j.Field("pid", getpid());
  j.Field("generation", absl::StrFormat("%08x", Engine::Get().gen()));
  char comm[64] = {};
  if (int fd = sys::Open("/proc/self/comm", O_RDONLY | O_CLOEXEC, 0); fd >= 0) {
    if (sys::Read(fd, comm, sizeof(comm) - 1) < 0) comm[0] = 0;
    sys::Close(fd);
  }
  j.Field("comm", absl::StripAsciiWhitespace(comm));
  j.Key("sockets");
  j.Open('[');
  for (const std::shared_ptr<RdsSocket>& s : AllLiveSockets()) {
    rds::MutexLock lock(&s->mu);
    j.Open('{');
    j.Field("id", absl::StrFormat("%016x", s->id));
    j.Field("netns", NsName(s->ns->key()));
    j.Field("bound", Endpoint(s->bound));
    j.Field("connected", Endpoint(s->connected));
    j.Field("transport", TransportName(s->transport));
    j.Field("sndbuf", s->RdsSndbuf());
    j.Field("rcvbuf", s->RdsRcvbuf());
    j.Field("snd_bytes", s->snd_bytes);
    j.Field("rcv_bytes", s->rcv_bytes);
    j.Field("recv_queue", s->recv_queue.size());
    j.Field("congested", s->congested);
    j.Field("cong_monitor", s->cong_monitor);
    j.Field("nonblocking", s->nonblocking);
    j.Field("epoll", s->epoll_watched);
    j.Field("fds", s->fd_refs.load());
    j.Close('}');
  }
  j.Close(']');
  j.Key("paths");
  j.Open('[');
  for (const PathInfo& p : Engine::Get().Snapshot(std::nullopt)) {
    j.Open('{');
    j.Field("netns", NsName(p.ns));
    j.Field("laddr", p.laddr.ToString());
    j.Field("faddr", p.faddr.ToString());
    j.Field("peer_pid", p.peer_pid);
    j.Field("kernel_node", p.kernel_node);  // the peer is a kernel RDS node (peer_pid 0)
    // A kernel node's connection relayed through another engine of this host
    // (its pid), or a relayer's path to us.
    j.Field("node_owner", p.node_owner);
    j.Field("node_path", p.node_path);  // kernel_node: which of its paths (TCP connections)
    j.Field("relay_peer", p.relay_peer);
    j.Field("transport", p.in_process                          ? "loop"
                         : p.relay_peer || p.node_owner != 0 ? "relay"
                         : p.same_host                        ? "unix"
                         : p.rdma                             ? "rdma"
                                                              : "tcp");
    j.Field("state", p.up ? "up" : p.connecting ? "connecting" : "down");
    j.Field("next_tx_seq", p.next_tx_seq);
    j.Field("next_rx_seq", p.next_rx_seq);
    j.Field("backlog", p.send.size());
    j.Field("unacked", p.retrans.size());
    if (p.tcp_local && p.tcp_peer) {
      j.Field("tcp_local", Endpoint(p.tcp_local));
      j.Field("tcp_peer", Endpoint(p.tcp_peer));
    }
    if (p.rdma_info) {  // the queue pair under an RDMA path
      j.Key("rdma");
      j.Open('{');
      j.Field("qp_num", p.rdma_info->qp_num);
      j.Field("posted_receives", p.rdma_info->posted_receives);
      j.Field("recv_completions", p.rdma_info->recv_completions);
      j.Field("send_completions", p.rdma_info->send_completions);
      j.Field("cq_events", p.rdma_info->cq_events);
      j.Field("ack_frames", p.rdma_info->ack_frames);
      j.Close('}');
    }
    j.Close('}');
  }
  j.Close(']');
  // The shared-memory payload arena (docs/perf/history.md §9.6), once a large payload
  // to this host created it.
  j.Key("arena");
  if (std::shared_ptr<ShmArena> arena = ShmArena::Existing()) {
    const ShmArena::Usage u = arena->GetUsage();
    j.Open('{');
    j.Field("size", arena->size());
    j.Field("bytes_in_use", u.bytes_in_use);
    j.Field("blocks_in_use", u.blocks_in_use);
    j.Field("loans", u.loans);
    j.Field("chunks_carved", u.chunks_carved);
    j.Close('}');
  } else {
    j.Null();
  }
  j.Key("counters");
  j.Open('{');
  for (int c = 0; c < stats::kNumCounters; ++c) {
    j.Field(stats::Name(static_cast<stats::Counter>(c)), stats::Get(static_cast<stats::Counter>(c)));
  }
  j.Close('}');
  j.Key("config");
  j.Open('{');
  for (const auto& [name, value] : conf::Effective()) j.Field(absl::StrCat(conf::kEnvPrefix, name), value);
  j.Close('}');
  j.Close('}');
  return j.Take();
}

absl::StatusOr<InfoItems> LocalInfoItems(int option, const std::shared_ptr<NetNs>& ns) {
  if (!Registered(option)) return RdsError(ENOPROTOOPT);
  switch (option) {
    case RDS_INFO_COUNTERS: return Counters();
    case RDS_INFO_SOCKETS: return Sockets(ns, false);
    case RDS6_INFO_SOCKETS: return Sockets(ns, true);
    case RDS_INFO_RECV_MESSAGES: return RecvQueues(ns, false);
    case RDS6_INFO_RECV_MESSAGES: return RecvQueues(ns, true);
    default: break;
  }
  std::vector<PathInfo> paths = Engine::Get().Snapshot(ns->key());
  switch (option) {
    case RDS_INFO_CONNECTIONS: return Connections(paths, false);
    case RDS6_INFO_CONNECTIONS: return Connections(paths, true);
    case RDS_INFO_SEND_MESSAGES: return SendOrRetrans(paths, false, false);
    case RDS6_INFO_SEND_MESSAGES: return SendOrRetrans(paths, false, true);
    case RDS_INFO_RETRANS_MESSAGES: return SendOrRetrans(paths, true, false);
    case RDS6_INFO_RETRANS_MESSAGES: return SendOrRetrans(paths, true, true);
    case RDS_INFO_TCP_SOCKETS: return TcpSockets(paths, false);
    case RDS_INFO_IB_CONNECTIONS: return IbConnections(paths, false);
    case RDS6_INFO_IB_CONNECTIONS: return IbConnections(paths, true);
    default: return TcpSockets(paths, true);
  }
}

absl::StatusOr<int> InfoGetSockOpt(RdsSocket& rs, int option, void* optval, socklen_t* optlen) {
  int len = 0;
  if (absl::Status s = usercopy::FromUser(&len, optlen, sizeof(len)); !s.ok()) return s;
  if (len < 0) return RdsError(EINVAL);
  absl::StatusOr<InfoItems> items = LocalInfoItems(option, rs.ns);
  if (!items.ok()) return items.status();

  // Every other engine of the host that serves this namespace.
  for (const std::string& path : HostRegistry::Get().OtherEngineSockets()) {
    if (std::optional<InfoItems> theirs = QueryEngine(path, option, rs.ns->key())) {
      Merge(option, &*items, *theirs);
    }
  }
  if (option == RDS_INFO_CONNECTIONS || option == RDS6_INFO_CONNECTIONS) {
    MergeLoopbackRows(option, &*items);
  }

  int total = static_cast<int>(items->bytes.size());
  if (total > len) {
    if (absl::Status s = usercopy::ToUser(optlen, &total, sizeof(total)); !s.ok()) return s;
    return RdsError(ENOSPC);
  }
  if (total > 0) {
    if (absl::Status s = usercopy::ToUser(optval, items->bytes.data(), items->bytes.size()); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = usercopy::ToUser(optlen, &total, sizeof(total)); !s.ok()) return s;
  return static_cast<int>(items->each);
}

}  // namespace rds
