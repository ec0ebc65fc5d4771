// sdp/sockopt.h — the socket options only an SDP socket has.
//
// OFED's SDP (sdp.md §1.7, §4.1): at SOL_TCP, SDP_ZCOPY_THRESH (80: the send
// size from which zero copy is used; stored, 0 turns it off) and
// SDP_LAST_BIND_ERR (81, read-only: why the last bind failed on the SDP side,
// as a negative errno; 0 when nothing failed); and SO_KEEPALIVE at level
// AF_INET_SDP (27), which OFED required where TCP has SOL_SOCKET. Every other
// option of an SDP socket is the kernel TCP socket's own.
//
// Thread-safety: SdpOptions is guarded by its owner (preload/sdp_fds.h).
#ifndef RDS_SDP_SOCKOPT_H_
#define RDS_SDP_SOCKOPT_H_

#include <sys/socket.h>

#include <optional>

namespace rds::sdp {

inline constexpr int kSdpZcopyThresh = 80;
inline constexpr int kSdpLastBindErr = 81;
// OFED's default zero-copy threshold (sdp_zcopy_thresh, 64 KiB).
inline constexpr int kDefaultZcopyThresh = 64 * 1024;

struct SdpOptions {
  int zcopy_thresh = kDefaultZcopyThresh;
  int last_bind_err = 0;  // negative errno
};

// What the shim does with a getsockopt / setsockopt on an SDP socket.
struct OptionCall {
  enum class Kind {
    kKernel,     // pass it to the kernel as it is
    kKernelAs,   // pass it to the kernel as (level, name) below
    kAnswered,   // answered here: `error` (0 or an errno), value written for get
  } kind = Kind::kKernel;
  int level = 0, name = 0;
  int error = 0;
};

// setsockopt(level, name, value of `len` bytes, already copied in): a stored
// option is updated in `opts`.
OptionCall SetOption(SdpOptions& opts, int level, int name, const void* value, socklen_t len);
// getsockopt: a stored option's value goes to `*out` (an int) when answered.
OptionCall GetOption(const SdpOptions& opts, int level, int name, int* out);

}  // namespace rds::sdp

#endif  // RDS_SDP_SOCKOPT_H_
