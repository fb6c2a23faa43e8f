// pm_sampling_probe: can profd sample device-wide GPU performance counters (CUPTI PM sampling,
// CUDA 13.0) from its OWN process while the GPU work runs in another process, and at what cost?
// Run by hand on the GPU host next to a workload, never by ctest.
//
//   pm_sampling_probe --list     chip name, then every PM-samplable metric name, one per line
//   pm_sampling_probe [--device 0] [--interval_ns 100000] [--seconds 5] [--metrics m1,m2,...]
//     stdout: "sample,start_ns,end_ns,<metric names>", then "sample,<start>,<end>,<values...>"
//             for every completed sample;
//     stderr: chip, rejected metrics, GPU/host memory taken, sample count, gaps and overflow,
//             time spent in DecodeData, and which clock the sample timestamps look like.
//   More: --decode_ms 50, --max_samples 20000 (counter data image), --hw_buffer_mib 512, --ctx
//     (retain the primary context first; by default none is created here: every PM sampling
//     call takes a device index), --no_avail_image (config built without the counter
//     availability image: CUPTI 13.0 takes the device-level pcie__*/nvl*__ metrics only so).
// Exit codes: 0 ok, 1 usage, 2 CUPTI or driver error, 3 profiling restricted to admin users,
//   4 not supported here (MIG, vGPU, old GPU, ...), 5 hardware buffer overflow ended sampling.
#include <cuda.h>
#include <cupti.h>
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_target.h>
#include <dlfcn.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

// The requested defaults. If GH100 rejects one (compare --list), names that other PM samplers
// use: dramc__read_throughput / dramc__write_throughput, sm__pipe_tensor_cycles_active_realtime,
// sm__inst_executed_realtime, gpu__dram_throughput, nvlrx__bytes_data_user, the ".avg.pct_of_
// peak_sustained_elapsed" forms of pcie__read_bytes / nvlrx__bytes, and "TPC.TriageCompute."
// prefixed names (NVIDIA's "Triage" groups are sets known to fit in one pass).
const char* const kDefaultMetrics[] = {
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum.per_second",
    "dram__bytes_write.sum.per_second",
    "lts__t_bytes.sum.per_second",
    "pcie__read_bytes.sum.per_second",
    "pcie__write_bytes.sum.per_second",
    "nvlrx__bytes.sum.per_second",
    "nvltx__bytes.sum.per_second",
    "gr__cycles_active.avg.pct_of_peak_sustained_elapsed",
};

struct Options {
  int device = 0;
  uint64_t interval_ns = 100000;
  double seconds = 5;
  unsigned decode_ms = 50;
  uint32_t max_samples = 20000;
  size_t hw_buffer_mib = 512;
  bool list = false, ctx = false, no_avail_image = false;
  std::vector<std::string> metrics;
};

volatile std::sig_atomic_t g_stop = 0;         // SIGINT/SIGTERM: stop sampling early
CUpti_PmSampling_Object* g_sampler = nullptr;  // for the teardown on a fatal error

// A CUPTI params struct: structSize set, the named fields given, the rest (pPriv too) zero.
// GCC warns on designated initializers that leave fields out, which is the intent here.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define PARAMS(T, ...) \
  T { .structSize = T##_STRUCT_SIZE, __VA_ARGS__ }

// Best effort, on a fatal error: stop (if started) and disable; results ignored.
void Teardown() {
  if (g_sampler == nullptr) return;
  auto stop = PARAMS(CUpti_PmSampling_Stop_Params, .pPmSamplingObject = g_sampler);
  cuptiPmSamplingStop(&stop);
  auto disable = PARAMS(CUpti_PmSampling_Disable_Params, .pPmSamplingObject = g_sampler);
  cuptiPmSamplingDisable(&disable);
  g_sampler = nullptr;
}

[[noreturn]] void Exit(int code) {
  Teardown();
  std::fflush(stdout);
  std::exit(code);
}

const char* ResultName(CUptiResult r) {
  const char* s = nullptr;
  return cuptiGetResultString(r, &s) == CUPTI_SUCCESS && s != nullptr ? s : "CUPTI_ERROR_?";
}

void CheckCupti(CUptiResult r, const char* call) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  if (cuptiGetErrorMessage(r, &msg) != CUPTI_SUCCESS || msg == nullptr) msg = "";
  bool privileges = r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES ||
                    r == CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES;
  bool unsupported = r == CUPTI_ERROR_NOT_SUPPORTED || r == CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED ||
                     r == CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED ||
                     r == CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED ||
                     r == CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED ||
                     r == CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED ||
                     r == CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED;
  std::fprintf(stderr, "pm_sampling_probe: %s failed: %s (%d) %s\n%s", call, ResultName(r),
               static_cast<int>(r), msg,
               privileges    ? "pm_sampling_probe: profiling restricted to admin users (run as "
                               "root, or load nvidia with NVreg_RestrictProfilingToAdminUsers=0)\n"
               : unsupported ? "pm_sampling_probe: PM sampling not supported on this device or "
                               "setup (MIG, vGPU, confidential computing, pre-GA10x GPU, ...)\n"
                             : "");
  Exit(privileges ? 3 : unsupported ? 4 : 2);
}

void CheckCu(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  if (cuGetErrorName(r, &name) != CUDA_SUCCESS) name = "CUDA_ERROR_?";
  std::fprintf(stderr, "pm_sampling_probe: %s failed: %s (%d)\n", call, name, static_cast<int>(r));
  Exit(2);
}

#define CUPTI(call) CheckCupti((call), #call)
#define CU(call) CheckCu((call), #call)

uint64_t ClockNs(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// NVML through dlopen (no nvml.h on the build machines; layouts as in daemon/metrics/nvml.cc).
// Device-wide used memory moves with the workload's allocations too; this process's own GPU
// memory shows whether CUPTI made a context here behind our back.
struct Nvml {
  struct Memory {
    unsigned long long total, free, used;
  };
  struct Process {  // nvmlProcessInfo_v2_t
    unsigned int pid;
    unsigned long long used_gpu_memory;
    unsigned int gpu_instance_id, compute_instance_id;
  };
  void* dev = nullptr;
  int (*memory)(void*, Memory*) = nullptr;
  int (*processes)(void*, unsigned int*, Process*) = nullptr;

  explicit Nvml(CUdevice cu_dev) {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    auto init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    auto by_bus = reinterpret_cast<int (*)(const char*, void**)>(
        dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    memory = reinterpret_cast<decltype(memory)>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
    processes = reinterpret_cast<decltype(processes)>(
        dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3"));
    char bus[32] = {};  // NVML and CUDA number devices differently; the PCI bus id does not
    if (init == nullptr || by_bus == nullptr || memory == nullptr || init() != 0 ||
        cuDeviceGetPCIBusId(bus, sizeof bus, cu_dev) != CUDA_SUCCESS || by_bus(bus, &dev) != 0)
      dev = nullptr;
  }
  void Report(const char* when) const {
    Memory m{};
    long long used = dev != nullptr && memory(dev, &m) == 0 ? (long long)(m.used >> 20) : -1;
    long long own = -1;  // -1: no GPU memory held by this process (or NVML would not say)
    Process procs[256];
    unsigned int n = 256;
    if (dev != nullptr && processes != nullptr && processes(dev, &n, procs) == 0)
      for (unsigned i = 0; i < n; ++i)
        if (procs[i].pid == static_cast<unsigned>(getpid()))
          own = static_cast<long long>(procs[i].used_gpu_memory >> 20);
    rusage ru{};  // peak resident set: grows if CUPTI's buffers land in host memory
    getrusage(RUSAGE_SELF, &ru);
    std::fprintf(stderr, "mem[%s]: device_used=%lld MiB own_gpu=%lld MiB host_maxrss=%ld KiB\n",
                 when, used, own, ru.ru_maxrss);
  }
};

// Which raw counters can be scheduled on the device now (fails while a session is active there).
std::vector<uint8_t> CounterAvailability(int device) {
  auto p = PARAMS(CUpti_PmSampling_GetCounterAvailability_Params,
                  .deviceIndex = static_cast<size_t>(device));
  CUPTI(cuptiPmSamplingGetCounterAvailability(&p));  // null image: returns the size
  std::vector<uint8_t> image(p.counterAvailabilityImageSize);
  p.pCounterAvailabilityImage = image.data();
  CUPTI(cuptiPmSamplingGetCounterAvailability(&p));
  return image;
}

CUpti_Profiler_Host_Object* HostInit(const std::string& chip, const uint8_t* avail) {
  auto p =
      PARAMS(CUpti_Profiler_Host_Initialize_Params, .profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING,
             .pChipName = chip.c_str(), .pCounterAvailabilityImage = avail);
  CUPTI(cuptiProfilerHostInitialize(&p));
  return p.pHostObject;
}

void HostDeinit(CUpti_Profiler_Host_Object* host) {
  auto p = PARAMS(CUpti_Profiler_Host_Deinitialize_Params, .pHostObject = host);
  CUPTI(cuptiProfilerHostDeinitialize(&p));
}

std::vector<const char*> CStrs(const std::vector<std::string>& v) {
  std::vector<const char*> out;
  for (const auto& s : v) out.push_back(s.c_str());
  return out;
}

// The config image for `metrics`, built on a fresh host object. On success the host object is
// kept (it evaluates the samples); on failure it is destroyed and result/failed_call say why.
struct HostConfig {
  CUpti_Profiler_Host_Object* host = nullptr;
  std::vector<uint8_t> image;
  size_t passes = 0;
  CUptiResult result = CUPTI_SUCCESS;
  const char* failed_call = "";
};

HostConfig BuildConfig(const std::string& chip, const uint8_t* avail,
                       const std::vector<std::string>& metrics) {
  HostConfig c;
  c.host = HostInit(chip, avail);
  std::vector<const char*> names = CStrs(metrics);
  auto add = PARAMS(CUpti_Profiler_Host_ConfigAddMetrics_Params, .pHostObject = c.host,
                    .ppMetricNames = names.data(), .numMetrics = names.size());
  auto size = PARAMS(CUpti_Profiler_Host_GetConfigImageSize_Params, .pHostObject = c.host);
  auto fail = [&](CUptiResult r, const char* call) {
    c.result = r;
    c.failed_call = call;
    return r != CUPTI_SUCCESS;
  };
  if (!fail(cuptiProfilerHostConfigAddMetrics(&add), "cuptiProfilerHostConfigAddMetrics") &&
      !fail(cuptiProfilerHostGetConfigImageSize(&size), "cuptiProfilerHostGetConfigImageSize")) {
    c.image.resize(size.configImageSize);
    auto get = PARAMS(CUpti_Profiler_Host_GetConfigImage_Params, .pHostObject = c.host,
                      .configImageSize = c.image.size(), .pConfigImage = c.image.data());
    auto passes = PARAMS(CUpti_Profiler_Host_GetNumOfPasses_Params,
                         .configImageSize = c.image.size(), .pConfigImage = c.image.data());
    if (!fail(cuptiProfilerHostGetConfigImage(&get), "cuptiProfilerHostGetConfigImage") &&
        !fail(cuptiProfilerHostGetNumOfPasses(&passes), "cuptiProfilerHostGetNumOfPasses"))
      c.passes = passes.numOfPasses;
  }
  if (c.result != CUPTI_SUCCESS) HostDeinit(std::exchange(c.host, nullptr));
  return c;
}

// Adds the requested metrics one at a time to the set accepted so far. A metric is rejected
// when CUPTI refuses it or the set would need more than one pass (PM sampling is single-pass;
// with CUPTI 13.0, pcie__/nvl*__ device-level metrics do not mix with the others).
std::vector<std::string> SelectMetrics(const std::string& chip, const uint8_t* avail,
                                       const std::vector<std::string>& requested) {
  std::vector<std::string> accepted;
  for (const auto& m : requested) {
    std::vector<std::string> trial = accepted;
    trial.push_back(m);
    HostConfig c = BuildConfig(chip, avail, trial);
    if (c.host != nullptr) HostDeinit(c.host);
    if (c.result == CUPTI_SUCCESS && c.passes == 1) {
      accepted.push_back(m);
      continue;
    }
    std::string why = c.result != CUPTI_SUCCESS
                          ? std::string(c.failed_call) + ": " + ResultName(c.result)
                          : std::to_string(c.passes) + " passes";
    std::fprintf(stderr, "rejected metric %s: %s\n", m.c_str(), why.c_str());
  }
  return accepted;
}

// Base metrics of each type (counter, ratio, throughput), each with its rollup/submetric
// suffixes: the full names that --metrics takes.
int ListMetrics(const std::string& chip, const uint8_t* avail) {
  CUpti_Profiler_Host_Object* host = HostInit(chip, avail);
  std::printf("# chip %s\n", chip.c_str());
  for (int t = 0; t < CUPTI_METRIC_TYPE__COUNT; ++t) {
    auto base = PARAMS(CUpti_Profiler_Host_GetBaseMetrics_Params, .pHostObject = host,
                       .metricType = static_cast<CUpti_MetricType>(t));
    CUPTI(cuptiProfilerHostGetBaseMetrics(&base));
    for (size_t i = 0; i < base.numMetrics; ++i) {
      const char* name = base.ppMetricNames[i];
      auto sub = PARAMS(CUpti_Profiler_Host_GetSubMetrics_Params, .pHostObject = host,
                        .metricType = base.metricType, .pMetricName = name);
      CUptiResult r = cuptiProfilerHostGetSubMetrics(&sub);
      if (r != CUPTI_SUCCESS)
        std::fprintf(stderr, "cuptiProfilerHostGetSubMetrics(%s): %s\n", name, ResultName(r));
      if (r != CUPTI_SUCCESS || sub.numOfSubmetrics == 0) std::printf("%s\n", name);
      for (size_t j = 0; r == CUPTI_SUCCESS && j < sub.numOfSubmetrics; ++j)
        std::printf("%s%s%s\n", name, sub.ppSubMetrics[j][0] == '.' ? "" : ".",
                    sub.ppSubMetrics[j]);
    }
  }
  HostDeinit(host);
  return 0;
}

struct Stats {
  uint64_t samples = 0, zero_length = 0, gaps = 0, gap_ns = 0, regressions = 0, eval_errors = 0;
  uint64_t first_start = 0, last_end = 0, overflow_flags = 0, overflow_errors = 0, partial = 0;
  uint64_t decode_calls = 0, decode_ns = 0, decode_max_ns = 0, eval_ns = 0, reinit_ns = 0;
  uint64_t stop_reason[CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNT + 1] = {};
};

struct Sampler {
  const Options& opt;
  CUpti_PmSampling_Object* obj;
  CUpti_Profiler_Host_Object* host;
  std::vector<const char*> names;
  std::vector<uint8_t> image;  // the counter data image, in host memory
  Stats st;

  void InitImage() {
    uint64_t t0 = ClockNs(CLOCK_MONOTONIC);
    auto p = PARAMS(CUpti_PmSampling_CounterDataImage_Initialize_Params, .pPmSamplingObject = obj,
                    .counterDataSize = image.size(), .pCounterData = image.data());
    CUPTI(cuptiPmSamplingCounterDataImageInitialize(&p));
    st.reinit_ns += ClockNs(CLOCK_MONOTONIC) - t0;
  }

  void Emit(size_t index) {
    uint64_t t0 = ClockNs(CLOCK_MONOTONIC);
    auto info = PARAMS(CUpti_PmSampling_CounterData_GetSampleInfo_Params, .pPmSamplingObject = obj,
                       .pCounterDataImage = image.data(), .counterDataImageSize = image.size(),
                       .sampleIndex = index);
    CUPTI(cuptiPmSamplingCounterDataGetSampleInfo(&info));
    std::vector<double> values(names.size(), std::nan(""));
    // The "range" index of the host API is the sample index for PM sampling.
    auto ev = PARAMS(CUpti_Profiler_Host_EvaluateToGpuValues_Params, .pHostObject = host,
                     .pCounterDataImage = image.data(), .counterDataImageSize = image.size(),
                     .rangeIndex = index, .ppMetricNames = names.data(), .numMetrics = names.size(),
                     .pMetricValues = values.data());
    // Checked, but counted rather than fatal: one odd sample should not end the probe.
    CUptiResult r = cuptiProfilerHostEvaluateToGpuValues(&ev);
    if (r != CUPTI_SUCCESS && st.eval_errors++ < 5)
      std::fprintf(stderr, "cuptiProfilerHostEvaluateToGpuValues(sample %zu): %s\n", index,
                   ResultName(r));
    st.eval_ns += ClockNs(CLOCK_MONOTONIC) - t0;

    uint64_t start = info.startTimestamp, end = info.endTimestamp;
    if (st.samples++ == 0) st.first_start = st.last_end = start;
    if (end == start) ++st.zero_length;
    if (start < st.last_end) ++st.regressions;
    bool gap = start > st.last_end + opt.interval_ns / 2;  // a sample missing before this one
    st.gaps += gap;
    st.gap_ns += gap ? start - st.last_end : 0;
    st.last_end = std::max(st.last_end, end);
    std::printf("sample,%" PRIu64 ",%" PRIu64, start, end);
    for (double v : values) std::printf(",%.9g", v);
    std::printf("\n");
  }

  // Moves what the hardware buffer holds into the counter data image, prints the completed
  // samples and reinitializes the image, every time (as NVIDIA's pm_sampling sample and XLA do;
  // sample indices restart at 0), which also covers "reinitialize when full". A sample that is
  // populated but not completed at that point is lost: counted in `partial`. False: the
  // hardware buffer overflowed (sampling would have to be restarted).
  bool Drain(bool after_stop) {
    for (int round = 0; round < 1000; ++round) {
      auto d = PARAMS(CUpti_PmSampling_DecodeData_Params, .pPmSamplingObject = obj,
                      .pCounterDataImage = image.data(), .counterDataImageSize = image.size());
      uint64_t t0 = ClockNs(CLOCK_MONOTONIC);
      CUptiResult r = cuptiPmSamplingDecodeData(&d);
      uint64_t dt = ClockNs(CLOCK_MONOTONIC) - t0;
      ++st.decode_calls;
      st.decode_ns += dt;
      st.decode_max_ns = std::max(st.decode_max_ns, dt);
      if (r == CUPTI_ERROR_OUT_OF_MEMORY) {  // documented as: the hardware buffer overflowed
        ++st.overflow_errors;
        std::fprintf(stderr, "cuptiPmSamplingDecodeData: %s: hardware buffer overflow\n",
                     ResultName(r));
        return false;
      }
      if (r != CUPTI_SUCCESS && after_stop) {  // decoding after Stop: reported, not fatal
        std::fprintf(stderr, "cuptiPmSamplingDecodeData after Stop: %s\n", ResultName(r));
        return true;
      }
      CheckCupti(r, "cuptiPmSamplingDecodeData(&d)");
      if (d.overflow != 0) ++st.overflow_flags;
      ++st.stop_reason[std::min<unsigned>(d.decodeStopReason,
                                          CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNT)];
      auto info = PARAMS(CUpti_PmSampling_GetCounterDataInfo_Params,
                         .pCounterDataImage = image.data(), .counterDataImageSize = image.size());
      CUPTI(cuptiPmSamplingGetCounterDataInfo(&info));
      for (size_t i = 0; i < info.numCompletedSamples; ++i) Emit(i);
      st.partial +=
          info.numPopulatedSamples - std::min(info.numPopulatedSamples, info.numCompletedSamples);
      InitImage();
      // COUNTER_DATA_FULL: more records wait in the hardware buffer; otherwise it is empty now.
      if (d.decodeStopReason != CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL) break;
    }
    return true;
  }
};

struct ClockRefs {
  uint64_t cupti = 0, realtime = ClockNs(CLOCK_REALTIME), monotonic = ClockNs(CLOCK_MONOTONIC);
  ClockRefs() { CUPTI(cuptiGetTimestamp(&cupti)); }
};

int Run(const Options& opt, CUdevice cu_dev, const std::string& chip, const uint8_t* avail) {
  Nvml nvml(cu_dev);
  nvml.Report("before");
  std::vector<std::string> metrics = SelectMetrics(chip, avail, opt.metrics);
  if (metrics.empty()) {
    std::fprintf(stderr, "pm_sampling_probe: no usable metric\n");
    Exit(2);
  }
  HostConfig cfg = BuildConfig(chip, avail, metrics);  // the set SelectMetrics found: 1 pass
  CheckCupti(cfg.result, cfg.failed_call);
  std::fprintf(stderr, "metrics: %zu accepted; config image %zu bytes\n", metrics.size(),
               cfg.image.size());

  auto en = PARAMS(CUpti_PmSampling_Enable_Params, .deviceIndex = static_cast<size_t>(opt.device));
  CUPTI(cuptiPmSamplingEnable(&en));
  g_sampler = en.pPmSamplingObject;
  nvml.Report("after Enable");

  // Interval in ns in GPU_TIME_INTERVAL mode (in sys clocks in SYSCLK mode). KEEP_OLDEST: a
  // full hardware buffer is reported (overflow flag / OUT_OF_MEMORY), not silently overwritten.
  auto sc =
      PARAMS(CUpti_PmSampling_SetConfig_Params, .pPmSamplingObject = g_sampler,
             .configSize = cfg.image.size(), .pConfig = cfg.image.data(),
             .hardwareBufferSize = opt.hw_buffer_mib << 20, .samplingInterval = opt.interval_ns,
             .triggerMode = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL,
             .hwBufferAppendMode = CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST);
  CUPTI(cuptiPmSamplingSetConfig(&sc));
  nvml.Report("after SetConfig (hardware buffer)");

  Sampler s{opt, g_sampler, cfg.host, CStrs(metrics), {}, {}};
  auto size = PARAMS(CUpti_PmSampling_GetCounterDataSize_Params, .pPmSamplingObject = g_sampler,
                     .pMetricNames = s.names.data(), .numMetrics = s.names.size(),
                     .maxSamples = opt.max_samples);
  CUPTI(cuptiPmSamplingGetCounterDataSize(&size));
  s.image.resize(size.counterDataSize);
  s.InitImage();
  std::fprintf(stderr, "counter data image: %zu bytes of host memory for %u samples\n",
               s.image.size(), opt.max_samples);

  std::printf("sample,start_ns,end_ns");
  for (const auto& m : metrics) std::printf(",%s", m.c_str());
  std::printf("\n");

  auto start = PARAMS(CUpti_PmSampling_Start_Params, .pPmSamplingObject = g_sampler);
  CUPTI(cuptiPmSamplingStart(&start));
  ClockRefs at_start;
  uint64_t cpu0 = ClockNs(CLOCK_PROCESS_CPUTIME_ID);
  nvml.Report("after Start");

  bool overflowed = false;
  auto period = std::chrono::milliseconds(opt.decode_ms);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opt.seconds);
  for (auto next = std::chrono::steady_clock::now() + period; !g_stop && !overflowed;
       next += period) {
    std::this_thread::sleep_until(next);
    overflowed = !s.Drain(false);
    if (next >= deadline) break;
  }
  ClockRefs at_stop;
  auto stop = PARAMS(CUpti_PmSampling_Stop_Params, .pPmSamplingObject = g_sampler);
  CUPTI(cuptiPmSamplingStop(&stop));
  if (!overflowed) s.Drain(true);  // what was recorded between the last decode and Stop
  double cpu_s = static_cast<double>(ClockNs(CLOCK_PROCESS_CPUTIME_ID) - cpu0) / 1e9;
  nvml.Report("before Disable");
  auto dis = PARAMS(CUpti_PmSampling_Disable_Params, .pPmSamplingObject = g_sampler);
  CUPTI(cuptiPmSamplingDisable(&dis));
  g_sampler = nullptr;
  HostDeinit(cfg.host);
  std::fflush(stdout);

  const Stats& st = s.st;
  double wall_s = static_cast<double>(at_stop.monotonic - at_start.monotonic) / 1e9;
  // The headers do not say which clock the sample timestamps are on (likely the GPU
  // globaltimer, ns, kept near CLOCK_REALTIME by the driver). The clock read right after Start
  // that the first sample starts shortly after (0 <= ms < decode period) is the one.
  auto after_ms = [&](uint64_t ref) { return (double(st.first_start) - double(ref)) / 1e6; };
  std::fprintf(stderr, "summary: chip=%s device=%d interval_ns=%" PRIu64 "\n", chip.c_str(),
               opt.device, opt.interval_ns);
  // clang-format off
  const std::pair<const char*, double> kSummary[] = {
      {"sampled_s", wall_s}, {"samples", st.samples},
      {"expected_samples_over_span", double(st.last_end - st.first_start) / opt.interval_ns},
      {"zero_length_samples", st.zero_length}, {"gaps", st.gaps}, {"gap_ms", st.gap_ns / 1e6},
      {"timestamp_regressions", st.regressions}, {"evaluate_errors", st.eval_errors},
      {"decode_overflow_flags", st.overflow_flags}, {"decode_overflow_errors", st.overflow_errors},
      {"partial_samples_dropped_at_reinit", st.partial}, {"stop_reason_other", st.stop_reason[0]},
      {"stop_reason_counter_data_full", st.stop_reason[1]},
      {"stop_reason_end_of_records", st.stop_reason[2]}, {"decode_calls", st.decode_calls},
      {"decode_total_ms", st.decode_ns / 1e6}, {"decode_max_ms", st.decode_max_ns / 1e6},
      {"sampleinfo_evaluate_ms", st.eval_ns / 1e6}, {"image_reinit_ms", st.reinit_ns / 1e6},
      {"process_cpu_s_csv_printing_included", cpu_s},
      {"clock_first_sample_after_cupti_ms", after_ms(at_start.cupti)},
      {"clock_first_sample_after_realtime_ms", after_ms(at_start.realtime)},
      {"clock_first_sample_after_monotonic_ms", after_ms(at_start.monotonic)}};
  // clang-format on
  for (const auto& [key, value] : kSummary) std::fprintf(stderr, "summary: %s=%.10g\n", key, value);
  return overflowed ? 5 : 0;
}

[[noreturn]] void Usage() {
  std::fprintf(stderr,
               "usage: pm_sampling_probe [--list] [--device N] [--interval_ns NS] [--seconds S] "
               "[--metrics m1,m2,...] [--decode_ms MS] [--max_samples N] [--hw_buffer_mib MIB] "
               "[--ctx] [--no_avail_image]\n");
  std::exit(1);
}

Options Parse(int argc, char** argv) {
  Options o;
  const std::string kValued[] = {"--device",      "--interval_ns", "--seconds",      "--decode_ms",
                                 "--max_samples", "--metrics",     "--hw_buffer_mib"};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--list" || a == "--ctx" || a == "--no_avail_image") {
      (a == "--list" ? o.list : a == "--ctx" ? o.ctx : o.no_avail_image) = true;
      continue;
    }
    if (std::find(std::begin(kValued), std::end(kValued), a) == std::end(kValued) || i + 1 >= argc)
      Usage();
    std::string v = argv[++i];
    if (a == "--device") o.device = std::atoi(v.c_str());
    if (a == "--interval_ns") o.interval_ns = std::strtoull(v.c_str(), nullptr, 10);
    if (a == "--seconds") o.seconds = std::atof(v.c_str());
    if (a == "--decode_ms") o.decode_ms = static_cast<unsigned>(std::atoi(v.c_str()));
    if (a == "--max_samples") o.max_samples = static_cast<uint32_t>(std::atoi(v.c_str()));
    if (a == "--hw_buffer_mib") o.hw_buffer_mib = std::strtoull(v.c_str(), nullptr, 10);
    for (size_t pos = 0, comma; a == "--metrics" && pos < v.size(); pos = comma + 1) {
      comma = std::min(v.find(',', pos), v.size());
      if (comma > pos) o.metrics.push_back(v.substr(pos, comma - pos));
    }
  }
  if (o.metrics.empty()) o.metrics.assign(std::begin(kDefaultMetrics), std::end(kDefaultMetrics));
  if (o.interval_ns == 0 || o.decode_ms == 0 || o.max_samples == 0 || o.hw_buffer_mib == 0) Usage();
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = Parse(argc, argv);
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGTERM, [](int) { g_stop = 1; });

  CU(cuInit(0));
  CUdevice cu_dev = 0;
  CU(cuDeviceGet(&cu_dev, opt.device));
  if (opt.ctx) {  // only on request: no PM sampling call takes a context
    CUcontext ctx = nullptr;
    CU(cuDevicePrimaryCtxRetain(&ctx, cu_dev));
    CU(cuCtxSetCurrent(ctx));
    std::fprintf(stderr, "retained the primary context of device %d (--ctx)\n", opt.device);
  }
  auto init = PARAMS(CUpti_Profiler_Initialize_Params, .pPriv = nullptr);
  CUPTI(cuptiProfilerInitialize(&init));

  auto chip_params =
      PARAMS(CUpti_Device_GetChipName_Params, .deviceIndex = static_cast<size_t>(opt.device));
  CUPTI(cuptiDeviceGetChipName(&chip_params));
  std::string chip = chip_params.pChipName;
  std::fprintf(stderr, "chip: %s\n", chip.c_str());
  std::vector<uint8_t> avail = CounterAvailability(opt.device);
  const uint8_t* avail_ptr = opt.no_avail_image ? nullptr : avail.data();
  int rc = opt.list ? ListMetrics(chip, avail_ptr) : Run(opt, cu_dev, chip, avail_ptr);
  auto deinit = PARAMS(CUpti_Profiler_DeInitialize_Params, .pPriv = nullptr);
  CUPTI(cuptiProfilerDeInitialize(&deinit));
  return rc;
}
