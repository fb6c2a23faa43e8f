#include "daemon/trace/chrome_trace_writer.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/checked_math.h"
#include "daemon/trace/event_limits.h"
#include "daemon/trace/event_names.h"

namespace profd {
namespace {

// An event's text apart from its name (and a copy's bandwidth) is at most this long: ~300
// bytes of keys and at most 30 numbers of at most 21 characters each.
constexpr size_t kMaxEventBytes = 1024;

// The formatters write at p, which has room (Reserve), and return the new end.
template <size_t N>
char* Put(char* p, const char (&literal)[N]) {
  std::memcpy(p, literal, N - 1);
  return p + N - 1;
}

char* Put(char* p, std::string_view text) {
  std::memcpy(p, text.data(), text.size());
  return p + text.size();
}

char* PutUint(char* p, uint64_t v) { return std::to_chars(p, p + 20, v).ptr; }

char* PutInt(char* p, int64_t v) { return std::to_chars(p, p + 20, v).ptr; }

// µs with three decimals from ns, exact: 1234567 ns -> "1234.567". Any int64, INT64_MIN too.
char* PutMicros(char* p, int64_t ns) {
  uint64_t magnitude = static_cast<uint64_t>(ns);
  if (ns < 0) {
    *p++ = '-';
    magnitude = 0 - magnitude;  // unsigned: no overflow for INT64_MIN
  }
  p = PutUint(p, magnitude / 1000);
  const uint64_t frac = magnitude % 1000;
  p[0] = '.';
  p[1] = static_cast<char>('0' + frac / 100);
  p[2] = static_cast<char>('0' + frac / 10 % 10);
  p[3] = static_cast<char>('0' + frac % 10);
  return p + 4;
}

char* PutDur(char* p, uint64_t start, uint64_t end) {
  p = Put(p, ",\"dur\":");
  const uint64_t dur = end > start ? end - start : 0;
  return PutMicros(p,
                   dur > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(dur));
}

// "memory bandwidth (GB/s)": bytes per ns, as absl::StrCat prints a double (6 significant digits).
std::string Bandwidth(uint64_t bytes, uint64_t start, uint64_t end) {
  const uint64_t dur = end > start ? end - start : 0;
  return dur ? absl::StrCat(static_cast<double>(bytes) / static_cast<double>(dur)) : "0";
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChromeTraceWriter>> ChromeTraceWriter::Create(
    const std::string& path, const TraceProcess& process, int gzip_level, BytesObserver on_bytes) {
  absl::StatusOr<std::unique_ptr<TraceFile>> file =
      TraceFile::Create(path, gzip_level, std::move(on_bytes));
  if (!file.ok()) return file.status();
  std::unique_ptr<ChromeTraceWriter> writer(new ChromeTraceWriter(std::move(*file), process));
  writer->file_->Append(absl::StrCat(
      "{\"schemaVersion\":1,\"displayTimeUnit\":\"ms\",\"traceName\":",
      StringTable::JsonQuote(absl::StrCat(process.capture_id, "/", process.pid)),
      ",\"baseTimeNanoseconds\":", process.base_time_ns,
      process.distributed ? absl::StrCat(",\"distributedInfo\":{\"rank\":", process.rank,
                                         ",\"world_size\":", process.world_size, ",\"local_rank\":",
                                         process.local_rank, ",\"backend\":\"\"}")
                          : std::string(),
      ",\"traceEvents\":["));
  return writer;
}

char* ChromeTraceWriter::BeginEvent(size_t max_bytes) {
  // Flushing between events, not only after a batch, keeps the buffer near its flush size: one
  // ~1 MiB batch is several MB of JSON, and a capture of 64 processes holds 64 writers at once.
  file_->FlushIfFull();
  char* p = file_->Reserve(max_bytes + 2);
  if (!first_event_) p = Put(p, ",\n");
  first_event_ = false;
  return p;
}

char* ChromeTraceWriter::PutTs(char* p, uint64_t ns) const {
  p = Put(p, "\"ts\":");
  // Callers pass plausible times (<= 2^62), but the base comes from elsewhere: saturate anyway.
  int64_t t = ns > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(ns);
  return PutMicros(p, SaturatingSub(t, process_.base_time_ns));
}

void ChromeTraceWriter::SawThread(uint32_t tid) {
  if (!threads_.empty() && tid == last_thread_) return;
  if (std::find(threads_.begin(), threads_.end(), tid) == threads_.end()) threads_.push_back(tid);
  last_thread_ = tid;
}

void ChromeTraceWriter::SawGpuRow(uint32_t device, uint32_t stream) {
  auto row = std::make_pair(device, stream);
  if (!gpu_rows_.empty() && row == last_gpu_row_) return;
  if (std::find(gpu_rows_.begin(), gpu_rows_.end(), row) == gpu_rows_.end()) {
    gpu_rows_.push_back(row);
  }
  last_gpu_row_ = row;
}

char* ChromeTraceWriter::PutHostEvent(char* p, const char* cat, uint64_t start, uint64_t end,
                                      uint32_t tid, std::string_view quoted_name) {
  p = Put(p, "{\"ph\":\"X\",\"cat\":\"");
  p = Put(p, cat);
  p = Put(p, "\",\"name\":");
  p = Put(p, quoted_name);
  p = Put(p, ",\"pid\":");
  p = PutUint(p, process_.pid);
  p = Put(p, ",\"tid\":");
  p = PutUint(p, tid);
  *p++ = ',';
  p = PutTs(p, start);
  p = PutDur(p, start, end);
  SawThread(tid);
  return p;
}

char* ChromeTraceWriter::PutGpuHeader(char* p, const char* cat, std::string_view quoted_name,
                                      uint32_t device, uint32_t stream, uint64_t start,
                                      uint64_t end) {
  p = Put(p, "{\"ph\":\"X\",\"cat\":\"");
  p = Put(p, cat);
  p = Put(p, "\",\"name\":");
  p = Put(p, quoted_name);
  p = Put(p, ",\"pid\":");
  p = PutUint(p, device);
  p = Put(p, ",\"tid\":");
  p = PutUint(p, stream);
  *p++ = ',';
  p = PutTs(p, start);
  p = PutDur(p, start, end);
  p = Put(p, ",\"args\":{\"device\":");
  p = PutUint(p, device);
  p = Put(p, ",\"stream\":");
  p = PutUint(p, stream);
  SawGpuRow(device, stream);
  return p;
}

void ChromeTraceWriter::AppendFlowEnd(uint32_t correlation, uint32_t device, uint32_t stream,
                                      uint64_t ts) {
  if (correlation == 0) return;
  char* p = BeginEvent(kMaxEventBytes);
  p = Put(p, "{\"ph\":\"f\",\"id\":");
  p = PutUint(p, correlation);
  p = Put(p, ",\"pid\":");
  p = PutUint(p, device);
  p = Put(p, ",\"tid\":");
  p = PutUint(p, stream);
  *p++ = ',';
  p = PutTs(p, ts);
  p = Put(p, ",\"cat\":\"ac2g\",\"name\":\"ac2g\",\"bp\":\"e\"}");
  file_->Commit(p);
}

void ChromeTraceWriter::WriteKernel(const v1::Kernel& k, const StringTable& names) {
  const std::string& name = names.Find(k.name_id()).quoted;
  char* p = BeginEvent(kMaxEventBytes + name.size());
  p = PutGpuHeader(p, "kernel", name, k.device(), k.stream(), k.start_ns(), k.end_ns());
  p = Put(p, ",\"correlation\":");
  p = PutUint(p, k.correlation());
  p = Put(p, ",\"context\":");
  p = PutUint(p, k.context());
  p = Put(p, ",\"grid\":[");
  p = PutInt(p, k.grid_x());
  *p++ = ',';
  p = PutInt(p, k.grid_y());
  *p++ = ',';
  p = PutInt(p, k.grid_z());
  p = Put(p, "],\"block\":[");
  p = PutInt(p, k.block_x());
  *p++ = ',';
  p = PutInt(p, k.block_y());
  *p++ = ',';
  p = PutInt(p, k.block_z());
  p = Put(p, "],\"registers per thread\":");
  p = PutUint(p, k.registers_per_thread());
  p = Put(p, ",\"shared memory\":");
  p = PutUint(p, static_cast<uint64_t>(k.static_shared_bytes()) + k.dynamic_shared_bytes());
  if (k.graph_id() != 0) {
    p = Put(p, ",\"graph id\":");
    p = PutUint(p, k.graph_id());
  }
  p = Put(p, "}}");
  file_->Commit(p);
  AppendFlowEnd(k.correlation(), k.device(), k.stream(), k.start_ns());
}

// A copy or a memset: the GPU row's header, its correlation, bytes and bandwidth, then `extra`
// (the copy's kinds) before the closing braces.
template <typename Transfer>
void ChromeTraceWriter::WriteTransfer(const Transfer& m, const char* cat, const std::string& name,
                                      const std::string& extra) {
  const std::string bandwidth = Bandwidth(m.bytes(), m.start_ns(), m.end_ns());
  char* p = BeginEvent(kMaxEventBytes + name.size() + bandwidth.size() + extra.size());
  p = PutGpuHeader(p, cat, name, m.device(), m.stream(), m.start_ns(), m.end_ns());
  p = Put(p, ",\"correlation\":");
  p = PutUint(p, m.correlation());
  p = Put(p, ",\"bytes\":");
  p = PutUint(p, m.bytes());
  p = Put(p, ",\"memory bandwidth (GB/s)\":");
  p = Put(p, bandwidth);
  p = Put(p, extra);
  p = Put(p, "}}");
  file_->Commit(p);
  AppendFlowEnd(m.correlation(), m.device(), m.stream(), m.start_ns());
}

void ChromeTraceWriter::WriteMemcpy(const v1::Memcpy& m) {
  WriteTransfer(
      m, "gpu_memcpy",
      absl::StrCat("\"", CopyName(m.copy_kind(), m.src_kind(), m.dst_kind()), "\""),
      absl::StrCat(",\"copy kind\":\"", analysis::CuptiCopyKindName(m.copy_kind()),
                   "\",\"src kind\":\"", analysis::CuptiMemoryKindName(m.src_kind()),
                   "\",\"dst kind\":\"", analysis::CuptiMemoryKindName(m.dst_kind()), "\""));
}

void ChromeTraceWriter::WriteMemset(const v1::Memset& m) {
  WriteTransfer(m, "gpu_memset", absl::StrCat("\"", MemsetName(m.memory_kind()), "\""), "");
}

void ChromeTraceWriter::WriteApiCall(const v1::ApiCall& a, const StringTable& names) {
  const StringTable::Name& name = names.Find(a.name_id());
  char* p = BeginEvent(kMaxEventBytes + name.quoted.size());
  const bool driver = a.domain() == v1::API_DOMAIN_DRIVER;
  p = PutHostEvent(p, driver ? "cuda_driver" : "cuda_runtime", a.start_ns(), a.end_ns(), a.tid(),
                   name.quoted);
  p = Put(p, ",\"args\":{\"correlation\":");
  p = PutUint(p, a.correlation());
  p = Put(p, ",\"cbid\":");
  p = PutUint(p, a.cbid());
  if (a.return_value() != 0) {
    p = Put(p, ",\"return\":");
    p = PutUint(p, a.return_value());
  }
  p = Put(p, "}}");
  file_->Commit(p);
  // Launch -> GPU work arrows. Only calls that enqueue work start one (the kernel, copy or
  // memset ends it with the same correlation id).
  if (!name.enqueues_gpu_work) return;
  p = BeginEvent(kMaxEventBytes);
  p = Put(p, "{\"ph\":\"s\",\"id\":");
  p = PutUint(p, a.correlation());
  p = Put(p, ",\"pid\":");
  p = PutUint(p, process_.pid);
  p = Put(p, ",\"tid\":");
  p = PutUint(p, a.tid());
  *p++ = ',';
  p = PutTs(p, a.start_ns());
  p = Put(p, ",\"cat\":\"ac2g\",\"name\":\"ac2g\"}");
  file_->Commit(p);
}

void ChromeTraceWriter::WriteSync(const v1::Synchronization& s) {
  char* p = BeginEvent(kMaxEventBytes);
  p = Put(p, "{\"ph\":\"X\",\"cat\":\"cuda_sync\",\"name\":\"");
  p = Put(p, SyncKindName(s.kind()));
  p = Put(p, "\",\"pid\":");
  p = PutUint(p, process_.pid);
  p = Put(p, ",\"tid\":0,");
  p = PutTs(p, s.start_ns());
  p = PutDur(p, s.start_ns(), s.end_ns());
  p = Put(p, ",\"args\":{\"correlation\":");
  p = PutUint(p, s.correlation());
  p = Put(p, ",\"stream\":");
  p = PutUint(p, s.stream());
  p = Put(p, ",\"context\":");
  p = PutUint(p, s.context());
  p = Put(p, "}}");
  file_->Commit(p);
}

void ChromeTraceWriter::WriteMarker(const v1::Marker& m, const StringTable& names) {
  const std::string& name = names.Find(m.name_id()).quoted;
  char* p = BeginEvent(kMaxEventBytes + name.size());
  p = PutHostEvent(p, "user_annotation", m.start_ns(), m.end_ns(), m.tid(), name);
  *p++ = '}';
  file_->Commit(p);
}

void ChromeTraceWriter::WriteMemoryOp(const v1::MemoryOp& m) {
  char* p = BeginEvent(kMaxEventBytes);
  p = Put(p, "{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"gpu_memory\",\"name\":\"[memory]\",\"pid\":");
  p = PutUint(p, m.device());
  p = Put(p, ",\"tid\":0,");
  p = PutTs(p, m.timestamp_ns());
  p = Put(p, ",\"args\":{\"address\":");
  p = PutUint(p, m.address());
  p = Put(p, ",\"bytes\":");
  if (m.is_free()) *p++ = '-';
  p = PutUint(p, m.bytes());
  p = Put(p, ",\"kind\":\"");
  p = Put(p, analysis::CuptiMemoryKindName(m.memory_kind()));
  p = Put(p, "\"}}");
  file_->Commit(p);
}

void ChromeTraceWriter::WriteOverhead(const v1::Overhead& o) {
  char name[48];
  char* end = Put(name, "\"");
  end = Put(end, kOverheadNamePrefix);
  end = PutUint(end, o.kind());
  *end++ = '"';
  char* p = BeginEvent(kMaxEventBytes + static_cast<size_t>(end - name));
  p = PutHostEvent(p, "overhead", o.start_ns(), o.end_ns(), o.tid(),
                   std::string_view(name, static_cast<size_t>(end - name)));
  *p++ = '}';
  file_->Commit(p);
}

absl::Status ChromeTraceWriter::WriteCounters(uint32_t device,
                                              std::span<const GpuCounterReading> readings) {
  if (std::find(counter_devices_.begin(), counter_devices_.end(), device) ==
      counter_devices_.end()) {
    counter_devices_.push_back(device);
  }
  const auto defs = GpuCounterDefs();
  for (const GpuCounterReading& r : readings) {
    if (!PlausibleInterval(r.start_ns, r.end_ns) || r.end_ns == r.start_ns) continue;
    char* p = BeginEvent(kMaxEventBytes);
    p = Put(p, "{\"ph\":\"C\",\"cat\":\"gpu_counters\",\"name\":\"GPU counters\",\"pid\":");
    p = PutUint(p, device);
    p = Put(p, ",\"tid\":0,");
    p = PutTs(p, r.start_ns);
    p = PutDur(p, r.start_ns, r.end_ns);
    p = Put(p, ",\"args\":{");
    bool first = true;
    for (size_t i = 0; i < kGpuCounters; ++i) {
      const float v = r.values[i];
      if (!std::isfinite(v)) continue;
      if (!first) *p++ = ',';
      first = false;
      *p++ = '"';
      p = Put(p, GpuCounterTraceName(i));
      p = Put(p, "\":");
      // Ratios to 4 decimals (0.01 % of the SMs' time), traffic to the byte per second.
      if (defs[i].scale != 1) {
        p = std::to_chars(p, p + 24, std::clamp(v, -1e6f, 1e6f), std::chars_format::fixed, 4).ptr;
      } else {
        p = PutInt(p, std::llround(std::clamp<double>(v, -1e18, 1e18)));
      }
    }
    p = Put(p, "}}");
    file_->Commit(p);
  }
  file_->FlushIfFull();
  return file_->status();
}

absl::Status ChromeTraceWriter::Finish(const Footer& footer) {
  // Row names: the host process first, then one "GPU n" process per device with a row per stream.
  auto meta = [&](const char* what, uint32_t pid, const std::string* tid, const std::string& arg) {
    file_->Commit(BeginEvent(0));  // the separator, and a flush when due; a few events
    file_->Append(absl::StrCat("{\"ph\":\"M\",\"name\":\"", what, "\",\"pid\":", pid,
                               tid ? ",\"tid\":" : "", tid ? *tid : "", ",\"args\":{", arg, "}}"));
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
  auto name_gpu = [&](uint32_t device) {
    if (std::find(devices.begin(), devices.end(), device) != devices.end()) return;
    devices.push_back(device);
    meta("process_name", device, nullptr, absl::StrCat("\"name\":\"GPU ", device, "\""));
    meta("process_sort_index", device, nullptr, absl::StrCat("\"sort_index\":", 1000000 + device));
  };
  for (auto [device, stream] : gpu_rows_) {
    name_gpu(device);
    std::string t = std::to_string(stream);
    meta("thread_name", device, &t, absl::StrCat("\"name\":\"stream ", stream, "\""));
  }
  for (uint32_t device : counter_devices_) name_gpu(device);
  std::string tail = "\n],\"deviceProperties\":[";
  for (size_t i = 0; i < footer.devices.size(); ++i) {
    const v1::DeviceInfo& d = footer.devices[i];
    if (i) tail += ',';
    absl::StrAppend(
        &tail, "{\"id\":", d.ordinal(), ",\"name\":", StringTable::JsonQuote(d.name()),
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
      &tail, "],\"profd\":{\"capture_id\":", StringTable::JsonQuote(process_.capture_id),
      ",\"hostname\":", StringTable::JsonQuote(process_.hostname), ",\"pid\":", process_.pid,
      ",\"comm\":", StringTable::JsonQuote(process_.comm),
      ",\"command_line\":", StringTable::JsonQuote(process_.command_line),
      ",\"pod\":", StringTable::JsonQuote(process_.pod_name),
      ",\"namespace\":", StringTable::JsonQuote(process_.pod_namespace), ",\"events\":", events_,
      ",\"invalid_events\":", invalid_events_, ",\"dropped_records\":", footer.dropped_records,
      ",\"truncated\":", footer.truncated ? "true" : "false",
      ",\"error\":", StringTable::JsonQuote(footer.error), "}}\n");
  file_->Append(tail);
  return file_->Close();
}

}  // namespace profd
