// engine/small_pool.h — small blocks for messages that cross threads.
//
// A message is allocated on one thread (the application's, in sendmsg) and
// freed on another (the engine's, when the peer acknowledges it), or the other
// way round on the receive side. glibc's per-thread cache only helps a thread
// that frees what it allocates: here the allocating thread's cache is always
// empty and every malloc and free goes to the arena (a third of the sending
// process's time in the 64 B stream, docs/perf/history.md §9.4). This pool keeps freed
// blocks of a few size classes (64 B … 4 KiB) in per-thread caches and moves
// them between threads in batches of 32 through a global list, one lock per
// batch. It keeps at most 8 MiB of idle blocks per class beyond the threads'
// caches; the rest goes back to the heap.
//
// Use Allocate/Release for raw storage and PoolAllocator with
// std::allocate_shared for objects.
//
// Thread-safety: any thread. After fork() the child's pool is usable (its lock
// is taken across fork, engine/fork.cc); the caches of the parent's other
// threads are lost to the child (their blocks are leaked there, not reused).
#ifndef RDS_ENGINE_SMALL_POOL_H_
#define RDS_ENGINE_SMALL_POOL_H_

#include <cstddef>
#include <cstdint>
#include <new>

#include "engine/sync.h"

namespace rds::small_pool {

// The largest block the pool keeps.
inline constexpr size_t kMaxSize = 4096;

// Storage for `size` bytes (0 < size <= kMaxSize), aligned for any object.
void* Allocate(size_t size);
// Returns storage from Allocate(size), from any thread.
void Release(void* p, size_t size);

// The lock taken across fork() (engine/fork.cc).
rds::Mutex& ForkMutex();

// An allocator over the pool, for std::allocate_shared (larger requests go to
// the heap).
template <typename T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) {}  // NOLINT: rebinding must be implicit
  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes > kMaxSize) return static_cast<T*>(::operator new(bytes));
    return static_cast<T*>(Allocate(bytes));
  }
  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes > kMaxSize) return ::operator delete(p);
    Release(p, bytes);
  }
  template <typename U>
  bool operator==(const PoolAllocator<U>&) const { return true; }
};

}  // namespace rds::small_pool

#endif  // RDS_ENGINE_SMALL_POOL_H_
