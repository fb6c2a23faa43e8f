#include "client/output_folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/file_name.h"

namespace profctl {

namespace {

std::string PartName(absl::string_view name) { return absl::StrCat(".", name, ".part"); }

}  // namespace

absl::StatusOr<OutputFolder> OutputFolder::Open(const std::string& path, bool create) {
  if (create) {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) {
      return absl::PermissionDeniedError(absl::StrCat("cannot create ", path, ": ", ec.message()));
    }
  }
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open the folder ", path, ": ", std::strerror(errno)));
  }
  return OutputFolder(path, fd);
}

OutputFolder::OutputFolder(OutputFolder&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

OutputFolder& OutputFolder::operator=(OutputFolder&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

OutputFolder::~OutputFolder() {
  if (fd_ >= 0) close(fd_);
}

std::string OutputFolder::PathOf(absl::string_view name) const {
  return absl::StrCat(path_, "/", name);
}

absl::StatusOr<int> OutputFolder::Create(absl::string_view name, bool replace_stale) {
  if (absl::Status s = profd::ValidatePlainFileName(name); !s.ok()) return s;
  const std::string n(name);
  // unlinkat removes a link itself, never what it points to.
  if (replace_stale) unlinkat(fd_, n.c_str(), 0);
  int fd = openat(fd_, n.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", PathOf(name), ": ", std::strerror(errno)));
  }
  return fd;
}

absl::StatusOr<int> OutputFolder::CreatePart(absl::string_view name) {
  if (absl::Status s = profd::ValidatePlainFileName(name); !s.ok()) return s;
  return Create(PartName(name), /*replace_stale=*/true);
}

absl::Status OutputFolder::Commit(absl::string_view name) {
  if (absl::Status s = profd::ValidatePlainFileName(name); !s.ok()) return s;
  const std::string part = PartName(name), target(name);
  if (renameat(fd_, part.c_str(), fd_, target.c_str()) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot rename ", PathOf(part), " to ",
                                                    PathOf(name), ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void OutputFolder::Remove(absl::string_view name) {
  if (!profd::ValidatePlainFileName(name).ok()) return;
  unlinkat(fd_, std::string(name).c_str(), 0);
}

void OutputFolder::RemovePart(absl::string_view name) {
  if (!profd::ValidatePlainFileName(name).ok()) return;
  unlinkat(fd_, PartName(name).c_str(), 0);
}

std::string OutputFolder::ReadSmall(absl::string_view name) const {
  if (!profd::ValidatePlainFileName(name).ok()) return "";
  int fd = openat(fd_, std::string(name).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buffer[64 << 10];
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
    if (out.size() > (64u << 20)) break;  // a manifest is small; never read a huge file whole
  }
  close(fd);
  return out;
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace profctl
