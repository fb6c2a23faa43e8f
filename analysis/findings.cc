#include "analysis/findings.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analysis/format.h"
#include "analysis/gpu_counters.h"
#include "common/checked_math.h"

namespace profd::analysis {
namespace {

std::string GpuLabel(const GpuRow& g) {
  return absl::StrCat("GPU ", g.device, " (pid ", g.pid, ")");
}

std::string Short(const std::string& name, size_t max = 70) {
  return name.size() <= max ? name : name.substr(0, max - 3) + "...";
}

// "aten::addmm (72), aten::mm (3)": who launched a kernel's instances.
std::string Launchers(const std::vector<OperatorLaunches>& ops) {
  std::string out;
  for (const OperatorLaunches& l : ops) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", Short(l.name, 50), " (", FormatCount(l.kernels),
                    ")");
  }
  return out;
}

// The launch_bound finding's test (LaunchBound below): many short kernels, launched one by one.
bool IsLaunchBound(const GpuRow& g, const AnalysisOptions& o) {
  if (g.kernels < o.launch_bound_min_kernels || g.busy_ratio >= o.launch_bound_busy_below) {
    return false;
  }
  const double short_fraction =
      g.kernels_with_launch > 0 ? double(g.kernels_shorter_than_launch) / g.kernels_with_launch : 0;
  const bool many_short =
      g.kernels_with_launch > 0 && short_fraction >= o.launch_bound_short_fraction;
  return many_short || g.median_kernel_ns < double(o.launch_bound_median_kernel_ns);
}

void GpuIdle(const Report& r, const AnalysisOptions& o, std::vector<Finding>* out) {
  for (const GpuRow& g : r.gpus) {
    if (r.window_ns <= 0 || g.busy_ratio >= o.idle_busy_below) continue;
    Finding f;
    f.id = "gpu_idle";
    f.severity = g.busy_ratio < o.idle_busy_below / 2 ? "critical" : "warning";
    f.value = g.busy_ratio;
    int64_t idle =
        SaturatingAdd(SaturatingAdd(g.idle.host_wait_ns, g.idle.kernel_wait_ns), g.idle.other_ns);
    // host wait >= half of idle, without doubling a time that may be near INT64_MAX.
    bool host_bound = idle > 0 && g.idle.host_wait_ns >= idle - g.idle.host_wait_ns;
    // The host's time going to launching many short kernels is the launch_bound finding's: the
    // gaps are launch overhead, and more input workers would not fill them.
    const bool launch_bound = IsLaunchBound(g, o);
    f.title = absl::StrCat(GpuLabel(g), " is mostly idle: kernels ran ",
                           FormatPercent(g.busy_ratio), " of the time",
                           launch_bound ? " (launch-bound: see launch_bound)"
                           : host_bound ? " (CPU- or input-bound)"
                                        : "");
    f.threshold = absl::StrCat("kernel busy time < ", FormatPercent(o.idle_busy_below),
                               " of the trace window");
    f.evidence.push_back(absl::StrCat(
        "busy ", FormatDuration(g.busy_ns), " of ", FormatDuration(r.window_ns), " (",
        FormatPercent(g.busy_ratio), "); copies/memsets alone ", FormatDuration(g.copy_only_ns)));
    auto share = [idle](int64_t v) { return idle > 0 ? FormatPercent(double(v) / idle) : "-"; };
    f.evidence.push_back(absl::StrCat(
        "idle ", FormatDuration(g.idle_ns), ": host wait ", FormatDuration(g.idle.host_wait_ns),
        " (", share(g.idle.host_wait_ns), "), kernel wait ", FormatDuration(g.idle.kernel_wait_ns),
        " (", share(g.idle.kernel_wait_ns), "), other ", FormatDuration(g.idle.other_ns), " (",
        share(g.idle.other_ns), ")"));
    if (launch_bound) {
      f.advice.push_back(
          "The host spends the gaps launching short kernels one by one: fix that first (the "
          "launch_bound finding: CUDA Graphs, fused kernels, more work per kernel); input "
          "loading is not what the GPU waits for.");
    } else if (host_bound) {
      f.advice.push_back(
          "Host wait dominates: the CPU did not enqueue work fast enough. Look at the CPU side "
          "between steps (data loading and preprocessing, tokenization, Python overhead, "
          "request batching): use DataLoader workers with pin_memory, prefetch, larger batches.");
    } else {
      f.advice.push_back(
          "The GPU had work queued but waited (other streams, events, or launch overhead): check "
          "the synchronization and launch-bound findings, and cross-stream dependencies.");
    }
    f.advice.push_back(
        "Confirm on the timeline (open the trace in Perfetto UI) what the host does in the gaps.");
    out->push_back(std::move(f));
  }
}

void LaunchBound(const Report& r, const AnalysisOptions& o, std::vector<Finding>* out) {
  for (const GpuRow& g : r.gpus) {
    if (!IsLaunchBound(g, o)) continue;
    double short_fraction = g.kernels_with_launch > 0
                                ? double(g.kernels_shorter_than_launch) / g.kernels_with_launch
                                : 0;
    Finding f;
    f.id = "launch_bound";
    f.severity = "warning";
    f.value = short_fraction;
    f.title = absl::StrCat(GpuLabel(g), " is launch-bound: ", FormatCount(g.kernels),
                           " short kernels at ", FormatRate(g.launch_rate_per_s));
    f.threshold = absl::StrFormat(
        ">= %d kernels, busy < %s, and (>= %s of kernels shorter than their launch call, or "
        "median kernel < %s)",
        o.launch_bound_min_kernels, FormatPercent(o.launch_bound_busy_below),
        FormatPercent(o.launch_bound_short_fraction),
        FormatDuration(o.launch_bound_median_kernel_ns));
    f.evidence.push_back(absl::StrCat("median kernel ", FormatDuration(g.median_kernel_ns),
                                      "; busy ", FormatPercent(g.busy_ratio)));
    if (g.kernels_with_launch > 0) {
      f.evidence.push_back(absl::StrCat(FormatCount(g.kernels_shorter_than_launch), " of ",
                                        FormatCount(g.kernels_with_launch), " kernels (",
                                        FormatPercent(short_fraction),
                                        ") ran shorter than the launch call "
                                        "that queued them"));
      f.evidence.push_back(absl::StrCat("launch delay p50 ", FormatDuration(g.launch_delay_p50_ns),
                                        ", p90 ", FormatDuration(g.launch_delay_p90_ns)));
    }
    // Which operators launch the short kernels: where fusion or a CUDA Graph pays off first.
    double window_s = r.window_ns / 1e9;
    for (const OperatorLaunches& l : g.short_kernel_operators) {
      f.evidence.push_back(absl::StrCat(
          Short(l.name, 60), ": ",
          FormatCount(static_cast<uint64_t>(std::llround(window_s > 0 ? l.kernels / window_s : 0))),
          " launches/s of kernels < ", FormatDuration(o.launch_bound_median_kernel_ns), " (",
          FormatCount(l.kernels), " kernels, ", FormatDuration(l.total_ns), ")"));
    }
    f.evidence.push_back(absl::StrCat("kernel-wait gaps (< ", FormatDuration(o.kernel_wait_gap_ns),
                                      " between queued kernels) ",
                                      FormatDuration(g.idle.kernel_wait_ns), ", host wait ",
                                      FormatDuration(g.idle.host_wait_ns)));
    f.advice.push_back(
        "Capture the step in a CUDA Graph (torch.cuda.graphs / torch.compile(mode=\"reduce-"
        "overhead\")): one launch replays all kernels.");
    f.advice.push_back(
        "Fuse small kernels: torch.compile, fused optimizers/LayerNorm/attention, merge small "
        "linear layers into one larger GEMM.");
    f.advice.push_back("Give each kernel more work: larger batches, fewer Python-level loops.");
    out->push_back(std::move(f));
  }
}

void Copies(const Report& r, const AnalysisOptions& o, std::vector<Finding>* out) {
  int64_t host_copy_ns = 0;
  uint64_t host_copy_bytes = 0, host_copies = 0;
  uint64_t pageable = 0, pageable_bytes = 0;
  int64_t pageable_ns = 0;
  for (const CopyRow& c : r.copies) {
    if (c.kind == "HtoD" || c.kind == "DtoH" || c.kind == "HtoH") {
      host_copy_ns = SaturatingAdd(host_copy_ns, c.total_ns);
      host_copy_bytes = SaturatingAdd(host_copy_bytes, c.bytes);
      host_copies = SaturatingAdd(host_copies, c.count);
    }
    if (c.memory == "Pageable") {
      pageable = SaturatingAdd(pageable, c.count);
      pageable_bytes = SaturatingAdd(pageable_bytes, c.bytes);
      pageable_ns = SaturatingAdd(pageable_ns, c.total_ns);
    }
  }
  auto table = [&](Finding* f, bool pageable_only) {
    for (const CopyRow& c : r.copies) {
      if (c.kind == "Memset" || c.kind == "DtoD" || c.kind == "PtoP") continue;
      if (pageable_only && c.memory != "Pageable") continue;
      f->evidence.push_back(absl::StrCat(c.kind, " ", c.memory, ": ", FormatCount(c.count),
                                         " copies, ", FormatBytes(double(c.bytes)), " in ",
                                         FormatDuration(c.total_ns), " (",
                                         absl::StrFormat("%.1f", c.bandwidth_gbps), " GB/s)"));
    }
  };
  double fraction = r.window_ns > 0 ? double(host_copy_ns) / r.window_ns : 0;
  if (host_copies > 0 && fraction >= o.copies_hot_path_fraction) {
    Finding f;
    f.id = "copies_hot_path";
    f.severity = fraction >= 4 * o.copies_hot_path_fraction ? "critical" : "warning";
    f.value = fraction;
    f.title = absl::StrCat("Host<->device copies take ", FormatPercent(fraction),
                           " of the window (", FormatCount(host_copies), " copies, ",
                           FormatBytes(double(host_copy_bytes)), ")");
    f.threshold = absl::StrCat("HtoD+DtoH copy time on the GPU >= ",
                               FormatPercent(o.copies_hot_path_fraction), " of the trace window");
    table(&f, false);
    f.advice.push_back(
        "Keep tensors on the device between steps: create them there (device=\"cuda\"), avoid "
        ".cpu()/.numpy()/.tolist() and CPU-side masks or indices in the loop (torch.where with a "
        "CPU condition copies both ways).");
    f.advice.push_back(
        "Move inputs once, with pinned memory and non_blocking=True, overlapped with compute.");
    out->push_back(std::move(f));
  }
  if (pageable > 0 &&
      (pageable >= o.pageable_min_copies || pageable_bytes >= o.pageable_min_bytes)) {
    Finding f;
    f.id = "pageable_memory";
    f.severity = "warning";
    f.value = double(pageable);
    f.title =
        absl::StrCat(FormatCount(pageable), " copies use pageable host memory (",
                     FormatBytes(double(pageable_bytes)), ", ", FormatDuration(pageable_ns), ")");
    f.threshold = absl::StrCat(">= ", o.pageable_min_copies,
                               " pageable copies or >= ", FormatBytes(double(o.pageable_min_bytes)),
                               " through them");
    table(&f, true);
    f.advice.push_back(
        "Pageable copies are staged through a driver buffer and are synchronous for the host: "
        "pin the host buffers (DataLoader(pin_memory=True), tensor.pin_memory(), "
        "cudaHostAlloc) and copy with non_blocking=True.");
    out->push_back(std::move(f));
  }
}

void SyncStall(const Report& r, const AnalysisOptions& o, std::vector<Finding>* out) {
  for (const ProcessRow& p : r.processes) {
    double fraction = r.window_ns > 0 ? double(p.sync_ns) / r.window_ns : 0;
    if (p.sync_ns == 0 || fraction < o.sync_stall_fraction) continue;
    Finding f;
    f.id = "sync_stall";
    f.severity = fraction >= 3 * o.sync_stall_fraction ? "critical" : "warning";
    f.value = fraction;
    f.title =
        absl::StrCat("pid ", p.pid, " spends ", FormatPercent(fraction),
                     " of the window blocked in synchronization (", FormatDuration(p.sync_ns), ")");
    f.threshold =
        absl::StrCat("host time in synchronizing calls >= ", FormatPercent(o.sync_stall_fraction),
                     " of the trace window");
    bool has_api = std::any_of(r.syncs.begin(), r.syncs.end(),
                               [](const SyncRow& s) { return s.source == "api"; });
    for (const SyncRow& s : r.syncs) {
      if (has_api && s.source != "api") continue;
      f.evidence.push_back(absl::StrCat(s.kind, " (", s.source, "): ", FormatCount(s.count),
                                        " calls, ", FormatDuration(s.total_ns), ", longest ",
                                        FormatDuration(s.max_ns)));
    }
    f.advice.push_back(
        "Each .item(), .cpu(), .tolist(), print(tensor) or bool(tensor) of a CUDA tensor is a "
        "cudaMemcpy + cudaStreamSynchronize: keep the values on the GPU, read them once per "
        "step or asynchronously (non_blocking copy into pinned memory + an event).");
    f.advice.push_back(
        "Drop torch.cuda.synchronize()/cudaDeviceSynchronize() from the serving path; wait on "
        "a CUDA event for the one stream that matters instead.");
    out->push_back(std::move(f));
  }
}

void Dominant(const Report& r, const std::vector<KernelRow>& kernels, const AnalysisOptions& o,
              std::vector<Finding>* out) {
  size_t n = static_cast<size_t>(std::max(1, o.dominant_top_n));
  if (kernels.size() <= n || r.kernel_time_ns <= 0) return;
  double share = 0;
  for (size_t i = 0; i < n; ++i) share += kernels[i].time_ratio;
  if (share < o.dominant_fraction) return;
  Finding f;
  f.id = "dominant_kernels";
  f.severity = "info";
  f.value = share;
  f.title = absl::StrCat(n, " of ", kernels.size(), " kernels take ", FormatPercent(share),
                         " of GPU kernel time: optimise these first");
  f.threshold = absl::StrCat("top ", n, " kernels >= ", FormatPercent(o.dominant_fraction),
                             " of kernel time, with more than ", n, " distinct kernels");
  bool many_calls = false;
  for (size_t i = 0; i < n; ++i) {
    const KernelRow& k = kernels[i];
    f.evidence.push_back(absl::StrCat(
        Short(k.name), ": ", FormatCount(k.stats.count), " x ", FormatDuration(k.stats.avg_ns),
        " = ", FormatDuration(k.stats.total_ns), " (", FormatPercent(k.time_ratio), ")",
        k.operators.empty() ? "" : absl::StrCat(", launched by ", Launchers(k.operators))));
    if (k.stats.count >= 100 && k.stats.avg_ns < 20'000) many_calls = true;
  }
  f.advice.push_back(
      "Rank by count x time, not time per call: a kernel called thousands of times for a few "
      "µs each gains most from fusion or CUDA Graphs, a long one from a better algorithm, "
      "precision (fp16/bf16, TF32) or a tuned library kernel.");
  if (many_calls) {
    f.advice.push_back(
        "Some of these are short kernels called many times: fuse them (torch.compile) or batch "
        "the work into fewer, larger launches.");
  }
  f.advice.push_back(
      "Profile the top kernel with Nsight Compute (ncu --kernel-name ...) to see "
      "whether it is compute- or memory-bound.");
  out->push_back(std::move(f));
}

void LowOccupancy(const Report& r, const std::vector<KernelRow>& kernels, const AnalysisOptions& o,
                  std::vector<Finding>* out) {
  if (r.kernel_time_ns <= 0) return;
  double low_share = 0;
  bool any_measured = false;
  std::vector<const KernelRow*> low;
  for (const KernelRow& k : kernels) {
    KernelOccupancy occ = OccupancyOf(k);
    if (occ.ratio < 0 || occ.ratio >= o.low_occupancy_below) continue;
    low_share += k.time_ratio;
    any_measured |= occ.measured;
    low.push_back(&k);
  }
  if (low.empty() || low_share < o.low_occupancy_time_fraction) return;
  Finding f;
  f.id = "low_occupancy";
  f.severity = "warning";
  f.value = low_share;
  f.title = absl::StrCat(low.size(), " kernels with ", any_measured ? "" : "estimated ",
                         "occupancy below ", FormatPercent(o.low_occupancy_below), " take ",
                         FormatPercent(low_share), " of kernel time");
  f.threshold = absl::StrCat("kernels with ", any_measured ? "measured (else est.)" : "est.",
                             " achieved occupancy < ", FormatPercent(o.low_occupancy_below),
                             " together >= ", FormatPercent(o.low_occupancy_time_fraction),
                             " of kernel time");
  bool grid = false, regs = false, smem = false;
  for (size_t i = 0; i < low.size() && i < 5; ++i) {
    const KernelRow& k = *low[i];
    KernelOccupancy occ = OccupancyOf(k);
    std::string limiter = k.occupancy_limiter.empty() ? "-" : k.occupancy_limiter;
    f.evidence.push_back(absl::StrCat(
        Short(k.name, 60), ": ", occ.measured ? "measured " : "est. ", FormatPercent(occ.ratio),
        occ.measured && k.est_occupancy >= 0
            ? absl::StrCat(" (est. ", FormatPercent(k.est_occupancy), ")")
            : "",
        " (theoretical ", FormatPercent(k.theoretical_occupancy), "), limited by ", limiter, "; ",
        k.launch_config, "; ", FormatPercent(k.time_ratio), " of kernel time"));
    grid |= k.occupancy_limiter == "grid";
    regs |= k.occupancy_limiter == "registers";
    smem |= k.occupancy_limiter == "shared memory";
  }
  if (grid) {
    f.advice.push_back(
        "Grid too small to fill the SMs: batch more work per launch (larger batch, merge small "
        "GEMMs), or use split-K / persistent kernels for small matrices.");
  }
  if (regs) {
    f.advice.push_back(
        "Register-limited: cap registers (__launch_bounds__, -maxrregcount) or "
        "simplify the kernel.");
  }
  if (smem) {
    f.advice.push_back("Shared-memory-limited: smaller tiles or fewer pipeline stages.");
  }
  f.advice.push_back(any_measured
                         ? "Measured occupancy is the GPU's sm_occupancy_ratio over the kernel's "
                           "running time (device-wide: kernels running at the same time share it); "
                           "confirm with Nsight Compute (--section Occupancy)."
                         : "Estimates from the launch configuration only; confirm with Nsight "
                           "Compute (--section Occupancy).");
  out->push_back(std::move(f));
}

// The kernel_bound finding lists, most time first: enough kernels to cover most of the kernel
// time, few enough to read.
std::vector<const KernelRow*> KernelsToClassify(const std::vector<KernelRow>& kernels) {
  constexpr size_t kMaxKernels = 5;
  constexpr double kCoveredEnough = 0.80;
  std::vector<const KernelRow*> listed;
  double covered = 0;
  for (const KernelRow& k : kernels) {
    if (listed.size() == kMaxKernels || covered >= kCoveredEnough) break;
    if (k.bound.empty()) continue;
    listed.push_back(&k);
    covered += k.time_ratio;
  }
  return listed;
}

// Kernel time per class among the listed kernels, most first.
std::vector<std::pair<std::string, double>> TimePerBound(
    const std::vector<const KernelRow*>& listed) {
  std::vector<std::pair<std::string, double>> classes;
  for (const KernelRow* k : listed) {
    auto it = std::find_if(classes.begin(), classes.end(),
                           [k](const auto& c) { return c.first == k->bound; });
    if (it == classes.end()) it = classes.insert(classes.end(), {k->bound, 0.0});
    it->second += k->time_ratio;
  }
  std::stable_sort(classes.begin(), classes.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return classes;
}

// One kernel's line: its share, the counters behind the verdict, and what to do.
std::string BoundEvidence(const KernelRow& k) {
  const char* verdict = k.bound == "compute"  ? "compute-bound, fine"
                        : k.bound == "memory" ? "memory-bound: fuse it with its neighbours"
                        : k.bound == "launch"
                            ? "launch-bound: batch the work or capture it in a CUDA graph"
                            : "latency-bound: more blocks/warps, fewer dependent stalls";
  std::string covered_part;
  if (k.stats.total_ns > 0 && k.counter_time_ns < k.stats.total_ns) {
    covered_part =
        absl::StrCat(", counters over ",
                     FormatPercent(double(k.counter_time_ns) / k.stats.total_ns), " of its time");
  }
  return absl::StrCat(Short(k.name, 60), " (", FormatPercent(k.time_ratio), " of kernel time",
                      covered_part, "): ", k.bound_reason, " → ", verdict);
}

// Advice per class among the listed kernels (the math pipes' when all are compute-bound), then
// the counters' caveat.
void AddBoundAdvice(const std::vector<const KernelRow*>& listed, Finding* f) {
  bool memory = false, launch = false, latency = false;
  for (const KernelRow* k : listed) {
    memory |= k->bound == "memory";
    launch |= k->bound == "launch";
    latency |= k->bound == "latency";
  }
  if (memory) {
    f->advice.push_back(
        "Memory-bound kernels move more bytes than they compute on: fuse them with the kernels "
        "before and after (torch.compile, fused optimizers, norms and activations) so the "
        "intermediates stay on chip, and move narrower types (bf16, fp8).");
  }
  if (launch) {
    f->advice.push_back(
        "Launch-bound kernels are too short to fill the GPU: batch the work into fewer, larger "
        "launches, or capture the step in a CUDA Graph (torch.compile(mode=\"reduce-overhead\")).");
  }
  if (latency) {
    f->advice.push_back(
        "Latency-bound kernels hold the SMs while neither the pipes nor memory are busy: give "
        "them more blocks and warps (a larger grid, fewer registers or less shared memory per "
        "block) and fewer dependent stalls (more independent work per thread, asynchronous "
        "copies); Nsight Compute's warp state section names the stall.");
  }
  if (!memory && !launch && !latency) {
    f->advice.push_back(
        "The top kernels are limited by the math pipes: only less math or faster math "
        "(bf16/fp8 tensor cores, TF32) makes them faster.");
  }
  f->advice.push_back(
      "The counters are the GPU's, not the kernel's: kernels running at the same time share them, "
      "and a kernel shorter than a sample takes the whole sample's value (docs/ANALYSIS.md, "
      "\"Bound\").");
}

// What the kernels that take the time are limited by, from the hardware counters over their
// running time (ClassifyBound's verdicts): the kernels' side of the seeds' "compute- or
// memory-bound?" that dominant_kernels leaves to Nsight Compute.
void KernelBound(const Report& r, const std::vector<KernelRow>& kernels, const AnalysisOptions& o,
                 std::vector<Finding>* out) {
  // A warning when most kernel time is in kernels the math pipes do not limit.
  constexpr double kWarnNotCompute = 0.50;
  if (r.kernel_time_ns <= 0) return;
  const std::vector<const KernelRow*> listed = KernelsToClassify(kernels);
  if (listed.empty()) return;

  double not_compute = 0;
  std::string shares;
  for (const auto& [bound, share] : TimePerBound(listed)) {
    if (bound != "compute") not_compute += share;
    absl::StrAppend(&shares, shares.empty() ? "" : ", ", bound, " ", FormatPercent(share));
  }

  Finding f;
  f.id = "kernel_bound";
  f.severity = not_compute >= kWarnNotCompute ? "warning" : "info";
  f.value = not_compute;
  f.title = absl::StrCat("What bounds the top ", listed.size(),
                         listed.size() == 1 ? " kernel" : " kernels",
                         " (hardware counters): ", shares, " of kernel time");
  f.threshold =
      absl::StrCat("per kernel, the first that holds: compute if tensor pipes >= ",
                   FormatPercent(o.bound_compute_tensor),
                   "; memory if DRAM >= ", FormatPercent(o.bound_memory_dram),
                   " of peak; compute if SMs active >= ", FormatPercent(o.bound_compute_sm),
                   "; launch if median < ", FormatDuration(o.bound_launch_kernel_ns),
                   "; else latency. Warning when kernels not compute-bound take >= ",
                   FormatPercent(kWarnNotCompute), " of kernel time");
  for (const KernelRow* k : listed) f.evidence.push_back(BoundEvidence(*k));
  if (r.counter_samples > 0) {
    f.evidence.push_back(absl::StrCat("from ", FormatCount(r.counter_samples),
                                      " hardware counter samples of ",
                                      FormatDuration(r.counter_interval_ns), " each"));
  }
  AddBoundAdvice(listed, &f);
  out->push_back(std::move(f));
}

}  // namespace

std::array<double, kGpuCounters> KernelRow::NoCounters() {
  std::array<double, kGpuCounters> none;
  none.fill(std::numeric_limits<double>::quiet_NaN());
  return none;
}

double CounterOf(const KernelRow& k, std::string_view trace_name) {
  int i = GpuCounterFromTraceName(trace_name);
  return i < 0 ? std::numeric_limits<double>::quiet_NaN() : k.counters[static_cast<size_t>(i)];
}

std::vector<std::string> KernelCounterCells(const KernelRow& k) {
  const KernelOccupancy occ = OccupancyOf(k);
  return {occ.ratio < 0 ? "-" : absl::StrCat(occ.measured ? "" : "~", FormatPercent(occ.ratio)),
          FormatPercent(CounterOf(k, "sm_active_ratio")),
          FormatPercent(CounterOf(k, "tensor_active_ratio")),
          FormatPercent(CounterOf(k, "dram_active_ratio")), k.bound.empty() ? "-" : k.bound};
}

KernelOccupancy OccupancyOf(const KernelRow& k) {
  if (k.counter_time_ns > 0) {
    double measured = CounterOf(k, "sm_occupancy_ratio");
    if (std::isfinite(measured)) return {measured, true};
  }
  return {k.est_occupancy, false};
}

void ClassifyBound(const AnalysisOptions& o, KernelRow* k) {
  k->bound.clear();
  k->bound_reason.clear();
  if (k->counter_time_ns <= 0) return;
  const double sm = CounterOf(*k, "sm_active_ratio");
  const double tensor = CounterOf(*k, "tensor_active_ratio");
  const double dram = CounterOf(*k, "dram_active_ratio");
  // Comparisons with NaN are false: compute by the tensor pipes and memory need only their own
  // counter; the classes by elimination need all three. Tensor pipes first: a GEMM streaming its
  // operands at high DRAM throughput is still limited by its math, and fusing it would not help.
  if (tensor >= o.bound_compute_tensor) {
    k->bound = "compute";
    k->bound_reason = absl::StrCat("tensor pipes ", FormatPercent(tensor), " busy");
    if (std::isfinite(dram)) {
      absl::StrAppend(&k->bound_reason, ", DRAM ", FormatPercent(dram), " of peak");
    }
    return;
  }
  if (dram >= o.bound_memory_dram) {
    k->bound = "memory";
    k->bound_reason = absl::StrCat("DRAM ", FormatPercent(dram), " of peak");
    double bytes_per_s =
        CounterOf(*k, "dram_read_bytes_per_second") + CounterOf(*k, "dram_write_bytes_per_second");
    if (std::isfinite(bytes_per_s)) {
      absl::StrAppend(&k->bound_reason, absl::StrFormat(" (%.1f GB/s)", bytes_per_s / 1e9));
    }
    return;
  }
  if (!std::isfinite(sm) || !std::isfinite(tensor) || !std::isfinite(dram)) return;
  std::string pipes = absl::StrCat("SMs active ", FormatPercent(sm), ", tensor ",
                                   FormatPercent(tensor), ", DRAM ", FormatPercent(dram));
  if (sm >= o.bound_compute_sm) {
    k->bound = "compute";
    k->bound_reason = std::move(pipes);
  } else if (k->stats.median_ns < double(o.bound_launch_kernel_ns)) {
    k->bound = "launch";
    k->bound_reason = absl::StrCat("median ", FormatDuration(k->stats.median_ns), ", SMs active ",
                                   FormatPercent(sm));
  } else {
    k->bound = "latency";
    k->bound_reason = std::move(pipes);
    double occupancy = CounterOf(*k, "sm_occupancy_ratio");
    if (std::isfinite(occupancy)) {
      absl::StrAppend(&k->bound_reason, ", occupancy ", FormatPercent(occupancy));
    }
  }
}

std::vector<Finding> BuildFindings(const Report& report, const std::vector<KernelRow>& all_kernels,
                                   const AnalysisOptions& options) {
  std::vector<Finding> out;
  GpuIdle(report, options, &out);
  LaunchBound(report, options, &out);
  Copies(report, options, &out);
  SyncStall(report, options, &out);
  Dominant(report, all_kernels, options, &out);
  LowOccupancy(report, all_kernels, options, &out);
  KernelBound(report, all_kernels, options, &out);
  auto rank = [](const std::string& s) { return s == "critical" ? 0 : s == "warning" ? 1 : 2; };
  std::stable_sort(out.begin(), out.end(), [&](const Finding& a, const Finding& b) {
    return rank(a.severity) < rank(b.severity);
  });
  return out;
}

}  // namespace profd::analysis
