#include "agent/cuda_devices.h"

#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>

#include "profd/v1/agent_frame.h"

namespace profagent {
namespace {

template <typename Fn>
Fn Symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

}  // namespace

CudaDriverView QueryCudaDevices() {
  CudaDriverView view;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return view;
  view.driver_loaded = true;

  using GetCount = CUresult (*)(int*);
  using GetDevice = CUresult (*)(CUdevice*, int);
  using GetName = CUresult (*)(char*, int, CUdevice);
  using GetUuid = CUresult (*)(CUuuid*, CUdevice);
  using TotalMem = CUresult (*)(size_t*, CUdevice);
  using GetAttribute = CUresult (*)(int*, CUdevice_attribute, CUdevice);
  using DriverVersion = CUresult (*)(int*);

  auto get_count = Symbol<GetCount>(lib, "cuDeviceGetCount");
  auto get_device = Symbol<GetDevice>(lib, "cuDeviceGet");
  auto get_name = Symbol<GetName>(lib, "cuDeviceGetName");
  auto get_uuid = Symbol<GetUuid>(lib, "cuDeviceGetUuid_v2");
  if (get_uuid == nullptr) get_uuid = Symbol<GetUuid>(lib, "cuDeviceGetUuid");
  auto total_mem = Symbol<TotalMem>(lib, "cuDeviceTotalMem_v2");
  auto get_attribute = Symbol<GetAttribute>(lib, "cuDeviceGetAttribute");
  auto driver_version = Symbol<DriverVersion>(lib, "cuDriverGetVersion");
  if (get_count == nullptr || get_device == nullptr || get_attribute == nullptr) {
    dlclose(lib);
    return view;
  }
  int version = 0;
  if (driver_version && driver_version(&version) == CUDA_SUCCESS) view.driver_version = version;

  int count = 0;
  // Before cuInit completes this answers CUDA_ERROR_NOT_INITIALIZED; the caller asks again later.
  if (get_count(&count) != CUDA_SUCCESS) {
    dlclose(lib);
    return view;
  }
  view.initialized = true;
  // profd takes at most this many devices in a hello or heartbeat (agent_frame.h); no machine
  // has more, but a count past it must not cost the agent its connection.
  count = std::min(count, static_cast<int>(profd::v1::kMaxAgentDevices));
  for (int i = 0; i < count; ++i) {
    CUdevice dev;
    if (get_device(&dev, i) != CUDA_SUCCESS) continue;
    wire::DeviceInfo d;
    d.ordinal = static_cast<uint32_t>(i);
    char name[256] = {};
    if (get_name && get_name(name, sizeof(name) - 1, dev) == CUDA_SUCCESS) d.name = name;
    CUuuid uuid;
    if (get_uuid && get_uuid(&uuid, dev) == CUDA_SUCCESS) {
      // The form nvidia-smi and NVML print: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
      char text[64];
      const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
      std::snprintf(text, sizeof(text),
                    "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                    b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
                    b[13], b[14], b[15]);
      d.uuid = text;
    }
    size_t bytes = 0;
    if (total_mem && total_mem(&bytes, dev) == CUDA_SUCCESS) d.global_memory_bytes = bytes;
    auto attr = [&](CUdevice_attribute a) -> uint32_t {
      int v = 0;
      return get_attribute(&v, a, dev) == CUDA_SUCCESS && v > 0 ? static_cast<uint32_t>(v) : 0;
    };
    d.compute_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    d.compute_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    d.multiprocessors = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    d.max_threads_per_multiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
    d.max_blocks_per_multiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
    d.max_registers_per_multiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
    d.max_shared_memory_per_multiprocessor =
        attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    d.warp_size = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    d.max_registers_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
    d.max_shared_memory_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    view.devices.push_back(std::move(d));
  }
  dlclose(lib);
  return view;
}

}  // namespace profagent
