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

// A pod UID as the kubelet writes it into cgroup names: a UUID (8-4-4-4-12 hex), or for a static
// pod the 32-hex hash of its manifest (the API's mirror pod has it as kubernetes.io/config.mirror).
bool IsPodUid(absl::string_view uid) {
  if (uid.size() == 32) {
    for (char c : uid) {
      if (!absl::ascii_isxdigit(c)) return false;
    }
    return true;
  }
  if (uid.size() != 36) return false;
  for (size_t i = 0; i < uid.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? uid[i] != '-' : !absl::ascii_isxdigit(uid[i])) return false;
  }
  return true;
}

// "pod<uid>" (cgroupfs driver, dashes) or "kubepods[-<qos>]-pod<uid>.slice" (systemd driver,
// underscores for the dashes). A UID has no 'p' or 'o', so the last "pod" starts it.
std::string PodUidIn(absl::string_view segment) {
  size_t at = segment.rfind("pod");
  if (at == absl::string_view::npos) return "";
  if (at != 0 && !absl::StartsWith(segment, "kubepods-")) return "";
  absl::string_view rest = segment.substr(at + 3);
  if (absl::EndsWith(rest, ".slice")) {
    rest.remove_suffix(6);
  } else if (at != 0) {
    return "";
  }
  std::string uid = absl::StrReplaceAll(rest, {{"_", "-"}});
  return IsPodUid(uid) ? absl::AsciiStrToLower(uid) : "";
}

}  // namespace

void ParseCgroup(absl::string_view cgroup_text, ProcessIdentity* identity) {
  for (absl::string_view line : absl::StrSplit(cgroup_text, '\n', absl::SkipEmpty())) {
    // hierarchy-id:controllers:path
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    // The pod is the first pod segment below the kubelet's "kubepods" cgroup: a process allowed
    // to make cgroups inside its own (a delegated subtree) could name one "pod<another uid>",
    // but only below the kubelet's, which comes first. Paths seen through a cgroup namespace
    // ("/../../kubepods.slice/...") read the same.
    bool in_kubepods = false;
    for (absl::string_view segment : absl::StrSplit(parts[2], '/', absl::SkipEmpty())) {
      if (absl::StartsWith(segment, "kubepods")) in_kubepods = true;
      if (in_kubepods && identity->pod_uid.empty()) identity->pod_uid = PodUidIn(segment);
      if (identity->container_id.empty()) identity->container_id = ContainerIdIn(segment);
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
