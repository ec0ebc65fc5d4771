// sdp/sockaddr.cc — families 27 / 28 in, AF_INET / AF_INET6 to the kernel.
#include "sdp/sockaddr.h"

#include <netinet/in.h>

#include "sdp/socket_forms.h"

namespace rds::sdp {

bool HasSdpFamily(sa_family_t family) { return family == kAfInetSdp || family == kAfInet6Sdp; }

void ToKernelFamily(sockaddr_storage* addr) {
  if (addr->ss_family == kAfInetSdp) {
    addr->ss_family = AF_INET;
  } else if (addr->ss_family == kAfInet6Sdp) {
    addr->ss_family = AF_INET6;
  }
}

}  // namespace rds::sdp
