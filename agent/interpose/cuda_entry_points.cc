#include "agent/interpose/cuda_entry_points.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>

#include <array>
#include <atomic>
#include <cstring>
#include <utility>

#include "agent/counters/launch_counters.h"
#include "agent/interpose/got_patcher.h"
#include "agent/log.h"

namespace profagent {
namespace {

// What a wrapper does once the real call returned.

std::atomic<bool> g_single_device{false};
// The driver's current-context calls, for the device a call was made on (more than one device).
using CtxGetCurrentFn = CUresult (*)(CUcontext*);
using CtxGetDeviceFn = CUresult (*)(CUdevice*);
std::atomic<CtxGetCurrentFn> g_ctx_get_current{nullptr};
std::atomic<CtxGetDeviceFn> g_ctx_get_device{nullptr};

// Most threads keep one context: its device is asked for once.
thread_local CUcontext t_context = nullptr;
thread_local uint32_t t_device = 0;

uint32_t CurrentDevice() {
  if (g_single_device.load(std::memory_order_relaxed)) return 0;
  CtxGetCurrentFn get_current = g_ctx_get_current.load(std::memory_order_relaxed);
  CtxGetDeviceFn get_device = g_ctx_get_device.load(std::memory_order_relaxed);
  CUcontext context = nullptr;
  if (get_current == nullptr || get_current(&context) != CUDA_SUCCESS || context == nullptr) {
    return 0;
  }
  if (context == t_context) return t_device;
  CUdevice device = 0;
  if (get_device == nullptr || get_device(&device) != CUDA_SUCCESS || device < 0) return 0;
  t_context = context;
  t_device = static_cast<uint32_t>(device);
  return t_device;
}

void Launched(bool graph) {
  LaunchCounters& counters = LaunchCounters::Get();
  if (counters.counting_entry_points()) counters.OnLaunch(CurrentDevice(), graph);
}
void Allocated(uint64_t key, uint64_t bytes) {
  LaunchCounters& counters = LaunchCounters::Get();
  if (counters.counting_entry_points()) counters.OnAlloc(CurrentDevice(), key, bytes);
}
void AllocatedOn(uint32_t device, uint64_t key, uint64_t bytes) {
  LaunchCounters& counters = LaunchCounters::Get();
  if (counters.counting_entry_points()) counters.OnAlloc(device, key, bytes);
}
void Freed(uint64_t key) {
  LaunchCounters& counters = LaunchCounters::Get();
  if (counters.counting_entry_points()) counters.OnFree(key);
}
uint64_t Key(const void* p) { return reinterpret_cast<uint64_t>(p); }
// cuMemCreate hands out handles, not addresses: the top bit keeps the two apart in one table.
uint64_t HandleKey(CUmemGenericAllocationHandle h) {
  return static_cast<uint64_t>(h) | (1ull << 63);
}

void* WrapDriverLookup(const char* symbol, void* fn, int cuda_version);

// The entry points.
//
// One struct per family of functions that share a signature: the names it is exported as, the
// name cuGetProcAddress knows it by (driver API), and what a successful call means. Lookups
// (kLookup) wrap what they return, whatever the call depth; the others count at depth 1 only.

// What most families share: counted (not a lookup); runtime API families have no driver name.
struct Counted {
  static constexpr const char* kDriverName = nullptr;
  static constexpr bool kLookup = false;
};
struct Lookup {
  static constexpr const char* kDriverName = nullptr;
  static constexpr bool kLookup = true;
};

struct CudaLaunchKernel : Counted {
  static constexpr const char* kNames[] = {"cudaLaunchKernel", "cudaLaunchKernel_ptsz"};
  using Fn = cudaError_t (*)(const void*, dim3, dim3, void**, size_t, cudaStream_t);
  static void After(const void*, dim3, dim3, void**, size_t, cudaStream_t) { Launched(false); }
};
struct CudaLaunchKernelExC : Counted {
  static constexpr const char* kNames[] = {"cudaLaunchKernelExC", "cudaLaunchKernelExC_ptsz"};
  using Fn = cudaError_t (*)(const cudaLaunchConfig_t*, const void*, void**);
  static void After(const cudaLaunchConfig_t*, const void*, void**) { Launched(false); }
};
struct CudaLaunchCooperativeKernel : Counted {
  static constexpr const char* kNames[] = {"cudaLaunchCooperativeKernel",
                                           "cudaLaunchCooperativeKernel_ptsz"};
  using Fn = cudaError_t (*)(const void*, dim3, dim3, void**, size_t, cudaStream_t);
  static void After(const void*, dim3, dim3, void**, size_t, cudaStream_t) { Launched(false); }
};
struct CudaGraphLaunch : Counted {
  static constexpr const char* kNames[] = {"cudaGraphLaunch", "cudaGraphLaunch_ptsz"};
  using Fn = cudaError_t (*)(cudaGraphExec_t, cudaStream_t);
  static void After(cudaGraphExec_t, cudaStream_t) { Launched(true); }
};
struct CudaMalloc : Counted {
  static constexpr const char* kNames[] = {"cudaMalloc"};
  using Fn = cudaError_t (*)(void**, size_t);
  static void After(void** p, size_t bytes) {
    if (p) Allocated(Key(*p), bytes);
  }
};
struct CudaMallocManaged : Counted {
  static constexpr const char* kNames[] = {"cudaMallocManaged"};
  using Fn = cudaError_t (*)(void**, size_t, unsigned int);
  static void After(void** p, size_t bytes, unsigned int) {
    if (p) Allocated(Key(*p), bytes);
  }
};
struct CudaMallocPitch : Counted {
  static constexpr const char* kNames[] = {"cudaMallocPitch"};
  using Fn = cudaError_t (*)(void**, size_t*, size_t, size_t);
  static void After(void** p, size_t* pitch, size_t, size_t height) {
    if (p && pitch) Allocated(Key(*p), *pitch * height);
  }
};
struct CudaMallocAsync : Counted {
  static constexpr const char* kNames[] = {"cudaMallocAsync", "cudaMallocAsync_ptsz"};
  using Fn = cudaError_t (*)(void**, size_t, cudaStream_t);
  static void After(void** p, size_t bytes, cudaStream_t) {
    if (p) Allocated(Key(*p), bytes);
  }
};
struct CudaMallocFromPoolAsync : Counted {
  static constexpr const char* kNames[] = {"cudaMallocFromPoolAsync",
                                           "cudaMallocFromPoolAsync_ptsz"};
  using Fn = cudaError_t (*)(void**, size_t, cudaMemPool_t, cudaStream_t);
  static void After(void** p, size_t bytes, cudaMemPool_t, cudaStream_t) {
    if (p) Allocated(Key(*p), bytes);
  }
};
struct CudaFree : Counted {
  static constexpr const char* kNames[] = {"cudaFree"};
  using Fn = cudaError_t (*)(void*);
  static void After(void* p) { Freed(Key(p)); }
};
struct CudaFreeAsync : Counted {
  static constexpr const char* kNames[] = {"cudaFreeAsync", "cudaFreeAsync_ptsz"};
  using Fn = cudaError_t (*)(void*, cudaStream_t);
  static void After(void* p, cudaStream_t) { Freed(Key(p)); }
};

struct CuLaunchKernel : Counted {
  static constexpr const char* kNames[] = {"cuLaunchKernel", "cuLaunchKernel_ptsz"};
  static constexpr const char* kDriverName = "cuLaunchKernel";
  using Fn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, CUstream, void**, void**);
  static void After(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                    unsigned, CUstream, void**, void**) {
    Launched(false);
  }
};
struct CuLaunchKernelEx : Counted {
  static constexpr const char* kNames[] = {"cuLaunchKernelEx", "cuLaunchKernelEx_ptsz"};
  static constexpr const char* kDriverName = "cuLaunchKernelEx";
  using Fn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
  static void After(const CUlaunchConfig*, CUfunction, void**, void**) { Launched(false); }
};
struct CuLaunchCooperativeKernel : Counted {
  static constexpr const char* kNames[] = {"cuLaunchCooperativeKernel",
                                           "cuLaunchCooperativeKernel_ptsz"};
  static constexpr const char* kDriverName = "cuLaunchCooperativeKernel";
  using Fn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, CUstream, void**);
  static void After(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                    unsigned, CUstream, void**) {
    Launched(false);
  }
};
struct CuGraphLaunch : Counted {
  static constexpr const char* kNames[] = {"cuGraphLaunch", "cuGraphLaunch_ptsz"};
  static constexpr const char* kDriverName = "cuGraphLaunch";
  using Fn = CUresult (*)(CUgraphExec, CUstream);
  static void After(CUgraphExec, CUstream) { Launched(true); }
};
struct CuMemAlloc : Counted {
  static constexpr const char* kNames[] = {"cuMemAlloc_v2"};
  static constexpr const char* kDriverName = "cuMemAlloc";
  using Fn = CUresult (*)(CUdeviceptr*, size_t);
  static void After(CUdeviceptr* p, size_t bytes) {
    if (p) Allocated(*p, bytes);
  }
};
struct CuMemAllocPitch : Counted {
  static constexpr const char* kNames[] = {"cuMemAllocPitch_v2"};
  static constexpr const char* kDriverName = "cuMemAllocPitch";
  using Fn = CUresult (*)(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
  static void After(CUdeviceptr* p, size_t* pitch, size_t, size_t height, unsigned int) {
    if (p && pitch) Allocated(*p, *pitch * height);
  }
};
struct CuMemAllocManaged : Counted {
  static constexpr const char* kNames[] = {"cuMemAllocManaged"};
  static constexpr const char* kDriverName = "cuMemAllocManaged";
  using Fn = CUresult (*)(CUdeviceptr*, size_t, unsigned int);
  static void After(CUdeviceptr* p, size_t bytes, unsigned int) {
    if (p) Allocated(*p, bytes);
  }
};
struct CuMemAllocAsync : Counted {
  static constexpr const char* kNames[] = {"cuMemAllocAsync", "cuMemAllocAsync_ptsz"};
  static constexpr const char* kDriverName = "cuMemAllocAsync";
  using Fn = CUresult (*)(CUdeviceptr*, size_t, CUstream);
  static void After(CUdeviceptr* p, size_t bytes, CUstream) {
    if (p) Allocated(*p, bytes);
  }
};
struct CuMemAllocFromPoolAsync : Counted {
  static constexpr const char* kNames[] = {"cuMemAllocFromPoolAsync",
                                           "cuMemAllocFromPoolAsync_ptsz"};
  static constexpr const char* kDriverName = "cuMemAllocFromPoolAsync";
  using Fn = CUresult (*)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
  static void After(CUdeviceptr* p, size_t bytes, CUmemoryPool, CUstream) {
    if (p) Allocated(*p, bytes);
  }
};
struct CuMemFree : Counted {
  static constexpr const char* kNames[] = {"cuMemFree_v2"};
  static constexpr const char* kDriverName = "cuMemFree";
  using Fn = CUresult (*)(CUdeviceptr);
  static void After(CUdeviceptr p) { Freed(p); }
};
struct CuMemFreeAsync : Counted {
  static constexpr const char* kNames[] = {"cuMemFreeAsync", "cuMemFreeAsync_ptsz"};
  static constexpr const char* kDriverName = "cuMemFreeAsync";
  using Fn = CUresult (*)(CUdeviceptr, CUstream);
  static void After(CUdeviceptr p, CUstream) { Freed(p); }
};
struct CuMemCreate : Counted {
  static constexpr const char* kNames[] = {"cuMemCreate"};
  static constexpr const char* kDriverName = "cuMemCreate";
  using Fn = CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                          unsigned long long);
  static void After(CUmemGenericAllocationHandle* h, size_t bytes, const CUmemAllocationProp* prop,
                    unsigned long long) {
    if (h == nullptr) return;
    if (prop != nullptr && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
        prop->location.id >= 0) {
      AllocatedOn(static_cast<uint32_t>(prop->location.id), HandleKey(*h), bytes);
    } else {
      Allocated(HandleKey(*h), bytes);
    }
  }
};
struct CuMemRelease : Counted {
  static constexpr const char* kNames[] = {"cuMemRelease"};
  static constexpr const char* kDriverName = "cuMemRelease";
  using Fn = CUresult (*)(CUmemGenericAllocationHandle);
  static void After(CUmemGenericAllocationHandle h) { Freed(HandleKey(h)); }
};

// The lookups: what they hand back is wrapped in turn.
struct CuGetProcAddressV1 : Lookup {
  static constexpr const char* kNames[] = {"cuGetProcAddress"};
  using Fn = CUresult (*)(const char*, void**, int, cuuint64_t);
  static void After(const char* symbol, void** pfn, int version, cuuint64_t) {
    if (symbol && pfn && *pfn) *pfn = WrapDriverLookup(symbol, *pfn, version);
  }
};
struct CuGetProcAddressV2 : Lookup {
  static constexpr const char* kNames[] = {"cuGetProcAddress_v2", "cuGetProcAddress_v2_ptsz"};
  using Fn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  static void After(const char* symbol, void** pfn, int version, cuuint64_t,
                    CUdriverProcAddressQueryResult*) {
    if (symbol && pfn && *pfn) *pfn = WrapDriverLookup(symbol, *pfn, version);
  }
};
// The runtime's own lookups answer for the runtime's version of the driver API.
constexpr int kRuntimeLookupVersion = CUDART_VERSION;
struct CudaGetDriverEntryPoint : Lookup {
  static constexpr const char* kNames[] = {"cudaGetDriverEntryPoint",
                                           "cudaGetDriverEntryPoint_ptsz"};
  using Fn = cudaError_t (*)(const char*, void**, unsigned long long,
                             cudaDriverEntryPointQueryResult*);
  static void After(const char* symbol, void** pfn, unsigned long long,
                    cudaDriverEntryPointQueryResult*) {
    if (symbol && pfn && *pfn) *pfn = WrapDriverLookup(symbol, *pfn, kRuntimeLookupVersion);
  }
};
struct CudaGetDriverEntryPointByVersion : Lookup {
  static constexpr const char* kNames[] = {"cudaGetDriverEntryPointByVersion",
                                           "cudaGetDriverEntryPointByVersion_ptsz"};
  using Fn = cudaError_t (*)(const char*, void**, unsigned int, unsigned long long,
                             cudaDriverEntryPointQueryResult*);
  static void After(const char* symbol, void** pfn, unsigned int version, unsigned long long,
                    cudaDriverEntryPointQueryResult*) {
    if (symbol && pfn && *pfn) *pfn = WrapDriverLookup(symbol, *pfn, static_cast<int>(version));
  }
};

// Wrappers.
//
// A family's wrappers are kSlots copies of one function, each calling the real function held in
// its slot: a lookup may hand back several real functions for one family (the _ptsz form, a
// newer version), and each needs a wrapper of its own that knows where to go.

constexpr int kSlots = 8;
template <typename F>
std::atomic<void*> g_real[kSlots];
// Real functions a family's exported names have in the process's libcuda (the only answers a
// lookup may give whose signature we are sure of when the caller asks for an old version).
template <typename F>
std::atomic<void*> g_known[std::size(F::kNames)];

// Depth of wrapped calls on this thread: a call is counted only by the outermost wrapper.
thread_local int t_depth = 0;
struct Depth {
  Depth() { ++t_depth; }
  ~Depth() { --t_depth; }
  bool outermost() const { return t_depth == 1; }
};

template <typename F, int S, typename R, typename... A>
R Wrapped(A... args) {
  auto real = reinterpret_cast<R (*)(A...)>(g_real<F>[S].load(std::memory_order_relaxed));
  Depth depth;
  R result = real(args...);
  if (static_cast<int>(result) == 0 && (F::kLookup || depth.outermost())) F::After(args...);
  return result;
}

template <typename F, typename R, typename... A, size_t... S>
std::array<void*, kSlots> MakeWrappers(R (*)(A...), std::index_sequence<S...>) {
  return {reinterpret_cast<void*>(&Wrapped<F, static_cast<int>(S), R, A...>)...};
}

template <typename F>
const std::array<void*, kSlots>& WrappersOf() {
  static const std::array<void*, kSlots> wrappers =
      MakeWrappers<F>(typename F::Fn{}, std::make_index_sequence<kSlots>{});
  return wrappers;
}

std::atomic<uint64_t> g_lookups_wrapped{0};
std::atomic<uint64_t> g_lookups_unwrapped{0};
std::atomic<uint64_t> g_launch_lookups_wrapped{0};

// The type-erased view of a family, for the tables below.
struct Family {
  const char* const* names;
  size_t name_count;
  const char* driver_name;
  std::atomic<void*>* real;
  std::atomic<void*>* known;
  const std::array<void*, kSlots>& (*wrappers)();
  bool lookup;
  bool counts_launches;
};

template <typename F>
constexpr Family FamilyOf(bool counts_launches) {
  return {F::kNames,  std::size(F::kNames), F::kDriverName, g_real<F>,
          g_known<F>, &WrappersOf<F>,       F::kLookup,     counts_launches};
}

const Family kRuntimeFamilies[] = {
    FamilyOf<CudaLaunchKernel>(true),
    FamilyOf<CudaLaunchKernelExC>(true),
    FamilyOf<CudaLaunchCooperativeKernel>(true),
    FamilyOf<CudaGraphLaunch>(true),
    FamilyOf<CudaMalloc>(false),
    FamilyOf<CudaMallocManaged>(false),
    FamilyOf<CudaMallocPitch>(false),
    FamilyOf<CudaMallocAsync>(false),
    FamilyOf<CudaMallocFromPoolAsync>(false),
    FamilyOf<CudaFree>(false),
    FamilyOf<CudaFreeAsync>(false),
    FamilyOf<CudaGetDriverEntryPoint>(false),
    FamilyOf<CudaGetDriverEntryPointByVersion>(false),
};
const Family kDriverFamilies[] = {
    FamilyOf<CuLaunchKernel>(true),
    FamilyOf<CuLaunchKernelEx>(true),
    FamilyOf<CuLaunchCooperativeKernel>(true),
    FamilyOf<CuGraphLaunch>(true),
    FamilyOf<CuMemAlloc>(false),
    FamilyOf<CuMemAllocPitch>(false),
    FamilyOf<CuMemAllocManaged>(false),
    FamilyOf<CuMemAllocAsync>(false),
    FamilyOf<CuMemAllocFromPoolAsync>(false),
    FamilyOf<CuMemFree>(false),
    FamilyOf<CuMemFreeAsync>(false),
    FamilyOf<CuMemCreate>(false),
    FamilyOf<CuMemRelease>(false),
    FamilyOf<CuGetProcAddressV1>(false),
    FamilyOf<CuGetProcAddressV2>(false),
};

bool IsWrapper(const Family& f, void* fn) {
  for (void* w : f.wrappers()) {
    if (w == fn) return true;
  }
  return false;
}

// The wrapper that calls `real`, claiming a free slot for it; `real` itself when every slot is
// taken by other functions (then that function goes uncounted, and the report says so).
void* Claim(const Family& f, void* real) {
  if (real == nullptr || IsWrapper(f, real)) return real;
  for (int s = 0; s < kSlots; ++s) {
    void* current = f.real[s].load();
    if (current == nullptr && f.real[s].compare_exchange_strong(current, real)) {
      return f.wrappers()[s];
    }
    if (current == real) return f.wrappers()[s];
  }
  g_lookups_unwrapped.fetch_add(1, std::memory_order_relaxed);
  return real;
}

// A lookup's answer, wrapped: counted for the report.
void* ClaimForLookup(const Family& f, void* real) {
  g_lookups_wrapped.fetch_add(1, std::memory_order_relaxed);
  if (f.counts_launches) g_launch_lookups_wrapped.fetch_add(1, std::memory_order_relaxed);
  return Claim(f, real);
}

const Family* ByExportedName(const char* name) {
  auto find = [name](const auto& table) -> const Family* {
    for (const Family& f : table) {
      for (size_t i = 0; i < f.name_count; ++i) {
        if (std::strcmp(f.names[i], name) == 0) return &f;
      }
    }
    return nullptr;
  };
  const Family* f = find(kDriverFamilies);
  return f != nullptr ? f : find(kRuntimeFamilies);
}

bool Known(const Family& f, void* fn) {
  for (size_t i = 0; i < f.name_count; ++i) {
    if (f.known[i].load() == fn) return true;
  }
  return false;
}

// What cuGetProcAddress (or the runtime's lookup) returned for `symbol`: a wrapper when it is one
// of ours. Every family keeps its signature in the versions a caller of today asks for; for an
// old version only the functions we can recognise are wrapped. cuGetProcAddress asked for itself
// is wrapped only when we can tell which of its two signatures came back.
constexpr int kFirstVersionWrapped = 11000;
void* WrapDriverLookup(const char* symbol, void* fn, int cuda_version) {
  if (symbol[0] != 'c' || symbol[1] != 'u') return fn;
  if (std::strcmp(symbol, "cuGetProcAddress") == 0) {
    for (const Family& f : kDriverFamilies) {
      if (f.lookup && Known(f, fn)) return ClaimForLookup(f, fn);
    }
    return fn;
  }
  for (const Family& f : kDriverFamilies) {
    if (f.driver_name == nullptr || std::strcmp(f.driver_name, symbol) != 0) continue;
    if (!Known(f, fn) && cuda_version < kFirstVersionWrapped) return fn;
    return ClaimForLookup(f, fn);
  }
  return fn;
}

// dlsym and dlvsym.
//
// Libraries with their own static CUDA runtime (cuBLASLt, cuDNN, NCCL) and Triton find the driver
// with dlopen + dlsym("cuGetProcAddress_v2") or dlsym("cuLaunchKernelEx"). dlsym's answer for
// RTLD_NEXT depends on who called it (glibc reads its return address), so the hook is a stub that
// asks Intercept first and, unless the name is one of ours, jumps to the real dlsym with the
// caller's registers and return address untouched.

extern "C" {
__attribute__((visibility("hidden"))) void* profagent_real_dlsym = nullptr;
__attribute__((visibility("hidden"))) void* profagent_real_dlvsym = nullptr;
__attribute__((visibility("hidden"))) void* profagent_dlsym_intercept(void* handle,
                                                                      const char* name);
__attribute__((visibility("hidden"))) void* profagent_dlvsym_intercept(void* handle,
                                                                       const char* name,
                                                                       const char* version);
void profagent_dlsym_hook();
void profagent_dlvsym_hook();
}

#if defined(__x86_64__)
constexpr bool kDlsymHooks = true;
// rdi, rsi (and rdx) are the arguments: kept across the call to the intercept, then either its
// answer is returned or the real function is entered as if called directly.
asm(R"(
  .text
  .p2align 4
  .globl profagent_dlsym_hook
  .hidden profagent_dlsym_hook
  .type profagent_dlsym_hook, @function
profagent_dlsym_hook:
  .cfi_startproc
  endbr64
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp
  .cfi_adjust_cfa_offset 8
  call profagent_dlsym_intercept
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  testq %rax, %rax
  jz 1f
  ret
1:
  jmp *profagent_real_dlsym(%rip)
  .cfi_endproc
  .size profagent_dlsym_hook, .-profagent_dlsym_hook

  .p2align 4
  .globl profagent_dlvsym_hook
  .hidden profagent_dlvsym_hook
  .type profagent_dlvsym_hook, @function
profagent_dlvsym_hook:
  .cfi_startproc
  endbr64
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  pushq %rdx
  .cfi_adjust_cfa_offset 8
  call profagent_dlvsym_intercept
  popq %rdx
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  testq %rax, %rax
  jz 1f
  ret
1:
  jmp *profagent_real_dlvsym(%rip)
  .cfi_endproc
  .size profagent_dlvsym_hook, .-profagent_dlvsym_hook
)");
#else
constexpr bool kDlsymHooks = false;
#endif

void* InterceptLookup(void* handle, const char* name, void* real) {
  // A library that was just dlopen'ed looks its first symbols up right away: patch it now, before
  // its own lookups of the driver go unseen.
  CudaEntryPoints::Get().InterposeIfIdle();
  if (name == nullptr || name[0] != 'c' || name[1] != 'u' || handle == RTLD_NEXT ||
      real == nullptr) {
    return nullptr;
  }
  const Family* f = ByExportedName(name);
  if (f == nullptr) return nullptr;
  return ClaimForLookup(*f, real);
}

}  // namespace

extern "C" void* profagent_dlsym_intercept(void* handle, const char* name) {
  if (name == nullptr || name[0] != 'c' || name[1] != 'u' || handle == RTLD_NEXT) {
    CudaEntryPoints::Get().InterposeIfIdle();
    return nullptr;
  }
  using DlsymFn = void* (*)(void*, const char*);
  return InterceptLookup(handle, name,
                         reinterpret_cast<DlsymFn>(profagent_real_dlsym)(handle, name));
}

extern "C" void* profagent_dlvsym_intercept(void* handle, const char* name, const char* version) {
  if (name == nullptr || name[0] != 'c' || name[1] != 'u' || handle == RTLD_NEXT) {
    CudaEntryPoints::Get().InterposeIfIdle();
    return nullptr;
  }
  using DlvsymFn = void* (*)(void*, const char*, const char*);
  return InterceptLookup(handle, name,
                         reinterpret_cast<DlvsymFn>(profagent_real_dlvsym)(handle, name, version));
}

namespace {

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The process's libcudart.so, if one is loaded (PyTorch's comes from a wheel, anywhere).
std::string FindLoadedRuntime() {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        const char* name = info->dlpi_name;
        if (name == nullptr) return 0;
        const char* base = std::strrchr(name, '/');
        base = base ? base + 1 : name;
        if (std::strncmp(base, "libcudart.so", 12) != 0) return 0;
        *static_cast<std::string*>(data) = name;
        return 1;
      },
      &found);
  return found;
}

// Objects never patched: the agent, the driver and CUPTI (their calls to themselves are not the
// application's), the C library and the loader.
const std::vector<std::string> kNeverPatchNames = {"libcuda.so", "libcupti.so", "libc.so",
                                                   "ld-linux",   "libdl.so",    "libnvidia-"};

void AddHooks(const Family& f, void* library, std::vector<ImportHook>* hooks, bool* any_launch) {
  for (size_t i = 0; i < f.name_count; ++i) {
    void* real = dlsym(library, f.names[i]);
    f.known[i].store(real);
    if (real == nullptr) continue;
    hooks->push_back({f.names[i], Claim(f, real), real});
    *any_launch |= f.counts_launches;
  }
}

// A CUDA runtime initialized before the agent (PyTorch's, or one linked statically into a
// program) looked its driver entry points up with a cuGetProcAddress we could not interpose yet,
// and keeps them in a table of its own: every value a lookup can have given it for a family we
// count, to be found in that table and replaced by the family's wrapper.
std::vector<DataHook> DriverTableHooks(void* driver) {
  using GetProcAddressFn =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto lookup = reinterpret_cast<GetProcAddressFn>(dlsym(driver, "cuGetProcAddress_v2"));
  std::vector<DataHook> hooks;
  auto add = [&](const Family& f, void* real) {
    if (real == nullptr) return;
    for (const DataHook& h : hooks) {
      if (h.original == real) return;
    }
    void* wrapper = Claim(f, real);
    if (wrapper != real) hooks.push_back({real, wrapper});
  };
  for (const Family& f : kDriverFamilies) {
    for (size_t i = 0; i < f.name_count; ++i) add(f, f.known[i].load());
    if (f.driver_name == nullptr || lookup == nullptr) continue;
    for (int version : {CUDA_VERSION, 12000}) {
      for (cuuint64_t flags :
           {CU_GET_PROC_ADDRESS_DEFAULT, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM}) {
        void* fn = nullptr;
        if (lookup(f.driver_name, &fn, version, flags, nullptr) == CUDA_SUCCESS) add(f, fn);
      }
    }
  }
  return hooks;
}

}  // namespace

CudaEntryPoints& CudaEntryPoints::Get() {
  static CudaEntryPoints* points = new CudaEntryPoints;  // leaked: wrappers outlive statics
  return *points;
}

bool CudaEntryPoints::Enabled() const {
  const LaunchCounters& counters = LaunchCounters::Get();
  return counters.wants_entry_points() && counters.route() != wire::LaunchCounting::kCupti;
}

// With one device (most serving processes), every call is device 0: the wrappers skip asking the
// driver for the current context. cuDeviceGetCount answers once cuInit has completed.
void CudaEntryPoints::LearnDeviceCountLocked() {
  if (device_count_known_) return;
  using GetCountFn = CUresult (*)(int*);
  auto get_count = reinterpret_cast<GetCountFn>(dlsym(driver_, "cuDeviceGetCount"));
  int count = 0;
  if (get_count == nullptr || get_count(&count) != CUDA_SUCCESS) return;
  g_single_device.store(count == 1);
  device_count_known_ = true;
}

bool CudaEntryPoints::SetUpLocked() {
  if (set_up_) return true;
  driver_ = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (driver_ == nullptr) return false;  // no CUDA in the process: nothing to count
  g_ctx_get_current.store(reinterpret_cast<CtxGetCurrentFn>(dlsym(driver_, "cuCtxGetCurrent")));
  g_ctx_get_device.store(reinterpret_cast<CtxGetDeviceFn>(dlsym(driver_, "cuCtxGetDevice")));
  std::vector<ImportHook> hooks;
  bool any_launch = false;
  for (const Family& f : kDriverFamilies) AddHooks(f, driver_, &hooks, &any_launch);
  if (kDlsymHooks) {
    // Our own GOT holds the C library's functions (this object is never patched).
    profagent_real_dlsym = reinterpret_cast<void*>(&dlsym);
    profagent_real_dlvsym = reinterpret_cast<void*>(&dlvsym);
    hooks.push_back(
        {"dlsym", reinterpret_cast<void*>(&profagent_dlsym_hook), profagent_real_dlsym});
    hooks.push_back(
        {"dlvsym", reinterpret_cast<void*>(&profagent_dlvsym_hook), profagent_real_dlvsym});
  }
  driver_patcher_ = new GotPatcher(
      std::move(hooks),
      {reinterpret_cast<const void*>(&CudaEntryPoints::Get), dlsym(driver_, "cuInit")},
      kNeverPatchNames);
  set_up_ = true;
  return true;
}

void CudaEntryPoints::Interpose(bool tables) {
  if (!Enabled()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (withdrawn_ || !SetUpLocked()) return;
  LearnDeviceCountLocked();
  if (tables && !table_hooks_set_) {
    driver_patcher_->SetDataHooks(DriverTableHooks(driver_));
    table_hooks_set_ = true;
  }
  driver_patcher_->Scan();  // new objects: their imports and their tables
  if (table_hooks_set_) {
    // A runtime fills its table lazily, as functions are first used: the pages around each table
    // found are looked at again every time, everything now and then (seconds 0, 2, 5, 10, then
    // every minute).
    const uint64_t n = table_scans_++;
    driver_patcher_->ScanData(n == 0 || n == 2 || n == 5 || n == 10 || n % 60 == 0);
  }
  if (runtime_patcher_ == nullptr) {
    std::string path = FindLoadedRuntime();
    if (!path.empty()) runtime_ = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (runtime_ != nullptr) {
      std::vector<ImportHook> hooks;
      bool any_launch = false;
      for (const Family& f : kRuntimeFamilies) AddHooks(f, runtime_, &hooks, &any_launch);
      runtime_patcher_ = new GotPatcher(
          std::move(hooks),
          {reinterpret_cast<const void*>(&CudaEntryPoints::Get), dlsym(runtime_, "cudaMalloc")},
          kNeverPatchNames);
    }
  }
  if (runtime_patcher_ != nullptr) runtime_patcher_->Scan();

  // One log line per object the first time it is patched or left alone.
  uint64_t generation =
      driver_patcher_->generation() + (runtime_patcher_ ? runtime_patcher_->generation() : 0);
  if (generation == logged_generation_) return;
  logged_generation_ = generation;
  for (GotPatcher* patcher : {driver_patcher_, runtime_patcher_}) {
    if (patcher == nullptr) continue;
    for (const GotPatcher::ObjectReport& o : patcher->Report()) {
      std::string line = o.path + "|" + std::to_string(o.slots) + "|" +
                         std::to_string(o.data_slots) + "|" + o.problem;
      bool seen = false;
      for (const std::string& l : logged_) seen |= l == line;
      if (seen) continue;
      logged_.push_back(line);
      if (!o.problem.empty()) {
        Log(LogLevel::kWarning, "launch and memory counters cannot see calls from %s: %s",
            o.path.c_str(), o.problem.c_str());
      } else if (o.slots > 0 || o.data_slots > 0) {
        Log(LogLevel::kInfo,
            "counting CUDA calls from %s (%u GOT slots, %u driver entry points in its own tables)",
            o.path.c_str(), o.slots, o.data_slots);
      }
    }
  }
}

void CudaEntryPoints::InterposeIfIdle() {
  if (!Enabled()) return;
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock() || !set_up_ || withdrawn_) return;
  driver_patcher_->TryScan();
  if (runtime_patcher_ != nullptr) runtime_patcher_->TryScan();
}

void CudaEntryPoints::SetWithdrawn(bool withdrawn) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    withdrawn_ = withdrawn;
    if (withdrawn) {
      for (GotPatcher* patcher : {driver_patcher_, runtime_patcher_}) {
        if (patcher != nullptr) patcher->RestoreAll();
      }
      return;
    }
  }
  Interpose();
}

CudaEntryPoints::Coverage CudaEntryPoints::Report() const {
  Coverage c;
  std::lock_guard<std::mutex> lock(mutex_);
  for (GotPatcher* patcher : {driver_patcher_, runtime_patcher_}) {
    if (patcher == nullptr) continue;
    for (const GotPatcher::ObjectReport& o : patcher->Report()) {
      if (o.slots > 0 || o.data_slots > 0) c.interposed.push_back(Basename(o.path));
      if (!o.problem.empty()) c.problems.push_back(Basename(o.path) + ": " + o.problem);
      for (const std::string& name : o.hooked) {
        const Family* f = ByExportedName(name.c_str());
        if (f != nullptr && f->counts_launches) ++c.launch_routes;
      }
    }
  }
  if (driver_patcher_ != nullptr) c.table_slots = driver_patcher_->data_slots();
  c.launch_routes += g_launch_lookups_wrapped.load() + c.table_slots;
  c.lookups_wrapped = g_lookups_wrapped.load();
  c.lookups_unwrapped = g_lookups_unwrapped.load();
  return c;
}

}  // namespace profagent
