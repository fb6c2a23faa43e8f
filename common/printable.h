// Text from peers made safe to show. Kernel, pod and label names, command lines and paths come
// from agents, PyTorch processes and trace files: profd's log, profctl's tables and the HTML
// report all pass them through Printable, so no peer can forge a line, move the cursor, recolour
// a terminal or make a name read differently from what it holds (bidirectional overrides).
// JSON keeps the exact text (its own escaping is enough to parse it back); JSON written for
// people and scripts additionally goes through EscapeJsonLineSeparators.
#pragma once

#include <string>
#include <string_view>

namespace profd {

// The text with every control character (C0, DEL, C1), invalid UTF-8 byte and character that
// would move or reorder the line written as an escape: \n, \r, \t, \\, \xNN for bytes,
// \u{NNNN} for characters. Escaped characters: C1 controls (U+0080-U+009F), the line and
// paragraph separators (U+2028, U+2029), the directional marks and controls U+061C, U+200E,
// U+200F, U+202A-U+202E, U+2066-U+2069. A backslash is doubled, so an escape in the output always
// stands for something escaped. Printable ASCII and other valid UTF-8 stay as they are.
std::string Printable(std::string_view text);

// JSON text with U+2028 and U+2029 written as \u2028 and \u2029. Both are valid inside JSON
// strings, but JavaScript (before ES2019) and line-based tools take them for line breaks. Only
// strings can hold them in JSON, so the result is the same JSON value.
std::string EscapeJsonLineSeparators(std::string json);

}  // namespace profd
