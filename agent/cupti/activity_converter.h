// Turns CUPTI activity records into profd.v1.EventBatch messages, written straight into a reused
// buffer (no protobuf library, no allocation per record in steady state). Strings (kernel names,
// API names, NVTX texts) are interned: sent once per capture as a StringDef, then referred to by
// id. Kernel names are pointers into the process that stay valid, so they are interned by pointer.
//
// Called from CUPTI's buffer-completed callback (CUPTI's worker thread, or our capture thread
// while it flushes); CUPTI never runs two of those at once, and the capture serializes them too.
#pragma once

#include <cupti.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/wire/agent_messages.h"
#include "agent/wire/proto_writer.h"
#include "profd/v1/agent_frame.h"

namespace profagent {

class ActivityConverter {
 public:
  // Resolves (domain, cbid) to an API name such as "cudaLaunchKernel_v7000"; nullptr if unknown.
  using ApiNameFn = const char* (*)(CUpti_CallbackDomain domain, uint32_t cbid);

  ActivityConverter(std::string capture_id, ApiNameFn api_name, uint64_t max_events);

  // Appends one record to the batch being built. Records of kinds profd does not use are skipped.
  // Past max_events nothing more is added and truncated() turns true.
  void Add(const CUpti_Activity* record);

  // Records that began before ns are left out (skipped() counts them): the flight recorder's
  // ring holds some from before the window a capture asked for.
  void SkipBefore(uint64_t ns) { skip_before_ns_ = ns; }
  uint64_t skipped() const { return skipped_; }

  size_t pending_events() const { return pending_events_; }
  size_t pending_bytes() const { return body_.size(); }
  // Time to TakeBatch: at batch_bytes, or at half the events profd accepts in one batch, so
  // that a batch of many tiny records never reaches profd's limit (agent_frame.h).
  bool BatchFull(size_t batch_bytes) const {
    return body_.size() >= batch_bytes || pending_events_ >= kBatchRecords;
  }
  static constexpr size_t kBatchRecords = profd::v1::kMaxBatchRecords / 2;
  uint64_t total_events() const { return total_events_; }
  bool truncated() const { return truncated_; }

  // Completes the batch as one encoded AgentMessage{events} into *out and starts the next one.
  // dropped_records and the optional clock and devices go into this batch's header.
  void TakeBatch(uint64_t dropped_records, const uint64_t clock[3],
                 const std::vector<wire::DeviceInfo>* devices, std::string* out);

  // "cudaLaunchKernel_v7000" -> "cudaLaunchKernel" (CUPTI's version suffix, which HTA and the
  // PyTorch profiler do not carry).
  static std::string StripVersionSuffix(const char* name);

 private:
  uint32_t InternPointer(const char* text);
  uint32_t InternApi(CUpti_CallbackDomain domain, uint32_t cbid);
  uint32_t InternString(const std::string& text);
  uint32_t DefineString(const char* text, size_t length);

  void AddKernel(const CUpti_ActivityKernel10& k);
  void AddMemcpy(const CUpti_ActivityMemcpy6& m);
  void AddMemset(const CUpti_ActivityMemset4& m);
  void AddApi(const CUpti_ActivityAPI& a, CUpti_CallbackDomain domain);
  void AddSync(const CUpti_ActivitySynchronization2& s);
  void AddMemory(const CUpti_ActivityMemory4& m);
  void AddOverhead(const CUpti_ActivityOverhead3& o);
  void AddMarker(const CUpti_ActivityMarker2& m);

  const std::string capture_id_;
  const ApiNameFn api_name_;
  const uint64_t max_events_;

  std::string body_;  // EventBatch fields of the batch being built
  wire::ProtoWriter writer_{&body_};
  uint64_t sequence_ = 0;
  size_t pending_events_ = 0;
  uint64_t total_events_ = 0;
  bool truncated_ = false;
  uint64_t skip_before_ns_ = 0;
  uint64_t skipped_ = 0;

  uint32_t next_string_id_ = 1;
  std::unordered_map<const char*, uint32_t> by_pointer_;
  std::unordered_map<uint64_t, uint32_t> by_api_;  // (domain << 32 | cbid)
  std::unordered_map<std::string, uint32_t> by_text_;

  struct OpenMarker {
    uint64_t start_ns;
    uint32_t tid;
    uint32_t name_id;
    uint32_t domain_id;
  };
  std::unordered_map<uint32_t, OpenMarker> open_markers_;  // NVTX range id -> its start
};

}  // namespace profagent
