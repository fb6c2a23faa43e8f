// The file under a trace writer: events are encoded straight into a buffer (Reserve, then Commit
// the new end), and every ~256 KiB the buffer is gzip-compressed (GzipStream) into the file. Both
// trace formats (ChromeTraceWriter's JSON, PerfettoTraceWriter's protobuf) write through it, so
// profd never holds more than a buffer of any trace. Owned by one writer, on one thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/gzip_stream.h"

namespace profd {

class TraceFile {
 public:
  // Sees each run of compressed bytes once it is in the file, in file order (a capture folder
  // takes the file's SHA-256 from them rather than reading the file back).
  using BytesObserver = std::function<void(std::string_view compressed)>;

  // The buffer is compressed once it holds this much (between events).
  static constexpr size_t kFlushBytes = 256 * 1024;

  // Creates (truncates) path. gzip_level: GzipStream's (ISA-L's 0-3).
  static absl::StatusOr<std::unique_ptr<TraceFile>> Create(const std::string& path, int gzip_level,
                                                           BytesObserver on_bytes);
  ~TraceFile();

  // Room for `bytes` more at the end of the buffer: write there, then Commit the new end.
  char* Reserve(size_t bytes);
  void Commit(char* end) { size_ = static_cast<size_t>(end - buffer_.get()); }
  void Append(std::string_view bytes);

  // Compresses a full buffer into the file; call between events. After a failed write the
  // buffer's bytes have nowhere to go and are dropped: the error is kept for status().
  void FlushIfFull();
  // The first write error, if any.
  const absl::Status& status() const { return error_; }
  // Compresses the rest, ends the gzip stream and closes the file.
  absl::Status Close();

  uint64_t compressed_bytes() const { return compressed_bytes_; }

 private:
  TraceFile(std::string path, FILE* file, int level, BytesObserver on_bytes);
  absl::Status Flush(bool finish);

  const std::string path_;
  FILE* file_;
  BytesObserver on_bytes_;
  GzipStream gzip_;
  std::unique_ptr<char[]> buffer_;
  size_t size_ = 0;
  size_t capacity_ = 0;
  absl::Status error_;
  uint64_t compressed_bytes_ = 0;
};

}  // namespace profd
