#include "common/printable.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace profd {
namespace {

// Length of the valid UTF-8 sequence at text[i] (2 to 4 bytes) and its code point, or 0 when
// the bytes there are not one (overlong forms and surrogates included).
size_t Utf8Sequence(std::string_view text, size_t i, uint32_t* code_point) {
  const unsigned char lead = static_cast<unsigned char>(text[i]);
  size_t length;
  uint32_t cp, min;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2, cp = lead & 0x1f, min = 0x80;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3, cp = lead & 0x0f, min = 0x800;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4, cp = lead & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    const unsigned char next = static_cast<unsigned char>(text[i + k]);
    if ((next & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (next & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  *code_point = cp;
  return length;
}

// Characters that are valid but would break or disguise a line: C1 controls (U+0085 is a line
// break to some readers, U+009B starts an escape sequence on others), the line and paragraph
// separators, and the bidirectional marks and controls that make a line read differently from
// what it holds (Trojan Source, CVE-2021-42574).
bool Disguising(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || cp == 0x2028 || cp == 0x2029 ||
         (cp >= 0x200e && cp <= 0x200f) || (cp >= 0x202a && cp <= 0x202e) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string Printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      if (c == '\\') out += '\\';
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c == '\n' || c == '\r' || c == '\t') {
      out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
      ++i;
      continue;
    }
    uint32_t cp = 0;
    size_t length = c >= 0x80 ? Utf8Sequence(text, i, &cp) : 0;
    if (length == 0) {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
      ++i;
    } else if (Disguising(cp)) {
      absl::StrAppend(&out, "\\u{", absl::Hex(cp, absl::kZeroPad4), "}");
      i += length;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  return out;
}

std::string EscapeJsonLineSeparators(std::string json) {
  // U+2028 and U+2029 are E2 80 A8 and E2 80 A9 in UTF-8; E2 80 never starts anything else
  // that ends in A8 or A9.
  for (size_t at = json.find("\xe2\x80"); at != std::string::npos;
       at = json.find("\xe2\x80", at + 1)) {
    if (at + 2 >= json.size()) break;
    const char last = json[at + 2];
    if (last == '\xa8' || last == '\xa9') {
      json.replace(at, 3, last == '\xa8' ? "\\u2028" : "\\u2029");
    }
  }
  return json;
}

}  // namespace profd
