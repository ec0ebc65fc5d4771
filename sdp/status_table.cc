// sdp/status_table.cc — see status_table.h.
#include "sdp/status_table.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace rds::sdp::status {

const char* StateName(State s) {
  switch (s) {
    case State::kFree: return "free";
    case State::kOpen: return "open";
    case State::kListening: return "listening";
    case State::kConnecting: return "connecting";
    case State::kConnected: return "connected";
    case State::kFailed: return "failed";
  }
  return "?";
}

const char* TransportName(Transport t) {
  switch (t) {
    case Transport::kNone: return "-";
    case Transport::kVerbs: return "verbs";
    case Transport::kTcp: return "tcp";
    case Transport::kTcpRelayed: return "tcp (relayed)";
    case Transport::kVerbsAndTcp: return "verbs+tcp";
  }
  return "?";
}

namespace {

void PackAddress(const sockaddr_storage& a, uint8_t out[16], uint16_t* port) {
  std::memset(out, 0, 16);
  *port = 0;
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    std::memcpy(out, &in.sin_addr, 4);
    *port = ntohs(in.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    std::memcpy(out, &in6.sin6_addr, 16);
    *port = ntohs(in6.sin6_port);
  }
}

sockaddr_storage UnpackAddress(int family, const uint8_t in[16], uint16_t port) {
  sockaddr_storage a{};
  if (family == AF_INET) {
    auto& s = reinterpret_cast<sockaddr_in&>(a);
    s.sin_family = AF_INET;
    std::memcpy(&s.sin_addr, in, 4);
    s.sin_port = htons(port);
  } else if (family == AF_INET6) {
    auto& s6 = reinterpret_cast<sockaddr_in6&>(a);
    s6.sin6_family = AF_INET6;
    std::memcpy(&s6.sin6_addr, in, 16);
    s6.sin6_port = htons(port);
  }
  return a;
}

}  // namespace

std::optional<SlotView> Read(const Slot& slot) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const uint32_t before = slot.seq.load(std::memory_order_acquire);
    if (before & 1) continue;
    // A copy of the plain fields: a torn copy is discarded below.
    Slot copy;
    std::memcpy(reinterpret_cast<char*>(&copy) + sizeof(copy.seq),
                reinterpret_cast<const char*>(&slot) + sizeof(slot.seq),
                sizeof(Slot) - sizeof(slot.seq));
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.seq.load(std::memory_order_relaxed) != before) continue;
    if (copy.state == State::kFree) return std::nullopt;
    SlotView v;
    v.state = copy.state;
    v.transport = copy.transport;
    v.family = copy.family;
    v.id = copy.id;
    v.changed_ns = copy.changed_ns;
    v.local = UnpackAddress(copy.family, copy.local, copy.local_port);
    v.peer = UnpackAddress(copy.family, copy.peer, copy.peer_port);
    copy.note[sizeof(copy.note) - 1] = '\0';
    v.note = copy.note;
    return v;
  }
  return std::nullopt;
}

void Write(Slot& slot, const SlotView& v) {
  const uint32_t seq = slot.seq.load(std::memory_order_relaxed);
  slot.seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slot.state = v.state;
  slot.transport = v.transport;
  slot.family = static_cast<uint8_t>(v.family);
  slot.id = v.id;
  slot.changed_ns = v.changed_ns;
  PackAddress(v.local, slot.local, &slot.local_port);
  PackAddress(v.peer, slot.peer, &slot.peer_port);
  std::memset(slot.note, 0, sizeof(slot.note));
  std::memcpy(slot.note, v.note.data(), std::min(v.note.size(), sizeof(slot.note) - 1));
  slot.seq.store(seq + 2, std::memory_order_release);
}

void Clear(Slot& slot) {
  const uint32_t seq = slot.seq.load(std::memory_order_relaxed);
  slot.seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slot.state = State::kFree;
  slot.seq.store(seq + 2, std::memory_order_release);
}

std::string Show(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &in.sin_addr, buf, sizeof buf);
    return absl::StrCat(buf, ":", ntohs(in.sin_port));
  }
  if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &in6.sin6_addr, buf, sizeof buf);
    return absl::StrCat("[", buf, "]:", ntohs(in6.sin6_port));
  }
  return "";
}

}  // namespace rds::sdp::status
