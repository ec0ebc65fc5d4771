// engine/buffer_pool.cc — recycled storage for large payloads.
#include "engine/buffer_pool.h"

#include <sys/mman.h>

#include <atomic>
#include <bit>
#include <cstdlib>
#include <new>

#include "engine/small_pool.h"

namespace rds::buffer_pool {
namespace {

constexpr int kMinShift = 16;  // 64 KiB
constexpr int kMaxShift = 20;  // 1 MiB (RDS_MAX_MSG_SIZE)
constexpr int kClasses = kMaxShift - kMinShift + 1;
constexpr int kSlots = 4;      // per class: 4 x (64K + … + 1M) < 8 MiB

std::atomic<uint8_t*> slots[kClasses][kSlots];

// The class of a size, or -1 when the pool does not keep it.
int ClassOf(size_t size) {
  if (size < (size_t{1} << kMinShift) || size > (size_t{1} << kMaxShift)) return -1;
  return std::bit_width(size - 1) - kMinShift;  // ceil(log2(size)) - kMinShift
}

constexpr size_t kPage = 4096;

uint8_t* NewClassBuffer(int c) {
  // Class sizes are powers of two >= 64 KiB: whole pages.
  void* p = std::aligned_alloc(kPage, size_t{1} << (c + kMinShift));
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<uint8_t*>(p);
}

}  // namespace

bool PageBacked(size_t size) { return ClassOf(size) >= 0; }

uint8_t* Allocate(size_t size) {
  if (size <= small_pool::kMaxSize) return static_cast<uint8_t*>(small_pool::Allocate(size));
  int c = ClassOf(size);
  if (c < 0) return new uint8_t[size];
  for (std::atomic<uint8_t*>& s : slots[c]) {
    if (s.load(std::memory_order_relaxed) == nullptr) continue;
    if (uint8_t* p = s.exchange(nullptr, std::memory_order_acquire)) return p;
  }
  return NewClassBuffer(c);
}

void Release(uint8_t* p, size_t size) {
  if (p == nullptr) return;
  if (size <= small_pool::kMaxSize) return small_pool::Release(p, size);
  int c = ClassOf(size);
  if (c >= 0) {
    for (std::atomic<uint8_t*>& s : slots[c]) {
      uint8_t* expected = nullptr;
      if (s.compare_exchange_strong(expected, p, std::memory_order_release,
                                    std::memory_order_relaxed)) {
        return;
      }
    }
    std::free(p);
    return;
  }
  delete[] p;
}

void ReleaseAbandoned(uint8_t* p, size_t size) {
  const int c = ClassOf(size);
  if (p == nullptr || c < 0) return Release(p, size);
  // Same protection and kind of mapping as the heap's own pages; if the
  // kernel refuses, the storage is leaked rather than reused under it.
  if (mmap(p, size_t{1} << (c + kMinShift), PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
    return;
  }
  Release(p, size);
}

}  // namespace rds::buffer_pool
