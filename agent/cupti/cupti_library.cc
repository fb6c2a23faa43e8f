#include "agent/cupti/cupti_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace profagent {
namespace {

template <typename Fn>
bool Bind(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  return *out != nullptr;
}

constexpr const char* kLoadedNames[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};

void* OpenCupti(std::string* path, std::string* error) {
  // A copy already in the process wins: two CUPTIs in one process would fight over the driver.
  for (const char* name : kLoadedNames) {
    if (void* lib = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) {
      *path = std::string(name) + " (already loaded)";
      return lib;
    }
  }
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("PROFD_CUPTI_PATH"); env && env[0]) candidates.push_back(env);
  candidates.push_back("libcupti.so.13");
  candidates.push_back("/usr/local/cuda/lib64/libcupti.so.13");
  candidates.push_back("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13");
  for (const std::string& candidate : candidates) {
    if (void* lib = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      *path = candidate;
      return lib;
    }
    *error = dlerror();
  }
  *error = "libcupti.so.13 not found (set PROFD_CUPTI_PATH): " + *error;
  return nullptr;
}

}  // namespace

bool CuptiInProcess() {
  for (const char* name : kLoadedNames) {
    if (void* lib = dlopen(name, RTLD_LAZY | RTLD_NOLOAD)) {
      dlclose(lib);
      return true;
    }
  }
  return false;
}

std::string CuptiLibrary::Describe(CUptiResult result) const {
  const char* text = nullptr;
  if (GetResultString) GetResultString(result, &text);
  return text ? std::string(text) : "CUPTI error " + std::to_string(static_cast<int>(result));
}

const CuptiLibrary& LoadCupti() {
  static CuptiLibrary* library = nullptr;  // leaked on purpose: used until the process exits
  static std::once_flag once;
  std::call_once(once, [] {
    library = new CuptiLibrary;
    CuptiLibrary& c = *library;
    void* lib = OpenCupti(&c.path, &c.error);
    if (lib == nullptr) return;
    bool ok = Bind(lib, "cuptiGetVersion", &c.GetVersion) &&
              Bind(lib, "cuptiGetResultString", &c.GetResultString) &&
              Bind(lib, "cuptiSubscribe", &c.Subscribe) &&
              Bind(lib, "cuptiUnsubscribe", &c.Unsubscribe) &&
              Bind(lib, "cuptiActivityEnable", &c.ActivityEnable) &&
              Bind(lib, "cuptiActivityDisable", &c.ActivityDisable) &&
              Bind(lib, "cuptiActivityRegisterCallbacks", &c.ActivityRegisterCallbacks) &&
              Bind(lib, "cuptiActivityFlushAll", &c.ActivityFlushAll) &&
              Bind(lib, "cuptiActivityGetNextRecord", &c.ActivityGetNextRecord) &&
              Bind(lib, "cuptiActivityGetNumDroppedRecords", &c.ActivityGetNumDroppedRecords) &&
              Bind(lib, "cuptiGetTimestamp", &c.GetTimestamp) &&
              Bind(lib, "cuptiGetCallbackName", &c.GetCallbackName) &&
              Bind(lib, "cuptiEnableCallback", &c.EnableCallback) &&
              Bind(lib, "cuptiGetDeviceId", &c.GetDeviceId);
    if (!ok) {
      c.error = c.path + " lacks an entry point profd needs (CUPTI older than CUDA 12?)";
      return;
    }
    Bind(lib, "cuptiSubscribe_v2", &c.SubscribeV2);  // CUDA 12.6+; optional
    Bind(lib, "cuptiEnableDomain", &c.EnableDomain);
    Bind(lib, "cuptiEnableAllDomains", &c.EnableAllDomains);
    Bind(lib, "cuptiGetCallbackState", &c.GetCallbackState);
    Bind(lib, "cuptiFinalize", &c.Finalize);
    Bind(lib, "cuptiActivityEnableContext", &c.ActivityEnableContext);
    Bind(lib, "cuptiActivityDisableContext", &c.ActivityDisableContext);
    Bind(lib, "cuptiActivityRegisterTimestampCallback", &c.ActivityRegisterTimestampCallback);
    Bind(lib, "cuptiSetThreadIdType", &c.SetThreadIdType);
    Bind(lib, "cuptiActivityEnableRuntimeApi", &c.ActivityEnableRuntimeApi);
    Bind(lib, "cuptiActivityEnableDriverApi", &c.ActivityEnableDriverApi);
    Bind(lib, "cuptiActivityEnableAllSyncRecords", &c.ActivityEnableAllSyncRecords);
    c.GetVersion(&c.version);
    c.loaded = true;
  });
  return *library;
}

}  // namespace profagent
