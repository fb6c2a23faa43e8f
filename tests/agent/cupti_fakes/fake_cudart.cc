// A stand-in for libcudart.so.13 as the entry-point counters meet it: its launches and
// allocations reach the driver through functions it looks up itself, lazily, with
// dlsym("cuGetProcAddress_v2") and cuGetProcAddress — as the CUDA runtime (and every library with
// a static copy of it: cuBLASLt, cuDNN, NCCL) does. A runtime call must be counted once, not once
// more for the driver call inside it.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

namespace {

using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t,
                                      CUdriverProcAddressQueryResult*);

template <typename Fn>
Fn Driver(const char* name) {
  static void* cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  auto get = reinterpret_cast<GetProcAddressFn>(dlsym(cuda, "cuGetProcAddress_v2"));
  void* fn = nullptr;
  if (get == nullptr ||
      get(name, &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr) != CUDA_SUCCESS) {
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

}  // namespace

extern "C" {

cudaError_t cudaLaunchKernel(const void*, dim3 grid, dim3 block, void** args, size_t shared,
                             cudaStream_t stream) {
  using Fn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, CUstream, void**, void**);
  static Fn launch = Driver<Fn>("cuLaunchKernel");
  if (launch == nullptr) return cudaErrorInitializationError;
  CUresult r =
      launch(nullptr, grid.x, grid.y, grid.z, block.x, block.y, block.z,
             static_cast<unsigned>(shared), reinterpret_cast<CUstream>(stream), args, nullptr);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graph, cudaStream_t stream) {
  using Fn = CUresult (*)(CUgraphExec, CUstream);
  static Fn launch = Driver<Fn>("cuGraphLaunch");
  return launch(reinterpret_cast<CUgraphExec>(graph), reinterpret_cast<CUstream>(stream)) ==
                 CUDA_SUCCESS
             ? cudaSuccess
             : cudaErrorInvalidValue;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  using Fn = CUresult (*)(CUdeviceptr*, size_t);
  static Fn alloc = Driver<Fn>("cuMemAlloc");
  CUdeviceptr d = 0;
  if (alloc(&d, bytes) != CUDA_SUCCESS) return cudaErrorMemoryAllocation;
  *p = reinterpret_cast<void*>(d);
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  using Fn = CUresult (*)(CUdeviceptr);
  static Fn free_fn = Driver<Fn>("cuMemFree");
  return free_fn(reinterpret_cast<CUdeviceptr>(p)) == CUDA_SUCCESS ? cudaSuccess
                                                                   : cudaErrorInvalidValue;
}

}  // extern "C"
