#include "daemon/trace/trace_repair.h"

#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "daemon/common/atomic_file.h"
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

}  // namespace

absl::StatusOr<TraceRepair> RepairTrace(const std::string& path, const TraceProcess& process,
                                        const std::string& why, int gzip_level) {
  std::unique_ptr<FILE, FileCloser> in(std::fopen(path.c_str(), "rb"));
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  const std::string temp = path + ".repair";
  std::unique_ptr<gzFile_s, GzCloser> out(
      gzopen(temp.c_str(), absl::StrCat("wb", gzip_level).c_str()));
  if (!out) {
    return absl::UnavailableError(absl::StrCat("cannot create ", temp, ": ", std::strerror(errno)));
  }
  auto fail = [&](const std::string& what) {
    out.reset();
    unlink(temp.c_str());
    return absl::InternalError(absl::StrCat("cannot repair ", path, ": ", what));
  };

  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) return fail("zlib");
  TraceRepair result;
  bool whole = false;
  bool header = false;     // the header (through kEventsStart) is written
  bool any_event = false;  // text after the header was written
  std::string pending;     // decompressed text not written yet
  std::string compressed(64 * 1024, '\0');
  std::string chunk(256 * 1024, '\0');
  auto write = [&](std::string_view text) {
    return text.empty() || gzwrite(out.get(), text.data(), static_cast<unsigned>(text.size())) ==
                               static_cast<int>(text.size());
  };
  bool ok = true;
  bool stop = false;
  while (!stop) {
    const size_t n = std::fread(compressed.data(), 1, compressed.size(), in.get());
    if (n == 0) break;
    zs.next_in = reinterpret_cast<Bytef*>(compressed.data());
    zs.avail_in = static_cast<uInt>(n);
    while (zs.avail_in > 0 && !stop) {
      zs.next_out = reinterpret_cast<Bytef*>(chunk.data());
      zs.avail_out = static_cast<uInt>(chunk.size());
      const int rc = inflate(&zs, Z_NO_FLUSH);
      pending.append(chunk.data(), chunk.size() - zs.avail_out);
      if (rc == Z_STREAM_END) {
        whole = true;
        stop = true;
      } else if (rc != Z_OK) {
        stop = true;  // corrupt from here on: keep what came before
      }
      if (!header) {
        const size_t at = pending.find(kEventsStart);
        if (at == std::string::npos) continue;
        ok &= write(std::string_view(pending).substr(0, at + kEventsStart.size()));
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
        ok &= write(done);
        pending.erase(0, last);
      }
      if (pending.size() > kMaxPending) stop = true;
    }
  }
  inflateEnd(&zs);
  if (whole) {
    // Finished by its writer (or not the writer's, but whole): nothing to do.
    out.reset();
    unlink(temp.c_str());
    return result;
  }
  result.repaired = true;
  result.bytes_lost = pending.size();
  if (!header) {
    // Not even the header decompresses: an empty trace that says so.
    ok &= write(
        absl::StrCat("{\"schemaVersion\":1,\"displayTimeUnit\":\"ms\",\"traceName\":",
                     StringTable::JsonQuote(absl::StrCat(process.capture_id, "/", process.pid)),
                     ",\"traceEvents\":["));
  }
  ok &= write(absl::StrCat(
      "\n],\"profd\":{\"capture_id\":", StringTable::JsonQuote(process.capture_id),
      ",\"hostname\":", StringTable::JsonQuote(process.hostname), ",\"pid\":", process.pid,
      ",\"comm\":", StringTable::JsonQuote(process.comm), ",\"events\":", result.events,
      ",\"truncated\":true,\"error\":", StringTable::JsonQuote(why), "}}\n"));
  if (!ok) return fail(absl::StrCat("cannot write ", temp));
  if (gzclose(out.release()) != Z_OK) {
    unlink(temp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", temp, ": ", std::strerror(errno)));
  }
  if (absl::Status s = CommitFile(temp, path); !s.ok()) return s;
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
