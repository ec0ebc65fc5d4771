// transports/stream/payload_splicer.h — large payloads into a TCP socket
// without copying them.
//
// A write() copies every payload byte into the socket's buffer; on a 1 MiB
// stream that copy is the sending core's largest cost after TCP itself
// (docs/perf/history.md §9.8). The splicer instead hands the kernel the payload's pages:
// vmsplice() puts references to them into a pipe, splice() moves those
// references into the socket. The kernel then reads the pages until the peer
// has read the bytes — on loopback and veth the receiving socket's buffers
// *are* these pages — so the storage must not be written again before the
// peer acknowledged the message (Message::payload_on_loan, Payload::Abandon).
//
// One splicer per link. Its pipe may hold payload bytes that did not fit in
// the socket yet (`pending()`); they are the next bytes of the stream, so the
// link writes nothing else until Write() has moved them.
//
// Thread-safety: external synchronization required (the link's).
#ifndef RDS_TRANSPORTS_STREAM_PAYLOAD_SPLICER_H_
#define RDS_TRANSPORTS_STREAM_PAYLOAD_SPLICER_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace rds {

class PayloadSplicer {
 public:
  // A splicer with its pipe, or null when no pipe can be made (the link
  // then copies as before).
  static std::unique_ptr<PayloadSplicer> Create();
  ~PayloadSplicer();
  PayloadSplicer(const PayloadSplicer&) = delete;
  PayloadSplicer& operator=(const PayloadSplicer&) = delete;

  // Moves the next bytes of `data[0, len)` into the stream socket `sock`: the
  // first pending() of them are already in the pipe (the caller passes the
  // same bytes again, from the first one not yet in the socket). `more`: more
  // data follows at once (no push after this part). Returns the bytes that
  // reached the socket, or -1 with errno (EAGAIN: the socket is full; what
  // is in the pipe stays pending).
  ssize_t Write(int sock, const uint8_t* data, size_t len, bool more);

  // Bytes taken from the caller's data that are in the pipe, not yet in the
  // socket. (A link that dies destroys its splicer: they are dropped.)
  size_t pending() const { return pending_; }

 private:
  PayloadSplicer(int read_end, int write_end, size_t capacity)
      : read_end_(read_end), write_end_(write_end), capacity_(capacity) {}

  int read_end_;
  int write_end_;
  size_t capacity_;
  size_t pending_ = 0;
};

}  // namespace rds

#endif  // RDS_TRANSPORTS_STREAM_PAYLOAD_SPLICER_H_
