// preload/sdp_calls.h — what the socket wrappers do for an SDP fd (DESIGN.md §11).
//
// Each returns what the libc call returns (-1 with errno on failure). The fd
// is a kernel TCP socket: the kernel does the call, after the address family
// is made the kernel's (27 / 28 → AF_INET / AF_INET6) and with the SDP-only
// options answered here. Where RDMA verbs serve the addresses
// (sdp_relay/service.h), a connect makes an SDP connection and joins the fd
// to its relay over loopback (a non-blocking one through the gate: EINPROGRESS,
// then POLLOUT or the error in SO_ERROR), and a listener is served over verbs
// as well as TCP; elsewhere the socket runs over TCP. Under libsdp's "both"
// a connect that finds no SDP goes on over TCP (a blocking one on the fd
// itself, a non-blocking one relayed by the relay thread), and the
// destination goes to TCP at once for a minute. connect() and listen() log
// which (info level).
//
// Thread-safety: safe for concurrent use.
#ifndef RDS_PRELOAD_SDP_CALLS_H_
#define RDS_PRELOAD_SDP_CALLS_H_

#include <sys/socket.h>

#include "preload/sdp_fds.h"
#include "sdp/socket_forms.h"

namespace rds::preload::sdp_calls {

// socket() for an SDP form (form.sdp): its error, or a new SDP fd.
int Socket(const sdp::SocketForm& form);
int Bind(sdp_fds::SdpFd& s, int fd, const sockaddr* addr, socklen_t len);
int Connect(sdp_fds::SdpFd& s, int fd, const sockaddr* addr, socklen_t len);
int Listen(sdp_fds::SdpFd& s, int fd, int backlog);
// accept / accept4 (`four`): the new fd is an SDP socket too.
int Accept(sdp_fds::SdpFd& s, int fd, sockaddr* addr, socklen_t* len, int flags, bool four);
int SetSockOpt(sdp_fds::SdpFd& s, int fd, int level, int name, const void* val, socklen_t len);
int GetSockOpt(sdp_fds::SdpFd& s, int fd, int level, int name, void* val, socklen_t* len);
// getsockname / getpeername (`peer`): a connection over RDMA verbs answers
// with its SDP addresses (the fd itself is connected to the relay).
int GetName(sdp_fds::SdpFd& s, int fd, sockaddr* addr, socklen_t* len, bool peer);

// connect() (`addr`: the destination) or listen() (`addr` null: the bound
// address) of an fd that is neither RDS nor SDP: with RDS_PRELOAD_SDP_CONFIG
// set, a kernel TCP socket is matched against its rules (sdp/rules.h) and
// becomes an SDP socket where they say sdp or both; the decision is logged
// (info). Returns the fd's SDP entry if it is one now. Cheap without rules.
std::shared_ptr<sdp_fds::SdpFd> ConvertByRules(int fd, const sockaddr* addr, socklen_t len);

// Before the process image ends (exit, _exit, exec; not in a vfork child):
// the relay thread ends with it, so each connection over RDMA verbs gets its
// end of file now (the fd shut for writing, as the kernel's close at exit
// would) and the relay delivers what the application wrote, waiting while
// data moves (at most RDS_PRELOAD_EXIT_FLUSH_MS without progress). No-op in
// a process without SDP over verbs.
void FlushBeforeImageEnds();

}  // namespace rds::preload::sdp_calls

#endif  // RDS_PRELOAD_SDP_CALLS_H_
