// sdp/socket_forms.cc — the SDP forms of socket(2).
#include "sdp/socket_forms.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>

namespace rds::sdp {
namespace {

constexpr int kTypeFlags = SOCK_NONBLOCK | SOCK_CLOEXEC;

}  // namespace

SocketForm ClassifySocketCall(int domain, int type, int protocol) {
  SocketForm f;
  const bool ofed = domain == kAfInetSdp || domain == kAfInet6Sdp;
  const bool solaris = (domain == AF_INET || domain == AF_INET6) && protocol == kProtoSdp;
  if (!ofed && !solaris) return f;
  f.sdp = true;
  // socket(2)'s own checks come first, as for any family.
  if ((type & ~(0xf | kTypeFlags)) != 0 || (type & 0xf) > SOCK_PACKET) {
    f.error = EINVAL;
    return f;
  }
  if ((type & ~kTypeFlags) != SOCK_STREAM) {
    f.error = ofed ? ESOCKTNOSUPPORT : EPROTONOSUPPORT;
    return f;
  }
  if (ofed && protocol != 0 && protocol != IPPROTO_TCP) {
    f.error = EPROTONOSUPPORT;
    return f;
  }
  f.family = (domain == AF_INET6 || domain == kAfInet6Sdp) ? AF_INET6 : AF_INET;
  f.type = type;
  return f;
}

}  // namespace rds::sdp
