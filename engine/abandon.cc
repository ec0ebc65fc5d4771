// engine/abandon.cc — the list of abandoned objects.
#include "engine/abandon.h"

#include <atomic>

namespace rds {
namespace {

struct Node {
  const void* object;
  Node* next;
};

std::atomic<Node*> abandoned{nullptr};

}  // namespace

void Abandon(const void* object) {
  if (object == nullptr) return;
  Node* n = new Node{object, abandoned.load(std::memory_order_relaxed)};
  while (!abandoned.compare_exchange_weak(n->next, n, std::memory_order_release,
                                          std::memory_order_relaxed)) {
  }
}

}  // namespace rds
