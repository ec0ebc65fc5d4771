// engine/small_pool.cc — per-thread caches of small blocks, exchanged in batches.
#include "engine/small_pool.h"

#include <pthread.h>

#include <algorithm>
#include <bit>

namespace rds::small_pool {
namespace {

#if defined(__SANITIZE_ADDRESS__)
// Under AddressSanitizer every block goes to the heap, so that a use after
// free is still reported.
constexpr bool kEnabled = false;
#else
constexpr bool kEnabled = true;
#endif

constexpr int kMinShift = 6;  // 64 B
constexpr int kClasses = std::bit_width(kMaxSize) - kMinShift;  // 64 B … 4 KiB
constexpr uint32_t kBatch = 32;
// Idle bytes kept in the global list per class. Enough for a send buffer's
// worth of the smallest messages (a sender refills its whole send buffer
// after every drain: a smaller cap returns those blocks to the heap just
// before they are needed again).
constexpr size_t kMaxGlobalBytes = size_t{8} << 20;
size_t MaxGlobalBatches(int c) { return kMaxGlobalBytes / (kBatch << (c + kMinShift)); }

// A free block. The first block of a batch in the global list also links
// the batches and counts its own chain (every class has room for that).
struct Block {
  Block* next;
  Block* next_batch;
  uint32_t count;
};
static_assert(sizeof(Block) <= (size_t{1} << kMinShift));

int ClassOf(size_t size) {
  return size <= (size_t{1} << kMinShift) ? 0 : std::bit_width(size - 1) - kMinShift;
}
size_t ClassSize(int c) { return size_t{1} << (c + kMinShift); }

// Trivially destructible (no TLS destructor): a pthread key's destructor
// returns the blocks when the thread exits, and `exited` sends frees made
// after that (by later destructors) straight to the global list.
struct Cache {
  Block* head[kClasses];
  uint32_t count[kClasses];
  bool registered;
  bool exited;
};
constinit thread_local Cache t_cache{};

rds::Mutex g_mu(absl::kConstInit);
Block* g_batches[kClasses] ABSL_GUARDED_BY(g_mu) = {};
size_t g_batch_count[kClasses] ABSL_GUARDED_BY(g_mu) = {};

pthread_key_t g_key;
pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

void DeleteChain(Block* b) {
  while (b) {
    Block* next = b->next;
    ::operator delete(b);
    b = next;
  }
}

// Hands a chain of `count` blocks to the global list (or to the heap when
// the list is full).
void PutBatch(int c, Block* head, uint32_t count) {
  head->count = count;
  {
    rds::MutexLock lock(&g_mu);
    if (g_batch_count[c] < MaxGlobalBatches(c)) {
      head->next_batch = g_batches[c];
      g_batches[c] = head;
      ++g_batch_count[c];
      return;
    }
  }
  DeleteChain(head);
}

void OnThreadExit(void* arg) {
  Cache* t = static_cast<Cache*>(arg);
  t->exited = true;
  for (int c = 0; c < kClasses; ++c) {
    if (t->head[c]) PutBatch(c, t->head[c], t->count[c]);
    t->head[c] = nullptr;
    t->count[c] = 0;
  }
}

void Register(Cache& t) {
  pthread_once(&g_key_once, [] { pthread_key_create(&g_key, OnThreadExit); });
  pthread_setspecific(g_key, &t);
  t.registered = true;
}

}  // namespace

rds::Mutex& ForkMutex() { return g_mu; }

void* Allocate(size_t size) {
  if (!kEnabled) return ::operator new(size);
  const int c = ClassOf(size);
  Cache& t = t_cache;
  if (!t.registered && !t.exited) Register(t);
  if (Block* b = t.head[c]) {
    t.head[c] = b->next;
    --t.count[c];
    // Blocks come back from other threads long after they were last
    // touched: fetch the next one now (up to four lines), or reading its
    // link and writing the object miss the cache on the next call
    // (docs/perf/history.md §9.9).
    if (const char* next = reinterpret_cast<const char*>(t.head[c])) {
      for (size_t off = 0; off < std::min<size_t>(ClassSize(c), 256); off += 64) {
        __builtin_prefetch(next + off, 1);
      }
    }
    return b;
  }
  if (!t.exited) {
    Block* batch = nullptr;
    {
      rds::MutexLock lock(&g_mu);
      if ((batch = g_batches[c]) != nullptr) {
        g_batches[c] = batch->next_batch;
        --g_batch_count[c];
      }
    }
    if (batch) {
      t.head[c] = batch->next;
      t.count[c] = batch->count - 1;
      return batch;
    }
  }
  return ::operator new(ClassSize(c));
}

void Release(void* p, size_t size) {
  if (p == nullptr) return;
  if (!kEnabled) return ::operator delete(p);
  const int c = ClassOf(size);
  Block* b = static_cast<Block*>(p);
  Cache& t = t_cache;
  if (t.exited) {
    b->next = nullptr;
    PutBatch(c, b, 1);
    return;
  }
  if (!t.registered) Register(t);
  b->next = t.head[c];
  t.head[c] = b;
  if (++t.count[c] < 2 * kBatch) return;
  // Keep kBatch, hand the older kBatch to the threads that allocate.
  Block* last_kept = b;
  for (uint32_t i = 1; i < kBatch; ++i) last_kept = last_kept->next;
  Block* batch = last_kept->next;
  last_kept->next = nullptr;
  t.count[c] = kBatch;
  PutBatch(c, batch, kBatch);
}

}  // namespace rds::small_pool
