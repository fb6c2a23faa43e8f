#include "tests/fuzz/capture_pipeline.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "analysis/analysis.h"
#include "analysis/render.h"
#include "common/checked_math.h"

namespace profd::fuzz {
namespace {

// A fixed base, as the orchestrator's (the request time rounded to the ms): runs are reproducible.
constexpr int64_t kBaseTimeNs = 1'764'000'000'000'000'000;

}  // namespace

void Check(bool cond, const char* what) {
  if (cond) return;
  std::fprintf(stderr, "fuzz check failed: %s\n", what);
  std::abort();
}

void CheckReport(const analysis::Report& r) {
  Check(r.window_ns >= 0, "window_ns >= 0");
  Check(r.kernel_time_ns >= 0, "kernel_time_ns >= 0");
  Check(r.api_time_ns >= 0, "api_time_ns >= 0");
  for (const analysis::GpuRow& g : r.gpus) {
    Check(g.busy_ns >= 0 && g.copy_only_ns >= 0, "GPU busy and copy-only times >= 0");
    Check(g.idle.host_wait_ns >= 0 && g.idle.kernel_wait_ns >= 0 && g.idle.other_ns >= 0,
          "idle split >= 0");
    Check(std::isfinite(g.busy_ratio) && std::isfinite(g.launch_rate_per_s) &&
              std::isfinite(g.median_kernel_ns),
          "GPU ratios finite");
    for (double v : g.busy_timeline) Check(std::isfinite(v) && v >= 0, "busy timeline finite");
  }
  for (const analysis::KernelRow& k : r.top_kernels) {
    Check(k.stats.total_ns >= 0 && k.stats.min_ns >= 0, "kernel durations >= 0");
    Check(std::isfinite(k.stats.avg_ns) && std::isfinite(k.stats.stddev_ns) &&
              std::isfinite(k.time_ratio) && std::isfinite(k.est_occupancy) &&
              std::isfinite(k.theoretical_occupancy),
          "kernel statistics finite");
  }
  for (const analysis::ApiRow& a : r.apis) {
    Check(a.stats.total_ns >= 0 && std::isfinite(a.stats.avg_ns), "API statistics sane");
  }
  for (const analysis::CopyRow& c : r.copies) {
    Check(c.total_ns >= 0 && std::isfinite(c.bandwidth_gbps), "copy rows sane");
  }
  for (const analysis::ProcessRow& p : r.processes) {
    Check(p.api_ns >= 0 && p.sync_ns >= 0 && std::isfinite(p.launch_rate_per_s),
          "process rows sane");
  }
  for (const analysis::StreamQueueRow& q : r.queues) {
    Check(std::isfinite(q.avg_depth), "queue depth finite");
  }
  for (const analysis::Finding& f : r.findings) Check(std::isfinite(f.value), "finding finite");
  // Every renderer runs over it: they divide and format what the checks above bound.
  analysis::RenderText(r);
  analysis::ReportToJson(r);
  analysis::RenderHtml(r, "fuzz");
}

CapturePipeline::CapturePipeline() {
  fd_ = memfd_create("profd-fuzz-trace", 0);
  Check(fd_ >= 0, "memfd_create");
  path_ = absl::StrCat("/proc/self/fd/", fd_);
  analysis_ = std::make_unique<CaptureAnalysis>(kBaseTimeNs);
  process_ = analysis_->AddProcess(4242, path_);
}

CapturePipeline::~CapturePipeline() {
  writer_.reset();
  if (fd_ >= 0) close(fd_);
}

void CapturePipeline::Add(const v1::EventBatch& batch) {
  names_.Add(batch);
  if (batch.devices_size() > 0) devices_.assign(batch.devices().begin(), batch.devices().end());
  if (writer_ == nullptr) {
    TraceProcess process;
    process.pid = 4242;
    process.comm = "fuzz";
    process.capture_id = "20260101T000000Z-fuzz-00000000";
    process.base_time_ns = kBaseTimeNs;
    auto writer = ChromeTraceWriter::Create(path_, process);
    Check(writer.ok(), "trace writer created");
    writer_ = std::move(*writer);
  }
  Check(writer_->Write(batch, names_).ok(), "trace writer accepts any batch");
  // --record_batches keeps the raw batch: serializing what was parsed must work.
  std::string raw = batch.SerializeAsString();
  (void)raw;
  analysis_->AddBatch(process_, batch, names_);
  dropped_ = SaturatingAdd(dropped_, batch.dropped_records());
}

void CapturePipeline::Finish() {
  if (writer_ == nullptr) return;
  ChromeTraceWriter::Footer footer;
  footer.devices = devices_;
  footer.dropped_records = dropped_;
  Check(writer_->Finish(footer).ok(), "trace writer finishes");
  writer_.reset();
  // The report profd makes as the batches arrive (summary.json).
  CheckReport(analysis_->Finish());
  // What profd writes must be what profd (and profctl report) can read back.
  absl::StatusOr<analysis::Report> report = analysis::AnalyzeTraceFiles({path_});
  if (!report.ok()) std::fprintf(stderr, "%s\n", std::string(report.status().message()).c_str());
  Check(report.ok(), "the trace profd wrote is readable by the analysis");
  CheckReport(*report);
}

}  // namespace profd::fuzz
