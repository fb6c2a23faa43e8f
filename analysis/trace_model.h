// The in-memory trace the analysis works on: only the GPU-side activity (kernels, copies,
// memsets), the CUDA API calls on the host, PyTorch's CPU operators and the device properties, in
// columns small enough that a 1 GB JSON trace fits in a few hundred MB. Filled by TraceReader from
// our captures or from PyTorch profiler / Kineto JSON, or directly by a pipeline that already holds
// the events.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "analysis/gpu_counters.h"
#include "common/checked_math.h"

namespace profd::analysis {

// What a trace may say. Times are ns on the trace's clock (Unix time for our captures and for
// Kineto): starts within [kMinTimeNs, kMaxTimeNs] (1897..2116 as Unix time) and durations up to
// kMaxDurationNs (36 years), so that any end, gap or window (a difference of two such times) fits
// in int64. Events outside are impossible (a corrupt or hostile file): they are skipped and
// counted, never rounded into the report.
inline constexpr int64_t kMinTimeNs = -(int64_t{1} << 61);
inline constexpr int64_t kMaxTimeNs = int64_t{1} << 62;
inline constexpr int64_t kMaxDurationNs = int64_t{1} << 60;
// Correlation ids are CUPTI's 32-bit ids (Kineto: 64-bit, small in practice); files are kept apart
// by adding file << kCorrelationBits, so larger ids would collide across files.
inline constexpr int kCorrelationBits = 40;
inline constexpr int64_t kMaxCorrelation = (int64_t{1} << kCorrelationBits) - 1;

inline bool TimeWithinLimits(int64_t start_ns, int64_t dur_ns) {
  return start_ns >= kMinTimeNs && start_ns <= kMaxTimeNs && dur_ns >= 0 &&
         dur_ns <= kMaxDurationNs;
}

// Interns strings (kernel and API names repeat millions of times) into dense ids. The names come
// from a trace or an agent, which may send millions of distinct ones (each costing the analysis a
// row): the table keeps at most Limits::max_names names in Limits::max_bytes, and gives every
// name past either the one id of kOtherName, so every table of the report folds them into one
// row ("[other names]") and says how many occurrences went there (folded()).
class NameTable {
 public:
  static constexpr char kOtherName[] = "[other names]";
  struct Limits {
    // A model has a few hundred to a few thousand distinct kernel, API and operator names; a
    // generated or hostile trace, millions (each ~1-2 KB of analysis state and report row).
    size_t max_names = size_t{1} << 16;
    uint64_t max_bytes = uint64_t{16} << 20;
  };

  NameTable() = default;
  explicit NameTable(const Limits& limits) : limits_(limits) {}
  NameTable(const NameTable& other) { *this = other; }
  NameTable& operator=(const NameTable& other);
  NameTable(NameTable&&) = default;  // deque elements keep their addresses: the views stay valid
  NameTable& operator=(NameTable&&) = default;

  uint32_t Intern(std::string_view name);
  const std::string& Name(uint32_t id) const { return names_[id]; }
  size_t size() const { return names_.size(); }
  uint64_t bytes() const { return bytes_; }  // of the distinct names
  // Whether id is kOtherName's: the names past the limits.
  bool IsOther(uint32_t id) const { return id == other_; }
  // Interns past the limits (occurrences, not distinct names: those are not kept to count).
  uint64_t folded() const { return folded_; }
  const Limits& limits() const { return limits_; }

 private:
  Limits limits_;
  uint64_t bytes_ = 0;
  uint64_t folded_ = 0;
  uint32_t other_ = UINT32_MAX;    // kOtherName's id, once a name was folded
  std::deque<std::string> names_;  // a deque: a string never moves, so ids_ may view it
  absl::flat_hash_map<std::string_view, uint32_t> ids_;
};

// Grid, block, registers and shared memory of a launch. Interned too: a model launches a few
// hundred distinct configurations millions of times.
struct LaunchConfig {
  uint32_t grid[3] = {0, 0, 0};
  uint32_t block[3] = {0, 0, 0};
  uint32_t registers_per_thread = 0;
  uint32_t shared_memory_bytes = 0;  // static + dynamic per block
  bool operator==(const LaunchConfig& o) const;
  // Saturating: three 32-bit dimensions from a file can multiply past 2^64.
  uint64_t Blocks() const { return SaturatingMul(SaturatingMul(grid[0], grid[1]), grid[2]); }
  uint64_t ThreadsPerBlock() const {
    return SaturatingMul(SaturatingMul(block[0], block[1]), block[2]);
  }
  bool Known() const { return Blocks() > 0 && ThreadsPerBlock() > 0; }
};

enum class CopyKind : uint8_t { kUnknown, kHtoD, kDtoH, kDtoD, kHtoH, kPtoP };
enum class MemoryKind : uint8_t { kUnknown, kPageable, kPinned, kDevice, kArray, kManaged };

const char* CopyKindName(CopyKind k);      // "HtoD", ...
const char* MemoryKindName(MemoryKind k);  // "Pageable", ...

// CUPTI's copy and memory kinds (CUpti_ActivityMemcpyKind, CUpti_ActivityMemoryKind; profd's
// proto uses the same numbers): their short names as traces write them ("HtoA", "Device
// Static"), and what the analysis counts them as. CUDA arrays live on the device: HtoA is a
// host-to-device copy, AtoH device-to-host, AtoA/AtoD/DtoA device-to-device.
const char* CuptiCopyKindName(int64_t kind);    // "HtoD", "HtoA", ...; "Unknown"
const char* CuptiMemoryKindName(int64_t kind);  // "Pageable", "Device Static", ...; "Unknown"
CopyKind CopyKindFromCupti(int64_t kind);
MemoryKind MemoryKindFromCupti(int64_t kind);
// From a trace's text: a short name ("HtoA") or a long one ("HostToDevice") anywhere in it.
CopyKind CopyKindFromText(std::string_view text);
MemoryKind MemoryKindFromText(std::string_view text);

// The name an operator is tabled under: torch folds every "ProfilerStep#N" into one
// "ProfilerStep*" row (_rewrite_name with_wildcard).
std::string_view OperatorKey(std::string_view name);

// A kernel, memcpy or memset as it ran on a GPU.
struct GpuActivity {
  enum class Type : uint8_t { kKernel, kMemcpy, kMemset };
  int64_t start_ns = 0;
  int64_t dur_ns = 0;
  int64_t correlation = -1;    // -1: none; offset per input file so files cannot collide
  uint64_t bytes = 0;          // memcpy/memset
  uint32_t name = 0;           // NameTable id
  uint32_t launch_config = 0;  // index into Trace::launch_configs (0 = unknown)
  int32_t device = 0;
  int32_t stream = 0;
  // The CPU operator that launched it ("External id" in Kineto traces), offset per file like
  // correlation; -1 when the trace does not say (our CUPTI captures).
  int64_t external_id = -1;
  uint16_t file = 0;  // which input file it came from
  Type type = Type::kKernel;
  CopyKind copy_kind = CopyKind::kUnknown;
  MemoryKind src_kind = MemoryKind::kUnknown;
  MemoryKind dst_kind = MemoryKind::kUnknown;
  int64_t end_ns() const { return start_ns + dur_ns; }
};

// One PM sample of a GPU's device-wide hardware counters (profctl capture --gpu-metrics; the
// trace's "gpu_counters" counter events, docs/TRACE_FORMAT.md): what the GPU did over
// [start_ns, start_ns + dur_ns), every process on it together. Values in the series' units
// (analysis/gpu_counters.h); NaN: not measured.
struct CounterSample {
  int64_t start_ns = 0;
  int64_t dur_ns = 0;
  int32_t device = 0;  // as the file's GPU activities name it
  uint16_t file = 0;
  std::array<float, kGpuCounters> values{};
  int64_t end_ns() const { return start_ns + dur_ns; }
};

// A CUDA runtime or driver API call, or a synchronization record, on a host thread.
struct HostCall {
  enum class Type : uint8_t { kRuntime, kDriver, kSync };
  int64_t start_ns = 0;
  int64_t dur_ns = 0;
  int64_t correlation = -1;
  uint32_t name = 0;
  int32_t pid = 0;
  int32_t tid = 0;
  uint16_t file = 0;
  Type type = Type::kRuntime;
  int64_t end_ns() const { return start_ns + dur_ns; }
};

// A PyTorch CPU operator (Kineto "cpu_op", e.g. aten::addmm), a record_function range
// ("user_annotation", e.g. ProfilerStep#3), or the profiler's own overhead on a host thread
// ("overhead", e.g. Activity Buffer Request). Kept per instance because operators nest by time on
// their thread and kernels name the one that launched them by External id; the operator table
// (operator_table.h) is built from these.
struct CpuOp {
  enum class Kind : uint8_t { kOperator, kUserAnnotation, kOverhead };
  int64_t start_ns = 0;
  int64_t dur_ns = 0;
  int64_t external_id = -1;  // offset per file like correlation ids; -1: none
  uint32_t name = 0;         // NameTable id; ProfilerStep#N is interned as ProfilerStep*
  int32_t pid = 0;
  int32_t tid = 0;
  uint16_t file = 0;
  Kind kind = Kind::kOperator;
  int64_t end_ns() const { return start_ns + dur_ns; }
};

// What the occupancy estimate needs of a GPU (cudaDeviceProp names).
struct DeviceProperties {
  int32_t id = 0;
  std::string name;
  uint32_t num_sms = 0;
  uint32_t max_threads_per_sm = 0;
  uint32_t max_threads_per_block = 0;
  uint32_t regs_per_sm = 0;
  uint32_t shared_memory_per_sm = 0;
  uint32_t max_blocks_per_sm = 0;
  uint32_t warp_size = 0;
  int32_t compute_major = 0;
  int32_t compute_minor = 0;
};

// H100/H200 SXM (sm_90): used when the trace carries no deviceProperties.
DeviceProperties DefaultDeviceProperties(int32_t device);

struct InputFile {
  std::string path;
  std::string format;  // "profd" (our captures) or "kineto" (PyTorch profiler and others)
  bool gzip = false;
  uint64_t bytes_read = 0;  // uncompressed JSON bytes
  uint64_t events = 0;      // trace events seen, all kinds
  // GPU and CUDA API events skipped because a number in them is impossible (NaN or infinite
  // time, a start beyond kMinTimeNs..kMaxTimeNs, a negative or over-long duration).
  uint64_t invalid_events = 0;
  int32_t host_pid = -1;  // the process that issued most CUDA calls in this file
};

struct Trace {
  NameTable names;
  std::vector<LaunchConfig> launch_configs{LaunchConfig{}};  // [0] = unknown
  std::vector<GpuActivity> gpu;
  std::vector<HostCall> host;
  std::vector<CpuOp> ops;
  std::vector<DeviceProperties> devices;
  std::vector<CounterSample> counters;
  std::vector<InputFile> files;
  // Start and end of everything in the trace (any complete event, CPU operators included).
  int64_t window_start_ns = INT64_MAX;
  int64_t window_end_ns = INT64_MIN;
  // The first file's baseTimeNanoseconds: later files are shifted onto its clock.
  bool has_base_time = false;
  int64_t base_time_ns = 0;

  // Distinct launch configurations kept (each a row of every kernel's occupancy estimate); past
  // it a configuration is interned as unknown (0). Models launch a few hundred.
  static constexpr size_t kMaxLaunchConfigs = size_t{1} << 16;
  uint32_t InternLaunchConfig(const LaunchConfig& config);
  // Widens the window to cover [start, end].
  void Cover(int64_t start_ns, int64_t end_ns) {
    if (start_ns < window_start_ns) window_start_ns = start_ns;
    if (end_ns > window_end_ns) window_end_ns = end_ns;
  }

 private:
  struct ConfigHash {
    size_t operator()(const LaunchConfig& c) const;
  };
  absl::flat_hash_map<LaunchConfig, uint32_t, ConfigHash> config_ids_;
};

}  // namespace profd::analysis
