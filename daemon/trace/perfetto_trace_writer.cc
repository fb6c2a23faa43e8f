#include "daemon/trace/perfetto_trace_writer.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "daemon/trace/event_limits.h"
#include "daemon/trace/event_names.h"

namespace profd {
namespace {

static_assert(std::endian::native == std::endian::little, "fixed64 fields are copied as they are");

// Field numbers of Perfetto's protos (protos/perfetto/trace/...), the ones this writer uses;
// tests/support/perfetto/perfetto_subset.proto declares the same.
namespace field {
constexpr uint32_t kTracePacket = 1;  // Trace.packet
// TracePacket
constexpr uint32_t kClockSnapshot = 6;
constexpr uint32_t kTimestamp = 8;
constexpr uint32_t kSequenceId = 10;  // trusted_packet_sequence_id
constexpr uint32_t kTrackEvent = 11;
constexpr uint32_t kInternedData = 12;
constexpr uint32_t kSequenceFlags = 13;
constexpr uint32_t kPacketDefaults = 59;
constexpr uint32_t kTrackDescriptor = 60;
// TracePacketDefaults
constexpr uint32_t kDefaultClockId = 58;
// ClockSnapshot, ClockSnapshot.Clock
constexpr uint32_t kClocks = 1;
constexpr uint32_t kPrimaryTraceClock = 2;
constexpr uint32_t kClockId = 1;
constexpr uint32_t kClockTimestamp = 2;
constexpr uint32_t kClockIsIncremental = 3;
// InternedData; EventName and DebugAnnotationName
constexpr uint32_t kEventNames = 2;
constexpr uint32_t kAnnotationNames = 3;
constexpr uint32_t kAnnotationStringValues = 29;  // InternedString {iid 1, str 2}
constexpr uint32_t kIid = 1;
constexpr uint32_t kInternedName = 2;
// TrackEvent
constexpr uint32_t kDebugAnnotations = 4;
constexpr uint32_t kType = 9;
constexpr uint32_t kNameIid = 10;
constexpr uint32_t kEventName = 23;  // the name itself, past the interning caps
constexpr uint32_t kTrackUuid = 11;
constexpr uint32_t kDoubleCounterValue = 44;
constexpr uint32_t kExtraDoubleCounterTracks = 45;
constexpr uint32_t kExtraDoubleCounterValues = 46;
constexpr uint32_t kLegacyEvent = 6;
// TrackEvent.LegacyEvent: a flow a reader binds to the slice; FLOW_OUT starts it, and each
// FLOW_IN with the same id draws an arrow from there (TrackEvent's own terminating_flow_ids end
// the flow at its first arrow: a graph launch would point at one of its kernels only).
constexpr uint32_t kBindId = 8;
constexpr uint32_t kFlowDirection = 13;
// DebugAnnotation
constexpr uint32_t kAnnotationNameIid = 1;
constexpr uint32_t kBoolValue = 2;
constexpr uint32_t kUintValue = 3;
constexpr uint32_t kIntValue = 4;
constexpr uint32_t kDoubleValue = 5;
constexpr uint32_t kStringValue = 6;
constexpr uint32_t kStringValueIid = 17;
// TrackDescriptor
constexpr uint32_t kUuid = 1;
constexpr uint32_t kTrackName = 2;
constexpr uint32_t kProcess = 3;
constexpr uint32_t kThread = 4;
constexpr uint32_t kParentUuid = 5;
constexpr uint32_t kCounter = 8;
// ProcessDescriptor, ThreadDescriptor, CounterDescriptor
constexpr uint32_t kPid = 1;
constexpr uint32_t kCmdline = 2;
constexpr uint32_t kProcessName = 6;
constexpr uint32_t kTid = 2;
constexpr uint32_t kThreadName = 5;
constexpr uint32_t kUnitName = 6;
}  // namespace field

constexpr uint64_t kSliceBegin = 1, kSliceEnd = 2, kInstant = 3, kCounterValue = 4;
constexpr uint64_t kFlowIn = 1, kFlowOut = 2;
constexpr uint64_t kIncrementalStateCleared = 1, kNeedsIncrementalState = 2;
constexpr uint64_t kBuiltinRealtime = 1, kBuiltinBoottime = 6;

// An event packet without its name or annotations is at most this long.
constexpr size_t kMaxPacketBytes = 512;

// The wire format: varints, fixed64, and length-delimited fields whose length is written once
// their contents are (Open reserves one byte; Close moves the contents when more are needed).
char* Varint(char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}
char* Tag(char* p, uint32_t field, uint32_t wire_type) {
  return Varint(p, (uint64_t{field} << 3) | wire_type);
}
char* VarintField(char* p, uint32_t field, uint64_t v) { return Varint(Tag(p, field, 0), v); }
char* Fixed64Field(char* p, uint32_t field, uint64_t v) {
  p = Tag(p, field, 1);
  std::memcpy(p, &v, 8);
  return p + 8;
}
char* DoubleField(char* p, uint32_t field, double v) {
  return Fixed64Field(p, field, std::bit_cast<uint64_t>(v));
}
char* BytesField(char* p, uint32_t field, std::string_view bytes) {
  p = Varint(Tag(p, field, 2), bytes.size());
  std::memcpy(p, bytes.data(), bytes.size());
  return p + bytes.size();
}
char* Open(char* p, uint32_t field) { return Tag(p, field, 2) + 1; }
char* Close(char* contents, char* end) {
  const size_t length = static_cast<size_t>(end - contents);
  if (length < 0x80) {
    contents[-1] = static_cast<char>(length);
    return end;
  }
  char prefix[10];
  const size_t n = static_cast<size_t>(Varint(prefix, length) - prefix);
  std::memmove(contents + n - 1, contents, length);
  std::memcpy(contents - 1, prefix, n);
  return end + n - 1;
}
// Bytes Close may add per nested message: a length of up to 2 MiB takes 3 bytes, not 1.
constexpr size_t kCloseSlack = 8;

// Annotation names, interned once at the start of the sequence; the argument names of the JSON
// trace, so both formats show the same words.
enum Annotation : uint64_t {
  kCorrelation = 1,
  kContext,
  kGrid,
  kBlock,
  kRegisters,
  kSharedMemory,
  kGraphId,
  kCbid,
  kReturn,
  kBytes,
  kBandwidth,
  kCopyKind,
  kSrcKind,
  kDstKind,
  kStream,
  kAddress,
  kKind,
  kCaptureId,
  kHostname,
  kPid,
  kComm,
  kCommandLine,
  kPod,
  kNamespace,
  kEvents,
  kInvalidEvents,
  kDroppedRecords,
  kTruncated,
  kError,
  kRank,
  kWorldSize,
  kLocalRank,
  kDeviceName,
  kUuid,
  kComputeCapability,
  kGlobalMemory,
  kSms,
  kMaxThreadsPerSm,
  kMaxBlocksPerSm,
  kRegistersPerSm,
  kSharedMemoryPerSm,
  kWarpSize,
  kRegistersPerBlock,
  kSharedMemoryPerBlock,
  kAnnotationEnd,
};
constexpr const char* kAnnotationNames[] = {
    "",
    "correlation",
    "context",
    "grid",
    "block",
    "registers per thread",
    "shared memory",
    "graph id",
    "cbid",
    "return",
    "bytes",
    "memory bandwidth (GB/s)",
    "copy kind",
    "src kind",
    "dst kind",
    "stream",
    "address",
    "kind",
    "capture_id",
    "hostname",
    "pid",
    "comm",
    "command_line",
    "pod",
    "namespace",
    "events",
    "invalid_events",
    "dropped_records",
    "truncated",
    "error",
    "rank",
    "world_size",
    "local_rank",
    "name",
    "uuid",
    "compute capability",
    "totalGlobalMem",
    "numSms",
    "maxThreadsPerMultiprocessor",
    "maxBlocksPerMultiprocessor",
    "regsPerMultiprocessor",
    "sharedMemPerMultiprocessor",
    "warpSize",
    "regsPerBlock",
    "sharedMemPerBlockOptin",
};
static_assert(std::size(kAnnotationNames) == kAnnotationEnd);

// One debug annotation: {name_iid, value}. Each is at most 16 bytes plus a string value's.
template <typename PutValue>
char* PutAnnotation(char* p, Annotation name, PutValue put_value) {
  char* contents = Open(p, field::kDebugAnnotations);
  return Close(contents, put_value(VarintField(contents, field::kAnnotationNameIid, name)));
}
char* PutUint(char* p, Annotation name, uint64_t v) {
  return PutAnnotation(p, name, [v](char* q) { return VarintField(q, field::kUintValue, v); });
}
char* PutInt(char* p, Annotation name, int64_t v) {
  return PutAnnotation(
      p, name, [v](char* q) { return VarintField(q, field::kIntValue, static_cast<uint64_t>(v)); });
}
char* PutBool(char* p, Annotation name, bool v) {
  return PutAnnotation(p, name, [v](char* q) { return VarintField(q, field::kBoolValue, v); });
}
char* PutDouble(char* p, Annotation name, double v) {
  return PutAnnotation(p, name, [v](char* q) { return DoubleField(q, field::kDoubleValue, v); });
}
char* PutString(char* p, Annotation name, std::string_view v) {
  return PutAnnotation(p, name, [v](char* q) { return BytesField(q, field::kStringValue, v); });
}
// "[x,y,z]", as the JSON trace's grid and block, into text (72 bytes).
std::string_view DimsText(char* text, int64_t x, int64_t y, int64_t z) {
  char* t = text;
  *t++ = '[';
  t = std::to_chars(t, t + 21, x).ptr;
  *t++ = ',';
  t = std::to_chars(t, t + 21, y).ptr;
  *t++ = ',';
  t = std::to_chars(t, t + 21, z).ptr;
  *t++ = ']';
  return std::string_view(text, static_cast<size_t>(t - text));
}

}  // namespace

uint32_t PerfettoTraceWriter::SequenceIdOf(const TraceProcess& process) {
  // FNV-1a over what tells one process's trace from another's (the host, the capture, the pid
  // and its base time), then folded into kSequenceBits, never 0.
  uint64_t h = 0xcbf29ce484222325u;
  auto mix = [&h](std::string_view bytes) {
    for (char c : bytes) {
      h ^= static_cast<uint8_t>(c);
      h *= 0x100000001b3u;
    }
    h ^= 0xff;  // a separator: ("ab", "c") and ("a", "bc") differ
    h *= 0x100000001b3u;
  };
  mix(process.hostname);
  mix(process.capture_id);
  mix(absl::StrCat(process.pid, ":", process.base_time_ns));
  h ^= h >> 29;
  return static_cast<uint32_t>(h % ((uint64_t{1} << kSequenceBits) - 1)) + 1;
}

absl::StatusOr<std::unique_ptr<PerfettoTraceWriter>> PerfettoTraceWriter::Create(
    const std::string& path, const TraceProcess& process, int gzip_level, BytesObserver on_bytes,
    size_t max_interned) {
  absl::StatusOr<std::unique_ptr<TraceFile>> file =
      TraceFile::Create(path, gzip_level, std::move(on_bytes));
  if (!file.ok()) return file.status();
  std::unique_ptr<PerfettoTraceWriter> w(
      new PerfettoTraceWriter(std::move(*file), process, max_interned));

  // The sequence starts: its incremental state cleared, the packets' clock, the annotation names.
  char* packet = w->BeginPacket(4096);
  char* p = VarintField(packet, field::kSequenceId, w->sequence_id_);
  p = VarintField(p, field::kSequenceFlags, kIncrementalStateCleared);
  char* defaults = Open(p, field::kPacketDefaults);
  p = Close(defaults, VarintField(defaults, field::kDefaultClockId, kClockId));
  char* interned = Open(p, field::kInternedData);
  p = interned;
  for (uint64_t i = 1; i < kAnnotationEnd; ++i) {
    char* name = Open(p, field::kAnnotationNames);
    p = Close(name, BytesField(VarintField(name, field::kIid, i), field::kInternedName,
                               kAnnotationNames[i]));
  }
  w->EndPacket(packet, Close(interned, p));

  // kClockId's origin is the process's base time, on CLOCK_REALTIME, the trace's own clock (and
  // BOOTTIME, the default trace clock of readers that do not take the primary clock from here).
  packet = w->BeginPacket(256);
  p = VarintField(packet, field::kSequenceId, w->sequence_id_);
  char* snapshot = Open(p, field::kClockSnapshot);
  p = snapshot;
  const uint64_t base = static_cast<uint64_t>(std::max<int64_t>(process.base_time_ns, 0));
  for (auto [id, ts] : {std::pair{uint64_t{kClockId}, kClockOrigin},
                        std::pair{kBuiltinRealtime, base}, std::pair{kBuiltinBoottime, base}}) {
    char* clock = Open(p, field::kClocks);
    char* q = VarintField(VarintField(clock, field::kClockId, id), field::kClockTimestamp, ts);
    if (id == kClockId) q = VarintField(q, field::kClockIsIncremental, 1);
    p = Close(clock, q);
  }
  p = VarintField(p, field::kPrimaryTraceClock, kBuiltinRealtime);
  w->EndPacket(packet, Close(snapshot, p));

  // The process's track.
  w->process_track_ = w->next_uuid_++;
  const std::string name =
      absl::StrCat(process.comm.empty() ? "process" : process.comm, " (pid ", process.pid, ")");
  packet = w->BeginPacket(256 + name.size() + process.command_line.size());
  p = VarintField(packet, field::kSequenceId, w->sequence_id_);
  char* track = Open(p, field::kTrackDescriptor);
  p = VarintField(track, field::kUuid, w->process_track_);
  char* descriptor = Open(p, field::kProcess);
  p = VarintField(descriptor, field::kPid, process.pid);
  p = BytesField(p, field::kProcessName, name);
  if (!process.command_line.empty()) p = BytesField(p, field::kCmdline, process.command_line);
  p = Close(descriptor, p);
  w->EndPacket(packet, Close(track, p));
  return w;
}

char* PerfettoTraceWriter::BeginPacket(size_t max_bytes) {
  file_->FlushIfFull();
  return Open(file_->Reserve(max_bytes + 4 * kCloseSlack), field::kTracePacket);
}

void PerfettoTraceWriter::EndPacket(char* packet, char* p) { file_->Commit(Close(packet, p)); }

uint64_t PerfettoTraceWriter::Clock(uint64_t ns) const {
  const int64_t t = ns > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(ns);
  const int64_t since_base = SaturatingSub(t, process_.base_time_ns);
  if (since_base <= -static_cast<int64_t>(kClockOrigin)) return 0;
  return kClockOrigin + static_cast<uint64_t>(since_base);
}

char* PerfettoTraceWriter::PutEventPacketHeader(char* p, uint64_t ns, bool interned) {
  last_ns_ = std::max(last_ns_, ns);
  // The delta from the previous packet's time (two's complement when earlier: a reader adds it
  // as a signed number).
  const uint64_t clock = Clock(ns);
  p = VarintField(p, field::kTimestamp, clock - last_clock_);
  last_clock_ = clock;
  p = VarintField(p, field::kSequenceId, sequence_id_);
  // Only packets that refer to interned names say they need the sequence's state.
  return interned ? VarintField(p, field::kSequenceFlags, kNeedsIncrementalState) : p;
}

uint64_t PerfettoTraceWriter::TrackOf(Track kind, uint32_t a, uint32_t b) {
  const TrackKey key{kind, a, b};
  if (last_track_uuid_ != 0 && key == last_track_key_) return last_track_uuid_;
  uint64_t uuid;
  if (auto it = tracks_.find(key); it != tracks_.end()) {
    uuid = it->second;
  } else {
    uuid = next_uuid_++;
    tracks_.emplace(key, uuid);
    DescribeTrack(uuid, kind, a, b);  // may describe its parent first
  }
  last_track_key_ = key;
  last_track_uuid_ = uuid;
  return uuid;
}

uint64_t PerfettoTraceWriter::LaneOf(Track kind, uint32_t a, uint32_t b, uint64_t start,
                                     uint64_t end) {
  const TrackKey key{kind, a, b};
  if (last_lanes_ == nullptr || key != last_lanes_key_) {
    last_lanes_ = &lanes_[key];
    last_lanes_key_ = key;
    if (last_lanes_->empty()) last_lanes_->push_back({TrackOf(kind, a, b), 0});
  }
  std::vector<Lane>& lanes = *last_lanes_;
  end = std::max(start, end);
  for (Lane& lane : lanes) {
    if (start >= lane.end) {
      lane.end = end;
      return lane.uuid;
    }
  }
  if (lanes.size() < kMaxLanes) {
    const uint64_t uuid = next_uuid_++;
    DescribeTrack(uuid, kind, a, b, lanes.size());
    lanes.push_back({uuid, end});
    return uuid;
  }
  lanes.back().end = std::max(lanes.back().end, end);  // past the cap it may not nest
  return lanes.back().uuid;
}

uint64_t PerfettoTraceWriter::ThreadLaneOf(uint32_t tid, uint64_t start, uint64_t end) {
  std::vector<ThreadLane>& lanes = thread_lanes_[tid];
  if (lanes.empty()) {
    lanes.emplace_back();
    lanes.back().uuid = ThreadTrack(tid);
  }
  end = std::max(start, end);
  for (ThreadLane& lane : lanes) {
    bool fits;
    if (start >= lane.end) {  // after everything on the lane
      lane.open.clear();
      fits = true;
    } else if (start >= lane.last_start) {  // in time order: within the slices still open
      while (!lane.open.empty() && lane.open.back().second <= start) lane.open.pop_back();
      fits =
          lane.open.empty() || (end <= lane.open.back().second && lane.open.size() < kMaxNesting);
    } else {
      fits = false;
    }
    if (fits) {
      lane.open.emplace_back(start, end);
      lane.last_start = start;
      lane.end = std::max(lane.end, end);
      return lane.uuid;
    }
  }
  if (lanes.size() < kMaxLanes) {
    const uint64_t uuid = next_uuid_++;
    DescribeTrack(uuid, Track::kThread, tid, 0, lanes.size());
    lanes.push_back({.uuid = uuid, .last_start = start, .end = end, .open = {{start, end}}});
    return uuid;
  }
  ThreadLane& last = lanes.back();  // past the cap it may not nest
  last.end = std::max(last.end, end);
  return last.uuid;
}

void PerfettoTraceWriter::DescribeTrack(uint64_t uuid, Track kind, uint32_t a, uint32_t b,
                                        size_t lane) {
  // A child's parent is described first; a thread's lanes past the first are its children.
  uint64_t parent = 0;
  if (kind == Track::kThread && lane > 0) {
    parent = ThreadTrack(a);
  } else if (kind == Track::kStream || kind == Track::kMemory || kind == Track::kCounter) {
    parent = TrackOf(Track::kGpu, a);
  } else if (kind == Track::kSync) {
    parent = process_track_;
  }
  std::string name;
  switch (kind) {
    case Track::kThread:
      name = absl::StrCat("thread ", a);
      break;
    case Track::kGpu:
      name = absl::StrCat("GPU ", a);
      break;
    case Track::kStream:
      name = absl::StrCat("stream ", b);
      break;
    case Track::kMemory:
      name = "GPU memory";
      break;
    case Track::kSync:
      name = absl::StrCat("CUDA synchronization, stream ", a);
      break;
    case Track::kCounter:
      name = absl::StrCat("GPU ", a, " ", std::string(GpuCounterTraceName(b)));
      break;
  }
  if (lane > 0) absl::StrAppend(&name, " (overlap ", lane, ")");
  char* packet = BeginPacket(256 + name.size());
  char* p = VarintField(packet, field::kSequenceId, sequence_id_);
  char* track = Open(p, field::kTrackDescriptor);
  p = VarintField(track, field::kUuid, uuid);
  if (parent != 0) p = VarintField(p, field::kParentUuid, parent);
  if (kind == Track::kThread && lane == 0) {
    char* thread = Open(p, field::kThread);
    p = VarintField(thread, field::kPid, process_.pid);
    p = VarintField(p, field::kTid, a);
    p = Close(thread, BytesField(p, field::kThreadName, name));
  } else {
    p = BytesField(p, field::kTrackName, name);
  }
  if (kind == Track::kCounter) {
    char* counter = Open(p, field::kCounter);
    p = counter;
    if (GpuCounterDefs()[b].scale == 1) p = BytesField(p, field::kUnitName, "B/s");
    p = Close(counter, p);
  }
  EndPacket(packet, Close(track, p));
}

bool PerfettoTraceWriter::Interned(uint32_t name_id) const {
  if (name_id < kDenseIds) return !interned_dense_.empty() && interned_dense_[name_id];
  return interned_ids_.contains(name_id);
}

void PerfettoTraceWriter::ForgetInterned(uint32_t name_id) {
  if (name_id < kDenseIds) {
    interned_dense_[name_id] = false;
  } else {
    interned_ids_.erase(name_id);
  }
}

void PerfettoTraceWriter::WriteStrings(const v1::EventBatch& batch) {
  for (const v1::StringDef& def : batch.strings()) {
    if (!Interned(def.id())) continue;  // its first use interns the table's text then
    ForgetInterned(def.id());
    if (renamed_.size() >= max_interned_ && !renamed_.contains(def.id())) {
      names_inline_ = true;  // bounded whatever the agent redefines
      continue;
    }
    renamed_[def.id()] = next_renamed_iid_;
    next_renamed_iid_ += 2;
  }
}

PerfettoTraceWriter::Name PerfettoTraceWriter::BatchName(uint32_t name_id,
                                                         const StringTable& names) {
  if (names_inline_) return Name{.iid = 0, .intern = names.Text(name_id), .new_name = false};
  Name name{.iid = NameIid(name_id), .intern = {}, .new_name = false};
  if (!renamed_.empty()) {
    if (auto it = renamed_.find(name_id); it != renamed_.end()) name.iid = it->second;
  }
  // Ids are small and dense in practice (the agent counts up): a bitmap, a set for the rest.
  bool added;
  if (name_id < kDenseIds) {
    if (interned_dense_.empty()) interned_dense_.resize(kDenseIds);
    added = !interned_dense_[name_id];
    interned_dense_[name_id] = true;
  } else if (interned_ids_.contains(name_id)) {
    added = false;
  } else if (interned_ids_.size() < max_interned_) {
    added = interned_ids_.insert(name_id).second;
  } else {
    return Name{.iid = 0, .intern = names.Text(name_id), .new_name = false};  // written inline
  }
  if (added) {
    name.intern = names.Text(name_id);
    name.new_name = true;
  }
  return name;
}

PerfettoTraceWriter::Name PerfettoTraceWriter::OwnName(const std::string& text) {
  auto it = own_names_.find(text);
  if (it != own_names_.end()) return Name{.iid = it->second, .intern = {}, .new_name = false};
  if (own_names_.size() >= max_interned_) return Name{.iid = 0, .intern = text, .new_name = false};
  it = own_names_.emplace(text, 2 * own_names_.size() + 1).first;
  return Name{.iid = it->second, .intern = it->first, .new_name = true};
}

uint64_t PerfettoTraceWriter::StringValueIid(std::string_view text) {
  auto it = string_values_.find(absl::string_view(text.data(), text.size()));
  if (it == string_values_.end()) {
    if (string_values_.size() >= max_interned_) return 0;
    it = string_values_.emplace(std::string(text), string_values_.size() + 1).first;
    new_strings_.push_back(&*it);
  }
  return it->second;
}

char* PerfettoTraceWriter::PutStringValue(char* p, uint64_t annotation, std::string_view text) {
  const uint64_t iid = StringValueIid(text);
  if (iid == 0) return PutString(p, static_cast<Annotation>(annotation), text);
  return PutAnnotation(p, static_cast<Annotation>(annotation),
                       [iid](char* q) { return VarintField(q, field::kStringValueIid, iid); });
}

char* PerfettoTraceWriter::PutDims(char* p, uint64_t annotation, int32_t x, int32_t y, int32_t z) {
  // Most kernels repeat a few launch shapes: a small cache by shape skips the text and its hash.
  uint64_t key = (uint64_t{static_cast<uint32_t>(x)} << 32 | static_cast<uint32_t>(y)) ^
                 (uint64_t{static_cast<uint32_t>(z)} << 16);
  key *= 0x9e3779b97f4a7c15u;
  DimsEntry& e = dims_cache_[key >> 58];  // 64 entries
  if (e.iid == 0 || e.x != x || e.y != y || e.z != z) {
    char text[72];
    const std::string_view dims = DimsText(text, x, y, z);
    const uint64_t iid = StringValueIid(dims);
    if (iid == 0) return PutString(p, static_cast<Annotation>(annotation), dims);
    e = {x, y, z, iid};
  }
  const uint64_t iid = e.iid;
  return PutAnnotation(p, static_cast<Annotation>(annotation),
                       [iid](char* q) { return VarintField(q, field::kStringValueIid, iid); });
}

char* PerfettoTraceWriter::PutInterned(char* p, const Name& name) {
  if (!name.new_name && new_strings_.empty()) return p;
  // One interned_data per packet (a reader keeps the last of a message field written twice).
  char* interned = Open(p, field::kInternedData);
  p = interned;
  if (name.new_name) {
    char* entry = Open(p, field::kEventNames);
    p = Close(entry, BytesField(VarintField(entry, field::kIid, name.iid), field::kInternedName,
                                name.intern));
  }
  for (const auto* value : new_strings_) {
    char* entry = Open(p, field::kAnnotationStringValues);
    p = Close(entry, BytesField(VarintField(entry, field::kIid, value->second),
                                field::kInternedName, value->first));
  }
  new_strings_.clear();
  return Close(interned, p);
}

template <typename Annotate>
void PerfettoTraceWriter::WriteNamedEvent(uint64_t type, uint64_t track, uint64_t ns,
                                          const Name& name, uint64_t flow,
                                          uint64_t terminating_flow, size_t annotation_bytes,
                                          Annotate annotate) {
  char* packet = BeginPacket(kMaxPacketBytes + 2 * name.intern.size() + annotation_bytes);
  char* p = PutEventPacketHeader(packet, ns);
  char* event = Open(p, field::kTrackEvent);
  p = VarintField(event, field::kType, type);
  p = VarintField(p, field::kTrackUuid, track);
  p = name.iid != 0 ? VarintField(p, field::kNameIid, name.iid)
                    : BytesField(p, field::kEventName, name.intern);
  // The launch starts its arrow; each GPU record of its correlation id ends one (a graph launch:
  // one per kernel).
  if (flow != 0 || terminating_flow != 0) {
    char* legacy = Open(p, field::kLegacyEvent);
    p = VarintField(legacy, field::kBindId, FlowId(static_cast<uint32_t>(flow | terminating_flow)));
    p = Close(legacy, VarintField(p, field::kFlowDirection, flow != 0 ? kFlowOut : kFlowIn));
  }
  p = annotate(p);
  EndPacket(packet, PutInterned(Close(event, p), name));
}

template <typename Annotate>
void PerfettoTraceWriter::WriteSlice(uint64_t track, uint64_t start, uint64_t end, const Name& name,
                                     uint64_t flow, uint64_t terminating_flow,
                                     size_t annotation_bytes, Annotate annotate) {
  WriteNamedEvent(kSliceBegin, track, start, name, flow, terminating_flow, annotation_bytes,
                  annotate);
  // An end before the start (clocks of a broken record) is a zero-length slice, as JSON's dur 0.
  char* packet = BeginPacket(kMaxPacketBytes);
  char* p = PutEventPacketHeader(packet, std::max(start, end), /*interned=*/false);
  char* event = Open(p, field::kTrackEvent);
  p = VarintField(event, field::kType, kSliceEnd);
  p = VarintField(p, field::kTrackUuid, track);
  EndPacket(packet, Close(event, p));
}

void PerfettoTraceWriter::WriteKernel(const v1::Kernel& k, const StringTable& names) {
  const uint64_t track = LaneOf(Track::kStream, k.device(), k.stream(), k.start_ns(), k.end_ns());
  WriteSlice(track, k.start_ns(), k.end_ns(), BatchName(k.name_id(), names), 0, k.correlation(),
             8 * 48, [&](char* p) {
               if (k.correlation() == 0)
                 p = PutUint(p, kCorrelation, 0);  // else the flow id says it
               p = PutUint(p, kContext, k.context());
               p = PutDims(p, kGrid, k.grid_x(), k.grid_y(), k.grid_z());
               p = PutDims(p, kBlock, k.block_x(), k.block_y(), k.block_z());
               p = PutUint(p, kRegisters, k.registers_per_thread());
               p = PutUint(
                   p, kSharedMemory,
                   static_cast<uint64_t>(k.static_shared_bytes()) + k.dynamic_shared_bytes());
               if (k.graph_id() != 0) p = PutUint(p, kGraphId, k.graph_id());
               return p;
             });
}

void PerfettoTraceWriter::WriteMemcpy(const v1::Memcpy& m) {
  const uint64_t track = LaneOf(Track::kStream, m.device(), m.stream(), m.start_ns(), m.end_ns());
  const uint64_t dur = m.end_ns() > m.start_ns() ? m.end_ns() - m.start_ns() : 0;
  WriteSlice(track, m.start_ns(), m.end_ns(),
             OwnName(CopyName(m.copy_kind(), m.src_kind(), m.dst_kind())), 0, m.correlation(),
             6 * 48, [&](char* p) {
               if (m.correlation() == 0) p = PutUint(p, kCorrelation, 0);  // else the flow id
               p = PutUint(p, kBytes, m.bytes());
               p = PutDouble(p, kBandwidth,
                             dur ? static_cast<double>(m.bytes()) / static_cast<double>(dur) : 0);
               p = PutStringValue(p, kCopyKind, analysis::CuptiCopyKindName(m.copy_kind()));
               p = PutStringValue(p, kSrcKind, analysis::CuptiMemoryKindName(m.src_kind()));
               return PutStringValue(p, kDstKind, analysis::CuptiMemoryKindName(m.dst_kind()));
             });
}

void PerfettoTraceWriter::WriteMemset(const v1::Memset& m) {
  const uint64_t track = LaneOf(Track::kStream, m.device(), m.stream(), m.start_ns(), m.end_ns());
  const uint64_t dur = m.end_ns() > m.start_ns() ? m.end_ns() - m.start_ns() : 0;
  WriteSlice(track, m.start_ns(), m.end_ns(), OwnName(MemsetName(m.memory_kind())), 0,
             m.correlation(), 3 * 32, [&](char* p) {
               if (m.correlation() == 0) p = PutUint(p, kCorrelation, 0);  // else the flow id
               p = PutUint(p, kBytes, m.bytes());
               return PutDouble(
                   p, kBandwidth,
                   dur ? static_cast<double>(m.bytes()) / static_cast<double>(dur) : 0);
             });
}

void PerfettoTraceWriter::WriteApiCall(const v1::ApiCall& a, const StringTable& names) {
  const uint64_t track = ThreadLaneOf(a.tid(), a.start_ns(), a.end_ns());
  // Launch -> GPU work arrows start at the calls that enqueue work (the kernel, copy or memset
  // with the same correlation id ends it).
  const uint64_t flow = names.Find(a.name_id()).enqueues_gpu_work ? a.correlation() : 0;
  WriteSlice(track, a.start_ns(), a.end_ns(), BatchName(a.name_id(), names), flow, 0, 3 * 32,
             [&](char* p) {
               if (flow == 0) p = PutUint(p, kCorrelation, a.correlation());  // else the flow id
               p = PutUint(p, kCbid, a.cbid());
               if (a.return_value() != 0) p = PutUint(p, kReturn, a.return_value());
               return p;
             });
}

void PerfettoTraceWriter::WriteSync(const v1::Synchronization& s) {
  // A track per stream, with lanes: waits of several threads overlap.
  const uint64_t track = LaneOf(Track::kSync, s.stream(), 0, s.start_ns(), s.end_ns());
  WriteSlice(track, s.start_ns(), s.end_ns(), OwnName(SyncKindName(s.kind())), 0, 0, 3 * 32,
             [&](char* p) {
               p = PutUint(p, kCorrelation, s.correlation());
               p = PutUint(p, kStream, s.stream());
               return PutUint(p, kContext, s.context());
             });
}

void PerfettoTraceWriter::WriteMarker(const v1::Marker& m, const StringTable& names) {
  const uint64_t track = ThreadLaneOf(m.tid(), m.start_ns(), m.end_ns());
  WriteSlice(track, m.start_ns(), m.end_ns(), BatchName(m.name_id(), names), 0, 0, 0,
             [](char* p) { return p; });
}

void PerfettoTraceWriter::WriteMemoryOp(const v1::MemoryOp& m) {
  const uint64_t track = TrackOf(Track::kMemory, m.device());
  const int64_t bytes = static_cast<int64_t>(std::min<uint64_t>(m.bytes(), INT64_MAX));
  WriteNamedEvent(kInstant, track, m.timestamp_ns(), OwnName("[memory]"), 0, 0, 3 * 32,
                  [&](char* p) {
                    p = PutUint(p, kAddress, m.address());
                    p = PutInt(p, kBytes, m.is_free() ? -bytes : bytes);
                    return PutStringValue(p, kKind, analysis::CuptiMemoryKindName(m.memory_kind()));
                  });
}

void PerfettoTraceWriter::WriteOverhead(const v1::Overhead& o) {
  const uint64_t track = ThreadLaneOf(o.tid(), o.start_ns(), o.end_ns());
  WriteSlice(track, o.start_ns(), o.end_ns(), OwnName(OverheadName(o.kind())), 0, 0, 0,
             [](char* p) { return p; });
}

absl::Status PerfettoTraceWriter::WriteCounters(uint32_t device,
                                                std::span<const GpuCounterReading> readings) {
  for (const GpuCounterReading& r : readings) {
    if (!PlausibleInterval(r.start_ns, r.end_ns) || r.end_ns == r.start_ns) continue;
    uint64_t tracks[kGpuCounters];
    double values[kGpuCounters];
    size_t n = 0;
    for (size_t i = 0; i < kGpuCounters; ++i) {
      if (!std::isfinite(r.values[i])) continue;
      tracks[n] = TrackOf(Track::kCounter, device, static_cast<uint32_t>(i));
      values[n++] = r.values[i];
    }
    if (n == 0) continue;
    char* packet = BeginPacket(kMaxPacketBytes + kGpuCounters * 24);
    char* p = PutEventPacketHeader(packet, r.start_ns, /*interned=*/false);
    char* event = Open(p, field::kTrackEvent);
    p = VarintField(event, field::kType, kCounterValue);
    p = VarintField(p, field::kTrackUuid, tracks[0]);
    p = DoubleField(p, field::kDoubleCounterValue, values[0]);
    for (size_t i = 1; i < n; ++i) p = VarintField(p, field::kExtraDoubleCounterTracks, tracks[i]);
    for (size_t i = 1; i < n; ++i) p = DoubleField(p, field::kExtraDoubleCounterValues, values[i]);
    EndPacket(packet, Close(event, p));
  }
  file_->FlushIfFull();
  return file_->status();
}

absl::Status PerfettoTraceWriter::Finish(const Footer& footer) {
  const TraceProcess& t = process_;
  const size_t text = t.capture_id.size() + t.hostname.size() + t.comm.size() +
                      t.command_line.size() + t.pod_name.size() + t.pod_namespace.size() +
                      footer.error.size();
  WriteNamedEvent(kInstant, process_track_, last_ns_, OwnName("profd capture"), 0, 0,
                  24 * 32 + text, [&](char* p) {
                    p = PutString(p, kCaptureId, t.capture_id);
                    p = PutString(p, kHostname, t.hostname);
                    p = PutUint(p, kPid, t.pid);
                    p = PutString(p, kComm, t.comm);
                    p = PutString(p, kCommandLine, t.command_line);
                    p = PutString(p, kPod, t.pod_name);
                    p = PutString(p, kNamespace, t.pod_namespace);
                    if (t.distributed) {
                      p = PutUint(p, kRank, t.rank);
                      p = PutUint(p, kWorldSize, t.world_size);
                      p = PutUint(p, kLocalRank, t.local_rank);
                    }
                    p = PutUint(p, kEvents, events_);
                    p = PutUint(p, kInvalidEvents, invalid_events_);
                    p = PutUint(p, kDroppedRecords, footer.dropped_records);
                    p = PutBool(p, kTruncated, footer.truncated);
                    return PutString(p, kError, footer.error);
                  });
  for (const v1::DeviceInfo& d : footer.devices) {
    const uint64_t track = TrackOf(Track::kGpu, d.ordinal());
    WriteNamedEvent(kInstant, track, last_ns_, OwnName("device properties"), 0, 0,
                    16 * 32 + d.name().size() + d.uuid().size(), [&](char* p) {
                      p = PutString(p, kDeviceName, d.name());
                      p = PutString(p, kUuid, d.uuid());
                      p = PutString(p, kComputeCapability,
                                    absl::StrCat(d.compute_major(), ".", d.compute_minor()));
                      p = PutUint(p, kGlobalMemory, d.global_memory_bytes());
                      p = PutUint(p, kSms, d.multiprocessors());
                      p = PutUint(p, kMaxThreadsPerSm, d.max_threads_per_multiprocessor());
                      p = PutUint(p, kMaxBlocksPerSm, d.max_blocks_per_multiprocessor());
                      p = PutUint(p, kRegistersPerSm, d.max_registers_per_multiprocessor());
                      p = PutUint(p, kSharedMemoryPerSm, d.max_shared_memory_per_multiprocessor());
                      p = PutUint(p, kWarpSize, d.warp_size());
                      p = PutUint(p, kRegistersPerBlock, d.max_registers_per_block());
                      return PutUint(p, kSharedMemoryPerBlock, d.max_shared_memory_per_block());
                    });
  }
  return file_->Close();
}

}  // namespace profd
