// transports/stream/payload_splicer.cc — vmsplice + splice of payload pages.
#include "transports/stream/payload_splicer.h"

#include <fcntl.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>

#include "engine/sys.h"

namespace rds {
namespace {

// The pipe holds one whole RDS message (RDS_MAX_MSG_SIZE) when the host lets
// it (fs.pipe-max-size, the user's pipe quota); a smaller one only costs more
// system calls per message.
constexpr int kPipeSizes[] = {1 << 20, 256 << 10};

}  // namespace

std::unique_ptr<PayloadSplicer> PayloadSplicer::Create() {
  int fds[2];
  if (sys::Pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return nullptr;
  const int read_end = sys::MakeInternal(fds[0]);
  const int write_end = sys::MakeInternal(fds[1]);
  for (int size : kPipeSizes) {
    if (sys::Fcntl(write_end, F_SETPIPE_SZ, size) >= 0) break;
  }
  const int capacity = sys::Fcntl(write_end, F_GETPIPE_SZ, 0);
  if (capacity <= 0) {
    sys::CloseInternal(read_end);
    sys::CloseInternal(write_end);
    return nullptr;
  }
  return std::unique_ptr<PayloadSplicer>(
      new PayloadSplicer(read_end, write_end, static_cast<size_t>(capacity)));
}

PayloadSplicer::~PayloadSplicer() {
  sys::CloseInternal(read_end_);
  sys::CloseInternal(write_end_);
}

ssize_t PayloadSplicer::Write(int sock, const uint8_t* data, size_t len, bool more) {
  if (pending_ == 0) {
    // The pipe is empty: it takes references to as many pages as it has slots.
    struct iovec iov = {const_cast<uint8_t*>(data), std::min(len, capacity_)};
    const ssize_t n = sys::Vmsplice(write_end_, &iov, 1, SPLICE_F_NONBLOCK);
    if (n < 0) return -1;
    pending_ = static_cast<size_t>(n);
  }
  unsigned int flags = SPLICE_F_NONBLOCK | SPLICE_F_MOVE;
  if (more || pending_ < len) flags |= SPLICE_F_MORE;
  const ssize_t w = sys::SpliceToSocketNoSignal(read_end_, sock, pending_, flags);
  if (w < 0) return -1;
  pending_ -= static_cast<size_t>(w);
  return w;
}

}  // namespace rds
