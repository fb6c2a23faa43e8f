#include "agent/cupti/activity_converter.h"

#include <cctype>
#include <cstring>

namespace profagent {
namespace {

// profd.v1.EventBatch field numbers (proto/profd/v1/events.proto).
enum BatchField : uint32_t {
  kCaptureId = 1,
  kSequence = 2,
  kStrings = 3,
  kKernels = 4,
  kMemcpys = 5,
  kMemsets = 6,
  kApiCalls = 7,
  kSyncs = 8,
  kMemoryOps = 9,
  kOverheads = 10,
  kMarkers = 11,
  kDevices = 12,
  kClock = 13,
  kDropped = 14,
};

constexpr uint32_t kApiDomainRuntime = 1, kApiDomainDriver = 2;

uint32_t ValidOrZero(uint32_t v) { return v == 0xffffffffu ? 0 : v; }

}  // namespace

ActivityConverter::ActivityConverter(std::string capture_id, ApiNameFn api_name,
                                     uint64_t max_events)
    : capture_id_(std::move(capture_id)), api_name_(api_name), max_events_(max_events) {}

std::string ActivityConverter::StripVersionSuffix(const char* name) {
  std::string s(name);
  size_t v = s.rfind("_v");
  if (v != std::string::npos && v + 2 < s.size()) {
    bool digits = true;
    for (size_t i = v + 2; i < s.size(); ++i)
      digits = digits && std::isdigit(static_cast<unsigned char>(s[i]));
    if (digits) s.resize(v);
  }
  return s;
}

uint32_t ActivityConverter::DefineString(const char* text, size_t length) {
  // Past profd's last id a name is left out (id 0: no name) rather than the connection lost.
  if (next_string_id_ > profd::v1::kMaxStringId) return 0;
  // profd refuses longer strings: cut, at a character boundary so the text stays UTF-8.
  if (length > profd::v1::kMaxStringBytes) {
    length = profd::v1::kMaxStringBytes;
    while (length > 0 && (static_cast<unsigned char>(text[length]) & 0xc0) == 0x80) --length;
  }
  uint32_t id = next_string_id_++;
  size_t at = writer_.BeginNested(kStrings);
  writer_.Varint(1, id);
  writer_.String(2, std::string_view(text, length));
  writer_.EndNested(at);
  return id;
}

uint32_t ActivityConverter::InternPointer(const char* text) {
  if (text == nullptr) return 0;
  auto [it, inserted] = by_pointer_.try_emplace(text, 0);
  if (inserted) it->second = DefineString(text, std::strlen(text));
  return it->second;
}

uint32_t ActivityConverter::InternString(const std::string& text) {
  auto [it, inserted] = by_text_.try_emplace(text, 0);
  if (inserted) it->second = DefineString(text.data(), text.size());
  return it->second;
}

uint32_t ActivityConverter::InternApi(CUpti_CallbackDomain domain, uint32_t cbid) {
  uint64_t key = (static_cast<uint64_t>(domain) << 32) | cbid;
  auto it = by_api_.find(key);
  if (it != by_api_.end()) return it->second;
  const char* raw = api_name_ ? api_name_(domain, cbid) : nullptr;
  std::string name =
      raw ? StripVersionSuffix(raw)
          : (domain == CUPTI_CB_DOMAIN_DRIVER_API ? "cuda_driver_" : "cuda_runtime_") +
                std::to_string(cbid);
  uint32_t id = InternString(name);
  by_api_[key] = id;
  return id;
}

namespace {

// When the record's activity began (0: a kind without a start time).
uint64_t StartOf(const CUpti_Activity* record) {
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL:
      return reinterpret_cast<const CUpti_ActivityKernel10*>(record)->start;
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return reinterpret_cast<const CUpti_ActivityMemcpy6*>(record)->start;
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return reinterpret_cast<const CUpti_ActivityMemset4*>(record)->start;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
      return reinterpret_cast<const CUpti_ActivityAPI*>(record)->start;
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      return reinterpret_cast<const CUpti_ActivitySynchronization2*>(record)->start;
    case CUPTI_ACTIVITY_KIND_MEMORY2:
      return reinterpret_cast<const CUpti_ActivityMemory4*>(record)->timestamp;
    case CUPTI_ACTIVITY_KIND_OVERHEAD:
      return reinterpret_cast<const CUpti_ActivityOverhead3*>(record)->start;
    case CUPTI_ACTIVITY_KIND_MARKER:
      return reinterpret_cast<const CUpti_ActivityMarker2*>(record)->timestamp;
    default:
      return 0;
  }
}

}  // namespace

void ActivityConverter::Add(const CUpti_Activity* record) {
  if (max_events_ != 0 && total_events_ >= max_events_) {
    truncated_ = true;
    return;
  }
  if (skip_before_ns_ != 0 && StartOf(record) < skip_before_ns_) {
    ++skipped_;
    return;
  }
  size_t before = pending_events_;
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL:
      AddKernel(*reinterpret_cast<const CUpti_ActivityKernel10*>(record));
      break;
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      AddMemcpy(*reinterpret_cast<const CUpti_ActivityMemcpy6*>(record));
      break;
    case CUPTI_ACTIVITY_KIND_MEMSET:
      AddMemset(*reinterpret_cast<const CUpti_ActivityMemset4*>(record));
      break;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
      AddApi(*reinterpret_cast<const CUpti_ActivityAPI*>(record), CUPTI_CB_DOMAIN_RUNTIME_API);
      break;
    case CUPTI_ACTIVITY_KIND_DRIVER:
      AddApi(*reinterpret_cast<const CUpti_ActivityAPI*>(record), CUPTI_CB_DOMAIN_DRIVER_API);
      break;
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      AddSync(*reinterpret_cast<const CUpti_ActivitySynchronization2*>(record));
      break;
    case CUPTI_ACTIVITY_KIND_MEMORY2:
      AddMemory(*reinterpret_cast<const CUpti_ActivityMemory4*>(record));
      break;
    case CUPTI_ACTIVITY_KIND_OVERHEAD:
      AddOverhead(*reinterpret_cast<const CUpti_ActivityOverhead3*>(record));
      break;
    case CUPTI_ACTIVITY_KIND_MARKER:
      AddMarker(*reinterpret_cast<const CUpti_ActivityMarker2*>(record));
      break;
    default:
      break;
  }
  total_events_ += pending_events_ - before;
}

void ActivityConverter::AddKernel(const CUpti_ActivityKernel10& k) {
  uint32_t name_id = InternPointer(k.name);
  wire::ProtoWriter& w = writer_;
  size_t at = w.BeginNested(kKernels);
  w.Varint(1, k.start);
  w.Varint(2, k.end);
  w.Varint(3, k.deviceId);
  w.Varint(4, k.streamId);
  w.Varint(5, k.correlationId);
  w.Varint(6, name_id);
  w.Signed(7, k.gridX);
  w.Signed(8, k.gridY);
  w.Signed(9, k.gridZ);
  w.Signed(10, k.blockX);
  w.Signed(11, k.blockY);
  w.Signed(12, k.blockZ);
  w.Varint(13, k.registersPerThread);
  w.Varint(14, static_cast<uint32_t>(k.staticSharedMemory));
  w.Varint(15, static_cast<uint32_t>(k.dynamicSharedMemory));
  w.Varint(16, k.contextId);
  w.Varint(17, k.graphId);
  w.Varint(18, k.channelID);
  w.EndNested(at);
  ++pending_events_;
}

void ActivityConverter::AddMemcpy(const CUpti_ActivityMemcpy6& m) {
  wire::ProtoWriter& w = writer_;
  size_t at = w.BeginNested(kMemcpys);
  w.Varint(1, m.start);
  w.Varint(2, m.end);
  w.Varint(3, m.deviceId);
  w.Varint(4, m.streamId);
  w.Varint(5, m.correlationId);
  w.Varint(6, m.bytes);
  w.Varint(7, m.copyKind);
  w.Varint(8, m.srcKind);
  w.Varint(9, m.dstKind);
  w.Varint(12, m.contextId);
  w.Varint(13, m.graphId);
  w.EndNested(at);
  ++pending_events_;
}

void ActivityConverter::AddMemset(const CUpti_ActivityMemset4& m) {
  wire::ProtoWriter& w = writer_;
  size_t at = w.BeginNested(kMemsets);
  w.Varint(1, m.start);
  w.Varint(2, m.end);
  w.Varint(3, m.deviceId);
  w.Varint(4, m.streamId);
  w.Varint(5, m.correlationId);
  w.Varint(6, m.bytes);
  w.Varint(7, m.value);
  w.Varint(8, m.memoryKind);
  w.Varint(9, m.contextId);
  w.Varint(10, m.graphId);
  w.EndNested(at);
  ++pending_events_;
}

void ActivityConverter::AddApi(const CUpti_ActivityAPI& a, CUpti_CallbackDomain domain) {
  uint32_t name_id = InternApi(domain, a.cbid);
  wire::ProtoWriter& w = writer_;
  size_t at = w.BeginNested(kApiCalls);
  w.Varint(1, a.start);
  w.Varint(2, a.end);
  w.Varint(3, a.threadId);
  w.Varint(4, a.correlationId);
  w.Varint(5, domain == CUPTI_CB_DOMAIN_DRIVER_API ? kApiDomainDriver : kApiDomainRuntime);
  w.Varint(6, a.cbid);
  w.Varint(7, name_id);
  w.Varint(8, a.returnValue);
  w.EndNested(at);
  ++pending_events_;
}

void ActivityConverter::AddSync(const CUpti_ActivitySynchronization2& s) {
  wire::ProtoWriter& w = writer_;
  size_t at = w.BeginNested(kSyncs);
  w.Varint(1, s.start);
  w.Varint(2, s.end);
  w.Varint(3, s.correlationId);
  w.Varint(4, static_cast<uint32_t>(s.type));
  w.Varint(5, ValidOrZero(s.streamId));
  w.Varint(6, ValidOrZero(s.contextId));
  w.EndNested(at);
  ++pending_events_;
}

void ActivityConverter::AddMemory(const CUpti_ActivityMemory4& m) {
  wire::ProtoWriter& w = writer_;
  size_t at = w.BeginNested(kMemoryOps);
  w.Varint(1, m.timestamp);
  w.Varint(2, m.deviceId);
  w.Varint(3, m.address);
  w.Varint(4, m.bytes);
  w.Bool(5, m.memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE);
  w.Varint(6, static_cast<uint32_t>(m.memoryKind));
  w.Varint(7, m.correlationId);
  w.Varint(8, ValidOrZero(m.streamId));
  w.EndNested(at);
  ++pending_events_;
}

void ActivityConverter::AddOverhead(const CUpti_ActivityOverhead3& o) {
  wire::ProtoWriter& w = writer_;
  size_t at = w.BeginNested(kOverheads);
  w.Varint(1, o.start);
  w.Varint(2, o.end);
  w.Varint(3, static_cast<uint32_t>(o.overheadKind));
  if (o.objectKind == CUPTI_ACTIVITY_OBJECT_THREAD) w.Varint(4, o.objectId.pt.threadId);
  w.EndNested(at);
  ++pending_events_;
}

void ActivityConverter::AddMarker(const CUpti_ActivityMarker2& m) {
  uint32_t tid = m.objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? m.objectId.pt.threadId : 0;
  uint64_t start = m.timestamp;
  uint32_t name_id = 0, domain_id = 0;
  if (m.flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
    // A range opens: remember it until its end record arrives (maybe in a later buffer).
    OpenMarker open{m.timestamp, tid, m.name ? InternString(m.name) : 0,
                    m.domain ? InternString(m.domain) : 0};
    open_markers_[m.id] = open;
    return;
  }
  if (m.flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
    auto it = open_markers_.find(m.id);
    if (it == open_markers_.end()) return;  // its start came before the capture
    start = it->second.start_ns;
    tid = it->second.tid;
    name_id = it->second.name_id;
    domain_id = it->second.domain_id;
    open_markers_.erase(it);
  } else {  // instantaneous
    name_id = m.name ? InternString(m.name) : 0;
    domain_id = m.domain ? InternString(m.domain) : 0;
  }
  wire::ProtoWriter& w = writer_;
  size_t at = w.BeginNested(kMarkers);
  w.Varint(1, start);
  w.Varint(2, m.timestamp);
  w.Varint(3, tid);
  w.Varint(4, name_id);
  w.Varint(5, domain_id);
  w.EndNested(at);
  ++pending_events_;
}

void ActivityConverter::TakeBatch(uint64_t dropped_records, const uint64_t clock[3],
                                  const std::vector<wire::DeviceInfo>* devices, std::string* out) {
  out->clear();
  wire::ProtoWriter w(out);
  size_t at = w.BeginNested(wire::kAgentMessageEventsField);
  w.String(kCaptureId, capture_id_);
  w.Varint(kSequence, sequence_++);
  w.Varint(kDropped, dropped_records);
  if (clock != nullptr) {
    size_t c = w.BeginNested(kClock);
    w.Varint(1, clock[0]);
    w.Varint(2, clock[1]);
    w.Varint(3, clock[2]);
    w.EndNested(c);
  }
  if (devices != nullptr) {
    for (const wire::DeviceInfo& d : *devices) wire::WriteDeviceInfo(w, kDevices, d);
  }
  out->append(body_);
  w.EndNested(at);
  body_.clear();
  pending_events_ = 0;
}

}  // namespace profagent
