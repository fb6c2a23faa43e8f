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
