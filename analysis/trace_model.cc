#include "analysis/trace_model.h"

#include "absl/hash/hash.h"

namespace profd::analysis {

NameTable& NameTable::operator=(const NameTable& other) {
  if (this == &other) return *this;
  limits_ = other.limits_;
  bytes_ = other.bytes_;
  folded_ = other.folded_;
  other_ = other.other_;
  names_ = other.names_;
  ids_.clear();
  ids_.reserve(names_.size());
  for (uint32_t id = 0; id < names_.size(); ++id) {
    if (id != other_) ids_.emplace(names_[id], id);
  }
  return *this;
}

uint32_t NameTable::Intern(std::string_view name) {
  auto it = ids_.find(name);
  if (it != ids_.end()) return it->second;
  if (names_.size() >= limits_.max_names || bytes_ + name.size() > limits_.max_bytes) {
    ++folded_;
    if (other_ == UINT32_MAX) {
      // The one name past the limits: kept apart from ids_, so a trace naming a kernel
      // "[other names]" still gets a row of its own.
      other_ = static_cast<uint32_t>(names_.size());
      names_.emplace_back(kOtherName);
    }
    return other_;
  }
  uint32_t id = static_cast<uint32_t>(names_.size());
  names_.emplace_back(name);
  bytes_ += name.size();
  ids_.emplace(names_.back(), id);
  return id;
}

bool LaunchConfig::operator==(const LaunchConfig& o) const {
  return grid[0] == o.grid[0] && grid[1] == o.grid[1] && grid[2] == o.grid[2] &&
         block[0] == o.block[0] && block[1] == o.block[1] && block[2] == o.block[2] &&
         registers_per_thread == o.registers_per_thread &&
         shared_memory_bytes == o.shared_memory_bytes;
}

size_t Trace::ConfigHash::operator()(const LaunchConfig& c) const {
  return absl::HashOf(c.grid[0], c.grid[1], c.grid[2], c.block[0], c.block[1], c.block[2],
                      c.registers_per_thread, c.shared_memory_bytes);
}

uint32_t Trace::InternLaunchConfig(const LaunchConfig& config) {
  if (!config.Known() && config.registers_per_thread == 0 && config.shared_memory_bytes == 0) {
    return 0;
  }
  auto it = config_ids_.find(config);
  if (it != config_ids_.end()) return it->second;
  if (launch_configs.size() >= kMaxLaunchConfigs) return 0;
  uint32_t id = static_cast<uint32_t>(launch_configs.size());
  launch_configs.push_back(config);
  config_ids_.emplace(config, id);
  return id;
}

const char* CopyKindName(CopyKind k) {
  switch (k) {
    case CopyKind::kHtoD:
      return "HtoD";
    case CopyKind::kDtoH:
      return "DtoH";
    case CopyKind::kDtoD:
      return "DtoD";
    case CopyKind::kHtoH:
      return "HtoH";
    case CopyKind::kPtoP:
      return "PtoP";
    case CopyKind::kUnknown:
      break;
  }
  return "unknown";
}

const char* MemoryKindName(MemoryKind k) {
  switch (k) {
    case MemoryKind::kPageable:
      return "Pageable";
    case MemoryKind::kPinned:
      return "Pinned";
    case MemoryKind::kDevice:
      return "Device";
    case MemoryKind::kArray:
      return "Array";
    case MemoryKind::kManaged:
      return "Managed";
    case MemoryKind::kUnknown:
      break;
  }
  return "unknown";
}

DeviceProperties DefaultDeviceProperties(int32_t device) {
  DeviceProperties p;
  p.id = device;
  p.name = "assumed H100/H200 SXM (sm_90)";
  p.num_sms = 132;
  p.max_threads_per_sm = 2048;
  p.max_threads_per_block = 1024;
  p.regs_per_sm = 65536;
  p.shared_memory_per_sm = 233472;  // 228 KiB
  p.max_blocks_per_sm = 32;
  p.warp_size = 32;
  p.compute_major = 9;
  p.compute_minor = 0;
  return p;
}

namespace {

constexpr const char* kCuptiCopyKinds[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                           "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
constexpr CopyKind kCopyKindOfCupti[] = {CopyKind::kUnknown, CopyKind::kHtoD, CopyKind::kDtoH,
                                         CopyKind::kHtoD,    CopyKind::kDtoH, CopyKind::kDtoD,
                                         CopyKind::kDtoD,    CopyKind::kDtoD, CopyKind::kDtoD,
                                         CopyKind::kHtoH,    CopyKind::kPtoP};
constexpr const char* kCuptiMemoryKinds[] = {"Unknown",       "Pageable",      "Pinned",
                                             "Device",        "Array",         "Managed",
                                             "Device Static", "Managed Static"};
constexpr MemoryKind kMemoryKindOfCupti[] = {
    MemoryKind::kUnknown, MemoryKind::kPageable, MemoryKind::kPinned, MemoryKind::kDevice,
    MemoryKind::kArray,   MemoryKind::kManaged,  MemoryKind::kDevice, MemoryKind::kManaged};
constexpr int64_t kCopyKinds = sizeof(kCuptiCopyKinds) / sizeof(kCuptiCopyKinds[0]);
constexpr int64_t kMemoryKinds = sizeof(kCuptiMemoryKinds) / sizeof(kCuptiMemoryKinds[0]);

}  // namespace

const char* CuptiCopyKindName(int64_t kind) {
  return kind >= 0 && kind < kCopyKinds ? kCuptiCopyKinds[kind] : "Unknown";
}

const char* CuptiMemoryKindName(int64_t kind) {
  return kind >= 0 && kind < kMemoryKinds ? kCuptiMemoryKinds[kind] : "Unknown";
}

CopyKind CopyKindFromCupti(int64_t kind) {
  return kind >= 0 && kind < kCopyKinds ? kCopyKindOfCupti[kind] : CopyKind::kUnknown;
}

MemoryKind MemoryKindFromCupti(int64_t kind) {
  return kind >= 0 && kind < kMemoryKinds ? kMemoryKindOfCupti[kind] : MemoryKind::kUnknown;
}

CopyKind CopyKindFromText(std::string_view text) {
  static constexpr std::pair<std::string_view, CopyKind> kLong[] = {
      {"HostToDevice", CopyKind::kHtoD},
      {"DeviceToHost", CopyKind::kDtoH},
      {"DeviceToDevice", CopyKind::kDtoD},
      {"HostToHost", CopyKind::kHtoH},
      {"Peer", CopyKind::kPtoP}};
  for (int64_t k = 1; k < kCopyKinds; ++k) {
    if (text.find(kCuptiCopyKinds[k]) != text.npos) return kCopyKindOfCupti[k];
  }
  for (const auto& [name, kind] : kLong) {
    if (text.find(name) != text.npos) return kind;
  }
  return CopyKind::kUnknown;
}

MemoryKind MemoryKindFromText(std::string_view text) {
  for (int64_t k = 1; k < kMemoryKinds; ++k) {
    std::string_view name = kCuptiMemoryKinds[k];
    if (text == name) return kMemoryKindOfCupti[k];
    // Lower case ("pageable") and without the space ("DeviceStatic"), as other tools write them.
    if (text.size() == name.size() && text[0] == name[0] + ('a' - 'A') &&
        text.substr(1) == name.substr(1)) {
      return kMemoryKindOfCupti[k];
    }
    const size_t space = name.find(' ');
    if (space != name.npos && text.size() + 1 == name.size() &&
        text.substr(0, space) == name.substr(0, space) &&
        text.substr(space) == name.substr(space + 1)) {
      return kMemoryKindOfCupti[k];
    }
  }
  return MemoryKind::kUnknown;
}

std::string_view OperatorKey(std::string_view name) {
  constexpr std::string_view kStep = "ProfilerStep#";
  return name.substr(0, kStep.size()) == kStep ? std::string_view("ProfilerStep*") : name;
}

}  // namespace profd::analysis
