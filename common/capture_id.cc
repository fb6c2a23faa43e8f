#include "common/capture_id.h"

#include <cstdint>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/mutex.h"

namespace profd {

namespace {

constexpr char kFleetMark[] = "-fleet-";

uint32_t RandomSuffix() {
  static absl::Mutex mutex;
  static std::mt19937_64 rng{std::random_device{}()};  // guarded by mutex
  MutexLock lock(&mutex);
  return static_cast<uint32_t>(rng());
}

std::string IdTime(absl::Time now) {
  return absl::FormatTime("%Y%m%dT%H%M%SZ", now, absl::UTCTimeZone());
}

}  // namespace

std::string NewCaptureId(const std::string& hostname, absl::Time now) {
  const uint32_t suffix = RandomSuffix();
  std::string host;
  for (char c : hostname) {
    host.push_back(absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-' ? c : '-');
  }
  if (host.empty()) host = "host";
  return absl::StrCat(IdTime(now), "-", host, "-", absl::Hex(suffix, absl::kZeroPad8));
}

std::string NewFleetId(absl::Time now) {
  return absl::StrCat(IdTime(now), kFleetMark, absl::Hex(RandomSuffix(), absl::kZeroPad8));
}

bool IsFleetId(const std::string& id, absl::Time* at) {
  // 16 characters of time, the mark, 8 hex digits.
  constexpr size_t kTime = 16, kMark = sizeof(kFleetMark) - 1;
  if (id.size() != kTime + kMark + 8 || id.compare(kTime, kMark, kFleetMark) != 0) return false;
  for (size_t i = kTime + kMark; i < id.size(); ++i) {
    if (!absl::ascii_isxdigit(id[i])) return false;
  }
  absl::Time t;
  if (!TimeOfId(id, &t)) return false;
  if (at != nullptr) *at = t;
  return true;
}

bool TimeOfId(const std::string& id, absl::Time* out) {
  if (id.size() < 16 || id[8] != 'T' || id[15] != 'Z') return false;
  // absl's %Y takes every digit it sees: give it separators.
  std::string text = absl::StrCat(id.substr(0, 4), "-", id.substr(4, 2), "-", id.substr(6, 2), " ",
                                  id.substr(9, 2), ":", id.substr(11, 2), ":", id.substr(13, 2));
  std::string err;
  return absl::ParseTime("%Y-%m-%d %H:%M:%S", text, absl::UTCTimeZone(), out, &err);
}

}  // namespace profd
