// preload/sdp_status.h — this process's SDP sockets published for rdsctl:
// the writer of <rundir>/sdp-<pid>.status (layout: sdp/status_table.h).
//
// The file is made at the first write of a process image (a fork child makes
// its own: the parent's mapping is dropped, never written) under a temporary
// name, locked (a shared flock, held while the process lives), initialized and
// renamed into place; Withdraw removes it at exit. After exec the lock is gone
// with the image: rdsctl removes the file, or the new image replaces it. A file that cannot be made is logged
// once and nothing is published (SDP sockets work the same).
//
// Thread-safety: not thread-safe; preload/sdp_fds.h calls it under its lock
// (one writer at a time).
#ifndef RDS_PRELOAD_SDP_STATUS_H_
#define RDS_PRELOAD_SDP_STATUS_H_

#include <cstdint>

#include "sdp/status_table.h"

namespace rds::preload::sdp_status {

// The slot of `fd` to write (null: no table, or fd beyond its slots).
// `*fresh` is set when the table was made by this call: every SDP fd of the
// process is to be written again (a fork child's, or after a failed exec).
sdp::status::Slot* SlotFor(int fd, bool* fresh);
// How many SDP fds are at or above the table's slots (not shown).
void SetBeyond(uint64_t n);
// Removes the file (the process image ends); a later write makes it again.
void Withdraw();

}  // namespace rds::preload::sdp_status

#endif  // RDS_PRELOAD_SDP_STATUS_H_
