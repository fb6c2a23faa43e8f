#include "daemon/trace/perfetto_trace_reader.h"

#include <zlib.h>

#include <charconv>
#include <cstring>
#include <optional>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "daemon/trace/event_names.h"
#include "daemon/trace/perfetto_trace_writer.h"

namespace profd {
namespace {

using analysis::CpuOp;
using analysis::GpuActivity;
using analysis::HostCall;

// Field numbers of Perfetto's protos, the ones PerfettoTraceWriter writes (its field:: names).
constexpr uint32_t kTracePacket = 1;
constexpr uint32_t kClockSnapshot = 6, kTimestamp = 8, kTrackEvent = 11, kInternedData = 12,
                   kSequenceFlags = 13, kTrackDescriptor = 60;
constexpr uint32_t kClocks = 1, kClockId = 1, kClockTimestamp = 2;
constexpr uint32_t kEventNames = 2, kAnnotationNames = 3, kStringValues = 29, kIid = 1,
                   kInternedName = 2;
constexpr uint32_t kDebugAnnotations = 4, kType = 9, kNameIid = 10, kTrackUuid = 11,
                   kEventName = 23, kFlowIds = 47, kTerminatingFlowIds = 48, kLegacyEvent = 6;
// TrackEvent.LegacyEvent: the launch -> GPU arrows (older traces: flow_ids above).
constexpr uint32_t kBindId = 8, kFlowDirection = 13;
constexpr uint64_t kFlowIn = 1, kFlowOut = 2;
constexpr uint32_t kAnnotationNameIid = 1, kUintValue = 3, kIntValue = 4, kStringValue = 6,
                   kStringValueIid = 17;
constexpr uint32_t kUuid = 1, kTrackName = 2, kProcess = 3, kThread = 4, kParentUuid = 5,
                   kCounter = 8;
constexpr uint32_t kPid = 1, kTid = 2;
constexpr uint64_t kSliceBegin = 1, kSliceEnd = 2, kInstant = 3;
constexpr uint64_t kIncrementalStateCleared = 1;
constexpr uint64_t kBuiltinRealtime = 1;

// A packet longer than this is not the writer's (its largest carries one 64 KiB name twice).
constexpr size_t kMaxPacketBytes = 16u << 20;
// Tracks and interned entries kept: the writer interns at most 65,536 of each table and gives a
// track per thread, stream lane and counter.
constexpr size_t kMaxTracks = size_t{1} << 20;
constexpr size_t kMaxInterned = size_t{1} << 18;

struct Field {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t value = 0;      // varint, fixed64, fixed32
  std::string_view bytes;  // length-delimited
};

bool Varint(std::string_view* in, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && !in->empty(); shift += 7) {
    const uint8_t b = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    *v |= uint64_t{b & 0x7fu} << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// The fields of one message, in order; ok() false once something is not protobuf.
class Fields {
 public:
  explicit Fields(std::string_view message) : in_(message) {}
  bool Next(Field* f) {
    if (in_.empty() || !ok_) return false;
    uint64_t tag;
    if (!Varint(&in_, &tag)) return ok_ = false;
    f->number = static_cast<uint32_t>(tag >> 3);
    f->wire = static_cast<uint32_t>(tag & 7);
    switch (f->wire) {
      case 0:
        if (!Varint(&in_, &f->value)) return ok_ = false;
        return true;
      case 1:
      case 5: {
        const size_t n = f->wire == 1 ? 8 : 4;
        if (in_.size() < n) return ok_ = false;
        f->value = 0;
        std::memcpy(&f->value, in_.data(), n);  // little-endian (the writer asserts it too)
        in_.remove_prefix(n);
        return true;
      }
      case 2: {
        uint64_t n;
        if (!Varint(&in_, &n) || n > in_.size()) return ok_ = false;
        f->bytes = in_.substr(0, n);
        in_.remove_prefix(n);
        return true;
      }
      default:
        return ok_ = false;
    }
  }
  bool ok() const { return ok_; }

 private:
  std::string_view in_;
  bool ok_ = true;
};

// "[x,y,z]", as the writer gives grid and block.
bool ParseDims(std::string_view text, int64_t dims[3]) {
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') return false;
  text = text.substr(1, text.size() - 2);
  for (int i = 0; i < 3; ++i) {
    const size_t comma = i < 2 ? text.find(',') : text.size();
    if (comma == std::string_view::npos) return false;
    const std::string_view part = text.substr(0, comma);
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), dims[i]);
    if (ec != std::errc() || end != part.data() + part.size()) return false;
    text.remove_prefix(std::min(text.size(), comma + 1));
  }
  return true;
}

// An unsigned number after a prefix: "stream 7" -> 7.
std::optional<uint64_t> NumberAfter(std::string_view text, std::string_view prefix) {
  if (!text.starts_with(prefix)) return std::nullopt;
  text.remove_prefix(prefix.size());
  uint64_t v;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end == text.data() ||
      (end != text.data() + text.size() && *end != ' ')) {
    return std::nullopt;
  }
  return v;
}

class PerfettoReader {
 public:
  PerfettoReader(analysis::Trace* tables, analysis::TraceEventSink* sink, uint16_t file)
      : t_(tables),
        sink_(sink),
        file_(file),
        id_offset_(static_cast<int64_t>(file) << analysis::kCorrelationBits) {}

  // One TracePacket; false: not the writer's.
  bool Packet(std::string_view packet) {
    Fields fields(packet);
    Field f;
    std::string_view event, interned, track, clocks;
    bool has_time = false;
    uint64_t delta = 0;
    while (fields.Next(&f)) {
      switch (f.number) {
        case kTimestamp:
          has_time = true;
          delta = f.value;
          break;
        case kSequenceFlags:
          if (f.value & kIncrementalStateCleared) ClearInterned();
          break;
        case kTrackEvent:
          event = f.bytes;
          break;
        case kInternedData:
          interned = f.bytes;
          break;
        case kTrackDescriptor:
          track = f.bytes;
          break;
        case kClockSnapshot:
          clocks = f.bytes;
          break;
        default:
          break;
      }
    }
    if (!fields.ok()) return false;
    // Each timed packet's timestamp is its difference from the previous one's (mod 2^64).
    if (has_time) clock_ += delta;
    if (!clocks.empty()) ClockSnapshot(clocks);
    if (!track.empty() && !TrackDescriptor(track)) return false;
    if (!interned.empty() && !Interned(interned)) return false;
    if (!event.empty() && !TrackEvent(event)) return false;
    return true;
  }

 private:
  enum class Kind : uint8_t { kProcess, kThread, kGpu, kStream, kMemory, kSync, kCounter, kOther };
  struct Track {
    Kind kind = Kind::kOther;
    uint64_t a = 0;  // tid, device (GPU, stream, memory, counter tracks) or the sync's stream
    uint64_t b = 0;  // stream
  };
  // What a slice's BEGIN says; its END, the next packet on the same track, gives the end.
  struct Slice {
    uint64_t track = 0;
    uint64_t start = 0;  // on the writer's clock
    uint32_t name = 0;
    std::string text;
    uint64_t flow = 0, terminating_flow = 0;
    std::optional<uint64_t> correlation, bytes, registers, shared_memory, cbid;
    std::optional<std::string> grid, block, copy_kind, src_kind, dst_kind;
    // The footer's "device properties" instant (DeviceInfo, as the JSON's deviceProperties).
    std::optional<std::string> device_name, compute_capability;
    std::optional<uint64_t> sms, threads_per_sm, blocks_per_sm, registers_per_sm, shared_per_sm,
        warp_size;
  };
  enum class Arg : uint8_t {
    kOther,
    kCorrelation,
    kGrid,
    kBlock,
    kRegisters,
    kSharedMemory,
    kCbid,
    kBytes,
    kCopyKind,
    kSrcKind,
    kDstKind,
    kDeviceName,
    kComputeCapability,
    kSms,
    kThreadsPerSm,
    kBlocksPerSm,
    kRegistersPerSm,
    kSharedPerSm,
    kWarpSize,
  };

  void ClearInterned() {
    event_names_.clear();
    values_.clear();
    args_.clear();
  }

  void ClockSnapshot(std::string_view snapshot) {
    Fields fields(snapshot);
    Field f;
    while (fields.Next(&f)) {
      if (f.number != kClocks) continue;
      Fields clock(f.bytes);
      Field c;
      uint64_t id = 0, ts = 0;
      while (clock.Next(&c)) {
        if (c.number == kClockId) id = c.value;
        if (c.number == kClockTimestamp) ts = c.value;
      }
      // The writer's clock at kClockOrigin is the process's base time on CLOCK_REALTIME.
      if (id != kBuiltinRealtime || ts > static_cast<uint64_t>(analysis::kMaxTimeNs)) continue;
      const int64_t base = static_cast<int64_t>(ts);
      if (!t_->has_base_time) {
        t_->has_base_time = true;
        t_->base_time_ns = base;
      }
      shift_ = base - t_->base_time_ns;
    }
  }

  bool TrackDescriptor(std::string_view descriptor) {
    Fields fields(descriptor);
    Field f;
    uint64_t uuid = 0, parent = 0;
    std::string_view name;
    std::string_view process, thread;
    bool counter = false;
    while (fields.Next(&f)) {
      if (f.number == kUuid) uuid = f.value;
      if (f.number == kParentUuid) parent = f.value;
      if (f.number == kTrackName) name = f.bytes;
      if (f.number == kProcess) process = f.bytes;
      if (f.number == kThread) thread = f.bytes;
      if (f.number == kCounter) counter = true;
    }
    if (!fields.ok()) return false;
    if (tracks_.size() >= kMaxTracks && !tracks_.contains(uuid)) return true;
    Track t;
    if (!process.empty()) {
      t.kind = Kind::kProcess;
      Fields p(process);
      while (p.Next(&f)) {
        if (f.number == kPid) pid_ = static_cast<int64_t>(f.value);
      }
      // The trace is this process's: its GPU work is the process's even before (or without) a
      // CUDA call naming it, as CaptureAnalysis has it.
      if (pid_ <= INT32_MAX) t_->files[file_].host_pid = static_cast<int32_t>(pid_);
    } else if (!thread.empty()) {
      t.kind = Kind::kThread;
      Fields p(thread);
      while (p.Next(&f)) {
        if (f.number == kTid) t.a = f.value;
      }
    } else if (auto parent_track = tracks_.find(parent); parent_track != tracks_.end()) {
      // Children of a GPU: its streams (with their overlap lanes), memory and counters; of the
      // process: the waits per stream (DescribeTrack's names).
      const Track& up = parent_track->second;
      if (up.kind == Kind::kThread) {  // a thread's overlap lane
        t.kind = Kind::kThread;
        t.a = up.a;
      } else if (up.kind == Kind::kGpu) {
        t.a = up.a;
        if (counter) {
          t.kind = Kind::kCounter;
        } else if (std::optional<uint64_t> stream = NumberAfter(name, "stream ")) {
          t.kind = Kind::kStream;
          t.b = *stream;
        } else if (name == "GPU memory") {
          t.kind = Kind::kMemory;
        }
      } else if (up.kind == Kind::kProcess) {
        if (std::optional<uint64_t> stream = NumberAfter(name, "CUDA synchronization, stream ")) {
          t.kind = Kind::kSync;
          t.a = *stream;
        }
      }
    } else if (std::optional<uint64_t> device = NumberAfter(name, "GPU ")) {
      t.kind = Kind::kGpu;
      t.a = *device;
    }
    tracks_[uuid] = t;
    return true;
  }

  bool Interned(std::string_view data) {
    Fields fields(data);
    Field f;
    while (fields.Next(&f)) {
      if (f.number != kEventNames && f.number != kAnnotationNames && f.number != kStringValues) {
        continue;
      }
      Fields entry(f.bytes);
      Field e;
      uint64_t iid = 0;
      std::string_view text;
      while (entry.Next(&e)) {
        if (e.number == kIid) iid = e.value;
        if (e.number == kInternedName) text = e.bytes;
      }
      if (!entry.ok()) return false;
      if (f.number == kEventNames) {
        if (event_names_.size() < kMaxInterned || event_names_.contains(iid)) {
          event_names_[iid] = t_->names.Intern(text);
        }
      } else if (f.number == kAnnotationNames) {
        args_[iid] = ArgOf(text);
      } else if (values_.size() < kMaxInterned || values_.contains(iid)) {
        values_[iid] = std::string(text.substr(0, 256));  // the writer's values are short
      }
    }
    return fields.ok();
  }

  static Arg ArgOf(std::string_view name) {
    if (name == "correlation") return Arg::kCorrelation;
    if (name == "grid") return Arg::kGrid;
    if (name == "block") return Arg::kBlock;
    if (name == "registers per thread") return Arg::kRegisters;
    if (name == "shared memory") return Arg::kSharedMemory;
    if (name == "cbid") return Arg::kCbid;
    if (name == "bytes") return Arg::kBytes;
    if (name == "copy kind") return Arg::kCopyKind;
    if (name == "src kind") return Arg::kSrcKind;
    if (name == "dst kind") return Arg::kDstKind;
    if (name == "name") return Arg::kDeviceName;
    if (name == "compute capability") return Arg::kComputeCapability;
    if (name == "numSms") return Arg::kSms;
    if (name == "maxThreadsPerMultiprocessor") return Arg::kThreadsPerSm;
    if (name == "maxBlocksPerMultiprocessor") return Arg::kBlocksPerSm;
    if (name == "regsPerMultiprocessor") return Arg::kRegistersPerSm;
    if (name == "sharedMemPerMultiprocessor") return Arg::kSharedPerSm;
    if (name == "warpSize") return Arg::kWarpSize;
    return Arg::kOther;
  }

  bool Annotation(std::string_view annotation, Slice* s) {
    Fields fields(annotation);
    Field f;
    Arg arg = Arg::kOther;
    std::optional<uint64_t> number;
    std::optional<std::string> text;
    while (fields.Next(&f)) {
      if (f.number == kAnnotationNameIid) {
        auto it = args_.find(f.value);
        arg = it == args_.end() ? Arg::kOther : it->second;
      } else if (f.number == kUintValue || f.number == kIntValue) {
        number = f.value;
      } else if (f.number == kStringValue) {
        text = std::string(f.bytes);
      } else if (f.number == kStringValueIid) {
        auto it = values_.find(f.value);
        text = it == values_.end() ? std::string() : it->second;
      }
    }
    switch (arg) {
      case Arg::kCorrelation:
        s->correlation = number;
        break;
      case Arg::kRegisters:
        s->registers = number;
        break;
      case Arg::kSharedMemory:
        s->shared_memory = number;
        break;
      case Arg::kCbid:
        s->cbid = number;
        break;
      case Arg::kBytes:
        s->bytes = number;
        break;
      case Arg::kGrid:
        s->grid = text;
        break;
      case Arg::kBlock:
        s->block = text;
        break;
      case Arg::kCopyKind:
        s->copy_kind = text;
        break;
      case Arg::kSrcKind:
        s->src_kind = text;
        break;
      case Arg::kDstKind:
        s->dst_kind = text;
        break;
      case Arg::kDeviceName:
        s->device_name = text;
        break;
      case Arg::kComputeCapability:
        s->compute_capability = text;
        break;
      case Arg::kSms:
        s->sms = number;
        break;
      case Arg::kThreadsPerSm:
        s->threads_per_sm = number;
        break;
      case Arg::kBlocksPerSm:
        s->blocks_per_sm = number;
        break;
      case Arg::kRegistersPerSm:
        s->registers_per_sm = number;
        break;
      case Arg::kSharedPerSm:
        s->shared_per_sm = number;
        break;
      case Arg::kWarpSize:
        s->warp_size = number;
        break;
      case Arg::kOther:
        break;
    }
    return fields.ok();
  }

  bool TrackEvent(std::string_view event) {
    Fields fields(event);
    Field f;
    uint64_t type = 0, track = 0;
    Slice s;
    std::optional<uint64_t> name_iid;
    std::optional<std::string_view> inline_name;
    while (fields.Next(&f)) {
      switch (f.number) {
        case kType:
          type = f.value;
          break;
        case kTrackUuid:
          track = f.value;
          break;
        case kNameIid:
          name_iid = f.value;
          break;
        case kEventName:
          inline_name = f.bytes;
          break;
        case kFlowIds:
          s.flow = f.value;
          break;
        case kTerminatingFlowIds:
          s.terminating_flow = f.value;
          break;
        case kDebugAnnotations:
          if (!Annotation(f.bytes, &s)) return false;
          break;
        case kLegacyEvent: {
          Fields legacy(f.bytes);
          Field l;
          uint64_t bind_id = 0, direction = 0;
          while (legacy.Next(&l)) {
            if (l.number == kBindId) bind_id = l.value;
            if (l.number == kFlowDirection) direction = l.value;
          }
          if (!legacy.ok()) return false;
          if (direction == kFlowOut) s.flow = bind_id;
          if (direction == kFlowIn) s.terminating_flow = bind_id;
          break;
        }
        default:
          break;
      }
    }
    if (!fields.ok()) return false;
    auto it = tracks_.find(track);
    const Track* where = it == tracks_.end() ? nullptr : &it->second;
    if (type == kSliceEnd) {
      if (open_ && open_->track == track) {
        Emit(*open_, clock_, where);
        open_.reset();
      }
      return true;
    }
    if (type == kInstant) {
      // Memory operations are records (counted, not analysed); the footer's instants are not,
      // but its device properties are the occupancy estimate's.
      if (where != nullptr && where->kind == Kind::kMemory) ++t_->files[file_].events;
      if (where != nullptr && where->kind == Kind::kGpu && s.device_name) Device(*where, s);
      return true;
    }
    if (type != kSliceBegin) return true;  // counter values: not read back
    s.track = track;
    s.start = clock_;
    if (name_iid) {
      auto n = event_names_.find(*name_iid);
      s.name = n == event_names_.end() ? t_->names.Intern("") : n->second;
      s.text = t_->names.Name(s.name);
    } else {
      s.text = std::string(inline_name.value_or(""));
      s.name = t_->names.Intern(s.text);
    }
    open_ = std::move(s);  // a BEGIN whose END never came (the cut) is not an event
    return true;
  }

  // As CaptureAnalysis takes a batch's DeviceInfo.
  void Device(const Track& gpu, const Slice& s) {
    if (gpu.a > INT32_MAX || t_->devices.size() >= 1024) return;
    analysis::DeviceProperties d;
    d.id = static_cast<int32_t>(gpu.a);
    d.name = *s.device_name;
    auto u32 = [](const std::optional<uint64_t>& v) {
      return static_cast<uint32_t>(std::min<uint64_t>(v.value_or(0), UINT32_MAX));
    };
    d.num_sms = u32(s.sms);
    d.max_threads_per_sm = u32(s.threads_per_sm);
    d.regs_per_sm = u32(s.registers_per_sm);
    d.shared_memory_per_sm = u32(s.shared_per_sm);
    d.max_blocks_per_sm = u32(s.blocks_per_sm);
    d.warp_size = u32(s.warp_size);
    const std::string cc = s.compute_capability.value_or("");
    const size_t dot = cc.find('.');
    if (dot != std::string::npos) {
      std::from_chars(cc.data(), cc.data() + dot, d.compute_major);
      std::from_chars(cc.data() + dot + 1, cc.data() + cc.size(), d.compute_minor);
    }
    for (analysis::DeviceProperties& known : t_->devices) {
      if (known.id == d.id) {
        known = std::move(d);
        return;
      }
    }
    t_->devices.push_back(std::move(d));
  }

  int64_t Correlation(const Slice& s, uint64_t flow) const {
    // A flow id is the 32-bit correlation id under the file's own bits.
    const uint64_t id = flow != 0 ? flow & 0xffffffffu : s.correlation.value_or(0);
    return static_cast<int64_t>(id & analysis::kMaxCorrelation) + id_offset_;
  }

  // A whole slice: the record it was written from, into the sink as CaptureAnalysis would have
  // added it (events counted; impossible ones counted as invalid).
  void Emit(const Slice& s, uint64_t end_clock, const Track* track) {
    // The writer's records are slices on stream, thread and wait tracks.
    if (track == nullptr || (track->kind != Kind::kStream && track->kind != Kind::kThread &&
                             track->kind != Kind::kSync)) {
      return;
    }
    ++t_->files[file_].events;
    const int64_t start = static_cast<int64_t>(s.start) -
                          static_cast<int64_t>(PerfettoTraceWriter::kClockOrigin) + shift_;
    const int64_t dur = end_clock > s.start ? static_cast<int64_t>(end_clock - s.start) : 0;
    if (!analysis::TimeWithinLimits(start, dur)) return Invalid();
    switch (track->kind) {
      case Kind::kStream:
        return EmitGpuActivity(s, *track, start, dur);
      case Kind::kThread:
        return EmitThreadSlice(s, *track, start, dur);
      case Kind::kSync:
        return EmitSync(s, start, dur);
      default:
        return;
    }
  }

  void Invalid() { ++t_->files[file_].invalid_events; }

  // A kernel, copy or memset on a stream track.
  void EmitGpuActivity(const Slice& s, const Track& track, int64_t start, int64_t dur) {
    if (track.a > INT32_MAX || track.b > INT32_MAX) return Invalid();
    GpuActivity a;
    a.start_ns = start;
    a.dur_ns = dur;
    a.correlation = Correlation(s, s.terminating_flow);
    a.device = static_cast<int32_t>(track.a);
    a.stream = static_cast<int32_t>(track.b);
    a.file = file_;
    a.name = s.name;
    a.bytes = s.bytes.value_or(0);
    if (s.grid || s.block) {
      analysis::LaunchConfig config;
      if (!LaunchConfigOf(s, &config)) return Invalid();
      a.type = GpuActivity::Type::kKernel;
      a.launch_config = t_->InternLaunchConfig(config);
      a.bytes = 0;
    } else if (s.copy_kind) {
      a.type = GpuActivity::Type::kMemcpy;
      a.copy_kind = analysis::CopyKindFromText(*s.copy_kind);
      a.src_kind = analysis::MemoryKindFromText(s.src_kind.value_or(""));
      a.dst_kind = analysis::MemoryKindFromText(s.dst_kind.value_or(""));
    } else {
      a.type = GpuActivity::Type::kMemset;
    }
    if (a.bytes > static_cast<uint64_t>(INT64_MAX)) return Invalid();
    t_->Cover(start, start + dur);
    sink_->Add(a);
  }

  // A kernel slice's launch configuration; false when a reader would find it impossible.
  static bool LaunchConfigOf(const Slice& s, analysis::LaunchConfig* config) {
    int64_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
    if (!ParseDims(s.grid.value_or(""), grid) || !ParseDims(s.block.value_or(""), block)) {
      return false;
    }
    for (int i = 0; i < 3; ++i) {
      // Written from the agent's int32: a negative one makes the kernel impossible.
      if (grid[i] < 0 || block[i] < 0 || grid[i] > INT32_MAX || block[i] > INT32_MAX) {
        return false;
      }
      config->grid[i] = static_cast<uint32_t>(grid[i]);
      config->block[i] = static_cast<uint32_t>(block[i]);
    }
    if (s.shared_memory.value_or(0) > UINT32_MAX) return false;
    config->registers_per_thread = static_cast<uint32_t>(s.registers.value_or(0));
    config->shared_memory_bytes = static_cast<uint32_t>(s.shared_memory.value_or(0));
    return true;
  }

  // An API call (it has a cbid), or else a user annotation or the agent's overhead.
  void EmitThreadSlice(const Slice& s, const Track& track, int64_t start, int64_t dur) {
    if (track.a > INT32_MAX) return Invalid();
    t_->Cover(start, start + dur);
    const int32_t pid = static_cast<int32_t>(pid_);
    if (s.cbid) {
      HostCall c;
      c.start_ns = start;
      c.dur_ns = dur;
      c.correlation = Correlation(s, s.flow);
      c.name = s.name;
      c.pid = pid;
      c.tid = static_cast<int32_t>(track.a);
      c.file = file_;
      // The trace keeps no domain: runtime calls are the cuda* ones (cudaLaunchKernel),
      // driver calls cu* (cuLaunchKernel).
      c.type = s.text.starts_with("cuda") ? HostCall::Type::kRuntime : HostCall::Type::kDriver;
      sink_->Add(c);
      return;
    }
    CpuOp op;
    op.start_ns = start;
    op.dur_ns = dur;
    op.pid = pid;
    op.tid = static_cast<int32_t>(track.a);
    op.file = file_;
    if (s.text.starts_with(kOverheadNamePrefix)) {
      op.kind = CpuOp::Kind::kOverhead;
      op.name = s.name;
    } else {
      op.kind = CpuOp::Kind::kUserAnnotation;
      op.name = t_->names.Intern(analysis::OperatorKey(s.text));
    }
    sink_->Add(op);
  }

  void EmitSync(const Slice& s, int64_t start, int64_t dur) {
    t_->Cover(start, start + dur);
    HostCall c;
    c.start_ns = start;
    c.dur_ns = dur;
    c.correlation = Correlation(s, 0);
    c.name = s.name;
    c.pid = static_cast<int32_t>(pid_);
    c.tid = 0;
    c.file = file_;
    c.type = HostCall::Type::kSync;
    sink_->Add(c);
  }

  analysis::Trace* const t_;
  analysis::TraceEventSink* const sink_;
  const uint16_t file_;
  const int64_t id_offset_;
  int64_t shift_ = 0;  // this file's base onto the trace's
  int64_t pid_ = 0;
  uint64_t clock_ = PerfettoTraceWriter::kClockOrigin;
  absl::flat_hash_map<uint64_t, Track> tracks_;
  absl::flat_hash_map<uint64_t, uint32_t> event_names_;  // iid -> NameTable id
  absl::flat_hash_map<uint64_t, std::string> values_;
  absl::flat_hash_map<uint64_t, Arg> args_;
  std::optional<Slice> open_;
};

}  // namespace

bool IsPerfettoTraceFile(const std::string& path) {
  for (std::string_view suffix : {".pftrace", ".pftrace.gz", ".perfetto-trace"}) {
    if (path.ends_with(suffix)) return true;
  }
  gzFile in = gzopen(path.c_str(), "rb");  // reads plain files as they are
  if (in == nullptr) return false;
  unsigned char head[64];
  const int n = gzread(in, head, sizeof(head));
  gzclose(in);
  if (n <= 0 || head[0] != ((kTracePacket << 3) | 2)) return false;
  // A JSON trace may start with a newline too (0x0a, torch's does): JSON is text, a Trace's first
  // bytes are not (tags and lengths below 0x20).
  for (int i = 0; i < n; ++i) {
    if (head[i] < 0x20 && head[i] != '\n' && head[i] != '\r' && head[i] != '\t') return true;
  }
  return false;
}

absl::Status StreamPerfettoTrace(const std::string& path, analysis::Trace* tables,
                                 analysis::TraceEventSink* sink) {
  if (tables->files.size() >= 0xffff) {
    return absl::InvalidArgumentError("more than 65535 trace files in one analysis");
  }
  gzFile in = gzopen(path.c_str(), "rb");
  if (in == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot open trace ", path, ": ", std::strerror(errno)));
  }
  gzbuffer(in, 1 << 20);
  const uint16_t file = static_cast<uint16_t>(tables->files.size());
  analysis::InputFile& f = tables->files.emplace_back();
  f.path = path;
  f.format = "profd";
  f.gzip = true;
  PerfettoReader reader(tables, sink, file);
  std::string pending;
  std::string chunk(1 << 20, '\0');
  size_t at = 0;  // start of the next packet in pending
  absl::Status status;
  while (status.ok()) {
    const int n = gzread(in, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int error = 0;
      status = absl::DataLossError(
          absl::StrCat(path, ": cannot decompress: ", gzerror(in, &error), " (truncated?)"));
      break;
    }
    if (n == 0) break;
    tables->files[file].bytes_read += static_cast<uint64_t>(n);
    pending.erase(0, at);
    at = 0;
    pending.append(chunk.data(), static_cast<size_t>(n));
    // Whole `Trace.packet` fields: tag 0x0a, a varint length, that many bytes.
    while (at < pending.size()) {
      std::string_view rest = std::string_view(pending).substr(at);
      uint64_t tag, length;
      if (!Varint(&rest, &tag) || !Varint(&rest, &length)) break;  // more bytes needed
      if (tag != ((kTracePacket << 3) | 2) || length > kMaxPacketBytes) {
        status = absl::InvalidArgumentError(
            absl::StrCat(path, ": not a Perfetto trace written by profd at byte ",
                         tables->files[file].bytes_read - (pending.size() - at)));
        break;
      }
      if (rest.size() < length) break;
      if (!reader.Packet(rest.substr(0, length))) {
        status = absl::InvalidArgumentError(
            absl::StrCat(path, ": a packet that is not protobuf at byte ",
                         tables->files[file].bytes_read - (pending.size() - at)));
        break;
      }
      at = pending.size() - (rest.size() - length);
    }
  }
  gzclose(in);
  return status;
}

}  // namespace profd
