// Byte counts for flags and messages: "8MiB", "10G", "512k" or plain bytes, and back to text.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace profd::store {

// K/M/G/T (and KiB/MiB/... , KB/MB/...) are powers of 1024.
absl::StatusOr<uint64_t> ParseByteSize(const std::string& text);
std::string FormatBytes(uint64_t bytes);  // "1.5 MiB"

}  // namespace profd::store
