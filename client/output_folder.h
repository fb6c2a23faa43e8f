// OutputFolder: the folder `profctl get` and `profctl report ID` write downloaded files into.
// Names come from profd, which reads them from a store anyone with the bucket's credentials can
// write: the folder is opened once and every file is created in it by name (openat), each name
// first checked to be one plain file name, and no link found in the folder is followed. So a name
// cannot leave the folder, and a link planted in it cannot redirect a write.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace profctl {

class OutputFolder {
 public:
  // Opens `path`, creating it (and its parents) first when `create`. The folder itself may be
  // reached through a link: the user named it.
  static absl::StatusOr<OutputFolder> Open(const std::string& path, bool create);
  OutputFolder(OutputFolder&& other) noexcept;
  OutputFolder& operator=(OutputFolder&& other) noexcept;
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;
  ~OutputFolder();

  const std::string& path() const { return path_; }
  // path()/name, for messages and for readers that take a path.
  std::string PathOf(absl::string_view name) const;

  // A new file `name` in the folder, open for writing: O_CREAT|O_EXCL|O_NOFOLLOW, so it is never
  // an existing file or a link. INVALID_ARGUMENT for a name that is not a plain file name.
  absl::StatusOr<int> Create(absl::string_view name, bool replace_stale);
  // The same under a temporary name (".<name>.part", a stale one replaced), for Commit.
  absl::StatusOr<int> CreatePart(absl::string_view name);
  // Renames ".<name>.part" to name, replacing whatever is there (a planted link is replaced, not
  // followed).
  absl::Status Commit(absl::string_view name);
  void Remove(absl::string_view name);
  void RemovePart(absl::string_view name);
  // A small file of the folder, read without following a link ("" when absent).
  std::string ReadSmall(absl::string_view name) const;

 private:
  OutputFolder(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

// Writes all of data to fd; errno-named message on failure.
absl::Status WriteAll(int fd, absl::string_view data, const std::string& path);

}  // namespace profctl
