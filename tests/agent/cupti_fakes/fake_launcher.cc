// A module loaded late with dlopen, as Triton's generated launcher or a cuDNN engine library is:
// it finds cuLaunchKernelEx with dlsym on first use and keeps the pointer. Also answers what
// dlsym(RTLD_NEXT, ...) finds from here, which the agent's dlsym hook must leave unchanged.
#include <cuda.h>
#include <dlfcn.h>

extern "C" {

int probe_target() { return 1; }  // fake_probe_dep's comes next in this module's scope

int launch_n(int n) {
  using Fn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
  static Fn launch = reinterpret_cast<Fn>(
      dlsym(dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD), "cuLaunchKernelEx"));
  if (launch == nullptr) return -1;
  CUlaunchConfig config{};
  config.gridDimX = 1;
  for (int i = 0; i < n; ++i) launch(&config, nullptr, nullptr, nullptr);
  return n;
}

int next_probe() {
  auto next = reinterpret_cast<int (*)()>(dlsym(RTLD_NEXT, "probe_target"));
  return next ? next() : -1;
}

}  // extern "C"
