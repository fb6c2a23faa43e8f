#include "daemon/trace/string_table.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"

namespace profd {
namespace {

// Length of the well-formed UTF-8 sequence at s[0..n), or 0 if there is none (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF).
size_t Utf8SequenceLength(const unsigned char* s, size_t n) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; ++i) {
    if (s[i] < 0x80 || s[i] > 0xBF) return 0;
  }
  return len;
}

}  // namespace

std::string StringTable::Demangle(const std::string& name) {
  if (name.size() < 2 || name[0] != '_' || name[1] != 'Z') return name;
  if (name.size() > kMaxDemangleBytes) return name;
  int status = 0;
  char* out = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) return name;
  std::string result(out);
  std::free(out);
  return result;
}

std::string StringTable::ValidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    const size_t len = Utf8SequenceLength(s + i, text.size() - i);
    if (len == 0) {
      out += "\xef\xbf\xbd";  // U+FFFD
      ++i;
    } else {
      out.append(text.data() + i, len);
      i += len;
    }
  }
  return out;
}

std::string StringTable::JsonQuote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    unsigned char c = s[i];
    switch (c) {
      case '"':
        out += "\\\"";
        ++i;
        continue;
      case '\\':
        out += "\\\\";
        ++i;
        continue;
      case '\n':
        out += "\\n";
        ++i;
        continue;
      case '\r':
        out += "\\r";
        ++i;
        continue;
      case '\t':
        out += "\\t";
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
      ++i;
      continue;
    }
    size_t len = Utf8SequenceLength(s + i, n - i);
    if (len == 0) {
      out += "\\ufffd";
      ++i;
    } else {
      out.append(text.data() + i, len);
      i += len;
    }
  }
  out += '"';
  return out;
}

size_t StringTable::Cost(const Name& e) {
  // The two strings' heap blocks as malloc hands them out (a 16-byte multiple past an 8-byte
  // header, at least 32), none for a string held inline. The slots are charged apart (SlotBytes).
  auto heap = [](const std::string& s) -> size_t {
    if (s.capacity() <= 15) return 0;  // libstdc++'s small-string buffer
    return std::max<size_t>(32, (s.capacity() + 1 + 8 + 15) & ~size_t{15});
  };
  return heap(e.text) + heap(e.quoted);
}

size_t StringTable::SlotBytes(size_t capacity) {
  // A slot per capacity (the table doubles: up to twice the entries) and a control byte each.
  return capacity * (sizeof(std::pair<const uint32_t, Name>) + 1);
}

size_t StringTable::bytes() const { return bytes_ + SlotBytes(entries_.capacity()); }

void StringTable::Add(const v1::EventBatch& batch) {
  for (const v1::StringDef& def : batch.strings()) {
    const std::string& value = def.value();
    Name e;
    // Cut before demangling: a cut name is longer than kMaxDemangleBytes and stays mangled.
    e.text = Demangle(value.size() > kMaxStringBytes ? value.substr(0, kMaxStringBytes) : value);
    if (e.text.size() > kMaxStringBytes) e.text.resize(kMaxStringBytes);
    // Both trace formats and the reports want UTF-8 (JSON; protobuf strings).
    e.text = ValidUtf8(e.text);
    e.quoted = JsonQuote(e.text);
    e.enqueues_gpu_work = e.text.find("Launch") != std::string::npos ||
                          e.text.find("Memcpy") != std::string::npos ||
                          e.text.find("Memset") != std::string::npos;
    e.text.shrink_to_fit();
    e.quoted.shrink_to_fit();
    auto it = entries_.find(def.id());
    size_t old_cost = it == entries_.end() ? 0 : Cost(it->second);
    size_t new_cost = Cost(e);
    // A new entry may make the table grow: charged at the capacity it would grow to.
    size_t slots = entries_.capacity();
    if (it == entries_.end() && entries_.size() + 1 > slots * 7 / 8) slots = slots * 2 + 1;
    if (bytes_ - old_cost + new_cost + SlotBytes(slots) > max_bytes_) {
      if (rejected_ == 0) first_rejected_id_ = def.id();
      ++rejected_;
      continue;
    }
    bytes_ = bytes_ - old_cost + new_cost;
    if (it == entries_.end()) {
      entries_.emplace(def.id(), std::move(e));
    } else {
      it->second = std::move(e);
    }
  }
}

absl::Status StringTable::status() const {
  if (rejected_ == 0) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "string table full: ", rejected_, " string(s) not stored (first id ", first_rejected_id_,
      "), the table holds ", entries_.size(), " strings in ", bytes(), " of ", max_bytes_,
      " bytes; their events get an empty name. The agent sends far more distinct names than a "
      "CUDA program has (a unique NVTX text per call?)"));
}

const StringTable::Name& StringTable::Find(uint32_t id) const {
  static const Name kUnknown{"", "\"\"", false};
  auto it = entries_.find(id);
  return it == entries_.end() ? kUnknown : it->second;
}

const std::string& StringTable::Text(uint32_t id) const { return Find(id).text; }

const std::string& StringTable::Quoted(uint32_t id) const { return Find(id).quoted; }

}  // namespace profd
