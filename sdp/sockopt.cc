// sdp/sockopt.cc — SDP_ZCOPY_THRESH, SDP_LAST_BIND_ERR, SO_KEEPALIVE at level 27.
#include "sdp/sockopt.h"

#include <netinet/in.h>

#include <cerrno>
#include <cstring>

#include "sdp/socket_forms.h"

namespace rds::sdp {
namespace {

OptionCall Answered(int error) {
  OptionCall c;
  c.kind = OptionCall::Kind::kAnswered;
  c.error = error;
  return c;
}

OptionCall KernelAs(int level, int name) {
  OptionCall c;
  c.kind = OptionCall::Kind::kKernelAs;
  c.level = level;
  c.name = name;
  return c;
}

}  // namespace

OptionCall SetOption(SdpOptions& opts, int level, int name, const void* value, socklen_t len) {
  if (level == kAfInetSdp) {
    // OFED's level for the keepalive timer; nothing else lived there.
    return name == SO_KEEPALIVE ? KernelAs(SOL_SOCKET, SO_KEEPALIVE) : Answered(ENOPROTOOPT);
  }
  if (level != IPPROTO_TCP) return OptionCall{};
  if (name == kSdpLastBindErr) return Answered(ENOPROTOOPT);  // read-only
  if (name != kSdpZcopyThresh) return OptionCall{};
  int v = 0;
  if (len < static_cast<socklen_t>(sizeof(v))) return Answered(EINVAL);
  std::memcpy(&v, value, sizeof(v));
  if (v < 0) return Answered(EINVAL);
  opts.zcopy_thresh = v;
  return Answered(0);
}

OptionCall GetOption(const SdpOptions& opts, int level, int name, int* out) {
  if (level == kAfInetSdp) {
    return name == SO_KEEPALIVE ? KernelAs(SOL_SOCKET, SO_KEEPALIVE) : Answered(ENOPROTOOPT);
  }
  if (level != IPPROTO_TCP) return OptionCall{};
  if (name == kSdpZcopyThresh) {
    *out = opts.zcopy_thresh;
    return Answered(0);
  }
  if (name == kSdpLastBindErr) {
    *out = opts.last_bind_err;
    return Answered(0);
  }
  return OptionCall{};
}

}  // namespace rds::sdp
