#include "common/file_name.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/printable.h"

namespace profd {

std::string EscapedName(absl::string_view name) {
  constexpr size_t kShown = 200;
  std::string out = Printable(std::string_view(name.data(), std::min(name.size(), kShown)));
  if (name.size() > kShown) absl::StrAppend(&out, "... (", name.size(), " bytes)");
  return out;
}

absl::Status ValidatePlainFileName(absl::string_view name) {
  const char* why = nullptr;
  if (name.empty()) {
    why = "it is empty";
  } else if (name.size() > kMaxPlainFileNameBytes) {
    why = "it is longer than 255 bytes";
  } else if (name == "." || name == "..") {
    why = "it names a folder, not a file";
  } else if (name.find('/') != absl::string_view::npos) {
    why = "it holds a '/' (a path, not a name)";
  } else {
    for (char c : name) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        why = "it holds a control character";
        break;
      }
    }
  }
  if (why == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "'", EscapedName(name), "' is not a plain file name (", why,
      "): expected one name such as trace-1234.json.gz, without '/', '.' or '..' and without "
      "control characters"));
}

}  // namespace profd
