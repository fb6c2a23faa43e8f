#include "daemon/capture/process_sink.h"

#include <algorithm>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "daemon/log.h"

namespace profd {
namespace {

constexpr char kComponent[] = "capture";
// Counter samples held for a process whose first events have not come yet: 5 s at 100 us.
constexpr size_t kMaxPendingReadings = 50'000;

}  // namespace

ProcessSink::ProcessSink(TraceProcess process, std::vector<v1::DeviceInfo> devices,
                         CaptureFolder* folder, CaptureAnalysis* analysis, Options options)
    : process_(std::move(process)),
      folder_(folder),
      analysis_(analysis),
      options_(options),
      devices_(std::move(devices)),
      // ChargeStrings stops the trace at its estimate of the names; the table holds itself to
      // the same bound as malloc counts it (demangling may lengthen a name 4-fold).
      names_(options.max_string_bytes) {}

std::string ProcessSink::ChargeStrings(const v1::EventBatch& batch) {
  uint32_t top = 0;
  uint64_t text = 0;
  for (const v1::StringDef& def : batch.strings()) {
    top = std::max(top, def.id());
    text += def.value().size();
  }
  // A slot is two std::string (text, quoted); a string is kept twice (demangled, quoted).
  const uint64_t slots = top >= string_slots_ ? top + 1 - string_slots_ : 0;
  string_slots_ = std::max(string_slots_, top + 1);
  string_bytes_ += slots * 2 * sizeof(std::string) + 2 * text;
  const uint64_t limit = options_.max_string_bytes;
  // The estimate first (before any demangling), then what the table really takes: a name may
  // demangle to 4 times its length, and each entry has its slot in the table.
  bool over = string_bytes_ > limit;
  if (!over) {
    const uint64_t rejected_before = names_.rejected();
    names_.Add(batch);
    charged_ = &batch;
    over = names_.rejected() != rejected_before;
  }
  if (!over) return "";
  return absl::StrCat("the agent's kernel and API names need more than ", limit >> 20,
                      " MiB (string ids up to ", top,
                      "): the trace stops there (CaptureOptions::max_string_bytes_per_process)");
}

bool ProcessSink::Cut(v1::EventBatch* batch, uint64_t max_events) const {
  if (max_events == 0) return false;
  uint64_t room = max_events > events_ ? max_events - events_ : 0;
  bool cut = false;
  auto keep = [&](auto* events) {
    const uint64_t size = static_cast<uint64_t>(events->size());
    if (size > room) {
      events->DeleteSubrange(static_cast<int>(room), static_cast<int>(size - room));
      cut = true;
    }
    room -= std::min(room, size);
  };
  keep(batch->mutable_kernels());
  keep(batch->mutable_memcpys());
  keep(batch->mutable_memsets());
  keep(batch->mutable_api_calls());
  keep(batch->mutable_syncs());
  keep(batch->mutable_memory_ops());
  keep(batch->mutable_overheads());
  keep(batch->mutable_markers());
  return cut;
}

absl::Status ProcessSink::StartTrace() {
  file_name_ = TraceFileName(process_.pid, options_.trace_format);
  analysis_index_ = analysis_->AddProcess(process_.pid, folder_->PathOf(file_name_));
  absl::StatusOr<std::unique_ptr<TraceWriter>> writer =
      folder_->CreateTrace(process_, options_.trace_format, options_.gzip_level);
  if (!writer.ok()) return writer.status();
  writer_ = std::move(*writer);
  return absl::OkStatus();
}

absl::Status ProcessSink::Write(const v1::EventBatch& batch, absl::string_view bytes,
                                bool files_ok) {
  const uint64_t rejected_before = names_.rejected();
  if (charged_ != &batch) names_.Add(batch);  // ChargeStrings added them
  charged_ = nullptr;
  if (names_.rejected() != rejected_before) {
    // Once per batch that had refused names; their events are written with an empty name.
    LogWarning(kComponent, "capture %s pid %u: %s", process_.capture_id, process_.pid,
               names_.status().message());
  }
  if (batch.devices_size() > 0) devices_.assign(batch.devices().begin(), batch.devices().end());
  absl::Status error;
  if (writer_ == nullptr && files_ok) error = StartTrace();
  if (writer_) error = writer_->Write(batch, names_);
  if (writer_ && !pending_counters_.empty()) {
    for (const GpuCounterBatch& held : pending_counters_) {
      if (absl::Status s = AddCounters(held); error.ok()) error = s;
    }
    std::vector<GpuCounterBatch>().swap(pending_counters_);
  }
  if (options_.record_batches && files_ok && error.ok()) Record(bytes);
  if (writer_) analysis_->AddBatch(analysis_index_, batch, names_);
  events_ += batch.kernels_size() + batch.memcpys_size() + batch.memsets_size() +
             batch.api_calls_size() + batch.syncs_size() + batch.memory_ops_size() +
             batch.overheads_size() + batch.markers_size();
  dropped_records_ = SaturatingAdd(dropped_records_, batch.dropped_records());
  return error;
}

absl::Status ProcessSink::AddCounters(const GpuCounterBatch& batch) {
  if (writer_ == nullptr) {
    // Samples from before the process's first events: a second or two at most.
    if (pending_readings_ + batch.readings.size() <= kMaxPendingReadings) {
      pending_readings_ += batch.readings.size();
      pending_counters_.push_back(batch);
    }
    return absl::OkStatus();
  }
  absl::Status error;
  for (const v1::DeviceInfo& d : devices_) {
    if (d.uuid().empty() || d.uuid() != batch.uuid) continue;
    absl::Status s = writer_->WriteCounters(d.ordinal(), batch.readings);
    if (error.ok()) error = s;
    analysis_->AddCounters(analysis_index_, d.ordinal(), batch.readings);
  }
  return error;
}

void ProcessSink::Record(absl::string_view bytes) const {
  std::ofstream raw(folder_->PathOf(absl::StrCat("batches-", process_.pid, ".pb")),
                    std::ios::binary | std::ios::app);
  uint64_t n = bytes.size();
  while (n >= 0x80) {
    raw.put(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  raw.put(static_cast<char>(n));
  raw << bytes;
}

absl::Status ProcessSink::FinishTrace(uint64_t dropped_records, bool truncated,
                                      const std::string& error) {
  TraceWriter::Footer footer;
  footer.dropped_records = dropped_records;
  footer.truncated = truncated;
  footer.devices = devices_;
  footer.error = error;
  absl::Status s = writer_->Finish(footer);
  writer_.reset();
  return s;
}

}  // namespace profd
