#include "daemon/server/access_control.h"

#include <dirent.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/log.h"

namespace profd {
namespace {

namespace fs = std::filesystem;

constexpr char kComponent[] = "access";

std::string GroupName(gid_t gid) {
  std::vector<char> buffer(16384);
  group entry{};
  group* found = nullptr;
  if (getgrgid_r(gid, &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr) {
    return found->gr_name;
  }
  return std::to_string(gid);
}

std::string Mode(mode_t mode) { return absl::StrFormat("%04o", mode & 07777); }

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::PermissionDeniedError(
      absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(errno)));
}

// Creates `path` and its missing parents with `mode` (umask does not apply: chmod after mkdir)
// and, when gid >= 0, that group.
absl::Status MakeFolders(const fs::path& path, mode_t mode, int gid) {
  fs::path prefix;
  for (const fs::path& part : path) {
    prefix /= part;
    struct stat st;
    if (stat(prefix.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        return absl::FailedPreconditionError(
            absl::StrCat(prefix.string(), " is not a folder (needed for ", path.string(), ")"));
      }
      continue;
    }
    if (mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) return Errno("create", prefix);
    if (gid >= 0 && chown(prefix.c_str(), geteuid(), static_cast<gid_t>(gid)) != 0) {
      return Errno("set the group of", prefix);
    }
    if (chmod(prefix.c_str(), mode) != 0) return Errno("set the mode of", prefix);
  }
  return absl::OkStatus();
}

// Members of the group must get through every folder above `path` to reach it; say which one
// stops them (profd still starts: root can use it, and the operator decides).
void WarnIfGroupCannotReach(const fs::path& path, const AccessGroup& group) {
  for (fs::path above = path.parent_path(); !above.empty(); above = above.parent_path()) {
    struct stat st;
    if (stat(above.c_str(), &st) != 0) break;
    const bool passes = st.st_gid == group.gid ? (st.st_mode & S_IXGRP) : (st.st_mode & S_IXOTH);
    if (!passes) {
      LogWarning(kComponent,
                 "members of group %s cannot reach %s: %s is %s (owner %d, group %s); give it "
                 "o+x, or the group g+x",
                 group.name, path.string(), above.string(), Mode(st.st_mode), st.st_uid,
                 GroupName(st.st_gid));
      return;
    }
    if (above == above.root_path()) break;
  }
}

// Owner profd, group `gid`, mode 2750, for a folder profd owns.
absl::Status Restrict(const std::string& path, gid_t gid) {
  if (chown(path.c_str(), geteuid(), gid) != 0) return Errno("set the group of", path);
  if (chmod(path.c_str(), 02750) != 0) return Errno("set the mode of", path);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AccessGroup> ResolveAccessGroup(const std::string& flag) {
  AccessGroup group;
  if (flag.empty()) {
    group.gid = getegid();
    group.name = GroupName(group.gid);
    return group;
  }
  group.configured = true;
  uint32_t number = 0;
  if (absl::SimpleAtoi(flag, &number) && absl::ascii_isdigit(flag[0])) {
    // A gid with no name is fine: containers often have no /etc/group entry for it.
    group.gid = static_cast<gid_t>(number);
    group.name = GroupName(group.gid);
    return group;
  }
  std::vector<char> buffer(16384);
  struct group entry {};
  struct group* found = nullptr;
  int rc = getgrnam_r(flag.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (rc != 0 || found == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--access_group=", flag, ": no such group on this host (`getent group ", flag,
        "` finds none). Give the name of an existing group or a numeric gid, or leave the flag "
        "out to allow root only"));
  }
  group.gid = found->gr_gid;
  group.name = found->gr_name;
  return group;
}

mode_t RestrictUmask() { return umask(027); }

absl::Status MakeSocketFolder(const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  return MakeFolders(fs::absolute(path), 0755, -1);
}

absl::Status SecureControlSocket(const std::string& path, const AccessGroup& group) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return Errno("find the control socket", path);
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a socket"));
  }
  const mode_t mode = group.configured ? 0660 : 0600;
  if (chown(path.c_str(), geteuid(), group.gid) != 0) return Errno("set the group of", path);
  if (chmod(path.c_str(), mode) != 0) return Errno("set the mode of", path);
  return absl::OkStatus();
}

absl::Status PrepareDataFolder(const std::string& flag, const std::string& path,
                               const AccessGroup& group) {
  if (path.empty()) return absl::OkStatus();
  const fs::path folder = fs::absolute(path).lexically_normal();
  if (absl::Status s = MakeFolders(folder, 0750, static_cast<int>(group.gid)); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("--", flag, "=", path, ": ", s.message()));
  }
  struct stat st;
  if (stat(folder.c_str(), &st) != 0) return Errno("read", folder.string());
  if (st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--", flag, "=", path, " belongs to uid ", st.st_uid, ", not to profd (uid ", geteuid(),
        "): its owner could read or replace the traces profd writes there. Give profd a folder "
        "of its own (it creates a missing one)"));
  }
  if ((st.st_mode & S_ISVTX) || (st.st_mode & S_IWOTH)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--", flag, "=", path, " is a shared folder (mode ", Mode(st.st_mode),
                     "): anyone may create files in it. Give profd a folder of its own, e.g. ",
                     path, "/profd (it creates a missing one)"));
  }
  if (absl::Status s = Restrict(folder.string(), group.gid); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("--", flag, "=", path, ": ", s.message()));
  }
  // Folders an older profd left here, created with its umask (0755): give them the group too.
  if (DIR* dir = opendir(folder.c_str())) {
    while (dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      const std::string child = (folder / name).string();
      struct stat cst;
      if (lstat(child.c_str(), &cst) != 0 || !S_ISDIR(cst.st_mode) || cst.st_uid != geteuid()) {
        continue;
      }
      if (absl::Status s = Restrict(child, group.gid); !s.ok()) {
        LogWarning(kComponent, "%s", s.message());
      }
    }
    closedir(dir);
  }
  if (group.configured) WarnIfGroupCannotReach(folder, group);
  return absl::OkStatus();
}

}  // namespace profd
