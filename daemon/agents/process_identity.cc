#include "daemon/agents/process_identity.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace profd {
namespace {

// At most `limit` bytes of a file under the process's folder; *cut says there was more.
std::string ReadBounded(int dir_fd, const char* name, size_t limit, bool* cut = nullptr) {
  std::string out;
  int fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  out.resize(limit + 1);
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (cut != nullptr) *cut = got > limit;
  out.resize(std::min(got, limit));
  return out;
}

bool IsHex64(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(c)) return false;
  }
  return true;
}

// A path segment may carry the id with a runtime prefix and a suffix: "cri-containerd-<id>.scope",
// "docker-<id>.scope", "crio-<id>", or be the bare id (cgroup v1).
std::string ContainerIdIn(absl::string_view segment) {
  if (absl::EndsWith(segment, ".scope")) segment.remove_suffix(6);
  size_t dash = segment.rfind('-');
  absl::string_view candidate =
      dash == absl::string_view::npos ? segment : segment.substr(dash + 1);
  return IsHex64(candidate) ? std::string(candidate) : "";
}

// "pod<uid>" (cgroupfs, dashes) or "kubepods-burstable-pod<uid>.slice" (systemd, underscores).
std::string PodUidIn(absl::string_view segment) {
  size_t at = segment.find("pod");
  if (at == absl::string_view::npos) return "";
  absl::string_view rest = segment.substr(at + 3);
  if (absl::EndsWith(rest, ".slice")) rest.remove_suffix(6);
  if (rest.size() != 36) return "";
  std::string uid = absl::StrReplaceAll(rest, {{"_", "-"}});
  for (char c : uid) {
    if (!absl::ascii_isxdigit(c) && c != '-') return "";
  }
  return uid;
}

}  // namespace

void ParseCgroup(absl::string_view cgroup_text, ProcessIdentity* identity) {
  for (absl::string_view line : absl::StrSplit(cgroup_text, '\n', absl::SkipEmpty())) {
    // hierarchy-id:controllers:path
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    for (absl::string_view segment : absl::StrSplit(parts[2], '/', absl::SkipEmpty())) {
      if (identity->pod_uid.empty()) identity->pod_uid = PodUidIn(segment);
      if (std::string id = ContainerIdIn(segment); !id.empty()) identity->container_id = id;
    }
    if (!identity->container_id.empty()) return;
  }
}

absl::StatusOr<ProcessIdentity> ReadProcessIdentity(pid_t pid, const std::function<bool()>& alive,
                                                    absl::string_view proc_root) {
  std::string dir = absl::StrCat(proc_root, "/", pid);
  int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open ", dir, ": ", std::strerror(errno)));
  }
  if (alive && !alive()) {
    close(dir_fd);
    return absl::NotFoundError(absl::StrCat("process ", pid, " has exited"));
  }
  ProcessIdentity identity;
  char exe[4096];
  ssize_t n = readlinkat(dir_fd, "exe", exe, sizeof(exe) - 1);
  if (n > 0) identity.exe.assign(exe, static_cast<size_t>(n));
  bool cut = false;
  std::string cmdline = ReadBounded(dir_fd, "cmdline", kMaxCommandLineBytes, &cut);
  while (!cmdline.empty() && cmdline.back() == '\0') cmdline.pop_back();
  std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
  if (cut) cmdline += kCommandLineCutMark;
  identity.command_line = cmdline;
  identity.comm = std::string(absl::StripTrailingAsciiWhitespace(ReadBounded(dir_fd, "comm", 64)));
  // A cgroup path per hierarchy: a few hundred bytes each, a dozen hierarchies at most.
  ParseCgroup(ReadBounded(dir_fd, "cgroup", 64 << 10), &identity);
  close(dir_fd);
  return identity;
}

}  // namespace profd
