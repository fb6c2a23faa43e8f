// Encoders for the messages the agent sends (profd.v1.AgentMessage) and a decoder for the ones it
// receives (profd.v1.DaemonMessage). Field numbers mirror proto/profd/v1/agent_channel.proto;
// tests/agent/wire_unittest.cc parses what these write with the generated classes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "agent/wire/proto_writer.h"

namespace profagent::wire {

struct DeviceInfo {
  uint32_t ordinal = 0;
  std::string name;
  std::string uuid;
  uint32_t compute_major = 0;
  uint32_t compute_minor = 0;
  uint32_t multiprocessors = 0;
  uint64_t global_memory_bytes = 0;
  uint32_t max_threads_per_multiprocessor = 0;
  uint32_t max_blocks_per_multiprocessor = 0;
  uint32_t max_registers_per_multiprocessor = 0;
  uint32_t max_shared_memory_per_multiprocessor = 0;
  uint32_t warp_size = 0;
  uint32_t max_registers_per_block = 0;
  uint32_t max_shared_memory_per_block = 0;
};

struct DeviceCounters {
  uint32_t device = 0;
  uint64_t kernel_launches = 0;
  uint64_t graph_launches = 0;
  uint64_t memory_allocated_bytes = 0;
  uint64_t memory_peak_bytes = 0;
};

struct Hello {
  std::string agent_version;
  uint32_t pid = 0;
  std::string hostname;
  std::string pod_name;
  std::string pod_namespace;
  std::string container_name;
  uint32_t cupti_version = 0;
  uint32_t cuda_driver_version = 0;
  std::vector<DeviceInfo> devices;
  bool injected = false;
  uint64_t start_realtime_ns = 0;
  bool distributed = false;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint32_t local_rank = 0;
};

// Mirrors profd.v1.CuptiSharingMode / CuptiSharing.
enum class CuptiSharingMode : uint32_t {
  kUnspecified = 0,
  kShared = 1,
  kWaiting = 2,
  kPartial = 3,
  kNotShared = 4,
  kOff = 5,
};

struct CuptiSharing {
  CuptiSharingMode mode = CuptiSharingMode::kUnspecified;
  std::string detail;
  std::vector<std::string> clients;
  bool other_tracing = false;
  std::string other_tracer;
  std::vector<std::string> interposed;
  std::vector<std::string> not_interposed;
  bool native_multiple_subscribers = false;
  uint32_t captures_cut_short = 0;
};

// Mirrors profd.v1.LaunchCounting.
enum class LaunchCounting : uint32_t { kOff = 0, kEntryPoints = 1, kCupti = 2 };

// Mirrors profd.v1.RecorderState.
struct RecorderState {
  bool on = false;
  uint64_t seconds = 0;
  uint64_t max_bytes = 0;
  uint64_t bytes = 0;
  uint64_t covered_since_realtime_ns = 0;
  uint64_t evicted_records = 0;
  bool paused = false;
  std::string detail;
  uint64_t duty_on_ms = 0;
  uint64_t duty_period_ms = 0;
};

struct Heartbeat {
  uint64_t realtime_ns = 0;
  std::vector<DeviceCounters> devices;
  std::vector<DeviceInfo> device_infos;
  uint32_t launch_sample_every = 0;
  bool has_cupti_sharing = false;
  CuptiSharing cupti_sharing;
  LaunchCounting launch_counting = LaunchCounting::kOff;
  bool counters_paused = false;
  RecorderState recorder;
};

// Mirrors profd.v1.CaptureState / CaptureError.
enum class CaptureState : uint32_t { kStarted = 1, kFinished = 2, kFailed = 3 };
enum class CaptureError : uint32_t {
  kNone = 0,
  kCuptiUnavailable = 1,
  kCuptiInUse = 2,
  kNoCudaDevice = 3,
  kAlreadyCapturing = 4,
  kCuptiFailed = 5,
  kCancelled = 6,
  kCutShort = 7,
};

struct CaptureStatus {
  std::string capture_id;
  CaptureState state = CaptureState::kStarted;
  CaptureError error = CaptureError::kNone;
  std::string message;
  uint64_t enabled_realtime_ns = 0;
  uint64_t disabled_realtime_ns = 0;
  uint64_t events = 0;
  uint64_t dropped_records = 0;
  uint64_t batches = 0;
  bool truncated = false;
  uint64_t recorded_from_realtime_ns = 0;
};

// Each writes one whole AgentMessage into *out (cleared first).
void EncodeHello(const Hello& hello, std::string* out);
void EncodeHeartbeat(const Heartbeat& heartbeat, std::string* out);
void EncodeCaptureStatus(const CaptureStatus& status, std::string* out);
void WriteDeviceInfo(ProtoWriter& w, uint32_t field, const DeviceInfo& d);

// Field number of AgentMessage.events: the capture code writes EventBatch bodies under it.
inline constexpr uint32_t kAgentMessageEventsField = 4;

// Mirrors profd.v1.ActivityKind.
enum class ActivityKind : uint32_t {
  kKernel = 1,
  kMemcpy = 2,
  kMemset = 3,
  kRuntime = 4,
  kSynchronization = 5,
  kDriver = 6,
  kNvtx = 7,
  kMemory = 8,
  kOverhead = 9,
};

struct StartCapture {
  std::string capture_id;
  uint64_t duration_ms = 0;
  std::vector<ActivityKind> kinds;
  uint64_t start_at_realtime_ns = 0;
  uint64_t max_events = 0;
  uint64_t flush_interval_ms = 0;
  uint64_t requested_realtime_ns = 0;
  uint64_t before_ms = 0;
};

struct SetRecorder {
  bool on = false;
  uint64_t seconds = 0;     // 0: the default
  uint64_t max_bytes = 0;   // 0: the default
  uint64_t duty_on_ms = 0;  // 0: all the time
  uint64_t duty_period_ms = 0;
};

struct DaemonCommand {
  enum class Kind { kUnknown, kHelloAck, kStartCapture, kStopCapture, kSetRecorder };
  Kind kind = Kind::kUnknown;
  // kHelloAck
  std::string daemon_version;
  uint64_t heartbeat_interval_ms = 0;
  // kStartCapture
  StartCapture start;
  // kStopCapture
  std::string stop_capture_id;
  // kSetRecorder
  SetRecorder recorder;
};

// False when the bytes are not a well-formed DaemonMessage.
bool DecodeDaemonMessage(std::string_view data, DaemonCommand* out);

}  // namespace profagent::wire
