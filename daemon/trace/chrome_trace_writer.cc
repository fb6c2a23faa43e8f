#include "daemon/trace/chrome_trace_writer.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/checked_math.h"
#include "daemon/trace/event_limits.h"

namespace profd {
namespace {

constexpr size_t kFlushBytes = 256 * 1024;
// deflate's output goes through a buffer of this size, however much input a flush has: sized to
// the input, it grew with the largest batch and stayed that large for the whole capture.
constexpr size_t kDeflateOutBytes = 64 * 1024;

const char* CopyKindName(int kind) {
  static const char* const kNames[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                       "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
  return kind >= 0 && kind <= 10 ? kNames[kind] : "Unknown";
}

const char* MemoryKindName(int kind) {
  static const char* const kNames[] = {"Unknown", "Pageable", "Pinned",        "Device",
                                       "Array",   "Managed",  "Device Static", "Managed Static"};
  return kind >= 0 && kind <= 7 ? kNames[kind] : "Unknown";
}

const char* SyncName(int kind) {
  switch (kind) {
    case v1::SYNC_KIND_EVENT_SYNCHRONIZE:
      return "Event Sync";
    case v1::SYNC_KIND_STREAM_WAIT_EVENT:
      return "Stream Wait Event";
    case v1::SYNC_KIND_STREAM_SYNCHRONIZE:
      return "Stream Sync";
    case v1::SYNC_KIND_CONTEXT_SYNCHRONIZE:
      return "Context Sync";
    default:
      return "Sync";
  }
}

void AppendUint(std::string& s, uint64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  s.append(buf, end);
}

void AppendInt(std::string& s, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  s.append(buf, end);
}

// µs with three decimals from ns, exact: 1234567 ns -> "1234.567". Any int64, INT64_MIN too.
void AppendMicros(std::string& s, int64_t ns) {
  uint64_t magnitude = static_cast<uint64_t>(ns);
  if (ns < 0) {
    s += '-';
    magnitude = 0 - magnitude;  // unsigned: no overflow for INT64_MIN
  }
  AppendUint(s, magnitude / 1000);
  uint64_t frac = magnitude % 1000;
  char buf[5] = {'.', static_cast<char>('0' + frac / 100), static_cast<char>('0' + frac / 10 % 10),
                 static_cast<char>('0' + frac % 10), 0};
  s.append(buf, 4);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChromeTraceWriter>> ChromeTraceWriter::Create(
    const std::string& path, const TraceProcess& process, int gzip_level) {
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot create trace file ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<ChromeTraceWriter> writer(new ChromeTraceWriter(path, file, process, gzip_level));
  std::string& b = writer->buffer_;
  b += "{\"schemaVersion\":1,\"displayTimeUnit\":\"ms\",\"traceName\":";
  b += StringTable::JsonQuote(process.capture_id + "/" + std::to_string(process.pid));
  b += ",\"baseTimeNanoseconds\":";
  AppendInt(b, process.base_time_ns);
  b += ",\"distributedInfo\":{\"rank\":0,\"world_size\":1,\"backend\":\"\"}";
  b += ",\"traceEvents\":[";
  return writer;
}

ChromeTraceWriter::ChromeTraceWriter(std::string path, FILE* file, const TraceProcess& process,
                                     int level)
    : path_(std::move(path)), file_(file), process_(process) {
  // windowBits 15 + 16: a gzip wrapper, so `zcat` and every trace viewer read it.
  deflateInit2(&zs_, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  buffer_.reserve(kFlushBytes + 4096);
}

ChromeTraceWriter::~ChromeTraceWriter() {
  if (file_ != nullptr) {
    deflateEnd(&zs_);
    std::fclose(file_);
  }
}

absl::Status ChromeTraceWriter::Flush(bool finish) {
  zs_.next_in = reinterpret_cast<Bytef*>(buffer_.data());
  zs_.avail_in = static_cast<uInt>(buffer_.size());
  out_.resize(kDeflateOutBytes);
  int flush = finish ? Z_FINISH : Z_NO_FLUSH;
  while (true) {
    zs_.next_out = reinterpret_cast<Bytef*>(out_.data());
    zs_.avail_out = static_cast<uInt>(out_.size());
    int rc = deflate(&zs_, flush);
    size_t produced = out_.size() - zs_.avail_out;
    if (produced > 0 && std::fwrite(out_.data(), 1, produced, file_) != produced) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot write trace file ", path_, ": ", std::strerror(errno)));
    }
    compressed_bytes_ += produced;
    if (finish ? rc == Z_STREAM_END : zs_.avail_in == 0 && zs_.avail_out != 0) break;
    if (rc != Z_OK && rc != Z_BUF_ERROR) return absl::InternalError("deflate failed");
  }
  buffer_.clear();
  return absl::OkStatus();
}

void ChromeTraceWriter::Separator() {
  // Flushing between events, not only after a batch, keeps buffer_ near kFlushBytes: one ~1 MiB
  // batch is several MB of JSON, and a capture of 64 processes holds 64 writers at once.
  if (buffer_.size() >= kFlushBytes && flush_error_.ok()) flush_error_ = Flush(false);
  if (!first_event_) buffer_ += ",\n";
  first_event_ = false;
}

void ChromeTraceWriter::AppendTs(uint64_t ns) {
  buffer_ += "\"ts\":";
  // Callers pass plausible times (<= 2^62), but the base comes from elsewhere: saturate anyway.
  int64_t t = ns > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(ns);
  AppendMicros(buffer_, SaturatingSub(t, process_.base_time_ns));
}

void ChromeTraceWriter::AppendDur(uint64_t start, uint64_t end) {
  buffer_ += ",\"dur\":";
  uint64_t dur = end > start ? end - start : 0;
  AppendMicros(buffer_,
               dur > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(dur));
}

void ChromeTraceWriter::AppendHostEvent(const char* cat, uint64_t start, uint64_t end, uint32_t tid,
                                        const std::string& quoted_name) {
  Separator();
  buffer_ += "{\"ph\":\"X\",\"cat\":\"";
  buffer_ += cat;
  buffer_ += "\",\"name\":";
  buffer_ += quoted_name;
  buffer_ += ",\"pid\":";
  AppendUint(buffer_, process_.pid);
  buffer_ += ",\"tid\":";
  AppendUint(buffer_, tid);
  buffer_ += ',';
  AppendTs(start);
  AppendDur(start, end);
  if (std::find(threads_.begin(), threads_.end(), tid) == threads_.end()) threads_.push_back(tid);
}

void ChromeTraceWriter::AppendGpuHeader(const char* cat, const std::string& quoted_name,
                                        uint32_t device, uint32_t stream, uint64_t start,
                                        uint64_t end) {
  Separator();
  buffer_ += "{\"ph\":\"X\",\"cat\":\"";
  buffer_ += cat;
  buffer_ += "\",\"name\":";
  buffer_ += quoted_name;
  buffer_ += ",\"pid\":";
  AppendUint(buffer_, device);
  buffer_ += ",\"tid\":";
  AppendUint(buffer_, stream);
  buffer_ += ',';
  AppendTs(start);
  AppendDur(start, end);
  buffer_ += ",\"args\":{\"device\":";
  AppendUint(buffer_, device);
  buffer_ += ",\"stream\":";
  AppendUint(buffer_, stream);
  auto row = std::make_pair(device, stream);
  if (std::find(gpu_rows_.begin(), gpu_rows_.end(), row) == gpu_rows_.end()) {
    gpu_rows_.push_back(row);
  }
}

void ChromeTraceWriter::AppendFlowEnd(uint32_t correlation, uint32_t device, uint32_t stream,
                                      uint64_t ts) {
  if (correlation == 0) return;
  Separator();
  buffer_ += "{\"ph\":\"f\",\"id\":";
  AppendUint(buffer_, correlation);
  buffer_ += ",\"pid\":";
  AppendUint(buffer_, device);
  buffer_ += ",\"tid\":";
  AppendUint(buffer_, stream);
  buffer_ += ',';
  AppendTs(ts);
  buffer_ += ",\"cat\":\"ac2g\",\"name\":\"ac2g\",\"bp\":\"e\"}";
}

absl::Status ChromeTraceWriter::Write(const v1::EventBatch& batch, const StringTable& names) {
  for (const v1::Kernel& k : batch.kernels()) {
    if (!PlausibleInterval(k.start_ns(), k.end_ns())) {
      ++invalid_events_;
      continue;
    }
    AppendGpuHeader("kernel", names.Quoted(k.name_id()), k.device(), k.stream(), k.start_ns(),
                    k.end_ns());
    std::string& b = buffer_;
    b += ",\"correlation\":";
    AppendUint(b, k.correlation());
    b += ",\"context\":";
    AppendUint(b, k.context());
    b += ",\"grid\":[";
    AppendInt(b, k.grid_x());
    b += ',';
    AppendInt(b, k.grid_y());
    b += ',';
    AppendInt(b, k.grid_z());
    b += "],\"block\":[";
    AppendInt(b, k.block_x());
    b += ',';
    AppendInt(b, k.block_y());
    b += ',';
    AppendInt(b, k.block_z());
    b += "],\"registers per thread\":";
    AppendUint(b, k.registers_per_thread());
    b += ",\"shared memory\":";
    AppendUint(b, static_cast<uint64_t>(k.static_shared_bytes()) + k.dynamic_shared_bytes());
    if (k.graph_id() != 0) {
      b += ",\"graph id\":";
      AppendUint(b, k.graph_id());
    }
    b += "}}";
    AppendFlowEnd(k.correlation(), k.device(), k.stream(), k.start_ns());
    ++events_;
  }
  for (const v1::Memcpy& m : batch.memcpys()) {
    if (!PlausibleInterval(m.start_ns(), m.end_ns())) {
      ++invalid_events_;
      continue;
    }
    std::string name =
        absl::StrCat("\"Memcpy ", CopyKindName(m.copy_kind()), " (", MemoryKindName(m.src_kind()),
                     " -> ", MemoryKindName(m.dst_kind()), ")\"");
    AppendGpuHeader("gpu_memcpy", name, m.device(), m.stream(), m.start_ns(), m.end_ns());
    std::string& b = buffer_;
    b += ",\"correlation\":";
    AppendUint(b, m.correlation());
    b += ",\"bytes\":";
    AppendUint(b, m.bytes());
    uint64_t dur = m.end_ns() > m.start_ns() ? m.end_ns() - m.start_ns() : 0;
    b += ",\"memory bandwidth (GB/s)\":";
    b += dur ? absl::StrCat(static_cast<double>(m.bytes()) / static_cast<double>(dur)) : "0";
    b += ",\"copy kind\":\"";
    b += CopyKindName(m.copy_kind());
    b += "\",\"src kind\":\"";
    b += MemoryKindName(m.src_kind());
    b += "\",\"dst kind\":\"";
    b += MemoryKindName(m.dst_kind());
    b += "\"}}";
    AppendFlowEnd(m.correlation(), m.device(), m.stream(), m.start_ns());
    ++events_;
  }
  for (const v1::Memset& m : batch.memsets()) {
    if (!PlausibleInterval(m.start_ns(), m.end_ns())) {
      ++invalid_events_;
      continue;
    }
    std::string name = absl::StrCat("\"Memset (", MemoryKindName(m.memory_kind()), ")\"");
    AppendGpuHeader("gpu_memset", name, m.device(), m.stream(), m.start_ns(), m.end_ns());
    std::string& b = buffer_;
    b += ",\"correlation\":";
    AppendUint(b, m.correlation());
    b += ",\"bytes\":";
    AppendUint(b, m.bytes());
    uint64_t dur = m.end_ns() > m.start_ns() ? m.end_ns() - m.start_ns() : 0;
    b += ",\"memory bandwidth (GB/s)\":";
    b += dur ? absl::StrCat(static_cast<double>(m.bytes()) / static_cast<double>(dur)) : "0";
    b += "}}";
    AppendFlowEnd(m.correlation(), m.device(), m.stream(), m.start_ns());
    ++events_;
  }
  for (const v1::ApiCall& a : batch.api_calls()) {
    if (!PlausibleInterval(a.start_ns(), a.end_ns())) {
      ++invalid_events_;
      continue;
    }
    const bool driver = a.domain() == v1::API_DOMAIN_DRIVER;
    AppendHostEvent(driver ? "cuda_driver" : "cuda_runtime", a.start_ns(), a.end_ns(), a.tid(),
                    names.Quoted(a.name_id()));
    std::string& b = buffer_;
    b += ",\"args\":{\"correlation\":";
    AppendUint(b, a.correlation());
    b += ",\"cbid\":";
    AppendUint(b, a.cbid());
    if (a.return_value() != 0) {
      b += ",\"return\":";
      AppendUint(b, a.return_value());
    }
    b += "}}";
    // Launch -> GPU work arrows. Only calls that enqueue work start one (the kernel, copy or
    // memset ends it with the same correlation id).
    const std::string& name = names.Text(a.name_id());
    if (name.find("Launch") != std::string::npos || name.find("Memcpy") != std::string::npos ||
        name.find("Memset") != std::string::npos) {
      Separator();
      b += "{\"ph\":\"s\",\"id\":";
      AppendUint(b, a.correlation());
      b += ",\"pid\":";
      AppendUint(b, process_.pid);
      b += ",\"tid\":";
      AppendUint(b, a.tid());
      b += ',';
      AppendTs(a.start_ns());
      b += ",\"cat\":\"ac2g\",\"name\":\"ac2g\"}";
    }
    ++events_;
  }
  for (const v1::Synchronization& s : batch.syncs()) {
    if (!PlausibleInterval(s.start_ns(), s.end_ns())) {
      ++invalid_events_;
      continue;
    }
    Separator();
    std::string& b = buffer_;
    b += "{\"ph\":\"X\",\"cat\":\"cuda_sync\",\"name\":\"";
    b += SyncName(s.kind());
    b += "\",\"pid\":";
    AppendUint(b, process_.pid);
    b += ",\"tid\":0,";
    AppendTs(s.start_ns());
    AppendDur(s.start_ns(), s.end_ns());
    b += ",\"args\":{\"correlation\":";
    AppendUint(b, s.correlation());
    b += ",\"stream\":";
    AppendUint(b, s.stream());
    b += ",\"context\":";
    AppendUint(b, s.context());
    b += "}}";
    ++events_;
  }
  for (const v1::Marker& m : batch.markers()) {
    if (!PlausibleInterval(m.start_ns(), m.end_ns())) {
      ++invalid_events_;
      continue;
    }
    AppendHostEvent("user_annotation", m.start_ns(), m.end_ns(), m.tid(),
                    names.Quoted(m.name_id()));
    buffer_ += "}";
    ++events_;
  }
  for (const v1::MemoryOp& m : batch.memory_ops()) {
    if (!PlausibleEventTime(m.timestamp_ns())) {
      ++invalid_events_;
      continue;
    }
    Separator();
    std::string& b = buffer_;
    b += "{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"gpu_memory\",\"name\":\"[memory]\",\"pid\":";
    AppendUint(b, m.device());
    b += ",\"tid\":0,";
    AppendTs(m.timestamp_ns());
    b += ",\"args\":{\"address\":";
    AppendUint(b, m.address());
    b += ",\"bytes\":";
    b += m.is_free() ? "-" : "";
    AppendUint(b, m.bytes());
    b += ",\"kind\":\"";
    b += MemoryKindName(m.memory_kind());
    b += "\"}}";
    ++events_;
  }
  for (const v1::Overhead& o : batch.overheads()) {
    if (!PlausibleInterval(o.start_ns(), o.end_ns())) {
      ++invalid_events_;
      continue;
    }
    AppendHostEvent("overhead", o.start_ns(), o.end_ns(), o.tid(),
                    absl::StrCat("\"CUPTI overhead: kind ", o.kind(), "\""));
    buffer_ += "}";
    ++events_;
  }
  if (!flush_error_.ok()) return flush_error_;
  if (buffer_.size() >= kFlushBytes) return Flush(false);
  return absl::OkStatus();
}

absl::Status ChromeTraceWriter::Finish(const Footer& footer) {
  // Row names: the host process first, then one "GPU n" process per device with a row per stream.
  auto meta = [&](const char* what, uint32_t pid, const std::string* tid, const std::string& arg) {
    Separator();
    buffer_ += "{\"ph\":\"M\",\"name\":\"";
    buffer_ += what;
    buffer_ += "\",\"pid\":";
    AppendUint(buffer_, pid);
    if (tid) {
      buffer_ += ",\"tid\":";
      buffer_ += *tid;
    }
    buffer_ += ",\"args\":{";
    buffer_ += arg;
    buffer_ += "}}";
  };
  meta("process_name", process_.pid, nullptr,
       "\"name\":" +
           StringTable::JsonQuote(absl::StrCat(process_.comm.empty() ? "process" : process_.comm,
                                               " (pid ", process_.pid, ")")));
  meta("process_sort_index", process_.pid, nullptr, "\"sort_index\":0");
  for (uint32_t tid : threads_) {
    std::string t = std::to_string(tid);
    meta("thread_name", process_.pid, &t, absl::StrCat("\"name\":\"thread ", tid, "\""));
  }
  std::vector<uint32_t> devices;
  for (auto [device, stream] : gpu_rows_) {
    if (std::find(devices.begin(), devices.end(), device) == devices.end()) {
      devices.push_back(device);
      meta("process_name", device, nullptr, absl::StrCat("\"name\":\"GPU ", device, "\""));
      meta("process_sort_index", device, nullptr,
           absl::StrCat("\"sort_index\":", 1000000 + device));
    }
    std::string t = std::to_string(stream);
    meta("thread_name", device, &t, absl::StrCat("\"name\":\"stream ", stream, "\""));
  }
  buffer_ += "\n],\"deviceProperties\":[";
  for (size_t i = 0; i < footer.devices.size(); ++i) {
    const v1::DeviceInfo& d = footer.devices[i];
    if (i) buffer_ += ',';
    absl::StrAppend(
        &buffer_, "{\"id\":", d.ordinal(), ",\"name\":", StringTable::JsonQuote(d.name()),
        ",\"uuid\":", StringTable::JsonQuote(d.uuid()), ",\"computeMajor\":", d.compute_major(),
        ",\"computeMinor\":", d.compute_minor(), ",\"totalGlobalMem\":", d.global_memory_bytes(),
        ",\"numSms\":", d.multiprocessors(),
        ",\"maxThreadsPerMultiprocessor\":", d.max_threads_per_multiprocessor(),
        ",\"maxBlocksPerMultiprocessor\":", d.max_blocks_per_multiprocessor(),
        ",\"regsPerMultiprocessor\":", d.max_registers_per_multiprocessor(),
        ",\"sharedMemPerMultiprocessor\":", d.max_shared_memory_per_multiprocessor(),
        ",\"warpSize\":", d.warp_size(), ",\"regsPerBlock\":", d.max_registers_per_block(),
        ",\"sharedMemPerBlockOptin\":", d.max_shared_memory_per_block(), "}");
  }
  absl::StrAppend(
      &buffer_, "],\"profd\":{\"capture_id\":", StringTable::JsonQuote(process_.capture_id),
      ",\"hostname\":", StringTable::JsonQuote(process_.hostname), ",\"pid\":", process_.pid,
      ",\"comm\":", StringTable::JsonQuote(process_.comm),
      ",\"command_line\":", StringTable::JsonQuote(process_.command_line),
      ",\"pod\":", StringTable::JsonQuote(process_.pod_name),
      ",\"namespace\":", StringTable::JsonQuote(process_.pod_namespace), ",\"events\":", events_,
      ",\"invalid_events\":", invalid_events_, ",\"dropped_records\":", footer.dropped_records,
      ",\"truncated\":", footer.truncated ? "true" : "false",
      ",\"error\":", StringTable::JsonQuote(footer.error), "}}\n");
  absl::Status status = flush_error_.ok() ? Flush(true) : flush_error_;
  deflateEnd(&zs_);
  if (std::fclose(file_) != 0 && status.ok()) {
    status = absl::ResourceExhaustedError(
        absl::StrCat("cannot write trace file ", path_, ": ", std::strerror(errno)));
  }
  file_ = nullptr;
  return status;
}

}  // namespace profd
