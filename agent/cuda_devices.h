// What the agent learns about the process's GPUs from the CUDA driver already loaded in it. The
// driver is looked up with RTLD_NOLOAD: a process without CUDA gets an empty list, never a load.
// Called on the agent thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "agent/wire/agent_messages.h"

namespace profagent {

struct CudaDriverView {
  bool driver_loaded = false;  // libcuda.so.1 is in the process
  bool initialized = false;    // cuInit has completed
  uint32_t driver_version = 0;
  std::vector<wire::DeviceInfo> devices;
};

CudaDriverView QueryCudaDevices();

}  // namespace profagent
