// CUPTI, loaded only when the first capture asks for it: an idle agent costs the process nothing
// of CUPTI. If the process already has a libcupti loaded (PyTorch ships its own), that copy is
// used, so there is never a second CUPTI in one process. Otherwise $PROFD_CUPTI_PATH, the
// loader's search path, then the CUDA toolkit's usual folders.
#pragma once

#include <cupti.h>

#include <string>

namespace profagent {

struct CuptiLibrary {
  bool loaded = false;
  std::string path;   // which file was loaded
  std::string error;  // why not, when !loaded
  uint32_t version = 0;

  decltype(&cuptiGetVersion) GetVersion = nullptr;
  decltype(&cuptiGetResultString) GetResultString = nullptr;
  decltype(&cuptiSubscribe) Subscribe = nullptr;
  decltype(&cuptiSubscribe_v2) SubscribeV2 = nullptr;  // names the holder when CUPTI is taken
  decltype(&cuptiUnsubscribe) Unsubscribe = nullptr;
  decltype(&cuptiActivityEnable) ActivityEnable = nullptr;
  decltype(&cuptiActivityDisable) ActivityDisable = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) ActivityRegisterCallbacks = nullptr;
  decltype(&cuptiActivityFlushAll) ActivityFlushAll = nullptr;
  decltype(&cuptiSetThreadIdType) SetThreadIdType = nullptr;  // optional
  decltype(&cuptiActivityGetNextRecord) ActivityGetNextRecord = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) ActivityGetNumDroppedRecords = nullptr;
  decltype(&cuptiGetTimestamp) GetTimestamp = nullptr;
  decltype(&cuptiGetCallbackName) GetCallbackName = nullptr;
  decltype(&cuptiEnableCallback) EnableCallback = nullptr;
  decltype(&cuptiGetDeviceId) GetDeviceId = nullptr;
  // Only the CUPTI broker needs these (cupti_broker.h); nullptr when the library lacks them.
  decltype(&cuptiEnableDomain) EnableDomain = nullptr;
  decltype(&cuptiEnableAllDomains) EnableAllDomains = nullptr;
  decltype(&cuptiGetCallbackState) GetCallbackState = nullptr;
  decltype(&cuptiFinalize) Finalize = nullptr;
  decltype(&cuptiActivityEnableContext) ActivityEnableContext = nullptr;
  decltype(&cuptiActivityDisableContext) ActivityDisableContext = nullptr;
  decltype(&cuptiActivityRegisterTimestampCallback) ActivityRegisterTimestampCallback = nullptr;
  decltype(&cuptiActivityEnableRuntimeApi) ActivityEnableRuntimeApi = nullptr;  // CUDA 12.5+
  decltype(&cuptiActivityEnableDriverApi) ActivityEnableDriverApi = nullptr;    // CUDA 12.5+
  decltype(&cuptiActivityEnableAllSyncRecords) ActivityEnableAllSyncRecords = nullptr;

  // "CUPTI_ERROR_...: description" for a result code.
  std::string Describe(CUptiResult result) const;
};

// Loads once per process (agent thread or capture thread); later calls return the same object.
const CuptiLibrary& LoadCupti();

// True when a libcupti is already in the process (PyTorch's, or one loaded earlier). Loads nothing.
bool CuptiInProcess();

}  // namespace profagent
