#include "agent/cupti/buffer_pool.h"

#include <cstdlib>

namespace profagent {

void BufferPool::Allocate(size_t count, size_t bytes) {
  Release();
  slots_ = std::make_unique<Slot[]>(count);
  count_ = count;
  bytes_ = bytes;
  // Untouched pages cost no memory until CUPTI writes to them.
  for (size_t i = 0; i < count; ++i) {
    slots_[i].data = static_cast<uint8_t*>(std::aligned_alloc(8, bytes));
  }
}

void BufferPool::Release() {
  for (size_t i = 0; i < count_; ++i) std::free(slots_[i].data);
  slots_.reset();
  count_ = 0;
}

uint8_t* BufferPool::Acquire() {
  for (size_t i = 0; i < count_; ++i) {
    bool expected = false;
    if (slots_[i].data &&
        slots_[i].in_use.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
      return slots_[i].data;
    }
  }
  return nullptr;
}

void BufferPool::Return(uint8_t* buffer) {
  for (size_t i = 0; i < count_; ++i) {
    if (slots_[i].data == buffer) {
      slots_[i].in_use.store(false, std::memory_order_release);
      return;
    }
  }
}

}  // namespace profagent
