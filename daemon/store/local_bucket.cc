#include "daemon/store/local_bucket.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/file_name.h"

namespace profd::store {

namespace fs = std::filesystem;

namespace {

std::string TempNameFor(const fs::path& target) {
  static std::atomic<uint64_t> counter{0};
  return (target.parent_path() /
          absl::StrCat(".", target.filename().string(), ".tmp-", getpid(), "-", counter++))
      .string();
}

absl::Status MakeParent(const fs::path& target) {
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create the store folder ", target.parent_path().string(), ": ",
                     ec.message(), " (check --store and profd's permissions)"));
  }
  return absl::OkStatus();
}

// Objects survive a crash once Put returns: fsync before the rename.
AtomicWriteOptions Durable() {
  AtomicWriteOptions options;
  options.sync = true;
  return options;
}

absl::Status SyncAndRename(const std::string& temp, const fs::path& target) {
  return CommitFile(temp, target.string(), Durable());
}

}  // namespace

LocalBucket::LocalBucket(std::string root) : root_(std::move(root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

std::string LocalBucket::UriOf(const std::string& key) const {
  return absl::StrCat("file://", root_, "/", key);
}

absl::Status ValidateObjectKey(const std::string& key) {
  bool ok = !key.empty() && key.front() != '/';
  size_t start = 0;
  while (ok && start <= key.size()) {
    size_t slash = key.find('/', start);
    if (slash == std::string::npos) slash = key.size();
    absl::string_view part(key.data() + start, slash - start);
    // A prefix ends in '/': its last, empty part is no name.
    if (!(part.empty() && slash == key.size() && start > 0)) {
      ok = ValidatePlainFileName(part).ok();
    }
    start = slash + 1;
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "refusing the store key '", EscapedName(key),
      "': every part of a key must be a plain name (no empty part, '.', '..' or control "
      "character); it was built from a name the store gave back"));
}

absl::Status LocalBucket::PutFile(const std::string& key, const std::string& path, bool may_move) {
  if (absl::Status s = ValidateObjectKey(key); !s.ok()) return s;
  fs::path target = fs::path(root_) / key;
  if (absl::Status s = MakeParent(target); !s.ok()) return s;
  std::string temp = TempNameFor(target);
  // A hard link rather than a rename: the source stays whole until the caller removes it, so a
  // Put that fails half-way can be retried from the same folder.
  if (may_move && link(path.c_str(), temp.c_str()) == 0) {
    return SyncAndRename(temp, target);
  }
  // Another file system (or the caller keeps its file): copy.
  std::error_code ec;
  fs::copy_file(path, temp, fs::copy_options::overwrite_existing, ec);
  if (ec) {
    unlink(temp.c_str());
    return absl::InternalError(absl::StrCat("cannot copy ", path, " into the store at ",
                                            target.string(), ": ", ec.message()));
  }
  return SyncAndRename(temp, target);
}

absl::Status LocalBucket::PutBytes(const std::string& key, const std::string& data) {
  if (absl::Status s = ValidateObjectKey(key); !s.ok()) return s;
  fs::path target = fs::path(root_) / key;
  if (absl::Status s = MakeParent(target); !s.ok()) return s;
  AtomicWriteOptions options = Durable();
  options.temp_path = TempNameFor(target);
  return WriteFileAtomically(target.string(), data, options);
}

// A local read needs no deadline: the disk answers or fails.
absl::Status LocalBucket::Read(const std::string& key, const ChunkSink& sink, absl::Time) {
  if (absl::Status s = ValidateObjectKey(key); !s.ok()) return s;
  std::string path = absl::StrCat(root_, "/", key);
  // profd writes objects by rename or hard link, never as links: a link in the store was put
  // there by someone else, and following it would read whatever it points at as root.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat("no object ", UriOf(key)));
    }
    if (errno == ELOOP) {
      return absl::PermissionDeniedError(absl::StrCat(
          "refusing to read ", path, ": it is a symbolic link, and profd never stores one"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  std::string buffer(1 << 20, '\0');
  absl::Status status;
  while (status.ok()) {
    ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status =
          absl::InternalError(absl::StrCat("read error in ", path, ": ", std::strerror(errno)));
      break;
    }
    if (n == 0) break;
    status = sink(absl::string_view(buffer.data(), static_cast<size_t>(n)));
  }
  close(fd);
  return status;
}

absl::StatusOr<ObjectListing> LocalBucket::List(const std::string& prefix, bool delimited,
                                                absl::Time) {
  ObjectListing listing;
  // Prefixes the store uses always end in '/': list that folder.
  fs::path folder = fs::path(root_) / prefix;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return listing;
  auto add = [&](const fs::directory_entry& entry) {
    std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, ".")) return;  // temporaries
    std::string key = fs::relative(entry.path(), root_).string();
    if (entry.is_directory()) {
      if (delimited) listing.folders.push_back(key + "/");
    } else if (entry.is_regular_file()) {
      struct stat st;
      absl::Time modified = stat(entry.path().c_str(), &st) == 0
                                ? absl::TimeFromTimespec(st.st_mtim)
                                : absl::InfiniteFuture();
      listing.objects.push_back({key, static_cast<uint64_t>(entry.file_size()), modified});
    }
  };
  if (delimited) {
    for (const auto& entry : fs::directory_iterator(folder, ec)) add(entry);
  } else {
    for (const auto& entry : fs::recursive_directory_iterator(folder, ec)) add(entry);
  }
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot list ", folder.string(), ": ", ec.message()));
  }
  std::sort(listing.folders.begin(), listing.folders.end());
  std::sort(listing.objects.begin(), listing.objects.end(),
            [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return listing;
}

absl::StatusOr<std::string> ReadAll(ObjectBucket& bucket, const std::string& key,
                                    absl::Time deadline) {
  std::string out;
  absl::Status s = bucket.Read(
      key,
      [&](absl::string_view chunk) {
        out.append(chunk.data(), chunk.size());
        return absl::OkStatus();
      },
      deadline);
  if (!s.ok()) return s;
  return out;
}

}  // namespace profd::store
