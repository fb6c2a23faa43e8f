// Sizes of live device allocations, keyed by address (or VMM handle), so a free can subtract
// what its allocation added. Written from application threads inside CUDA calls, so it takes no
// lock: open addressing with atomic compare-and-swap on the key, tombstones on removal.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace profagent {

class AddressTable {
 public:
  explicit AddressTable(size_t slots_pow2 = 1u << 17);

  // False when the table is full (the allocation is then not counted at all).
  bool Insert(uint64_t key, uint64_t size);
  // The size stored for key, removed; 0 when the key is unknown.
  uint64_t Remove(uint64_t key);

 private:
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kTombstone = ~0ull;
  struct Slot {
    std::atomic<uint64_t> key{kEmpty};
    std::atomic<uint64_t> size{0};
  };
  size_t Home(uint64_t key) const;

  std::unique_ptr<Slot[]> slots_;
  const size_t mask_;
};

}  // namespace profagent
