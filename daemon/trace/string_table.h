// The strings of one process's capture, keyed by the ids the agent assigned (StringDef), stored
// demangled and already JSON-quoted for the writers. Filled and read on the pipeline thread.
//
// Ids and texts come from the agent, which any local process can pretend to be: the table stores
// only the ids it was given (an id of 0xFFFFFFFF costs one entry, not a 4-billion-slot array), and
// bounds each string and the table's total size, so a 30-byte message cannot make profd allocate
// gigabytes however the ids are chosen.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "profd/v1/events.pb.h"

namespace profd {

class StringTable {
 public:
  // A string longer than this is cut (C++ template kernel names reach ~10 KiB demangled).
  static constexpr size_t kMaxStringBytes = 64 << 10;
  // Mangled names longer than this are kept mangled: the demangler's time and output grow with
  // the nesting of its input, which the agent chooses.
  static constexpr size_t kMaxDemangleBytes = 16 << 10;
  // All strings of one table together, as malloc holds them (text + quoted + the slot of each
  // entry). A real capture has a few thousand names; NVTX ranges with unique texts a few hundred
  // thousand.
  static constexpr size_t kDefaultMaxBytes = 256 << 20;

  StringTable() : StringTable(kDefaultMaxBytes) {}
  explicit StringTable(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Adds (or replaces) the batch's strings. Once the table holds max_bytes, further new strings
  // are not stored and are counted in rejected(); their events get an empty name. The table
  // stays usable either way; status() says what was refused, for the caller to log.
  void Add(const v1::EventBatch& batch);
  // OK, or RESOURCE_EXHAUSTED with how many strings were refused and why.
  absl::Status status() const;

  // What the writers need of one string, looked up once per event.
  struct Name {
    std::string text;    // demangled, valid UTF-8
    std::string quoted;  // text as a JSON string literal, quotes included
    // Whether an API call of this name enqueues GPU work (a launch, copy or memset): the trace
    // starts a launch -> GPU arrow there. Decided once per string, not once per call.
    bool enqueues_gpu_work = false;
  };
  // The name of id, or an empty one (text "", quoted "\"\"") for an unknown id.
  const Name& Find(uint32_t id) const;
  // The demangled text, or "" for an unknown id.
  const std::string& Text(uint32_t id) const;
  // The same text as a JSON string literal, quotes included.
  const std::string& Quoted(uint32_t id) const;

  size_t size() const { return entries_.size(); }
  // What the table takes: its strings' heap blocks and its slots; at most max_bytes.
  size_t bytes() const;
  uint64_t rejected() const { return rejected_; }

  static std::string Demangle(const std::string& name);
  // text with each byte that is not part of a UTF-8 sequence replaced by U+FFFD.
  static std::string ValidUtf8(std::string_view text);
  // A JSON string literal of text: control characters escaped, and bytes that are not UTF-8
  // replaced by U+FFFD, so the trace is valid JSON whatever the process named its kernels.
  static std::string JsonQuote(std::string_view text);

 private:
  static size_t Cost(const Name& e);
  static size_t SlotBytes(size_t capacity);

  const size_t max_bytes_;
  absl::flat_hash_map<uint32_t, Name> entries_;
  size_t bytes_ = 0;  // the strings' heap blocks
  uint64_t rejected_ = 0;
  uint32_t first_rejected_id_ = 0;
};

}  // namespace profd
