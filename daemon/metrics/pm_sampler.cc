#include "daemon/metrics/pm_sampler.h"

#include <cuda.h>
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_result.h>
#include <cupti_target.h>
#include <dlfcn.h>
#include <malloc.h>

#include <algorithm>
#include <bitset>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analysis/gpu_counters.h"
#include "common/mutex.h"
#include "daemon/log.h"

namespace profd {
namespace {

constexpr char kComponent[] = "gpu-counters";

// A CUPTI params struct: structSize set, the named fields given, the rest zero (GCC warns about
// the fields designated initializers leave out, which is the intent).
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define PARAMS(T, ...) \
  T { .structSize = T##_STRUCT_SIZE, __VA_ARGS__ }

// The CUDA driver and CUPTI entry points the sampler calls, resolved with dlsym.
struct Api {
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetUuid)(CUuuid*, CUdevice) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  decltype(&cuptiGetResultString) GetResultString = nullptr;
  decltype(&cuptiProfilerInitialize) ProfilerInitialize = nullptr;
  decltype(&cuptiProfilerDeInitialize) ProfilerDeInitialize = nullptr;
  decltype(&cuptiDeviceGetChipName) DeviceGetChipName = nullptr;
  decltype(&cuptiPmSamplingGetCounterAvailability) GetCounterAvailability = nullptr;
  decltype(&cuptiProfilerHostInitialize) HostInitialize = nullptr;
  decltype(&cuptiProfilerHostDeinitialize) HostDeinitialize = nullptr;
  decltype(&cuptiProfilerHostConfigAddMetrics) HostConfigAddMetrics = nullptr;
  decltype(&cuptiProfilerHostGetConfigImageSize) HostGetConfigImageSize = nullptr;
  decltype(&cuptiProfilerHostGetConfigImage) HostGetConfigImage = nullptr;
  decltype(&cuptiProfilerHostGetNumOfPasses) HostGetNumOfPasses = nullptr;
  decltype(&cuptiProfilerHostEvaluateToGpuValues) HostEvaluateToGpuValues = nullptr;
  decltype(&cuptiPmSamplingEnable) Enable = nullptr;
  decltype(&cuptiPmSamplingDisable) Disable = nullptr;
  decltype(&cuptiPmSamplingSetConfig) SetConfig = nullptr;
  decltype(&cuptiPmSamplingStart) Start = nullptr;
  decltype(&cuptiPmSamplingStop) Stop = nullptr;
  decltype(&cuptiPmSamplingGetCounterDataSize) GetCounterDataSize = nullptr;
  decltype(&cuptiPmSamplingCounterDataImageInitialize) CounterDataImageInitialize = nullptr;
  decltype(&cuptiPmSamplingDecodeData) DecodeData = nullptr;
  decltype(&cuptiPmSamplingGetCounterDataInfo) GetCounterDataInfo = nullptr;
  decltype(&cuptiPmSamplingCounterDataGetSampleInfo) GetSampleInfo = nullptr;

  std::string Describe(CUptiResult r) const {
    const char* text = nullptr;
    if (GetResultString != nullptr) GetResultString(r, &text);
    return text != nullptr ? text : absl::StrCat("CUPTI error ", static_cast<int>(r));
  }
};

template <typename F>
bool Bind(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  return *fn != nullptr;
}

// Loads both libraries; empty error on success.
std::string LoadApi(const std::string& cupti_path, Api* api) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) return absl::StrCat("no CUDA driver (", dlerror(), ")");
  if (!Bind(cuda, "cuInit", &api->cuInit) ||
      !Bind(cuda, "cuDeviceGetCount", &api->cuDeviceGetCount) ||
      !Bind(cuda, "cuDeviceGet", &api->cuDeviceGet) ||
      !Bind(cuda, "cuDeviceGetName", &api->cuDeviceGetName) ||
      !(Bind(cuda, "cuDeviceGetUuid_v2", &api->cuDeviceGetUuid) ||
        Bind(cuda, "cuDeviceGetUuid", &api->cuDeviceGetUuid))) {
    return "the CUDA driver lacks an entry point profd needs";
  }
  std::vector<std::string> candidates;
  if (!cupti_path.empty()) {
    candidates = {cupti_path};
  } else {
    candidates = {"libcupti.so.13", "/usr/local/cuda/lib64/libcupti.so.13",
                  "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13"};
  }
  void* cupti = nullptr;
  std::string tried;
  for (const std::string& path : candidates) {
    cupti = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (cupti != nullptr) break;
    absl::StrAppend(&tried, tried.empty() ? "" : ", ", path);
  }
  if (cupti == nullptr) return absl::StrCat("no CUPTI 13 (tried ", tried, "; --cupti_library)");
  bool ok =
      Bind(cupti, "cuptiGetResultString", &api->GetResultString) &&
      Bind(cupti, "cuptiProfilerInitialize", &api->ProfilerInitialize) &&
      Bind(cupti, "cuptiProfilerDeInitialize", &api->ProfilerDeInitialize) &&
      Bind(cupti, "cuptiDeviceGetChipName", &api->DeviceGetChipName) &&
      Bind(cupti, "cuptiPmSamplingGetCounterAvailability", &api->GetCounterAvailability) &&
      Bind(cupti, "cuptiProfilerHostInitialize", &api->HostInitialize) &&
      Bind(cupti, "cuptiProfilerHostDeinitialize", &api->HostDeinitialize) &&
      Bind(cupti, "cuptiProfilerHostConfigAddMetrics", &api->HostConfigAddMetrics) &&
      Bind(cupti, "cuptiProfilerHostGetConfigImageSize", &api->HostGetConfigImageSize) &&
      Bind(cupti, "cuptiProfilerHostGetConfigImage", &api->HostGetConfigImage) &&
      Bind(cupti, "cuptiProfilerHostGetNumOfPasses", &api->HostGetNumOfPasses) &&
      Bind(cupti, "cuptiProfilerHostEvaluateToGpuValues", &api->HostEvaluateToGpuValues) &&
      Bind(cupti, "cuptiPmSamplingEnable", &api->Enable) &&
      Bind(cupti, "cuptiPmSamplingDisable", &api->Disable) &&
      Bind(cupti, "cuptiPmSamplingSetConfig", &api->SetConfig) &&
      Bind(cupti, "cuptiPmSamplingStart", &api->Start) &&
      Bind(cupti, "cuptiPmSamplingStop", &api->Stop) &&
      Bind(cupti, "cuptiPmSamplingGetCounterDataSize", &api->GetCounterDataSize) &&
      Bind(cupti, "cuptiPmSamplingCounterDataImageInitialize", &api->CounterDataImageInitialize) &&
      Bind(cupti, "cuptiPmSamplingDecodeData", &api->DecodeData) &&
      Bind(cupti, "cuptiPmSamplingGetCounterDataInfo", &api->GetCounterDataInfo) &&
      Bind(cupti, "cuptiPmSamplingCounterDataGetSampleInfo", &api->GetSampleInfo);
  return ok ? "" : "this CUPTI has no PM sampling (CUDA 12.6 or later is needed)";
}

// Why a CUPTI call failed, in the words an operator acts on.
std::string Why(const Api& api, const char* call, CUptiResult r) {
  switch (r) {
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
      return "GPU profiling is restricted to admin users: run profd as root, or load the nvidia "
             "module with NVreg_RestrictProfilingToAdminUsers=0";
    case CUPTI_ERROR_NOT_SUPPORTED:
    case CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED:
    case CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED:
      return absl::StrCat(
          "PM sampling is not supported here (MIG, vGPU, confidential computing "
          "or a GPU older than Turing): ",
          call, ": ", api.Describe(r));
    default:
      return absl::StrCat(call, ": ", api.Describe(r),
                          " (another profiler, e.g. Nsight Compute or DCGM profiling, may hold "
                          "the GPU's counters)");
  }
}

std::string UuidText(const CUuuid& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  return absl::StrFormat("GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                         b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
                         b[12], b[13], b[14], b[15]);
}

// One GPU being sampled.
struct Gpu {
  GpuCounterSample identity;
  CUpti_Profiler_Host_Object* host = nullptr;  // evaluates the samples
  CUpti_PmSampling_Object* sampling = nullptr;
  std::vector<size_t> def_of_metric;  // for each configured metric, its def
  std::vector<const char*> metric_names;
  // Kept for the GPU's whole session: CUPTI may refer to them after the calls that take them
  // (the host object to its chip name and availability image).
  std::string chip;
  std::vector<uint8_t> availability;
  std::vector<uint8_t> config;
  std::vector<uint8_t> image;  // the counter data image
  std::vector<double> metric_values;
  GpuCounterMeans means{GpuCounterDefs().size()};
  uint64_t interval_ns = 0;  // the sampling interval now
  absl::Time last_decode;
  int restarts = 0;                         // after an overflow
  std::string error;                        // set when this GPU stopped being sampled
  std::bitset<kGpuCounters> said_left_out;  // logged once per GPU, not at every start
};

// A config image for `metrics` on a fresh host object (kept in *host on success).
CUptiResult BuildConfig(const Api& api, const std::string& chip, const std::vector<uint8_t>& avail,
                        std::vector<const char*> metrics, CUpti_Profiler_Host_Object** host,
                        std::vector<uint8_t>* image, size_t* passes, const char** failed) {
  auto init =
      PARAMS(CUpti_Profiler_Host_Initialize_Params, .profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING,
             .pChipName = chip.c_str(), .pCounterAvailabilityImage = avail.data());
  CUptiResult r = api.HostInitialize(&init);
  if (r != CUPTI_SUCCESS) return *failed = "cuptiProfilerHostInitialize", r;
  auto add = PARAMS(CUpti_Profiler_Host_ConfigAddMetrics_Params, .pHostObject = init.pHostObject,
                    .ppMetricNames = metrics.data(), .numMetrics = metrics.size());
  auto size =
      PARAMS(CUpti_Profiler_Host_GetConfigImageSize_Params, .pHostObject = init.pHostObject);
  if ((r = api.HostConfigAddMetrics(&add)) != CUPTI_SUCCESS) {
    *failed = "cuptiProfilerHostConfigAddMetrics";
  } else if ((r = api.HostGetConfigImageSize(&size)) != CUPTI_SUCCESS) {
    *failed = "cuptiProfilerHostGetConfigImageSize";
  } else {
    image->assign(size.configImageSize, 0);
    auto get = PARAMS(CUpti_Profiler_Host_GetConfigImage_Params, .pHostObject = init.pHostObject,
                      .configImageSize = image->size(), .pConfigImage = image->data());
    auto count = PARAMS(CUpti_Profiler_Host_GetNumOfPasses_Params, .configImageSize = image->size(),
                        .pConfigImage = image->data());
    if ((r = api.HostGetConfigImage(&get)) != CUPTI_SUCCESS) {
      *failed = "cuptiProfilerHostGetConfigImage";
    } else if ((r = api.HostGetNumOfPasses(&count)) != CUPTI_SUCCESS) {
      *failed = "cuptiProfilerHostGetNumOfPasses";
    } else {
      *passes = count.numOfPasses;
    }
  }
  if (r != CUPTI_SUCCESS) {
    auto deinit = PARAMS(CUpti_Profiler_Host_Deinitialize_Params, .pHostObject = init.pHostObject);
    api.HostDeinitialize(&deinit);
    return r;
  }
  *host = init.pHostObject;
  return CUPTI_SUCCESS;
}

void ReleaseHost(const Api& api, CUpti_Profiler_Host_Object* host) {
  auto deinit = PARAMS(CUpti_Profiler_Host_Deinitialize_Params, .pHostObject = host);
  api.HostDeinitialize(&deinit);
}

// Configures and starts PM sampling on one GPU with every counter the chip takes in one pass.
// Empty on success, else why not.
// How a GPU is sampled: /metrics' interval decoded every publication, or a capture's, decoded
// every kCaptureDecodeEvery into a larger hardware buffer.
struct Plan {
  absl::Duration interval;
  absl::Duration decode_every;
  uint64_t buffer_bytes = 0;
};

std::string StartSampling(const Api& api, const Plan& plan, Gpu& gpu);

std::string StartGpu(const Api& api, const Plan& plan, Gpu& gpu) {
  const size_t device = gpu.identity.cuda_index;
  CUptiResult r = CUPTI_SUCCESS;
  // From scratch every time (a capture's interval, /metrics' again, after an overflow): one path,
  // the one the H200 runs checked.
  gpu.metric_names.clear();
  gpu.def_of_metric.clear();
  auto chip = PARAMS(CUpti_Device_GetChipName_Params, .deviceIndex = device);
  r = api.DeviceGetChipName(&chip);
  if (r != CUPTI_SUCCESS) return Why(api, "cuptiDeviceGetChipName", r);
  gpu.chip = chip.pChipName;
  const std::string& chip_name = gpu.chip;
  auto avail = PARAMS(CUpti_PmSampling_GetCounterAvailability_Params, .deviceIndex = device);
  if ((r = api.GetCounterAvailability(&avail)) != CUPTI_SUCCESS) {
    return Why(api, "cuptiPmSamplingGetCounterAvailability", r);
  }
  std::vector<uint8_t>& availability = gpu.availability;
  availability.assign(avail.counterAvailabilityImageSize, 0);
  avail.pCounterAvailabilityImage = availability.data();
  if ((r = api.GetCounterAvailability(&avail)) != CUPTI_SUCCESS) {
    return Why(api, "cuptiPmSamplingGetCounterAvailability", r);
  }
  // Each counter in turn, kept when the set still builds in one pass (PM sampling has no replay).
  std::vector<uint8_t>& config = gpu.config;
  const auto defs = GpuCounterDefs();
  for (size_t d = 0; d < defs.size(); ++d) {
    std::vector<const char*> trial = gpu.metric_names;
    trial.push_back(defs[d].cupti_metric);
    CUpti_Profiler_Host_Object* host = nullptr;
    size_t passes = 0;
    const char* failed = "";
    r = BuildConfig(api, chip_name, availability, trial, &host, &config, &passes, &failed);
    if (r == CUPTI_SUCCESS) ReleaseHost(api, host);
    if (r == CUPTI_SUCCESS && passes == 1) {
      gpu.metric_names = std::move(trial);
      gpu.def_of_metric.push_back(d);
    } else if (!gpu.said_left_out[d]) {
      gpu.said_left_out[d] = true;
      LogInfo(kComponent, "GPU %d (%s): %s left out: %s", device, chip_name, defs[d].cupti_metric,
              r != CUPTI_SUCCESS ? absl::StrCat(failed, ": ", api.Describe(r))
                                 : absl::StrCat(passes, " passes"));
    }
  }
  if (gpu.metric_names.empty()) return absl::StrCat("no counter of profd's set on ", chip_name);
  size_t passes = 0;
  const char* failed = "";
  r = BuildConfig(api, chip_name, availability, gpu.metric_names, &gpu.host, &config, &passes,
                  &failed);
  if (r != CUPTI_SUCCESS) return Why(api, failed, r);
  return StartSampling(api, plan, gpu);
}

// Enables PM sampling on a configured GPU at `interval` with a counter data image for a few
// decodes' samples, and starts it.
std::string StartSampling(const Api& api, const Plan& plan, Gpu& gpu) {
  const size_t device = gpu.identity.cuda_index;
  std::vector<uint8_t>& config = gpu.config;
  CUptiResult r = CUPTI_SUCCESS;
  gpu.interval_ns = static_cast<uint64_t>(absl::ToInt64Nanoseconds(plan.interval));
  gpu.last_decode = absl::Now();
  auto enable = PARAMS(CUpti_PmSampling_Enable_Params, .deviceIndex = device);
  if ((r = api.Enable(&enable)) != CUPTI_SUCCESS) return Why(api, "cuptiPmSamplingEnable", r);
  gpu.sampling = enable.pPmSamplingObject;
  // KEEP_OLDEST: a buffer that fills between decodes is reported (overflow), not overwritten.
  auto set =
      PARAMS(CUpti_PmSampling_SetConfig_Params, .pPmSamplingObject = gpu.sampling,
             .configSize = config.size(), .pConfig = config.data(),
             .hardwareBufferSize = plan.buffer_bytes, .samplingInterval = gpu.interval_ns,
             .triggerMode = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL,
             .hwBufferAppendMode = CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST);
  if ((r = api.SetConfig(&set)) != CUPTI_SUCCESS) return Why(api, "cuptiPmSamplingSetConfig", r);
  // Room for two decode periods of samples, so one decode normally empties the buffer.
  const auto samples = static_cast<uint32_t>(2 * (plan.decode_every / plan.interval)) + 16;
  auto data_size =
      PARAMS(CUpti_PmSampling_GetCounterDataSize_Params, .pPmSamplingObject = gpu.sampling,
             .pMetricNames = gpu.metric_names.data(), .numMetrics = gpu.metric_names.size(),
             .maxSamples = samples);
  if ((r = api.GetCounterDataSize(&data_size)) != CUPTI_SUCCESS) {
    return Why(api, "cuptiPmSamplingGetCounterDataSize", r);
  }
  gpu.image.assign(data_size.counterDataSize, 0);
  auto init =
      PARAMS(CUpti_PmSampling_CounterDataImage_Initialize_Params, .pPmSamplingObject = gpu.sampling,
             .counterDataSize = gpu.image.size(), .pCounterData = gpu.image.data());
  if ((r = api.CounterDataImageInitialize(&init)) != CUPTI_SUCCESS) {
    return Why(api, "cuptiPmSamplingCounterDataImageInitialize", r);
  }
  gpu.metric_values.assign(gpu.metric_names.size(), 0);
  auto start = PARAMS(CUpti_PmSampling_Start_Params, .pPmSamplingObject = gpu.sampling);
  if ((r = api.Start(&start)) != CUPTI_SUCCESS) return Why(api, "cuptiPmSamplingStart", r);
  return "";
}

constexpr char kOverflow[] = "the hardware buffer overflowed between decodes";

// Moves what the GPU recorded into the counter data image and adds every completed sample to
// the GPU's means, and to `readings` when a capture wants them (nullptr: none); repeats while
// the image filled up before the hardware buffer emptied. kOverflow when samples were lost.
std::string Drain(const Api& api, Gpu& gpu, std::vector<GpuCounterReading>* readings) {
  const absl::Time started = absl::Now();
  size_t decoded = 0;
  for (int round = 0; round < 64; ++round) {
    auto decode =
        PARAMS(CUpti_PmSampling_DecodeData_Params, .pPmSamplingObject = gpu.sampling,
               .pCounterDataImage = gpu.image.data(), .counterDataImageSize = gpu.image.size());
    CUptiResult r = api.DecodeData(&decode);
    if (r == CUPTI_ERROR_OUT_OF_MEMORY || decode.overflow != 0) {
      LogInfo(kComponent,
              "GPU %d: %s (%s since the previous decode, round %d, %d samples decoded in this "
              "one, interval %dns)",
              gpu.identity.cuda_index, kOverflow, absl::FormatDuration(started - gpu.last_decode),
              round, decoded, gpu.interval_ns);
      return kOverflow;
    }
    if (r != CUPTI_SUCCESS) return Why(api, "cuptiPmSamplingDecodeData", r);
    auto info =
        PARAMS(CUpti_PmSampling_GetCounterDataInfo_Params, .pCounterDataImage = gpu.image.data(),
               .counterDataImageSize = gpu.image.size());
    if ((r = api.GetCounterDataInfo(&info)) != CUPTI_SUCCESS) {
      return Why(api, "cuptiPmSamplingGetCounterDataInfo", r);
    }
    std::vector<double> values(GpuCounterDefs().size(), std::nan(""));
    for (size_t i = 0; i < info.numCompletedSamples; ++i) {
      auto sample = PARAMS(CUpti_PmSampling_CounterData_GetSampleInfo_Params,
                           .pPmSamplingObject = gpu.sampling, .pCounterDataImage = gpu.image.data(),
                           .counterDataImageSize = gpu.image.size(), .sampleIndex = i);
      // For PM sampling the host API's "range" is the sample.
      auto evaluate =
          PARAMS(CUpti_Profiler_Host_EvaluateToGpuValues_Params, .pHostObject = gpu.host,
                 .pCounterDataImage = gpu.image.data(), .counterDataImageSize = gpu.image.size(),
                 .rangeIndex = i, .ppMetricNames = gpu.metric_names.data(),
                 .numMetrics = gpu.metric_names.size(), .pMetricValues = gpu.metric_values.data());
      if (api.GetSampleInfo(&sample) != CUPTI_SUCCESS ||
          api.HostEvaluateToGpuValues(&evaluate) != CUPTI_SUCCESS) {
        continue;  // one unreadable sample: its time is simply not covered
      }
      ++decoded;
      // The first sample after a start spans the time before it (0.5 s seen on the H200), its
      // rates averaged over that: left out, so no counter is diluted by it.
      if (sample.endTimestamp - sample.startTimestamp > 4 * gpu.interval_ns) continue;
      for (size_t m = 0; m < gpu.metric_values.size(); ++m) {
        values[gpu.def_of_metric[m]] = gpu.metric_values[m];
      }
      gpu.means.Add(sample.startTimestamp, sample.endTimestamp, values);
      if (readings != nullptr) {
        GpuCounterReading& reading = readings->emplace_back();
        reading.start_ns = sample.startTimestamp;
        reading.end_ns = sample.endTimestamp;
        const auto defs = GpuCounterDefs();
        for (size_t d = 0; d < kGpuCounters; ++d) {
          reading.values[d] = GpuCounterCaptureValue(d, values[d] * defs[d].scale);
        }
      }
    }
    auto init = PARAMS(CUpti_PmSampling_CounterDataImage_Initialize_Params,
                       .pPmSamplingObject = gpu.sampling, .counterDataSize = gpu.image.size(),
                       .pCounterData = gpu.image.data());
    if ((r = api.CounterDataImageInitialize(&init)) != CUPTI_SUCCESS) {
      return Why(api, "cuptiPmSamplingCounterDataImageInitialize", r);
    }
    if (decode.decodeStopReason != CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL) break;
  }
  gpu.last_decode = started;
  return "";
}

// Stops sampling and drops the configuration.
void StopGpu(const Api& api, Gpu& gpu) {
  if (gpu.sampling != nullptr) {
    auto stop = PARAMS(CUpti_PmSampling_Stop_Params, .pPmSamplingObject = gpu.sampling);
    api.Stop(&stop);
    auto disable = PARAMS(CUpti_PmSampling_Disable_Params, .pPmSamplingObject = gpu.sampling);
    api.Disable(&disable);
    gpu.sampling = nullptr;
  }
  if (gpu.host != nullptr) ReleaseHost(api, std::exchange(gpu.host, nullptr));
}

// How often a capture's samples are decoded, on a fixed cadence: at 100 us the H200 filled a
// 4 MiB hardware buffer in under 40 ms (a capture's is 32 MiB, ~0.3 s), and the capture's
// analysis wants the samples soon after the kernels they cover.
constexpr absl::Duration kCaptureDecodeEvery = absl::Milliseconds(20);
// Restarts after an overflow before a GPU's counters are given up on.
constexpr int kMaxRestarts = 20;

// Loads the driver and CUPTI and initialises CUPTI's profiler, with one Gpu per device: "" or
// why not.
std::string InitProfiler(const std::string& cupti_library, Api* api, std::vector<Gpu>* gpus,
                         bool* profiler) {
  std::string error = LoadApi(cupti_library, api);
  if (!error.empty()) return error;
  int count = 0;
  if (api->cuInit(0) != CUDA_SUCCESS || api->cuDeviceGetCount(&count) != CUDA_SUCCESS) {
    return "the CUDA driver does not initialise (no GPU?)";
  }
  if (count == 0) return "no GPU";
  auto init = PARAMS(CUpti_Profiler_Initialize_Params, .pPriv = nullptr);
  if (CUptiResult r = api->ProfilerInitialize(&init); r != CUPTI_SUCCESS) {
    return Why(*api, "cuptiProfilerInitialize", r);
  }
  *profiler = true;
  gpus->resize(static_cast<size_t>(count));
  return "";
}

// Each GPU's CUDA index, uuid and name, which its counters are published under.
void IdentifyGpus(const Api& api, std::vector<Gpu>& gpus) {
  for (size_t i = 0; i < gpus.size(); ++i) {
    Gpu& gpu = gpus[i];
    gpu.identity.cuda_index = static_cast<uint32_t>(i);
    CUdevice device = 0;
    CUuuid uuid{};
    char name[256] = {};
    if (api.cuDeviceGet(&device, static_cast<int>(i)) == CUDA_SUCCESS) {
      if (api.cuDeviceGetUuid(&uuid, device) == CUDA_SUCCESS) gpu.identity.uuid = UuidText(uuid);
      if (api.cuDeviceGetName(name, sizeof(name) - 1, device) == CUDA_SUCCESS) {
        gpu.identity.name = name;
      }
    }
  }
}

// The GPUs sampled without an error.
uint32_t SampledGpus(const std::vector<Gpu>& gpus) {
  return static_cast<uint32_t>(
      std::count_if(gpus.begin(), gpus.end(), [](const Gpu& g) { return g.error.empty(); }));
}

}  // namespace

// What the sampler's thread holds from loading the libraries until it lets go of the GPUs.
struct PmSampler::Session {
  Api api;
  std::vector<Gpu> gpus;
  // Empty while the GPUs can be sampled; else why not (said once, published, told to captures).
  std::string error;
  bool profiler = false;
  Plan plan;  // how the GPUs are sampled now; a zero interval: not started
  absl::Time next_publish;
  absl::Time next_decode = absl::InfiniteFuture();  // a capture's
};

// What the sampler's thread is asked to do.
struct PmSampler::Wanted {
  bool stop = false;
  bool metrics = false;
  bool capture = false;  // a capture's sink is set
  bool capture_ending = false;
  absl::Duration capture_interval;
};

PmSampler::PmSampler(Options options)
    : options_(std::move(options)),
      snapshot_(std::make_shared<const GpuCounterSnapshot>(
          GpuCounterSnapshot{.available = false, .error = "starting"})) {}

PmSampler::~PmSampler() { Stop(); }

void PmSampler::EnsureThread() {
  if (running_) return;
  // A thread that returned (a capture's sampling ended without --gpu_counters) is joined first.
  if (thread_.joinable()) thread_.join();
  running_ = true;
  thread_ = std::thread([this] { Run(); });
}

void PmSampler::Start() {
  MutexLock lock(&mutex_);
  metrics_ = true;
  EnsureThread();
  changed_cv_.SignalAll();
}

void PmSampler::Stop() {
  {
    MutexLock lock(&mutex_);
    stop_ = true;
    changed_cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

bool PmSampler::BeginCapture(absl::Duration interval, CaptureSink sink, std::string* why) {
  MutexLock lock(&mutex_);
  if (stop_) {
    *why = "profd is shutting down";
    return false;
  }
  if (capture_sink_) {
    *why = "another capture is sampling the GPUs' counters (one at a time)";
    return false;
  }
  capture_sink_ = std::move(sink);
  capture_interval_ = interval;
  capture_ending_ = false;
  capture_started_ = false;
  capture_error_.clear();
  EnsureThread();
  changed_cv_.SignalAll();
  return true;
}

void PmSampler::AwaitCaptureStart(absl::Duration timeout) {
  MutexLock lock(&mutex_);
  WaitUntil(&started_cv_, &mutex_, absl::Now() + timeout,
            [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
              return capture_started_ || !capture_sink_ || stop_;
            });
}

std::string PmSampler::EndCapture() {
  MutexLock lock(&mutex_);
  if (!capture_sink_) return capture_error_;
  capture_ending_ = true;
  changed_cv_.SignalAll();
  while (capture_sink_) Wait(&ended_cv_, &mutex_);
  return capture_error_;
}

std::shared_ptr<const GpuCounterSnapshot> PmSampler::snapshot() const {
  MutexLock lock(&mutex_);
  return snapshot_;
}

PmSampler::State PmSampler::state() const {
  MutexLock lock(&mutex_);
  State state = state_;
  state.metrics = metrics_;
  state.capture = static_cast<bool>(capture_sink_);
  return state;
}

void PmSampler::Publish(GpuCounterSnapshot snapshot) {
  snapshot.taken = absl::Now();
  auto published = std::make_shared<const GpuCounterSnapshot>(std::move(snapshot));
  MutexLock lock(&mutex_);
  snapshot_ = std::move(published);
}

PmSampler::Wanted PmSampler::AwaitChange(absl::Time until, const Wanted* known) {
  MutexLock lock(&mutex_);
  auto wanted = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return Wanted{.stop = stop_,
                  .metrics = metrics_,
                  .capture = static_cast<bool>(capture_sink_),
                  .capture_ending = capture_ending_,
                  .capture_interval = capture_interval_};
  };
  const Wanted before = known != nullptr ? *known : wanted();
  WaitUntil(&changed_cv_, &mutex_, until, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    const Wanted now = wanted();
    return now.stop != before.stop || now.metrics != before.metrics ||
           now.capture != before.capture || now.capture_ending != before.capture_ending;
  });
  return wanted();
}

void PmSampler::Run() {
  while (true) {
    Sample();
    MutexLock lock(&mutex_);
    // A capture that began while Sample was on its way out is served by a fresh start.
    if (capture_sink_ && !stop_) continue;
    running_ = false;
    if (capture_sink_) {
      capture_error_ = "profd is shutting down";
      capture_sink_ = nullptr;
      ended_cv_.SignalAll();
    }
    return;
  }
}

void PmSampler::OpenSession(Session& s) {
  s.error = InitProfiler(options_.cupti_library, &s.api, &s.gpus, &s.profiler);
  IdentifyGpus(s.api, s.gpus);
  if (!s.error.empty()) {
    SetState(s, absl::ZeroDuration(), s.error);
    LogWarning(kComponent,
               "GPU hardware counters unavailable: %s; captures and the other "
               "metrics are not affected",
               s.error);
    Publish(GpuCounterSnapshot{.available = false, .error = s.error});
  }
}

void PmSampler::SetState(const Session& s, absl::Duration interval, std::string why) {
  const uint32_t ok = interval == absl::ZeroDuration() ? 0 : SampledGpus(s.gpus);
  MutexLock lock(&mutex_);
  state_.interval = interval;
  state_.gpus = ok;
  state_.error = std::move(why);
}

void PmSampler::Configure(Session& s, const Wanted& w) {
  const Plan want =
      w.capture
          ? Plan{w.capture_interval, kCaptureDecodeEvery, options_.capture_hardware_buffer_bytes}
          : Plan{options_.interval, options_.publish_every, options_.hardware_buffer_bytes};
  if (!s.error.empty() ||
      (want.interval == s.plan.interval && want.decode_every == s.plan.decode_every)) {
    return;
  }
  std::string first_error;
  for (Gpu& gpu : s.gpus) {
    if (!gpu.error.empty()) continue;
    if (s.plan.interval != absl::ZeroDuration()) {
      (void)Drain(s.api, gpu, nullptr);  // what was sampled so far still counts for /metrics
      StopGpu(s.api, gpu);
    }
    gpu.error = StartGpu(s.api, want, gpu);
    if (!gpu.error.empty()) {
      LogWarning(kComponent, "GPU %d: no hardware counters: %s", gpu.identity.cuda_index,
                 gpu.error);
      if (first_error.empty()) first_error = gpu.error;
      StopGpu(s.api, gpu);
    }
  }
  s.plan = want;
  s.next_decode = w.capture ? absl::Now() + kCaptureDecodeEvery : absl::InfiniteFuture();
  if (SampledGpus(s.gpus) == 0) {
    s.error = first_error;
    SetState(s, absl::ZeroDuration(), s.error);
    Publish(GpuCounterSnapshot{.available = false, .error = s.error});
    return;
  }
  SetState(s, want.interval, first_error);
  LogInfo(kComponent, "sampling %d GPU(s) every %s for %s", s.gpus.size(),
          absl::FormatDuration(want.interval), w.capture ? "a capture" : "/metrics");
}

void PmSampler::PauseSampling(Session& s) {
  for (Gpu& gpu : s.gpus) {
    StopGpu(s.api, gpu);
    gpu.error.clear();
    gpu.restarts = 0;
  }
  s.error.clear();
  s.plan = Plan{};
  SetState(s, absl::ZeroDuration(), "");
  malloc_trim(0);
}

void PmSampler::MarkCaptureStarted() {
  MutexLock lock(&mutex_);
  if (!capture_started_) {
    capture_started_ = true;
    started_cv_.SignalAll();
  }
}

void PmSampler::Decode(Session& s, const Wanted& wanted) {
  s.next_decode = std::max(s.next_decode + kCaptureDecodeEvery, absl::Now());
  for (Gpu& gpu : s.gpus) {
    if (!gpu.error.empty() || gpu.sampling == nullptr) continue;
    GpuCounterBatch batch{
        .cuda_index = gpu.identity.cuda_index, .uuid = gpu.identity.uuid, .readings = {}};
    std::string e = Drain(s.api, gpu, wanted.capture ? &batch.readings : nullptr);
    if (e == kOverflow && gpu.restarts < kMaxRestarts) {
      // Samples are lost, not the GPU: sampling starts again (a gap in the counters).
      ++gpu.restarts;
      StopGpu(s.api, gpu);
      e = StartGpu(s.api, s.plan, gpu);
    }
    if (!e.empty()) {
      LogWarning(kComponent, "GPU %d: hardware counters stopped: %s", gpu.identity.cuda_index, e);
      gpu.error = e;
      StopGpu(s.api, gpu);
      SetState(s, SampledGpus(s.gpus) > 0 ? s.plan.interval : absl::ZeroDuration(), e);
    }
    if (!batch.readings.empty()) {
      CaptureSink sink;
      {
        MutexLock lock(&mutex_);
        sink = capture_sink_;
      }
      if (sink) sink(std::move(batch));
    }
  }
}

void PmSampler::EndCaptureSampling(const Session& s) {
  MutexLock lock(&mutex_);
  capture_error_ = s.error.empty() && SampledGpus(s.gpus) == 0 ? s.gpus.front().error : s.error;
  capture_sink_ = nullptr;
  capture_ending_ = false;
  ended_cv_.SignalAll();
}

void PmSampler::PublishMeans(Session& s) {
  GpuCounterSnapshot snapshot{.available = s.error.empty()};
  snapshot.error = s.error;
  for (Gpu& gpu : s.gpus) {
    if (!gpu.error.empty() || !s.error.empty()) continue;
    GpuCounterSample sample = gpu.identity;
    sample.values = gpu.means.Take();
    const auto defs = GpuCounterDefs();
    for (size_t d = 0; d < defs.size(); ++d) sample.values[d] *= defs[d].scale;
    snapshot.gpus.push_back(std::move(sample));
  }
  if (s.error.empty() && snapshot.gpus.empty()) {
    snapshot.available = false;
    snapshot.error = s.gpus.front().error;
  }
  Publish(std::move(snapshot));
  s.next_publish += options_.publish_every;
  if (s.next_publish < absl::Now()) s.next_publish = absl::Now();  // a slow decode skips ahead
}

void PmSampler::CloseSession(Session& s) {
  for (Gpu& gpu : s.gpus) StopGpu(s.api, gpu);
  SetState(s, absl::ZeroDuration(), s.error);
  s.gpus.clear();
  if (s.profiler) {
    auto deinit = PARAMS(CUpti_Profiler_DeInitialize_Params, .pPriv = nullptr);
    s.api.ProfilerDeInitialize(&deinit);
  }
  // A capture's sampling without --gpu_counters: what CUPTI and the buffers took goes back.
  malloc_trim(0);
}

void PmSampler::Sample() {
  Session s;
  OpenSession(s);
  s.next_publish = absl::Now() + options_.publish_every;

  Wanted wanted = AwaitChange(absl::Now());
  while (!wanted.stop) {
    if (!wanted.metrics && !wanted.capture) {
      if (!s.profiler) break;  // the next capture loads and initialises from scratch
      // Nothing wants the counters: the GPUs stop sampling, but CUPTI's profiler stays
      // initialised until profd stops. Tearing it down after a capture and initialising it for
      // the next crashed the profiled application's own CUPTI (a SIGSEGV inside its libcupti,
      // under cuEventQuery, during the next capture; H200, docs/HARDWARE_COUNTERS.md). Errors
      // are forgotten: the next capture tries every GPU again.
      PauseSampling(s);
      wanted = AwaitChange(absl::InfiniteFuture(), &wanted);
      continue;
    }
    Configure(s, wanted);
    if (wanted.capture) MarkCaptureStarted();
    const absl::Time now = absl::Now();
    absl::Time until = wanted.metrics ? s.next_publish : absl::InfiniteFuture();
    // A capture's decodes keep their cadence whatever a decode takes (the buffer fills meanwhile).
    if (wanted.capture && !wanted.capture_ending) until = std::min(until, s.next_decode);
    if (wanted.capture_ending) until = now;
    if (until > now) {
      const Wanted next = AwaitChange(until, &wanted);
      if (next.capture != wanted.capture || next.capture_ending != wanted.capture_ending ||
          next.stop || next.metrics != wanted.metrics) {
        wanted = next;
        if (!wanted.capture_ending && !wanted.stop) continue;
      }
    }
    // Decode; the capture's readings go to it, every sample to /metrics' means.
    Decode(s, wanted);
    if (wanted.capture && (wanted.capture_ending || wanted.stop)) EndCaptureSampling(s);
    if (wanted.metrics && absl::Now() >= s.next_publish) PublishMeans(s);
    wanted = AwaitChange(absl::Now());
  }
  CloseSession(s);
}

}  // namespace profd
