#include "daemon/trace/string_table.h"

#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>

namespace profd {

std::string StringTable::Demangle(const std::string& name) {
  if (name.size() < 2 || name[0] != '_' || name[1] != 'Z') return name;
  int status = 0;
  char* out = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) return name;
  std::string result(out);
  std::free(out);
  return result;
}

std::string StringTable::JsonQuote(const std::string& text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

void StringTable::Add(const v1::EventBatch& batch) {
  for (const v1::StringDef& def : batch.strings()) {
    if (def.id() >= text_.size()) {
      text_.resize(def.id() + 1);
      quoted_.resize(def.id() + 1, "\"\"");
    }
    text_[def.id()] = Demangle(def.value());
    quoted_[def.id()] = JsonQuote(text_[def.id()]);
  }
}

const std::string& StringTable::Text(uint32_t id) const {
  static const std::string kEmpty;
  return id < text_.size() ? text_[id] : kEmpty;
}

const std::string& StringTable::Quoted(uint32_t id) const {
  static const std::string kEmpty = "\"\"";
  return id < quoted_.size() ? quoted_[id] : kEmpty;
}

}  // namespace profd
