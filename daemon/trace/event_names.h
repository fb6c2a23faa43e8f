// The names profd's traces give to records that carry no name of their own: one home for the
// trace writer (what the file says) and the capture's analysis (what the report says), so that
// `profctl report FILE` and the capture's summary.json name them alike.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "analysis/trace_model.h"
#include "profd/v1/events.pb.h"

namespace profd {

// CUPTI synchronization records (cuda_sync events): "Stream Sync", ...
inline const char* SyncKindName(int kind) {
  switch (kind) {
    case v1::SYNC_KIND_EVENT_SYNCHRONIZE:
      return "Event Sync";
    case v1::SYNC_KIND_STREAM_WAIT_EVENT:
      return "Stream Wait Event";
    case v1::SYNC_KIND_STREAM_SYNCHRONIZE:
      return "Stream Sync";
    case v1::SYNC_KIND_CONTEXT_SYNCHRONIZE:
      return "Context Sync";
    default:
      return "Sync";
  }
}

// "Memcpy HtoD (Pageable -> Device)", as Kineto names copies.
inline std::string CopyName(int copy_kind, int src_kind, int dst_kind) {
  return absl::StrCat("Memcpy ", analysis::CuptiCopyKindName(copy_kind), " (",
                      analysis::CuptiMemoryKindName(src_kind), " -> ",
                      analysis::CuptiMemoryKindName(dst_kind), ")");
}

// "Memset (Device)"
inline std::string MemsetName(int memory_kind) {
  return absl::StrCat("Memset (", analysis::CuptiMemoryKindName(memory_kind), ")");
}

// CUPTI's overhead records: "CUPTI overhead: kind 2" (CUpti_ActivityOverheadKind).
inline constexpr char kOverheadNamePrefix[] = "CUPTI overhead: kind ";
inline std::string OverheadName(uint32_t kind) { return absl::StrCat(kOverheadNamePrefix, kind); }

}  // namespace profd
