// The strings of one process's capture, keyed by the ids the agent assigned (StringDef), stored
// demangled and already JSON-quoted for the writers. Filled and read on the pipeline thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profd/v1/events.pb.h"

namespace profd {

class StringTable {
 public:
  void Add(const v1::EventBatch& batch);
  // The demangled text, or "" for an unknown id.
  const std::string& Text(uint32_t id) const;
  // The same text as a JSON string literal, quotes included.
  const std::string& Quoted(uint32_t id) const;

  static std::string Demangle(const std::string& name);
  static std::string JsonQuote(const std::string& text);

 private:
  std::vector<std::string> text_;
  std::vector<std::string> quoted_;
};

}  // namespace profd
