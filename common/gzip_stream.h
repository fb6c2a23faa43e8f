// Streaming gzip (RFC 1952) compression with ISA-L's igzip, the one compressor profd writes with:
// trace files and gzip'd /metrics scrapes. At its level 1 it compresses profd's trace JSON about
// four times as fast as zlib's level 1 and a little smaller (docs/measurements/overhead.md), and
// any gzip reader (zcat, Perfetto, chrome://tracing, Python) reads what it writes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

struct isal_zstream;

namespace profd {

class GzipStream {
 public:
  // level: ISA-L's 0 (fastest) to 3; 1 is the default everywhere.
  explicit GzipStream(int level = 1);
  ~GzipStream();
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;

  // Receives each run of compressed bytes, in order; an error stops the compression and is
  // returned by Compress.
  using Sink = absl::FunctionRef<absl::Status(std::string_view compressed)>;

  // Compresses `in` as the next part of the stream, all of it: when the call returns, `sink` has
  // every byte needed to decompress `in` (a deflate sync flush). `finish` ends the stream (the
  // gzip trailer), after which it takes no more input. Output goes to `sink` through a fixed
  // buffer, however large `in` is.
  absl::Status Compress(std::string_view in, bool finish, Sink sink);

  // The whole of `in` as one gzip member.
  static std::string Gzip(std::string_view in, int level = 1);

 private:
  std::unique_ptr<isal_zstream> zs_;
  std::unique_ptr<uint8_t[]> level_buffer_;
  std::unique_ptr<uint8_t[]> out_;
  bool finished_ = false;
};

}  // namespace profd
