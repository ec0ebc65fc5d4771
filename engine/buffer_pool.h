// engine/buffer_pool.h — recycled storage for large payloads.
//
// A fresh allocation of 64 KiB or more comes from mmap (or from a heap that
// glibc trims back to the kernel), so every 4 KiB page of it costs a page
// fault on first touch: about 75 faults per 1 MiB message on each side
// before this pool (docs/perf/history.md). Freed buffers of those sizes are kept, a
// few per power-of-two size class (at most 8 MiB in all), and handed to the
// next payload of the same class. Buffers up to 4 KiB come from the small-block
// pool (engine/small_pool.h); those in between from the heap.
//
// Pooled buffers (64 KiB … 1 MiB) are page-aligned whole pages, so their pages
// can be handed to the kernel by reference (transports/stream/payload_splicer.h)
// and, should the kernel still hold them when the buffer is freed, replaced
// by fresh ones (ReleaseAbandoned) instead of being written under it.
//
// Thread-safety: lock-free (atomic slots), so also safe across fork().
#ifndef RDS_ENGINE_BUFFER_POOL_H_
#define RDS_ENGINE_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>

namespace rds::buffer_pool {

// Storage for at least `size` bytes (size > 0), uninitialised.
uint8_t* Allocate(size_t size);
// Returns storage obtained from Allocate(size) (the same size).
void Release(uint8_t* p, size_t size);

// True if Allocate(size) storage is whole pages of its own (size >= 64 KiB).
bool PageBacked(size_t size);
// Release() of PageBacked storage whose pages the kernel may still read: the
// process gets fresh zero pages at the same addresses (the old ones stay with
// the kernel until it drops them), then the storage is released as usual.
void ReleaseAbandoned(uint8_t* p, size_t size);

}  // namespace rds::buffer_pool

#endif  // RDS_ENGINE_BUFFER_POOL_H_
