// Names read back from a trace store (an index row's files and host, a listing's keys) are
// untrusted: anyone holding any node's credentials can write a bucket, and a shared local store
// is writable by every profd that uses it. Before such a name is joined to a key or a path it must
// be one plain file name, so that neither profd (reading the store) nor profctl (writing what it
// downloads) can be steered outside the folder it means.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace profd {

// NAME_MAX on Linux: longer names cannot be created anyway.
inline constexpr size_t kMaxPlainFileNameBytes = 255;

// OK for one plain file name: not empty, at most kMaxPlainFileNameBytes, no '/', not "." or "..",
// no NUL or other control character (bytes below 0x20 and 0x7f). INVALID_ARGUMENT otherwise, with
// the name shown escaped (so the message itself cannot carry control characters).
absl::Status ValidatePlainFileName(absl::string_view name);

// The name made Printable and cut at 200 bytes: for messages about a name that was refused.
std::string EscapedName(absl::string_view name);

}  // namespace profd
