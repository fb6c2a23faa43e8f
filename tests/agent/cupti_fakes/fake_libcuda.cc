// A stand-in for libcuda.so.1 with one initialized device: just what the agent asks the driver
// (agent/cuda_devices.cc), so a capture gets as far as CUPTI in a process without a GPU.
#include <cuda.h>

#include <cstring>

extern "C" {

CUresult cuDriverGetVersion(int* version) {
  *version = 13000;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  *count = 1;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int length, CUdevice) {
  std::strncpy(name, "Fake GPU", static_cast<size_t>(length));
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice) {
  std::memset(uuid, 0x42, sizeof(*uuid));
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
  *bytes = 1ull << 30;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute, CUdevice) {
  *value = 1;
  return CUDA_SUCCESS;
}

}  // extern "C"

// --- Launches, allocations and the lookups, for the entry-point counters (cuda_entry_points).
// A launch with gridDimX 0 fails, as on a real driver; everything else succeeds.
extern "C" {

CUresult cuInit(unsigned int) { return CUDA_SUCCESS; }

CUresult cuCtxGetCurrent(CUcontext* context) {
  *context = reinterpret_cast<CUcontext>(0x1000);
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) {
  *device = 0;
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction, unsigned gx, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, CUstream, void**, void**) {
  return gx == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuLaunchKernel_ptsz(CUfunction, unsigned gx, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void**, void**) {
  return gx == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction, void**, void**) {
  return config == nullptr || config->gridDimX == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuGraphLaunch(CUgraphExec, CUstream) { return CUDA_SUCCESS; }

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  static CUdeviceptr next = 0x7f0000000000;
  *p = next;
  next += (bytes + 0xfff) & ~static_cast<size_t>(0xfff);
  return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr) { return CUDA_SUCCESS; }

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t, const CUmemAllocationProp*,
                     unsigned long long) {
  static CUmemGenericAllocationHandle next = 1;
  *handle = next++;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle) { return CUDA_SUCCESS; }

// cuda.h renames cuGetProcAddress to its _v2; the old four-argument export keeps its name.
CUresult FakeGetProcAddressV1(const char* symbol, void** pfn, int version,
                              cuuint64_t flags) __asm__("cuGetProcAddress");
CUresult FakeGetProcAddressV1(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, nullptr);
}

// As the real one: base names, the _v2 and _ptsz forms chosen by version and flags.
CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  const bool ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  void* fn = nullptr;
  if (std::strcmp(symbol, "cuLaunchKernel") == 0) {
    fn = ptds ? reinterpret_cast<void*>(&cuLaunchKernel_ptsz)
              : reinterpret_cast<void*>(&cuLaunchKernel);
  } else if (std::strcmp(symbol, "cuLaunchKernelEx") == 0) {
    fn = reinterpret_cast<void*>(&cuLaunchKernelEx);
  } else if (std::strcmp(symbol, "cuGraphLaunch") == 0) {
    fn = reinterpret_cast<void*>(&cuGraphLaunch);
  } else if (std::strcmp(symbol, "cuMemAlloc") == 0) {
    fn = reinterpret_cast<void*>(&cuMemAlloc_v2);
  } else if (std::strcmp(symbol, "cuMemFree") == 0) {
    fn = reinterpret_cast<void*>(&cuMemFree_v2);
  } else if (std::strcmp(symbol, "cuGetProcAddress") == 0) {
    fn = version >= 12000 ? reinterpret_cast<void*>(&cuGetProcAddress_v2)
                          : reinterpret_cast<void*>(&FakeGetProcAddressV1);
  }
  if (status != nullptr) {
    *status = fn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  }
  *pfn = fn;
  return fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"
