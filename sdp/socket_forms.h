// sdp/socket_forms.h — which socket() calls make an SDP socket, and their errors.
//
// The forms (DESIGN.md §11, sdp.md §4.1): (AF_INET | AF_INET6, SOCK_STREAM, 257),
// the specification's (Solaris sdp(7D)); (27 AF_INET_SDP | 28 AF_INET6_SDP,
// SOCK_STREAM, 0 | IPPROTO_TCP), the Linux OFED one that OpenJDK, NSPR and
// libsdp use. Everything else is no SDP call and goes to the kernel untouched.
//
// Pure functions: no state, safe anywhere.
#ifndef RDS_SDP_SOCKET_FORMS_H_
#define RDS_SDP_SOCKET_FORMS_H_

namespace rds::sdp {

inline constexpr int kAfInetSdp = 27;   // AF_INET_SDP (OFED); AF_IB in mainline
inline constexpr int kAfInet6Sdp = 28;  // AF_INET6_SDP (OFED); AF_MPLS in mainline
inline constexpr int kProtoSdp = 257;   // PROTO_SDP (Solaris)

struct SocketForm {
  bool sdp = false;  // an SDP call (even one that fails)
  int error = 0;     // its errno, if it fails
  int family = 0;    // the kernel family of the socket: AF_INET or AF_INET6
  int type = 0;      // SOCK_STREAM with the caller's SOCK_NONBLOCK / SOCK_CLOEXEC
};

// Classifies socket(domain, type, protocol). An SDP call that cannot make a
// socket fails as OFED's did: bad flag bits or an unknown type EINVAL, another
// type ESOCKTNOSUPPORT (27/28) or EPROTONOSUPPORT (257, the protocol does not
// exist for it), another protocol with 27/28 EPROTONOSUPPORT.
SocketForm ClassifySocketCall(int domain, int type, int protocol);

}  // namespace rds::sdp

#endif  // RDS_SDP_SOCKET_FORMS_H_
