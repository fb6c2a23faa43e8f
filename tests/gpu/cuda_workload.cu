// A CUDA program with known work, for the GPU end-to-end tests and the overhead benchmark.
//   cuda_workload burst --kernels N --bytes B
//       initializes CUDA, prints "ready", then on each SIGUSR1 launches exactly N kernels
//       (profd_test_kernel), copies B bytes host->device and B bytes device->host (pageable),
//       does one memset of B bytes, synchronizes and prints "burst done"; SIGTERM ends it.
//   cuda_workload loop --launches N --windows W [--toggle none|counters|raw-cupti]
//       a launch-bound loop: W windows of N empty-kernel launches, printing for each window its
//       CLOCK_REALTIME start and end and its nanoseconds per launch. --toggle alternates a
//       condition between windows inside this one process (off, on, off, on, ...):
//         counters   the injected agent's launch/memory callbacks (profagent_set_counters)
//         raw-cupti  plain CUPTI activity tracing of kernels, copies, memsets and the runtime
//                    API done by this program itself (the anchor: what CUPTI costs with no
//                    profiler around it); run without the agent
//   cuda_workload pulse --on-ms A --off-ms B --cycles C
//       C cycles of A ms of empty-kernel launches then B ms idle (B = 0: a steady loop), printing
//       for each cycle its CLOCK_REALTIME start and end of launching and its exact launch count:
//       the known counts the sampled launch counter is checked against
#include <cuda_runtime.h>
#include <cupti.h>
#include <dlfcn.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

__global__ void profd_test_kernel(int* out, int value) {
  if (out != nullptr && threadIdx.x == 0 && blockIdx.x == 0) out[0] = value;
}

__global__ void profd_empty_kernel() {}

static void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cuda_workload: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

static long Arg(int argc, char** argv, const char* name, long fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atol(argv[i + 1]);
  }
  return fallback;
}

static int Burst(long kernels, long bytes) {
  int* device = nullptr;
  char* device_bytes = nullptr;
  Check(cudaMalloc(&device, sizeof(int)), "cudaMalloc");
  Check(cudaMalloc(&device_bytes, bytes), "cudaMalloc");
  std::vector<char> host(bytes, 1);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  std::printf("ready %d\n", getpid());
  std::fflush(stdout);
  while (true) {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig == SIGTERM) break;
    for (long i = 0; i < kernels; ++i) profd_test_kernel<<<1, 32>>>(device, static_cast<int>(i));
    Check(cudaMemcpy(device_bytes, host.data(), bytes, cudaMemcpyHostToDevice), "H2D");
    Check(cudaMemcpy(host.data(), device_bytes, bytes, cudaMemcpyDeviceToHost), "D2H");
    Check(cudaMemset(device_bytes, 0, bytes), "memset");
    Check(cudaDeviceSynchronize(), "sync");
    std::printf("burst done\n");
    std::fflush(stdout);
  }
  cudaFree(device);
  cudaFree(device_bytes);
  return 0;
}

static unsigned long long RealtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

// The raw-CUPTI anchor: the least a CUPTI activity client can do (hand out buffers, walk the
// records, free the buffers).
static unsigned long long g_records = 0;
static void CUPTIAPI RawRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8 << 20;
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, *size));
  *max_records = 0;
}
static void CUPTIAPI RawCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) ++g_records;
  free(buffer);
}
static const CUpti_ActivityKind kRawKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME};

static int Loop(long launches, long windows, const std::string& toggle) {
  Check(cudaFree(nullptr), "init");
  int (*set_counters)(int) = nullptr;
  if (toggle == "counters") {
    const char* agent = std::getenv("CUDA_INJECTION64_PATH");
    void* lib = agent ? dlopen(agent, RTLD_NOW | RTLD_NOLOAD) : nullptr;
    set_counters =
        lib ? reinterpret_cast<int (*)(int)>(dlsym(lib, "profagent_set_counters")) : nullptr;
    if (set_counters == nullptr || set_counters(0) != 0) {
      std::fprintf(stderr,
                   "cuda_workload: --toggle counters needs the agent injected with counters on\n");
      return 1;
    }
  }
  if (toggle == "raw-cupti") cuptiActivityRegisterCallbacks(RawRequested, RawCompleted);
  for (int i = 0; i < 1000; ++i) profd_empty_kernel<<<1, 1>>>();
  Check(cudaDeviceSynchronize(), "warmup");
  for (long w = 0; w < windows; ++w) {
    bool on = w % 2 == 1;
    if (set_counters) set_counters(on ? 1 : 0);
    if (toggle == "raw-cupti" && on) {
      for (CUpti_ActivityKind k : kRawKinds) cuptiActivityEnable(k);
    }
    unsigned long long start = RealtimeNs();
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < launches; ++i) profd_empty_kernel<<<1, 1>>>();
    Check(cudaDeviceSynchronize(), "sync");
    auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0);
    unsigned long long end = RealtimeNs();
    if (toggle == "raw-cupti" && on) {
      for (CUpti_ActivityKind k : kRawKinds) cuptiActivityDisable(k);
      cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    }
    std::printf("window %ld %llu %llu %.1f %s\n", w, start, end, ns.count() / launches,
                toggle == "none" ? "-" : (on ? "on" : "off"));
    std::fflush(stdout);
  }
  if (set_counters) set_counters(1);
  return 0;
}

static int Pulse(long on_ms, long off_ms, long cycles) {
  Check(cudaFree(nullptr), "init");
  std::printf("ready %d\n", getpid());
  std::fflush(stdout);
  for (long c = 0; c < cycles; ++c) {
    unsigned long long start = RealtimeNs(), end = start, launches = 0;
    const unsigned long long until = start + on_ms * 1000000ull;
    while (end < until) {
      for (int i = 0; i < 256; ++i) profd_empty_kernel<<<1, 1>>>();
      launches += 256;
      end = RealtimeNs();
    }
    std::printf("cycle %ld %llu %llu %llu\n", c, start, end, launches);
    std::fflush(stdout);
    Check(cudaDeviceSynchronize(), "sync");
    if (off_ms > 0) usleep(static_cast<useconds_t>(off_ms * 1000));
  }
  return 0;
}

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "burst";
  if (mode == "burst")
    return Burst(Arg(argc, argv, "--kernels", 1000), Arg(argc, argv, "--bytes", 8 << 20));
  if (mode == "loop") {
    std::string toggle = "none";
    for (int i = 1; i + 1 < argc; ++i) {
      if (std::strcmp(argv[i], "--toggle") == 0) toggle = argv[i + 1];
    }
    return Loop(Arg(argc, argv, "--launches", 100000), Arg(argc, argv, "--windows", 10), toggle);
  }
  if (mode == "pulse") {
    return Pulse(Arg(argc, argv, "--on-ms", 1000), Arg(argc, argv, "--off-ms", 4000),
                 Arg(argc, argv, "--cycles", 13));
  }
  std::fprintf(stderr, "usage: cuda_workload burst|loop|pulse [...]\n");
  return 2;
}
