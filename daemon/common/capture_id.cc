#include "daemon/common/capture_id.h"

#include <cstdint>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/common/mutex.h"

namespace profd {

std::string NewCaptureId(const std::string& hostname, absl::Time now) {
  static absl::Mutex mutex;
  static std::mt19937_64 rng{std::random_device{}()};  // guarded by mutex
  uint32_t suffix;
  {
    MutexLock lock(&mutex);
    suffix = static_cast<uint32_t>(rng());
  }
  std::string host;
  for (char c : hostname) {
    host.push_back(absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-' ? c : '-');
  }
  if (host.empty()) host = "host";
  return absl::StrCat(absl::FormatTime("%Y%m%dT%H%M%SZ", now, absl::UTCTimeZone()), "-", host, "-",
                      absl::Hex(suffix, absl::kZeroPad8));
}

}  // namespace profd
