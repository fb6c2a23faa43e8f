#include "daemon/trace/trace_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"

namespace profd {
namespace {

// Headroom over kFlushBytes: an event is flushed after, never split.
constexpr size_t kHeadroom = 4096;

}  // namespace

absl::StatusOr<std::unique_ptr<TraceFile>> TraceFile::Create(const std::string& path,
                                                             int gzip_level,
                                                             BytesObserver on_bytes) {
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    if (errno == ENOSPC || errno == EDQUOT) return FileWriteError(path, errno);
    return absl::UnavailableError(
        absl::StrCat("cannot create trace file ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<TraceFile>(new TraceFile(path, file, gzip_level, std::move(on_bytes)));
}

TraceFile::TraceFile(std::string path, FILE* file, int level, BytesObserver on_bytes)
    : path_(std::move(path)), file_(file), on_bytes_(std::move(on_bytes)), gzip_(level) {
  capacity_ = kFlushBytes + kHeadroom;
  buffer_.reset(new char[capacity_]);
}

TraceFile::~TraceFile() {
  if (file_ != nullptr) std::fclose(file_);
}

char* TraceFile::Reserve(size_t bytes) {
  if (capacity_ - size_ < bytes) {
    // Only an event with a name longer than a few KiB gets here.
    size_t capacity = std::max(2 * capacity_, size_ + bytes);
    std::unique_ptr<char[]> grown(new char[capacity]);
    std::memcpy(grown.get(), buffer_.get(), size_);
    buffer_ = std::move(grown);
    capacity_ = capacity;
  }
  return buffer_.get() + size_;
}

void TraceFile::Append(std::string_view bytes) {
  char* p = Reserve(bytes.size());
  std::memcpy(p, bytes.data(), bytes.size());
  Commit(p + bytes.size());
}

void TraceFile::FlushIfFull() {
  if (size_ < kFlushBytes) return;
  if (error_.ok()) {
    error_ = Flush(false);
  } else {
    size_ = 0;
  }
}

absl::Status TraceFile::Flush(bool finish) {
  absl::Status status = gzip_.Compress(
      std::string_view(buffer_.get(), size_), finish, [&](std::string_view compressed) {
        if (std::fwrite(compressed.data(), 1, compressed.size(), file_) != compressed.size()) {
          return FileWriteError(path_, errno);
        }
        compressed_bytes_ += compressed.size();
        if (on_bytes_) on_bytes_(compressed);
        return absl::OkStatus();
      });
  size_ = 0;
  return status;
}

absl::Status TraceFile::Close() {
  absl::Status status = error_.ok() ? Flush(true) : error_;
  if (std::fclose(file_) != 0 && status.ok()) status = FileWriteError(path_, errno);
  file_ = nullptr;
  return status;
}

}  // namespace profd
