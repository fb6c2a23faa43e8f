// Host buffers handed to CUPTI, a fixed set per session (a capture's, the flight recorder's).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace profagent {

// Fixed set of host buffers handed to CUPTI. Acquire/Return are lock-free: CUPTI calls Acquire on
// application threads. An exhausted pool makes CUPTI drop records, which it counts and we report.
class BufferPool {
 public:
  ~BufferPool() { Release(); }
  void Allocate(size_t count, size_t bytes);
  void Release();  // only when CUPTI holds none of them (after a forced flush)
  uint8_t* Acquire();
  void Return(uint8_t* buffer);
  size_t buffer_bytes() const { return bytes_; }

 private:
  struct Slot {
    uint8_t* data = nullptr;
    std::atomic<bool> in_use{false};
  };
  std::unique_ptr<Slot[]> slots_;
  size_t count_ = 0;
  size_t bytes_ = 0;
};

}  // namespace profagent
