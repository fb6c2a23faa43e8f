#include "daemon/trace/trace_repair.h"

#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "daemon/trace/string_table.h"

namespace profd {
namespace {

// ChromeTraceWriter's layout: a header that ends with this, then events separated by ",\n" (no
// raw newline appears inside an event: JsonQuote escapes them).
constexpr std::string_view kEventsStart = "\"traceEvents\":[";
constexpr std::string_view kSeparator = ",\n";
// Past this much text without a separator the rest is not the writer's: it is dropped.
constexpr size_t kMaxPending = 64u << 20;

struct GzCloser {
  void operator()(gzFile f) const {
    if (f != nullptr) gzclose(f);
  }
};
struct FileCloser {
  void operator()(FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};

// Decompresses in's gzip stream as far as it reads, appending to *pending piece by piece and
// calling take() after each, which consumes what it can and returns false to stop. Returns
// whether the stream was whole (read to its end).
bool InflateReadable(FILE* in, std::string* pending, const std::function<bool()>& take) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) return false;
  bool whole = false;
  bool stop = false;
  std::string compressed(64 * 1024, '\0');
  std::string chunk(256 * 1024, '\0');
  while (!stop) {
    const size_t n = std::fread(compressed.data(), 1, compressed.size(), in);
    if (n == 0) break;
    zs.next_in = reinterpret_cast<Bytef*>(compressed.data());
    zs.avail_in = static_cast<uInt>(n);
    while (zs.avail_in > 0 && !stop) {
      zs.next_out = reinterpret_cast<Bytef*>(chunk.data());
      zs.avail_out = static_cast<uInt>(chunk.size());
      const int rc = inflate(&zs, Z_NO_FLUSH);
      pending->append(chunk.data(), chunk.size() - zs.avail_out);
      if (rc == Z_STREAM_END) {
        whole = true;
        stop = true;
      } else if (rc != Z_OK) {
        stop = true;  // corrupt from here on: keep what came before
      }
      if (!take()) stop = true;
    }
  }
  inflateEnd(&zs);
  return whole;
}

// The repaired file: written to path.repair, then renamed over path.
class RepairedFile {
 public:
  RepairedFile(const std::string& path, int gzip_level)
      : path_(path),
        temp_(path + ".repair"),
        out_(gzopen(temp_.c_str(), absl::StrCat("wb", gzip_level).c_str())) {}
  ~RepairedFile() {
    if (out_) {
      out_.reset();
      unlink(temp_.c_str());
    }
  }
  absl::Status status() const {
    if (out_) return absl::OkStatus();
    return absl::UnavailableError(
        absl::StrCat("cannot create ", temp_, ": ", std::strerror(errno)));
  }
  bool Write(std::string_view bytes) {
    return bytes.empty() ||
           gzwrite(out_.get(), bytes.data(), static_cast<unsigned>(bytes.size())) ==
               static_cast<int>(bytes.size());
  }
  // Closes and renames it over path; ok: every Write succeeded.
  absl::Status Commit(bool ok) {
    if (!ok)
      return absl::InternalError(absl::StrCat("cannot repair ", path_, ": cannot write ", temp_));
    if (gzclose(out_.release()) != Z_OK) {
      unlink(temp_.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", temp_, ": ", std::strerror(errno)));
    }
    return CommitFile(temp_, path_);
  }

 private:
  const std::string path_;
  const std::string temp_;
  std::unique_ptr<gzFile_s, GzCloser> out_;
};

}  // namespace

absl::StatusOr<TraceRepair> RepairTrace(const std::string& path, const TraceProcess& process,
                                        const std::string& why, int gzip_level) {
  std::unique_ptr<FILE, FileCloser> in(std::fopen(path.c_str(), "rb"));
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  RepairedFile out(path, gzip_level);
  if (absl::Status s = out.status(); !s.ok()) return s;

  TraceRepair result;
  bool header = false;     // the header (through kEventsStart) is written
  bool any_event = false;  // text after the header was written
  std::string pending;     // decompressed text not written yet
  bool ok = true;
  const bool whole = InflateReadable(in.get(), &pending, [&] {
    if (!header) {
      const size_t at = pending.find(kEventsStart);
      if (at == std::string::npos) return pending.size() <= kMaxPending;
      ok &= out.Write(std::string_view(pending).substr(0, at + kEventsStart.size()));
      pending.erase(0, at + kEventsStart.size());
      header = true;
    }
    // Everything before the last separator is whole events.
    const size_t last = pending.rfind(kSeparator);
    if (last != std::string::npos && last > 0) {
      std::string_view done = std::string_view(pending).substr(0, last);
      for (size_t at = done.find(kSeparator); at != std::string_view::npos;
           at = done.find(kSeparator, at + 1)) {
        ++result.events;
      }
      if (!any_event) ++result.events;  // the first event has no separator before it
      any_event = true;
      ok &= out.Write(done);
      pending.erase(0, last);
    }
    return pending.size() <= kMaxPending;
  });
  // Finished by its writer (or not the writer's, but whole): nothing to do.
  if (whole) return result;
  result.repaired = true;
  result.bytes_lost = pending.size();
  if (!header) {
    // Not even the header decompresses: an empty trace that says so.
    ok &= out.Write(
        absl::StrCat("{\"schemaVersion\":1,\"displayTimeUnit\":\"ms\",\"traceName\":",
                     StringTable::JsonQuote(absl::StrCat(process.capture_id, "/", process.pid)),
                     ",\"traceEvents\":["));
  }
  ok &= out.Write(absl::StrCat(
      "\n],\"profd\":{\"capture_id\":", StringTable::JsonQuote(process.capture_id),
      ",\"hostname\":", StringTable::JsonQuote(process.hostname), ",\"pid\":", process.pid,
      ",\"comm\":", StringTable::JsonQuote(process.comm), ",\"events\":", result.events,
      ",\"truncated\":true,\"error\":", StringTable::JsonQuote(why), "}}\n"));
  if (absl::Status s = out.Commit(ok); !s.ok()) return s;
  return result;
}

absl::StatusOr<TraceRepair> RepairPerfettoTrace(const std::string& path, int gzip_level) {
  std::unique_ptr<FILE, FileCloser> in(std::fopen(path.c_str(), "rb"));
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  RepairedFile out(path, gzip_level);
  if (absl::Status s = out.status(); !s.ok()) return s;
  TraceRepair result;
  std::string pending;
  bool ok = true;
  const bool whole = InflateReadable(in.get(), &pending, [&] {
    // Whole `Trace.packet` fields: tag 0x0a, a varint length, that many bytes.
    size_t at = 0;
    while (at < pending.size()) {
      if (pending[at] != 0x0a) return false;  // not the writer's from here on
      uint64_t length = 0;
      size_t i = at + 1;
      int shift = 0;
      for (; i < pending.size() && shift < 64; ++i, shift += 7) {
        length |= uint64_t{static_cast<uint8_t>(pending[i]) & 0x7fu} << shift;
        if ((static_cast<uint8_t>(pending[i]) & 0x80) == 0) break;
      }
      if (i >= pending.size() || length > kMaxPending) break;
      if (pending.size() - (i + 1) < length) break;
      at = i + 1 + length;
      ++result.events;
    }
    ok &= out.Write(std::string_view(pending).substr(0, at));
    pending.erase(0, at);
    return pending.size() <= kMaxPending;
  });
  if (whole) return result;
  result.repaired = true;
  result.bytes_lost = pending.size();
  if (absl::Status s = out.Commit(ok); !s.ok()) return s;
  return result;
}

bool GzipIsWhole(const std::string& path) {
  gzFile in = gzopen(path.c_str(), "rb");
  if (in == nullptr) return false;
  std::string buffer(256 * 1024, '\0');
  int n;
  while ((n = gzread(in, buffer.data(), static_cast<unsigned>(buffer.size()))) > 0) {
  }
  int error = Z_OK;
  gzerror(in, &error);
  gzclose(in);
  return n == 0 && error == Z_OK;
}

}  // namespace profd
