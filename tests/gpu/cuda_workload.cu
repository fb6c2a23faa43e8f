// A CUDA program with known work, for the GPU end-to-end tests and the overhead benchmark.
//   cuda_workload burst --kernels N --bytes B
//       initializes CUDA, prints "ready", then on each SIGUSR1 launches exactly N kernels
//       (profd_test_kernel), copies B bytes host->device and B bytes device->host (pageable),
//       does one memset of B bytes, synchronizes and prints "burst done"; SIGTERM ends it.
//   cuda_workload loop --launches N --windows W
//       a launch-bound loop: W windows of N empty-kernel launches, printing each window's
//       nanoseconds per launch (the overhead benchmark alternates conditions between windows).
#include <cuda_runtime.h>
#include <signal.h>
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

static int Loop(long launches, long windows) {
  Check(cudaFree(nullptr), "init");
  for (int i = 0; i < 1000; ++i) profd_empty_kernel<<<1, 1>>>();
  Check(cudaDeviceSynchronize(), "warmup");
  for (long w = 0; w < windows; ++w) {
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < launches; ++i) profd_empty_kernel<<<1, 1>>>();
    Check(cudaDeviceSynchronize(), "sync");
    auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0);
    std::printf("window %ld %.1f ns/launch\n", w, ns.count() / launches);
    std::fflush(stdout);
  }
  return 0;
}

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "burst";
  if (mode == "burst") return Burst(Arg(argc, argv, "--kernels", 1000), Arg(argc, argv, "--bytes", 8 << 20));
  if (mode == "loop") return Loop(Arg(argc, argv, "--launches", 100000), Arg(argc, argv, "--windows", 10));
  std::fprintf(stderr, "usage: cuda_workload burst|loop [...]\n");
  return 2;
}
