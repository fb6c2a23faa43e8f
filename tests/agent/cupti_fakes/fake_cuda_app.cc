// The application side for the entry-point counters' tests: a library that calls CUDA every way a
// PyTorch process does — the runtime by import (PyTorch's own kernels), the driver by import, by
// dlsym and by cuGetProcAddress (cuBLASLt, Triton, NCCL). It is a library of its own because the
// agent never patches the object it lives in (here, the test program).
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstddef>

extern "C" {

int app_runtime_launches(int n, unsigned grid) {
  int ok = 0;
  for (int i = 0; i < n; ++i) {
    ok += cudaLaunchKernel(nullptr, dim3(grid), dim3(1), nullptr, 0, nullptr) == cudaSuccess;
  }
  return ok;
}

int app_driver_launches(int n) {
  CUlaunchConfig config{};
  config.gridDimX = 1;
  int ok = 0;
  for (int i = 0; i < n; ++i) ok += cuLaunchKernelEx(&config, nullptr, nullptr, nullptr) == 0;
  return ok;
}

int app_dlsym_launches(int n) {
  using Fn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, CUstream, void**, void**);
  auto launch = reinterpret_cast<Fn>(
      dlsym(dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD), "cuLaunchKernel"));
  int ok = 0;
  for (int i = 0; launch != nullptr && i < n; ++i) {
    ok += launch(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) == CUDA_SUCCESS;
  }
  return ok;
}

// cuGetProcAddress asked for itself first, as libraries that find only it by name do.
int app_proc_address_launches(int n) {
  using GetFn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  void* get_itself = nullptr;
  if (cuGetProcAddress_v2("cuGetProcAddress", &get_itself, 12000, CU_GET_PROC_ADDRESS_DEFAULT,
                          nullptr) != CUDA_SUCCESS) {
    return -1;
  }
  void* fn = nullptr;
  if (reinterpret_cast<GetFn>(get_itself)("cuLaunchKernel", &fn, 12000,
                                          CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                          nullptr) != CUDA_SUCCESS) {
    return -1;
  }
  using Fn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, CUstream, void**, void**);
  int ok = 0;
  for (int i = 0; i < n; ++i) {
    ok += reinterpret_cast<Fn>(fn)(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) ==
          CUDA_SUCCESS;
  }
  return ok;
}

int app_graph_launches(int n) {
  int ok = 0;
  for (int i = 0; i < n; ++i) ok += cudaGraphLaunch(nullptr, nullptr) == cudaSuccess;
  return ok;
}

void* app_malloc(size_t bytes) {
  void* p = nullptr;
  return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
}

void app_free(void* p) { cudaFree(p); }

unsigned long long app_mem_create(size_t bytes, int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  CUmemGenericAllocationHandle handle = 0;
  return cuMemCreate(&handle, bytes, &prop, 0) == CUDA_SUCCESS ? handle : 0;
}

void app_mem_release(unsigned long long handle) { cuMemRelease(handle); }

}  // extern "C"

extern "C" {

// As Python imports an extension module: dlopen, then at once dlsym of its entry point.
void* app_load_module(const char* path, const char* entry) {
  void* module = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  return module ? dlsym(module, entry) : nullptr;
}

}  // extern "C"
