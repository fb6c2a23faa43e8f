#include "agent/counters/address_table.h"

namespace profagent {

AddressTable::AddressTable(size_t slots_pow2)
    : slots_(std::make_unique<Slot[]>(slots_pow2)), mask_(slots_pow2 - 1) {}

size_t AddressTable::Home(uint64_t key) const {
  // Allocation addresses share their low bits (alignment): mix before masking.
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdull;
  key ^= key >> 33;
  return static_cast<size_t>(key) & mask_;
}

bool AddressTable::Insert(uint64_t key, uint64_t size) {
  if (key == kEmpty || key == kTombstone) return false;
  size_t i = Home(key);
  for (size_t probes = 0; probes <= mask_; ++probes, i = (i + 1) & mask_) {
    uint64_t seen = slots_[i].key.load(std::memory_order_acquire);
    if (seen != kEmpty && seen != kTombstone) continue;
    // The application learns the address only when this call returns, so no Remove of the
    // same key can run between the two stores.
    if (slots_[i].key.compare_exchange_strong(seen, key, std::memory_order_acq_rel)) {
      slots_[i].size.store(size, std::memory_order_release);
      return true;
    }
  }
  return false;
}

uint64_t AddressTable::Remove(uint64_t key) {
  if (key == kEmpty || key == kTombstone) return 0;
  size_t i = Home(key);
  for (size_t probes = 0; probes <= mask_; ++probes, i = (i + 1) & mask_) {
    uint64_t seen = slots_[i].key.load(std::memory_order_acquire);
    if (seen == kEmpty) return 0;
    if (seen != key) continue;
    uint64_t size = slots_[i].size.exchange(0, std::memory_order_acq_rel);
    if (slots_[i].key.compare_exchange_strong(seen, kTombstone, std::memory_order_acq_rel)) {
      return size;
    }
    return 0;
  }
  return 0;
}

}  // namespace profagent
