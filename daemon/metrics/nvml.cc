#include "daemon/metrics/nvml.h"

#include <dlfcn.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace profd {
namespace {

// From NVML's public header (nvml.h), which is not installed here. These are the stable ABI of
// the versioned entry points below; NVML never changes a published symbol's signature.
using nvmlReturn_t = int;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE = ~0ull;
constexpr unsigned kNvmlDeviceNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kNvmlUuidBufferSize = 96;        // NVML_DEVICE_UUID_V2_BUFFER_SIZE

struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlProcessInfo_v2_t; _v3 of the entry point takes the same layout.
struct nvmlProcessInfo_v2_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// nvmlProcessInfo_v1_t, for drivers older than R450 that only export the unversioned call.
struct nvmlProcessInfo_v1_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};

struct nvmlProcessUtilizationSample_t {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
};

// nvmlDeviceGetSamples' buffer entry and its value (NVML API reference, "nvmlSample_t",
// "nvmlValue_t", "nvmlValueType_t"; docs.nvidia.com/deploy/nvml-api). Utilization samples come
// as NVML_VALUE_TYPE_UNSIGNED_INT; the others are read too, in case a driver widens the type.
union nvmlValue_t {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  unsigned short usVal;
};

struct nvmlSample_t {
  unsigned long long timeStamp;  // CPU timestamp, microseconds
  nvmlValue_t sampleValue;
};

using nvmlValueType_t = int;
constexpr nvmlValueType_t NVML_VALUE_TYPE_DOUBLE = 0;
constexpr nvmlValueType_t NVML_VALUE_TYPE_UNSIGNED_INT = 1;
constexpr nvmlValueType_t NVML_VALUE_TYPE_UNSIGNED_LONG = 2;
constexpr nvmlValueType_t NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3;
constexpr nvmlValueType_t NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4;
constexpr nvmlValueType_t NVML_VALUE_TYPE_SIGNED_INT = 5;
constexpr nvmlValueType_t NVML_VALUE_TYPE_UNSIGNED_SHORT = 6;

static_assert(sizeof(nvmlSample_t) == 16);
static_assert(sizeof(nvmlProcessInfo_v2_t) == 24);
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16);
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32);

// A utilization sample's value as a percent; NVML documents 0..100, anything else is clamped.
uint32_t PercentOf(const nvmlValue_t& v, nvmlValueType_t type) {
  double percent;
  switch (type) {
    case NVML_VALUE_TYPE_DOUBLE:
      percent = v.dVal;
      break;
    case NVML_VALUE_TYPE_UNSIGNED_LONG:
      percent = static_cast<double>(v.ulVal);
      break;
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
      percent = static_cast<double>(v.ullVal);
      break;
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
      percent = static_cast<double>(v.sllVal);
      break;
    case NVML_VALUE_TYPE_SIGNED_INT:
      percent = v.siVal;
      break;
    case NVML_VALUE_TYPE_UNSIGNED_SHORT:
      percent = v.usVal;
      break;
    case NVML_VALUE_TYPE_UNSIGNED_INT:
    default:
      percent = v.uiVal;
      break;
  }
  if (!(percent > 0)) return 0;  // NaN too
  return percent >= 100 ? 100 : static_cast<uint32_t>(percent + 0.5);
}

template <typename Fn>
Fn Resolve(void* handle, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* symbol = dlsym(handle, name)) return reinterpret_cast<Fn>(symbol);
  }
  return nullptr;
}

}  // namespace

struct NvmlLibrary::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*device_count)(unsigned int*) = nullptr;
  nvmlReturn_t (*device_by_index)(unsigned int, NvmlDevice*) = nullptr;
  nvmlReturn_t (*name)(NvmlDevice, char*, unsigned int) = nullptr;
  nvmlReturn_t (*uuid)(NvmlDevice, char*, unsigned int) = nullptr;
  nvmlReturn_t (*utilization)(NvmlDevice, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*samples)(NvmlDevice, int /*nvmlSamplingType_t*/, unsigned long long,
                          nvmlValueType_t*, unsigned int*, nvmlSample_t*) = nullptr;
  nvmlReturn_t (*memory)(NvmlDevice, nvmlMemory_t*) = nullptr;
  // Exactly one of these two is set: the v2/v3 call with its layout, or the v1 one.
  nvmlReturn_t (*compute_processes_v2)(NvmlDevice, unsigned int*, nvmlProcessInfo_v2_t*) = nullptr;
  nvmlReturn_t (*compute_processes_v1)(NvmlDevice, unsigned int*, nvmlProcessInfo_v1_t*) = nullptr;
  nvmlReturn_t (*process_utilization)(NvmlDevice, nvmlProcessUtilizationSample_t*, unsigned int*,
                                      unsigned long long) = nullptr;

  std::string Describe(nvmlReturn_t code) const {
    const char* text = error_string ? error_string(code) : nullptr;
    return text ? absl::StrCat(text, " (NVML error ", code, ")")
                : absl::StrCat("NVML error ", code);
  }

  absl::Status Check(nvmlReturn_t code, const char* call) const {
    if (code == NVML_SUCCESS) return absl::OkStatus();
    std::string message = absl::StrCat(call, ": ", Describe(code));
    if (code == NVML_ERROR_NOT_SUPPORTED) return absl::UnimplementedError(message);
    if (code == NVML_ERROR_NOT_FOUND) return absl::NotFoundError(message);
    return absl::UnavailableError(message);
  }
};

absl::StatusOr<std::unique_ptr<NvmlLibrary>> NvmlLibrary::Load(const std::string& library_path) {
  void* handle = dlopen(library_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::NotFoundError(absl::StrCat(
        "cannot load ", library_path, " (", why ? why : "unknown reason",
        "): no NVIDIA driver on this host, or its library is not mounted into profd's container"));
  }
  auto api = std::make_unique<Api>();
  api->init = Resolve<decltype(api->init)>(handle, {"nvmlInit_v2", "nvmlInit"});
  api->shutdown = Resolve<decltype(api->shutdown)>(handle, {"nvmlShutdown"});
  api->error_string = Resolve<decltype(api->error_string)>(handle, {"nvmlErrorString"});
  api->device_count =
      Resolve<decltype(api->device_count)>(handle, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  api->device_by_index = Resolve<decltype(api->device_by_index)>(
      handle, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  api->name = Resolve<decltype(api->name)>(handle, {"nvmlDeviceGetName"});
  api->uuid = Resolve<decltype(api->uuid)>(handle, {"nvmlDeviceGetUUID"});
  api->utilization = Resolve<decltype(api->utilization)>(handle, {"nvmlDeviceGetUtilizationRates"});
  api->samples = Resolve<decltype(api->samples)>(handle, {"nvmlDeviceGetSamples"});
  api->memory = Resolve<decltype(api->memory)>(handle, {"nvmlDeviceGetMemoryInfo"});
  api->compute_processes_v2 = Resolve<decltype(api->compute_processes_v2)>(
      handle,
      {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"});
  if (api->compute_processes_v2 == nullptr) {
    api->compute_processes_v1 = Resolve<decltype(api->compute_processes_v1)>(
        handle, {"nvmlDeviceGetComputeRunningProcesses"});
  }
  api->process_utilization =
      Resolve<decltype(api->process_utilization)>(handle, {"nvmlDeviceGetProcessUtilization"});

  const char* missing = nullptr;
  if (api->init == nullptr)
    missing = "nvmlInit_v2";
  else if (api->shutdown == nullptr)
    missing = "nvmlShutdown";
  else if (api->device_count == nullptr)
    missing = "nvmlDeviceGetCount_v2";
  else if (api->device_by_index == nullptr)
    missing = "nvmlDeviceGetHandleByIndex_v2";
  if (missing != nullptr) {
    dlclose(handle);
    return absl::FailedPreconditionError(absl::StrCat(library_path, " has no ", missing,
                                                      ": not NVML, or a driver too old for profd"));
  }
  if (nvmlReturn_t code = api->init(); code != NVML_SUCCESS) {
    std::string why = api->Describe(code);
    dlclose(handle);
    return absl::UnavailableError(absl::StrCat(
        "nvmlInit failed: ", why, ". Is the NVIDIA kernel driver loaded (nvidia-smi works)?"));
  }
  return std::unique_ptr<NvmlLibrary>(new NvmlLibrary(handle, std::move(api)));
}

NvmlLibrary::NvmlLibrary(void* handle, std::unique_ptr<Api> api)
    : handle_(handle), api_(std::move(api)) {}

NvmlLibrary::~NvmlLibrary() {
  api_->shutdown();
  dlclose(handle_);
}

absl::StatusOr<uint32_t> NvmlLibrary::DeviceCount() {
  unsigned int count = 0;
  if (absl::Status s = api_->Check(api_->device_count(&count), "nvmlDeviceGetCount"); !s.ok()) {
    return s;
  }
  return count;
}

absl::StatusOr<NvmlDevice> NvmlLibrary::DeviceByIndex(uint32_t index) {
  NvmlDevice device = nullptr;
  absl::Status s = api_->Check(api_->device_by_index(index, &device), "nvmlDeviceGetHandleByIndex");
  if (!s.ok()) return s;
  return device;
}

absl::StatusOr<std::string> NvmlLibrary::Name(NvmlDevice device) {
  if (api_->name == nullptr) return absl::UnimplementedError("nvmlDeviceGetName: not exported");
  char name[kNvmlDeviceNameBufferSize] = {};
  absl::Status s = api_->Check(api_->name(device, name, sizeof(name) - 1), "nvmlDeviceGetName");
  if (!s.ok()) return s;
  return std::string(name);
}

absl::StatusOr<std::string> NvmlLibrary::Uuid(NvmlDevice device) {
  if (api_->uuid == nullptr) return absl::UnimplementedError("nvmlDeviceGetUUID: not exported");
  char uuid[kNvmlUuidBufferSize] = {};
  absl::Status s = api_->Check(api_->uuid(device, uuid, sizeof(uuid) - 1), "nvmlDeviceGetUUID");
  if (!s.ok()) return s;
  return std::string(uuid);
}

absl::StatusOr<NvmlUtilization> NvmlLibrary::Utilization(NvmlDevice device) {
  if (api_->utilization == nullptr) {
    return absl::UnimplementedError("nvmlDeviceGetUtilizationRates: not exported");
  }
  nvmlUtilization_t u{};
  absl::Status s = api_->Check(api_->utilization(device, &u), "nvmlDeviceGetUtilizationRates");
  if (!s.ok()) return s;
  return NvmlUtilization{u.gpu, u.memory};
}

bool NvmlLibrary::has_utilization_samples() const { return api_->samples != nullptr; }

absl::StatusOr<std::vector<NvmlUtilizationSample>> NvmlLibrary::UtilizationSamples(
    NvmlDevice device, NvmlSampling type, uint64_t since_us) {
  constexpr const char* kCall = "nvmlDeviceGetSamples";
  if (api_->samples == nullptr)
    return absl::UnimplementedError(absl::StrCat(kCall, ": not exported"));
  // A null buffer asks for the count. New samples can arrive between the two calls; NVML then
  // fills what fits, so a little headroom keeps the newest.
  nvmlValueType_t value_type = NVML_VALUE_TYPE_UNSIGNED_INT;
  unsigned int count = 0;
  nvmlReturn_t code =
      api_->samples(device, static_cast<int>(type), since_us, &value_type, &count, nullptr);
  if (code == NVML_ERROR_NOT_FOUND) return std::vector<NvmlUtilizationSample>{};
  if (code != NVML_SUCCESS && code != NVML_ERROR_INSUFFICIENT_SIZE) return api_->Check(code, kCall);
  if (count == 0) return std::vector<NvmlUtilizationSample>{};
  const unsigned int capacity = count + 16;
  std::vector<nvmlSample_t> samples(capacity);
  count = capacity;
  code =
      api_->samples(device, static_cast<int>(type), since_us, &value_type, &count, samples.data());
  if (code == NVML_ERROR_NOT_FOUND) return std::vector<NvmlUtilizationSample>{};
  if (code != NVML_SUCCESS) return api_->Check(code, kCall);
  std::vector<NvmlUtilizationSample> out;
  out.reserve(count);
  for (unsigned int i = 0; i < std::min(count, capacity); ++i) {
    out.push_back({samples[i].timeStamp, PercentOf(samples[i].sampleValue, value_type)});
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.timestamp_us < b.timestamp_us; });
  return out;
}

absl::StatusOr<NvmlMemory> NvmlLibrary::Memory(NvmlDevice device) {
  if (api_->memory == nullptr) {
    return absl::UnimplementedError("nvmlDeviceGetMemoryInfo: not exported");
  }
  nvmlMemory_t m{};
  absl::Status s = api_->Check(api_->memory(device, &m), "nvmlDeviceGetMemoryInfo");
  if (!s.ok()) return s;
  return NvmlMemory{m.total, m.used};
}

absl::StatusOr<std::vector<NvmlProcessMemory>> NvmlLibrary::ComputeProcesses(NvmlDevice device) {
  constexpr const char* kCall = "nvmlDeviceGetComputeRunningProcesses";
  if (api_->compute_processes_v2 == nullptr && api_->compute_processes_v1 == nullptr) {
    return absl::UnimplementedError(absl::StrCat(kCall, ": not exported"));
  }
  // The list can grow between the size query and the read: retry a few times with headroom.
  unsigned int capacity = 32;
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned int count = capacity;
    std::vector<NvmlProcessMemory> out;
    nvmlReturn_t code;
    if (api_->compute_processes_v2 != nullptr) {
      std::vector<nvmlProcessInfo_v2_t> infos(capacity);
      code = api_->compute_processes_v2(device, &count, infos.data());
      if (code == NVML_SUCCESS) {
        for (unsigned int i = 0; i < std::min(count, capacity); ++i) {
          NvmlProcessMemory p{infos[i].pid, std::nullopt};
          if (infos[i].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE)
            p.used_bytes = infos[i].usedGpuMemory;
          out.push_back(p);
        }
      }
    } else {
      std::vector<nvmlProcessInfo_v1_t> infos(capacity);
      code = api_->compute_processes_v1(device, &count, infos.data());
      if (code == NVML_SUCCESS) {
        for (unsigned int i = 0; i < std::min(count, capacity); ++i) {
          NvmlProcessMemory p{infos[i].pid, std::nullopt};
          if (infos[i].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE)
            p.used_bytes = infos[i].usedGpuMemory;
          out.push_back(p);
        }
      }
    }
    if (code == NVML_SUCCESS) return out;
    if (code != NVML_ERROR_INSUFFICIENT_SIZE) return api_->Check(code, kCall);
    capacity = std::max(count, capacity) * 2;
  }
  return absl::UnavailableError(
      absl::StrCat(kCall, ": the process list kept growing while it was read"));
}

absl::StatusOr<std::vector<NvmlProcessUtilization>> NvmlLibrary::ProcessUtilization(
    NvmlDevice device, uint64_t since_us) {
  constexpr const char* kCall = "nvmlDeviceGetProcessUtilization";
  if (api_->process_utilization == nullptr) {
    return absl::UnimplementedError(absl::StrCat(kCall, ": not exported"));
  }
  // NVML keeps a short ring of samples per device; asking with a null buffer gives its size.
  unsigned int count = 0;
  nvmlReturn_t code = api_->process_utilization(device, nullptr, &count, since_us);
  if (code == NVML_ERROR_NOT_FOUND) return std::vector<NvmlProcessUtilization>{};
  if (code != NVML_SUCCESS && code != NVML_ERROR_INSUFFICIENT_SIZE) {
    return api_->Check(code, kCall);
  }
  if (count == 0) return std::vector<NvmlProcessUtilization>{};
  unsigned int capacity = count + 8;
  std::vector<nvmlProcessUtilizationSample_t> samples(capacity);
  count = capacity;
  code = api_->process_utilization(device, samples.data(), &count, since_us);
  if (code == NVML_ERROR_NOT_FOUND) return std::vector<NvmlProcessUtilization>{};
  if (code != NVML_SUCCESS) return api_->Check(code, kCall);
  std::vector<NvmlProcessUtilization> out;
  out.reserve(count);
  for (unsigned int i = 0; i < std::min(count, capacity); ++i) {
    out.push_back({samples[i].pid, samples[i].timeStamp, samples[i].smUtil, samples[i].memUtil});
  }
  return out;
}

}  // namespace profd
