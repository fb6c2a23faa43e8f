// The agent's always-on launch and memory counters, counted in the CUDA entry points themselves:
// every call another library makes to a kernel or graph launch, or to a device allocation or free,
// goes through a wrapper of ours that calls the real function and, when it succeeded, bumps an
// atomic (LaunchCounters). No CUPTI is involved, so the counters cost a few nanoseconds per call
// and can never disturb torch.profiler, Kineto or Nsight in the process: to CUPTI, a process with
// the default agent looks exactly like one without it.
//
// How calls reach the wrappers, all through the GOT slots other objects import through
// (GotPatcher):
//  - runtime API (libcudart.so): cudaLaunchKernel, cudaLaunchKernelExC,
//  cudaLaunchCooperativeKernel,
//    cudaGraphLaunch, cudaMalloc*, cudaFree*, and their _ptsz forms, as PyTorch's own kernels call
//    them;
//  - driver API (libcuda.so.1) imported by name: cuLaunchKernel, cuLaunchKernelEx,
//    cuLaunchCooperativeKernel, cuGraphLaunch, cuMemAlloc*, cuMemFree*, cuMemCreate/Release;
//  - driver API looked up at run time, which is how cuBLASLt, cuDNN, NCCL and Triton (with their
//    own static CUDA runtime) reach the driver: the lookups themselves are interposed
//    (cuGetProcAddress, cudaGetDriverEntryPoint*, and on x86-64 dlsym/dlvsym) and hand back a
//    wrapper in place of the function asked for.
// A call is counted at the outermost wrapper only (a runtime launch that reaches a wrapped driver
// launch counts once), and only when it returned success.
//
// What is not seen: a library that looked a launch function up before the agent was injected or
// before it was loaded and patched (the agent rescans at every heartbeat, and whenever a patched
// object calls dlsym after new objects appeared); calls from inside libcuda and libcupti. Kernels
// replayed inside a CUDA graph are not launches (the graph launch is counted apart), as in CUPTI.
//
// Threads: the wrappers run on application threads and take no lock (atomics and a per-thread
// depth). Interpose() runs on cold paths: InitializeInjection, the agent thread's heartbeat, and
// a dlsym made after a dlopen (try-lock only, never waiting).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace profagent {

class GotPatcher;

class CudaEntryPoints {
 public:
  static CudaEntryPoints& Get();

  // Patches every loaded object that imports one of the entry points (a first call sets up from
  // the CUDA libraries in the process; libcudart is looked for again until one appears) and, with
  // `tables`, the driver entry points that CUDA runtimes initialized before the agent keep in
  // tables of their own (asking the driver for them: not from inside cuInit). Does nothing when
  // PROFD_AGENT_COUNTERS is "off" or "cupti" (Enabled() false).
  void Interpose(bool tables = true);
  // Like Interpose, but only if no other thread is doing it now and something was loaded since.
  void InterposeIfIdle();
  // withdrawn: every patched slot put back as it was and no more patching (counting stopped: the
  // off windows of the A/B overhead measurement see the process as without the agent); not
  // withdrawn: patched again. Functions that lookups already handed out stay wrapped, and count
  // nothing meanwhile.
  void SetWithdrawn(bool withdrawn);
  bool Enabled() const;

  // For the heartbeat log and tests: objects whose imports go through the wrappers, and those left
  // alone with the reason.
  struct Coverage {
    std::vector<std::string> interposed;
    std::vector<std::string> problems;
    uint64_t lookups_wrapped = 0;    // cuGetProcAddress/cudaGetDriverEntryPoint/dlsym results
    uint64_t lookups_unwrapped = 0;  // a launch or memory function handed back as is (no slot)
    // Driver entry points found in CUDA runtimes' own tables and pointed at the wrappers.
    uint64_t table_slots = 0;
    // Ways a kernel launch can reach a wrapper: patched launch imports, wrapped launch lookups,
    // runtime tables.
    uint64_t launch_routes = 0;
  };
  Coverage Report() const;

 private:
  CudaEntryPoints() = default;
  bool SetUpLocked();
  void LearnDeviceCountLocked();

  mutable std::mutex mutex_;
  bool set_up_ = false;
  void* driver_ = nullptr;                 // dlopen handle (RTLD_NOLOAD) of libcuda
  void* runtime_ = nullptr;                // of libcudart, once one is loaded
  GotPatcher* driver_patcher_ = nullptr;   // driver imports + the lookups (dlsym, cuGetProcAddress)
  GotPatcher* runtime_patcher_ = nullptr;  // runtime imports, once libcudart is in the process
  bool device_count_known_ = false;
  bool table_hooks_set_ = false;
  uint64_t table_scans_ = 0;
  bool withdrawn_ = false;
  uint64_t logged_generation_ = 0;
  std::vector<std::string> logged_;
};

}  // namespace profagent
