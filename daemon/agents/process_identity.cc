#include "daemon/agents/process_identity.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace profd {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
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

ProcessIdentity ReadProcessIdentity(pid_t pid, absl::string_view proc_root) {
  ProcessIdentity identity;
  std::string dir = absl::StrCat(proc_root, "/", pid);
  char exe[4096];
  ssize_t n = readlink((dir + "/exe").c_str(), exe, sizeof(exe) - 1);
  if (n > 0) identity.exe.assign(exe, static_cast<size_t>(n));
  std::string cmdline = ReadFile(dir + "/cmdline");
  while (!cmdline.empty() && cmdline.back() == '\0') cmdline.pop_back();
  std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
  identity.command_line = cmdline;
  identity.comm = std::string(absl::StripTrailingAsciiWhitespace(ReadFile(dir + "/comm")));
  ParseCgroup(ReadFile(dir + "/cgroup"), &identity);
  return identity;
}

}  // namespace profd
