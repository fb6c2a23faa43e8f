#include "analysis/trace_reader.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "rapidjson/error/en.h"
#include "rapidjson/reader.h"

namespace profd::analysis {
namespace {

constexpr size_t kChunkBytes = 1 << 20;
constexpr int kChunks = 4;
// A trace-event file nests 5 or 6 levels (root, traceEvents, event, args, an array in args).
// RapidJSON's reader recurses once per level, so an unbounded depth is a stack overflow: a
// 100,000-deep document crashed profd's gRPC thread. Far deeper than any real trace.
constexpr int kMaxJsonDepth = 64;
// deviceProperties entries kept per file: a node has at most a few dozen GPUs.
constexpr size_t kMaxDevices = 1024;

// Produces the uncompressed JSON bytes, chunk by chunk. Called on the prefetch thread only.
class ChunkSource {
 public:
  virtual ~ChunkSource() = default;
  // Up to cap bytes into buf; 0 at the end.
  virtual absl::StatusOr<size_t> Read(char* buf, size_t cap) = 0;
  virtual bool gzip() const = 0;
};

// A file, gzip or plain: zlib's gzread passes non-gzip content through unchanged.
class GzFileSource : public ChunkSource {
 public:
  explicit GzFileSource(gzFile f) : f_(f) {}
  ~GzFileSource() override { gzclose(f_); }
  absl::StatusOr<size_t> Read(char* buf, size_t cap) override {
    int n = gzread(f_, buf, static_cast<unsigned>(cap));
    if (n < 0) {
      int err = 0;
      const char* msg = gzerror(f_, &err);
      return absl::DataLossError(absl::StrCat("cannot decompress: ", msg ? msg : "zlib error",
                                              " (is the file truncated?)"));
    }
    gzip_ = gzdirect(f_) == 0;
    return static_cast<size_t>(n);
  }
  bool gzip() const override { return gzip_; }

 private:
  gzFile f_;
  bool gzip_ = false;
};

// A buffer in memory: inflated when it starts with the gzip magic, copied otherwise. Reads what
// zlib's gzread (the file path) reads: concatenated members, trailing garbage after a member
// ignored, a member cut short an error.
class MemorySource : public ChunkSource {
 public:
  explicit MemorySource(std::string_view data) : data_(data) {
    gzip_ = data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f &&
            static_cast<unsigned char>(data[1]) == 0x8b;
    if (gzip_) {
      std::memset(&z_, 0, sizeof(z_));
      z_ok_ = data.size() <= UINT_MAX && inflateInit2(&z_, 15 + 32) == Z_OK;
      z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
      z_.avail_in = static_cast<uInt>(std::min<size_t>(data.size(), UINT_MAX));
    }
  }
  ~MemorySource() override {
    if (gzip_ && z_ok_) inflateEnd(&z_);
  }
  absl::StatusOr<size_t> Read(char* buf, size_t cap) override {
    if (!gzip_) {
      size_t n = std::min(cap, data_.size() - pos_);
      std::memcpy(buf, data_.data() + pos_, n);
      pos_ += n;
      return n;
    }
    if (!z_ok_) {
      return absl::ResourceExhaustedError(
          "cannot decompress: zlib could not start (or the buffer is over 4 GiB)");
    }
    z_.next_out = reinterpret_cast<Bytef*>(buf);
    z_.avail_out = static_cast<uInt>(cap);
    while (z_.avail_out > 0 && !done_) {
      if (!in_member_) {
        if (z_.avail_in >= 2 && z_.next_in[0] == 0x1f && z_.next_in[1] == 0x8b) {
          inflateReset(&z_);  // the next of concatenated gzip members
          in_member_ = true;
        } else {
          done_ = true;  // the end, or trailing bytes that are not gzip: ignored, as gzread does
          break;
        }
      }
      if (z_.avail_in == 0) {
        return absl::DataLossError("cannot decompress: unexpected end of file (is it truncated?)");
      }
      int rc = inflate(&z_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        in_member_ = false;
      } else if (rc != Z_OK) {
        return absl::DataLossError(
            absl::StrCat("cannot decompress: ", z_.msg ? z_.msg : "zlib error"));
      }
    }
    return cap - z_.avail_out;
  }
  bool gzip() const override { return gzip_; }

 private:
  std::string_view data_;
  size_t pos_ = 0;
  bool gzip_ = false;
  bool z_ok_ = false;
  bool in_member_ = false;
  bool done_ = false;
  z_stream z_;
};

// Bytes handed over by a function (the Kineto copy, which tees what it reads into the analysis).
class FunctionSource : public ChunkSource {
 public:
  explicit FunctionSource(const ReadChunk& read) : read_(read) {}
  absl::StatusOr<size_t> Read(char* buf, size_t cap) override { return read_(buf, cap); }
  bool gzip() const override { return false; }

 private:
  const ReadChunk& read_;
};

// A RapidJSON input stream over the chunks of a ChunkSource, read ahead by its own thread so that
// decompression and parsing overlap. The parser (caller's thread) owns the current chunk; the
// reader thread fills the free ones.
class PrefetchStream {
 public:
  typedef char Ch;

  explicit PrefetchStream(ChunkSource* source) : source_(source) {
    for (int i = 0; i < kChunks; ++i) free_.push_back(i);
    // The first chunk is read here: a trace that fits in it (most imports, every test and fuzz
    // input) needs no reader thread and no hand-off between threads. Sources return less than
    // asked only at the end, so a short first chunk means the next read confirms the end.
    bool more = ReadNext();
    if (more && filled_.back().size < kChunkBytes) more = ReadNext();
    if (more) reader_ = std::thread([this] { ReadAhead(); });
    NextChunk();
  }
  ~PrefetchStream() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (reader_.joinable()) reader_.join();
  }

  Ch Peek() const { return *cur_; }
  Ch Take() {
    Ch c = *cur_;
    if (++cur_ == end_) NextChunk();
    return c;
  }
  size_t Tell() const { return consumed_ + static_cast<size_t>(cur_ - begin_); }
  Ch* PutBegin() { return nullptr; }
  void Put(Ch) {}
  void Flush() {}
  size_t PutEnd(Ch*) { return 0; }

  absl::Status status() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }
  size_t bytes() const { return Tell(); }

 private:
  struct Filled {
    int slot;
    size_t size;
  };

  // Reads one chunk into a free slot (one must be free); false at the end or on an error.
  bool ReadNext() {
    int slot;
    {
      std::unique_lock<std::mutex> lock(mu_);
      slot = free_.front();
      free_.pop_front();
    }
    if (!buffers_[slot]) buffers_[slot].reset(new char[kChunkBytes + 1]);
    absl::StatusOr<size_t> n = source_->Read(buffers_[slot].get(), kChunkBytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!n.ok()) status_ = n.status();
      filled_.push_back({slot, n.ok() ? *n : 0});
    }
    cv_.notify_all();
    return n.ok() && *n > 0;
  }

  void ReadAhead() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !free_.empty(); });
        if (stop_) return;
      }
      if (!ReadNext()) return;
    }
  }

  void NextChunk() {
    if (eof_) {
      cur_ = end_ = &sentinel_;  // Peek returns '\0' forever
      ++end_;
      return;
    }
    consumed_ += static_cast<size_t>(end_ - begin_);
    std::unique_lock<std::mutex> lock(mu_);
    if (current_slot_ >= 0) free_.push_back(current_slot_);
    cv_.notify_all();
    cv_.wait(lock, [this] { return !filled_.empty(); });
    Filled f = filled_.front();
    filled_.pop_front();
    current_slot_ = f.slot;
    if (f.size == 0) {
      eof_ = true;
      begin_ = cur_ = &sentinel_;
      end_ = begin_ + 1;
      return;
    }
    begin_ = cur_ = buffers_[f.slot].get();
    end_ = begin_ + f.size;
  }

  ChunkSource* source_;
  std::unique_ptr<char[]> buffers_[kChunks];
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> free_;
  std::deque<Filled> filled_;
  bool stop_ = false;
  absl::Status status_;
  std::thread reader_;

  // Parser side.
  int current_slot_ = -1;
  bool eof_ = false;
  char sentinel_ = '\0';
  const char* begin_ = &sentinel_;
  const char* cur_ = &sentinel_;
  const char* end_ = &sentinel_;
  size_t consumed_ = 0;
};

template <size_t N>
bool Is(const char* s, size_t n, const char (&lit)[N]) {
  return n == N - 1 && std::memcmp(s, lit, N - 1) == 0;
}

bool IEquals(const char* s, size_t n, const char* lit) {
  size_t m = std::strlen(lit);
  if (n != m) return false;
  for (size_t i = 0; i < n; ++i) {
    char a = s[i], b = lit[i];
    if (a >= 'A' && a <= 'Z') a = static_cast<char>(a - 'A' + 'a');
    if (b >= 'A' && b <= 'Z') b = static_cast<char>(b - 'A' + 'a');
    if (a != b) return false;
  }
  return true;
}

// "Memcpy HtoD (Pageable -> Device)": the names Kineto and our writer give copies.
void ParseCopyName(std::string_view name, GpuActivity* a) {
  if (a->copy_kind == CopyKind::kUnknown) a->copy_kind = CopyKindFromText(name);
  size_t open = name.find('(');
  size_t arrow = name.find("->");
  size_t close = name.rfind(')');
  if (open == name.npos || arrow == name.npos || close == name.npos || arrow < open) return;
  auto trim = [](std::string_view s) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
    return s;
  };
  if (a->src_kind == MemoryKind::kUnknown) {
    a->src_kind = MemoryKindFromText(trim(name.substr(open + 1, arrow - open - 1)));
  }
  if (a->dst_kind == MemoryKind::kUnknown && close > arrow + 2) {
    a->dst_kind = MemoryKindFromText(trim(name.substr(arrow + 2, close - arrow - 2)));
  }
}

// Operators torch.profiler drops before building its tables (torch/autograd/profiler_util.py,
// _filter_name): the profiler's own record_function plumbing and autograd bookkeeping. Dropped
// here too so that they neither get a row nor take CPU time from the operator around them.
bool IsFilteredOperator(std::string_view name) {
  static constexpr std::string_view kFiltered[] = {"[memory]",
                                                   "[OutOfMemory]",
                                                   "profiler::_record_function_enter",
                                                   "profiler::_record_function_enter_new",
                                                   "profiler::_record_function_exit",
                                                   "aten::is_leaf",
                                                   "aten::output_nr",
                                                   "aten::_version"};
  return std::find(std::begin(kFiltered), std::end(kFiltered), name) != std::end(kFiltered);
}

// A JSON number as the handler sees it: the double, and the integer when it is one that fits.
struct JsonNumber {
  double d;
  std::optional<int64_t> i;
};

// v when it lies in [lo, hi].
std::optional<int64_t> InRange(std::optional<int64_t> v, int64_t lo, int64_t hi) {
  if (!v || *v < lo || *v > hi) return std::nullopt;
  return v;
}

// The SAX handler: a small state machine over the few places of the document we read.
class TraceHandler : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, TraceHandler> {
 public:
  // sink: where the events go; null to keep them in *trace.
  TraceHandler(Trace* trace, uint16_t file, TraceEventSink* sink, const ReadLimits& limits)
      : trace_(trace),
        file_(file),
        sink_(sink),
        limits_(limits),
        // Correlation and External ids are per process: files are kept apart.
        id_offset_(static_cast<int64_t>(file) << kCorrelationBits) {}

  bool StartObject() {
    if (!Deeper()) return false;
    if (skip_ > 0) return ++skip_, true;
    switch (level_) {
      case Level::kRoot:
        level_ = Level::kTop;
        break;
      case Level::kEvents:
        level_ = Level::kEvent;
        ev_ = Event();
        ++events_;
        break;
      case Level::kEvent:
        if (key_ == Field::kArgs)
          level_ = Level::kArgs;
        else
          skip_ = 1;
        break;
      case Level::kDevices:
        level_ = Level::kDevice;
        dev_ = DeviceProperties();
        break;
      case Level::kTop:
        if (key_ == Field::kProfd) saw_profd_ = true;
        skip_ = 1;
        break;
      default:
        skip_ = 1;
    }
    key_ = Field::kNone;
    return true;
  }
  bool EndObject(rapidjson::SizeType) {
    --depth_;
    if (skip_ > 0) return --skip_, true;
    switch (level_) {
      case Level::kEvent:
        if (!FinishEvent()) return false;
        level_ = Level::kEvents;
        break;
      case Level::kArgs:
        level_ = Level::kEvent;
        break;
      case Level::kDevice:
        if (!dev_invalid_ && trace_->devices.size() < kMaxDevices) trace_->devices.push_back(dev_);
        dev_invalid_ = false;
        level_ = Level::kDevices;
        break;
      case Level::kTop:
        level_ = Level::kDone;
        break;
      default:
        break;
    }
    key_ = Field::kNone;
    return true;
  }
  bool StartArray() {
    if (!Deeper()) return false;
    if (skip_ > 0) return ++skip_, true;
    switch (level_) {
      case Level::kRoot:
        level_ = Level::kEvents;
        events_in_root_array_ = true;
        saw_events_ = true;
        break;
      case Level::kTop:
        if (key_ == Field::kTraceEvents)
          level_ = Level::kEvents, saw_events_ = true;
        else if (key_ == Field::kDeviceProperties)
          level_ = Level::kDevices;
        else
          skip_ = 1;
        break;
      case Level::kArgs:
        if (key_ == Field::kGrid || key_ == Field::kBlock) {
          level_ = Level::kArgArray;
          array_key_ = key_;
          array_index_ = 0;
        } else {
          skip_ = 1;
        }
        break;
      default:
        skip_ = 1;
    }
    key_ = Field::kNone;
    return true;
  }
  bool EndArray(rapidjson::SizeType) {
    --depth_;
    if (skip_ > 0) return --skip_, true;
    switch (level_) {
      case Level::kEvents:
        level_ = events_in_root_array_ ? Level::kDone : Level::kTop;
        break;
      case Level::kDevices:
        level_ = Level::kTop;
        break;
      case Level::kArgArray:
        level_ = Level::kArgs;
        break;
      default:
        break;
    }
    key_ = Field::kNone;
    return true;
  }

  bool Key(const char* s, rapidjson::SizeType n, bool) {
    if (skip_ > 0) return true;
    key_ = Field::kNone;
    switch (level_) {
      case Level::kTop:
        if (Is(s, n, "traceEvents"))
          key_ = Field::kTraceEvents;
        else if (Is(s, n, "deviceProperties"))
          key_ = Field::kDeviceProperties;
        else if (Is(s, n, "baseTimeNanoseconds"))
          key_ = Field::kBaseTime;
        else if (Is(s, n, "profd"))
          key_ = Field::kProfd;
        break;
      case Level::kEvent:
        if (Is(s, n, "ph"))
          key_ = Field::kPh;
        else if (Is(s, n, "cat"))
          key_ = Field::kCat;
        else if (Is(s, n, "name"))
          key_ = Field::kName;
        else if (Is(s, n, "pid"))
          key_ = Field::kPid;
        else if (Is(s, n, "tid"))
          key_ = Field::kTid;
        else if (Is(s, n, "ts"))
          key_ = Field::kTs;
        else if (Is(s, n, "dur"))
          key_ = Field::kDur;
        else if (Is(s, n, "args"))
          key_ = Field::kArgs;
        break;
      case Level::kArgs:
        if (Is(s, n, "correlation"))
          key_ = Field::kCorrelation;
        else if (Is(s, n, "External id"))
          key_ = Field::kExternalId;
        else if (Is(s, n, "device"))
          key_ = Field::kDevice;
        else if (Is(s, n, "stream"))
          key_ = Field::kStream;
        else if (Is(s, n, "grid"))
          key_ = Field::kGrid;
        else if (Is(s, n, "block"))
          key_ = Field::kBlock;
        else if (Is(s, n, "registers per thread"))
          key_ = Field::kRegisters;
        else if (Is(s, n, "shared memory"))
          key_ = Field::kSharedMemory;
        else if (Is(s, n, "bytes"))
          key_ = Field::kBytes;
        else if (Is(s, n, "copy kind"))
          key_ = Field::kCopyKind;
        else if (Is(s, n, "src kind"))
          key_ = Field::kSrcKind;
        else if (Is(s, n, "dst kind"))
          key_ = Field::kDstKind;
        else if (ev_.cat == Cat::kGpuCounters) {
          if (int c = GpuCounterFromTraceName(std::string_view(s, n)); c >= 0) {
            key_ = Field::kCounter;
            counter_ = static_cast<size_t>(c);
          }
        }
        break;
      case Level::kDevice:
        key_ = DeviceKey(s, n);
        break;
      default:
        break;
    }
    return true;
  }

  bool String(const char* s, rapidjson::SizeType n, bool) {
    if (skip_ > 0) return true;
    if (level_ == Level::kEvent) {
      switch (key_) {
        case Field::kPh:
          ev_.ph = n > 0 ? s[0] : 0;
          break;
        case Field::kCat:
          ev_.cat = CategoryOf(s, n);
          break;
        case Field::kName:
          ev_.name.assign(s, n);
          break;
        case Field::kPid:
          SetInt32(&ev_.pid, ParseIntPrefix(s, n));
          break;
        case Field::kTid:
          SetInt32(&ev_.tid, ParseIntPrefix(s, n));
          break;
        default:
          break;
      }
    } else if (level_ == Level::kArgs) {
      std::string_view v(s, n);
      switch (key_) {
        case Field::kCopyKind:
          ev_.copy_kind = CopyKindFromText(v);
          break;
        case Field::kSrcKind:
          ev_.src_kind = MemoryKindFromText(v);
          break;
        case Field::kDstKind:
          ev_.dst_kind = MemoryKindFromText(v);
          break;
        default:
          break;
      }
    } else if (level_ == Level::kDevice && key_ == Field::kDevName) {
      dev_.name.assign(s, n);
    }
    key_ = Field::kNone;
    return true;
  }

  bool Int(int i) { return Number({static_cast<double>(i), i}); }
  bool Uint(unsigned u) { return Number({static_cast<double>(u), u}); }
  bool Int64(int64_t i) { return Number({static_cast<double>(i), i}); }
  bool Uint64(uint64_t u) {
    std::optional<int64_t> i;
    if (u <= static_cast<uint64_t>(INT64_MAX)) i = static_cast<int64_t>(u);
    return Number({static_cast<double>(u), i});
  }
  bool Double(double d) { return Number({d, ExactInt64(d)}); }
  bool Null() { return Scalar(); }
  bool Bool(bool) { return Scalar(); }
  bool RawNumber(const char*, rapidjson::SizeType, bool) { return Scalar(); }
  bool Default() { return Scalar(); }

  uint64_t events() const { return events_; }
  // Complete and instant events: in profd's traces, the records the agent sent (the flow arrows
  // and row names the trace writer adds are not).
  uint64_t records() const { return records_; }
  uint64_t invalid_events() const { return invalid_events_; }
  bool too_deep() const { return depth_ > kMaxJsonDepth; }
  // Why the file as a whole cannot be read, found by the handler (OK if it can): the code, what
  // was found ("baseTimeNanoseconds 1e+300 is not ...") and what to do, apart, so that the
  // caller can put the byte offset between them.
  absl::StatusCode error_code() const { return error_code_; }
  const std::string& error() const { return error_; }
  const std::string& error_advice() const { return error_advice_; }
  bool saw_profd() const { return saw_profd_; }
  bool has_base_time() const { return has_base_time_; }
  int64_t base_time_ns() const { return base_time_ns_; }
  int64_t start_ns() const { return start_ns_; }
  int64_t end_ns() const { return end_ns_; }
  bool saw_events() const { return saw_events_; }
  bool events_in_root_array() const { return events_in_root_array_; }
  // Sink mode: impossible events and those the file's clock shift moved out of the model's range.
  uint64_t sink_invalid() const { return sink_invalid_; }

 private:
  enum class Level { kRoot, kTop, kEvents, kEvent, kArgs, kArgArray, kDevices, kDevice, kDone };
  enum class Field {
    kNone,
    kTraceEvents,
    kDeviceProperties,
    kBaseTime,
    kProfd,
    kPh,
    kCat,
    kName,
    kPid,
    kTid,
    kTs,
    kDur,
    kArgs,
    kCorrelation,
    kExternalId,
    kDevice,
    kStream,
    kGrid,
    kBlock,
    kRegisters,
    kSharedMemory,
    kBytes,
    kCopyKind,
    kSrcKind,
    kDstKind,
    kCounter,
    kDevId,
    kDevName,
    kNumSms,
    kMaxThreadsPerSm,
    kMaxThreadsPerBlock,
    kRegsPerSm,
    kSmemPerSm,
    kMaxBlocksPerSm,
    kWarpSize,
    kMajor,
    kMinor,
  };
  enum class Cat : uint8_t {
    kOther,
    kKernel,
    kMemcpy,
    kMemset,
    kRuntime,
    kDriver,
    kSync,
    kCpuOp,
    kUserAnnotation,
    kOverhead,
    kGpuCounters
  };

  struct Event {
    char ph = 0;
    Cat cat = Cat::kOther;
    std::string name;
    int32_t pid = 0, tid = 0;
    double ts = 0, dur = 0;
    bool has_ts = false;
    // A number in it is impossible (a negative size, a device id of 2^40...): skipped, counted.
    bool invalid = false;
    int64_t correlation = -1;
    int64_t external_id = -1;
    int32_t device = -1, stream = -1;
    LaunchConfig config;
    uint64_t bytes = 0;
    CopyKind copy_kind = CopyKind::kUnknown;
    MemoryKind src_kind = MemoryKind::kUnknown, dst_kind = MemoryKind::kUnknown;
    std::array<float, kGpuCounters> counters = NoCounters();  // "C" events of cat gpu_counters
  };

  static std::array<float, kGpuCounters> NoCounters() {
    std::array<float, kGpuCounters> none;
    none.fill(std::numeric_limits<float>::quiet_NaN());
    return none;
  }

  static Cat CategoryOf(const char* s, size_t n) {
    if (IEquals(s, n, "kernel")) return Cat::kKernel;
    if (IEquals(s, n, "gpu_memcpy") || IEquals(s, n, "memcpy")) return Cat::kMemcpy;
    if (IEquals(s, n, "gpu_memset") || IEquals(s, n, "memset")) return Cat::kMemset;
    if (IEquals(s, n, "cuda_runtime") || IEquals(s, n, "runtime")) return Cat::kRuntime;
    if (IEquals(s, n, "cuda_driver") || IEquals(s, n, "driver")) return Cat::kDriver;
    if (IEquals(s, n, "cuda_sync")) return Cat::kSync;
    if (IEquals(s, n, "cpu_op") || IEquals(s, n, "operator")) return Cat::kCpuOp;
    if (IEquals(s, n, "user_annotation")) return Cat::kUserAnnotation;
    if (IEquals(s, n, "overhead")) return Cat::kOverhead;
    if (IEquals(s, n, "gpu_counters")) return Cat::kGpuCounters;
    return Cat::kOther;
  }

  static Field DeviceKey(const char* s, size_t n) {
    if (Is(s, n, "id")) return Field::kDevId;
    if (Is(s, n, "name")) return Field::kDevName;
    if (Is(s, n, "numSms") || Is(s, n, "multiProcessorCount")) return Field::kNumSms;
    if (Is(s, n, "maxThreadsPerMultiprocessor") || Is(s, n, "maxThreadsPerMultiProcessor")) {
      return Field::kMaxThreadsPerSm;
    }
    if (Is(s, n, "maxThreadsPerBlock")) return Field::kMaxThreadsPerBlock;
    if (Is(s, n, "regsPerMultiprocessor") || Is(s, n, "regsPerMultiProcessor")) {
      return Field::kRegsPerSm;
    }
    if (Is(s, n, "sharedMemPerMultiprocessor") || Is(s, n, "sharedMemPerMultiProcessor")) {
      return Field::kSmemPerSm;
    }
    if (Is(s, n, "maxBlocksPerMultiProcessor") || Is(s, n, "maxBlocksPerMultiprocessor")) {
      return Field::kMaxBlocksPerSm;
    }
    if (Is(s, n, "warpSize")) return Field::kWarpSize;
    if (Is(s, n, "computeMajor")) return Field::kMajor;
    if (Is(s, n, "computeMinor")) return Field::kMinor;
    return Field::kNone;
  }

  // "stream 7" or "7": PyTorch traces sometimes name their tids. nullopt past int64.
  static std::optional<int64_t> ParseIntPrefix(const char* s, size_t n) {
    size_t i = 0;
    while (i < n && (s[i] < '0' || s[i] > '9')) ++i;
    int64_t v = 0;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; ++i) {
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[i] - '0', &v)) {
        return std::nullopt;
      }
    }
    return v;
  }

  // Stores v when it fits the model's 32-bit field; otherwise the event is impossible.
  void SetInt32(int32_t* field, std::optional<int64_t> v, int64_t lo = INT32_MIN) {
    if (std::optional<int64_t> ok = InRange(v, lo, INT32_MAX)) {
      *field = static_cast<int32_t>(*ok);
    } else {
      ev_.invalid = true;
    }
  }
  void SetUint32(uint32_t* field, std::optional<int64_t> v) {
    if (std::optional<int64_t> ok = InRange(v, 0, UINT32_MAX)) {
      *field = static_cast<uint32_t>(*ok);
    } else {
      ev_.invalid = true;
    }
  }

  void Fail(absl::StatusCode code, std::string what, std::string advice) {
    error_code_ = code;
    error_ = std::move(what);
    error_advice_ = std::move(advice);
  }

  bool Deeper() {
    // Returning false stops the parser before it recurses again (kParseErrorTermination).
    return ++depth_ <= kMaxJsonDepth;
  }

  bool Scalar() {
    if (skip_ == 0) key_ = Field::kNone;
    return true;
  }

  bool Number(JsonNumber v) {
    if (skip_ > 0) return true;
    switch (level_) {
      case Level::kEvent:
        EventNumber(v);
        break;
      case Level::kArgs:
        ArgNumber(v);
        break;
      case Level::kArgArray:
        ArgArrayNumber(v.i);
        return true;  // the key stays: more elements follow
      case Level::kDevice:
        DeviceNumber(v.i);
        break;
      case Level::kTop:
        if (key_ == Field::kBaseTime && !BaseTime(v)) return false;
        break;
      default:
        break;
    }
    key_ = Field::kNone;
    return true;
  }

  void EventNumber(JsonNumber v) {
    switch (key_) {
      case Field::kPid:
        SetInt32(&ev_.pid, v.i);
        break;
      case Field::kTid:
        SetInt32(&ev_.tid, v.i);
        break;
      case Field::kTs:
        ev_.ts = v.d;
        ev_.has_ts = true;
        break;
      case Field::kDur:
        ev_.dur = v.d;
        break;
      default:
        break;
    }
  }

  void ArgNumber(JsonNumber v) {
    const std::optional<int64_t>& i = v.i;
    switch (key_) {
      case Field::kCorrelation:
        // Negative: "none" in some exporters. Above 2^40: not a CUPTI id.
        if (i && *i < 0) {
          ev_.correlation = -1;
        } else if (std::optional<int64_t> c = InRange(i, 0, kMaxCorrelation)) {
          ev_.correlation = *c;
        } else {
          ev_.invalid = true;
        }
        break;
      case Field::kExternalId:
        // Kineto's link from a kernel or API call to the CPU operator that issued it. One
        // that does not fit (negative, past 2^40, fractional) is dropped, not the event: the
        // event is still good for everything else in the report.
        ev_.external_id = InRange(i, 0, kMaxCorrelation).value_or(-1);
        break;
      case Field::kDevice:
        // Negative: not given (the pid names the GPU row then, as in Kineto).
        SetInt32(&ev_.device, i && *i < 0 ? std::optional<int64_t>(-1) : i, -1);
        break;
      case Field::kStream:
        SetInt32(&ev_.stream, i && *i < 0 ? std::optional<int64_t>(-1) : i, -1);
        break;
      case Field::kRegisters:
        SetUint32(&ev_.config.registers_per_thread, i);
        break;
      case Field::kSharedMemory:
        SetUint32(&ev_.config.shared_memory_bytes, i);
        break;
      case Field::kBytes:
        if (i && *i >= 0) {
          ev_.bytes = static_cast<uint64_t>(*i);
        } else {
          ev_.invalid = true;
        }
        break;
      case Field::kCopyKind:
        ev_.copy_kind = CopyKindFromCupti(i.value_or(0));
        break;
      case Field::kSrcKind:
        ev_.src_kind = MemoryKindFromCupti(i.value_or(0));
        break;
      case Field::kDstKind:
        ev_.dst_kind = MemoryKindFromCupti(i.value_or(0));
        break;
      case Field::kCounter:
        ev_.counters[counter_] = static_cast<float>(v.d);
        break;
      default:
        break;
    }
  }

  // An element of "grid" or "block".
  void ArgArrayNumber(const std::optional<int64_t>& i) {
    if (array_index_ < 3) {
      uint32_t* dims = array_key_ == Field::kGrid ? ev_.config.grid : ev_.config.block;
      SetUint32(&dims[array_index_], i);
      ++array_index_;
    }
  }

  void DeviceNumber(const std::optional<int64_t>& i) {
    // A property that is not a count (negative, fractional, past 2^32) is left unset: the
    // analysis then uses its default for that device and says so.
    std::optional<int64_t> u = InRange(i, 0, UINT32_MAX);
    uint32_t value = u ? static_cast<uint32_t>(*u) : 0;
    switch (key_) {
      case Field::kDevId:
        if (std::optional<int64_t> id = InRange(i, 0, INT32_MAX)) {
          dev_.id = static_cast<int32_t>(*id);
        } else {
          dev_invalid_ = true;
        }
        break;
      case Field::kNumSms:
        dev_.num_sms = value;
        break;
      case Field::kMaxThreadsPerSm:
        dev_.max_threads_per_sm = value;
        break;
      case Field::kMaxThreadsPerBlock:
        dev_.max_threads_per_block = value;
        break;
      case Field::kRegsPerSm:
        dev_.regs_per_sm = value;
        break;
      case Field::kSmemPerSm:
        dev_.shared_memory_per_sm = value;
        break;
      case Field::kMaxBlocksPerSm:
        dev_.max_blocks_per_sm = value;
        break;
      case Field::kWarpSize:
        dev_.warp_size = value;
        break;
      case Field::kMajor:
        dev_.compute_major = static_cast<int32_t>(InRange(i, 0, 1000).value_or(0));
        break;
      case Field::kMinor:
        dev_.compute_minor = static_cast<int32_t>(InRange(i, 0, 1000).value_or(0));
        break;
      default:
        break;
    }
  }

  // baseTimeNanoseconds. False stops the parse (error_ says why).
  bool BaseTime(JsonNumber v) {
    if (std::optional<int64_t> base = InRange(v.i, 0, kMaxTimeNs)) {
      base_time_ns_ = *base;
      has_base_time_ = true;
      return sink_ == nullptr || AlignClock();
    }
    Fail(absl::StatusCode::kInvalidArgument,
         absl::StrCat("baseTimeNanoseconds ", v.d,
                      " is not a Unix time in ns (expected an integer from 0 to ", kMaxTimeNs, ")"),
         "Fix or remove that field (profd and torch.profiler write Unix ns).");
    return false;
  }

  // Sink mode: events go out as they are read, so this file's clock shift onto the trace's (the
  // first file's baseTimeNanoseconds) must be known before its first event. Trace writers put the
  // base in the header; a file that gives it after events it would have moved is refused.
  bool AlignClock() {
    if (!trace_->has_base_time) {
      trace_->has_base_time = true;
      trace_->base_time_ns = base_time_ns_;
    }
    shift_ = base_time_ns_ - trace_->base_time_ns;  // both in [0, kMaxTimeNs]: fits
    if (emitted_ && shift_ != 0) {
      Fail(absl::StatusCode::kInvalidArgument,
           "baseTimeNanoseconds comes after events that it would move onto the first file's clock",
           "Analyse this file on its own, or put baseTimeNanoseconds before \"traceEvents\".");
      return false;
    }
    return true;
  }

  // Sink mode: the event onto the trace's clock, or false (counted) if that moves it out of range.
  template <typename E>
  bool Shift(E& e) {
    emitted_ = true;
    e.start_ns += shift_;  // |start| <= 2^62 and |shift| <= 2^62: no overflow
    if (TimeWithinLimits(e.start_ns, e.dur_ns)) return true;
    ++sink_invalid_;
    return false;
  }

  // False stops the parse (a limit was reached; error_ says which).
  bool FinishEvent() {
    if (ev_.ph == 'X' || ev_.ph == 'i') ++records_;
    if (ev_.ph == 'C' && ev_.cat == Cat::kGpuCounters && ev_.has_ts) return FinishCounters();
    if (ev_.ph != 'X' || !ev_.has_ts) return true;
    // ts and dur are µs (doubles): NaN, Inf, a negative duration or a time past the model's
    // limits cannot be placed on a timeline.
    std::optional<int64_t> start = ScaledRound(ev_.ts, 1000.0, kMinTimeNs, kMaxTimeNs);
    std::optional<int64_t> dur = ScaledRound(ev_.dur, 1000.0, 0, kMaxDurationNs);
    if (!start || !dur || (ev_.invalid && ev_.cat != Cat::kOther)) {
      ++invalid_events_;
      return true;
    }
    if (*start < start_ns_) start_ns_ = *start;
    if (*start + *dur > end_ns_) end_ns_ = *start + *dur;
    if (ev_.cat == Cat::kOther) return true;
    if (ev_.cat == Cat::kCpuOp && IsFilteredOperator(ev_.name)) return true;
    if (sink_ == nullptr &&
        trace_->gpu.size() + trace_->host.size() + trace_->ops.size() >= limits_.max_events) {
      Fail(absl::StatusCode::kResourceExhausted,
           absl::StrCat("more than ", limits_.max_events,
                        " GPU and CUDA API events, the most one analysis holds"),
           "Analyse a shorter capture, or fewer files at once. (PyTorch's CPU operators count "
           "as events here too.)");
      return false;
    }
    StoreEvent(*start, *dur);
    return true;
  }

  // One hardware counter sample (profd's --gpu-metrics): on the GPU row its pid names, over
  // [ts, ts + dur). Not a record, and outside the window: the samples run past the window's ends.
  bool FinishCounters() {
    std::optional<int64_t> start = ScaledRound(ev_.ts, 1000.0, kMinTimeNs, kMaxTimeNs);
    std::optional<int64_t> dur = ScaledRound(ev_.dur, 1000.0, 0, kMaxDurationNs);
    if (!start || !dur || *dur == 0 || ev_.invalid) return true;
    if (sink_ == nullptr && trace_->counters.size() >= limits_.max_events) {
      Fail(absl::StatusCode::kResourceExhausted,
           absl::StrCat("more than ", limits_.max_events,
                        " hardware counter samples, the most one analysis holds"),
           "Analyse a shorter capture, or fewer files at once.");
      return false;
    }
    CounterSample c;
    c.start_ns = *start;
    c.dur_ns = *dur;
    c.device = ev_.pid;
    c.file = file_;
    c.values = ev_.counters;
    if (sink_ == nullptr) {
      trace_->counters.push_back(c);
    } else if (Shift(c)) {
      sink_->Add(c);
    }
    return true;
  }

  void StoreEvent(int64_t start, int64_t dur) {
    switch (ev_.cat) {
      case Cat::kKernel:
      case Cat::kMemcpy:
      case Cat::kMemset: {
        GpuActivity a;
        a.start_ns = start;
        a.dur_ns = dur;
        a.correlation = Offset(ev_.correlation);
        a.bytes = ev_.bytes;
        a.name = trace_->names.Intern(ev_.name);
        a.device = static_cast<int32_t>(ev_.device >= 0 ? ev_.device : ev_.pid);
        a.stream = static_cast<int32_t>(ev_.stream >= 0 ? ev_.stream : ev_.tid);
        a.external_id = Offset(ev_.external_id);
        a.file = file_;
        if (ev_.cat == Cat::kKernel) {
          a.type = GpuActivity::Type::kKernel;
          a.launch_config = trace_->InternLaunchConfig(ev_.config);
        } else if (ev_.cat == Cat::kMemcpy) {
          a.type = GpuActivity::Type::kMemcpy;
          a.copy_kind = ev_.copy_kind;
          a.src_kind = ev_.src_kind;
          a.dst_kind = ev_.dst_kind;
          ParseCopyName(ev_.name, &a);
        } else {
          a.type = GpuActivity::Type::kMemset;
        }
        if (sink_ == nullptr) {
          trace_->gpu.push_back(a);
        } else if (Shift(a)) {
          sink_->Add(a);
        }
        break;
      }
      case Cat::kRuntime:
      case Cat::kDriver:
      case Cat::kSync: {
        HostCall c;
        c.start_ns = start;
        c.dur_ns = dur;
        c.correlation = Offset(ev_.correlation);
        c.name = trace_->names.Intern(ev_.name);
        c.pid = static_cast<int32_t>(ev_.pid);
        c.tid = static_cast<int32_t>(ev_.tid);
        c.file = file_;
        c.type = ev_.cat == Cat::kRuntime  ? HostCall::Type::kRuntime
                 : ev_.cat == Cat::kDriver ? HostCall::Type::kDriver
                                           : HostCall::Type::kSync;
        if (sink_ == nullptr) {
          trace_->host.push_back(c);
        } else {
          // The process that issued the file's CUDA calls: here the first one's (a file holds
          // one process's calls); ReadTraceFile's in-memory count takes the most frequent.
          InputFile& f = trace_->files[file_];
          if (f.host_pid < 0 && c.type != HostCall::Type::kSync) f.host_pid = c.pid;
          if (Shift(c)) sink_->Add(c);
        }
        break;
      }
      case Cat::kCpuOp:
      case Cat::kUserAnnotation:
      case Cat::kOverhead: {
        CpuOp op;
        op.start_ns = start;
        op.dur_ns = dur;
        op.external_id = Offset(ev_.external_id);
        op.name = trace_->names.Intern(OperatorKey(ev_.name));
        op.pid = ev_.pid;
        op.tid = ev_.tid;
        op.file = file_;
        op.kind = ev_.cat == Cat::kCpuOp            ? CpuOp::Kind::kOperator
                  : ev_.cat == Cat::kUserAnnotation ? CpuOp::Kind::kUserAnnotation
                                                    : CpuOp::Kind::kOverhead;
        if (sink_ == nullptr) {
          trace_->ops.push_back(op);
        } else if (Shift(op)) {
          sink_->Add(op);
        }
        break;
      }
      case Cat::kOther:
      case Cat::kGpuCounters:
        break;
    }
  }

  int64_t Offset(int64_t id) const { return id >= 0 ? id + id_offset_ : id; }

  Trace* trace_;
  uint16_t file_;
  TraceEventSink* const sink_;
  const ReadLimits limits_;
  const int64_t id_offset_;
  int64_t shift_ = 0;     // sink mode: this file's clock onto the trace's
  bool emitted_ = false;  // sink mode: an event went out
  uint64_t sink_invalid_ = 0;
  Level level_ = Level::kRoot;
  Field key_ = Field::kNone;
  Field array_key_ = Field::kNone;
  int array_index_ = 0;
  int skip_ = 0;
  int depth_ = 0;
  bool dev_invalid_ = false;
  size_t counter_ = 0;  // Field::kCounter: which
  absl::StatusCode error_code_ = absl::StatusCode::kOk;
  std::string error_;
  std::string error_advice_;
  uint64_t invalid_events_ = 0;
  bool events_in_root_array_ = false;
  bool saw_events_ = false;
  bool saw_profd_ = false;
  bool has_base_time_ = false;
  int64_t base_time_ns_ = 0;
  uint64_t events_ = 0;
  uint64_t records_ = 0;
  int64_t start_ns_ = INT64_MAX;
  int64_t end_ns_ = INT64_MIN;
  Event ev_;
  DeviceProperties dev_;
};

// Why a file cannot be read, in the order a reader meets the problems; OK when it can.
absl::Status ParseOutcome(const TraceHandler& handler, const rapidjson::ParseResult& result,
                          const absl::Status& source_status, const std::string& label,
                          const ReadLimits& limits) {
  if (!source_status.ok()) {
    return absl::Status(source_status.code(), absl::StrCat(label, ": ", source_status.message()));
  }
  if (handler.too_deep()) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": JSON nested deeper than ", kMaxJsonDepth, " levels at byte ", result.Offset(),
        ". A Chrome trace-event file nests about 6 levels; this is not a trace (or a corrupt "
        "one)."));
  }
  if (handler.error_code() != absl::StatusCode::kOk) {
    return absl::Status(handler.error_code(),
                        absl::StrCat(label, ": ", handler.error(), " at byte ", result.Offset(),
                                     ". ", handler.error_advice()));
  }
  if (result.IsError()) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": not a valid JSON trace: ", rapidjson::GetParseError_En(result.Code()),
        " at byte ", result.Offset(),
        ". Expected Chrome trace-event JSON (an object with \"traceEvents\", as written by profd "
        "or torch.profiler's export_chrome_trace), plain or gzip."));
  }
  if (!handler.saw_events() || (limits.require_object && handler.events_in_root_array())) {
    return absl::InvalidArgumentError(absl::StrCat(
        label,
        ": no \"traceEvents\" array found in a top-level object. Expected Chrome trace-event "
        "JSON as written by profd or torch.profiler's export_chrome_trace."));
  }
  return absl::OkStatus();
}

// The sizes of the trace's tables before a file's events were added.
struct TableSizes {
  size_t gpu, host, ops, counters;
};

// Moves the file's events (those after `before`) by `shift` and drops those that leave the
// model's range; returns how many were dropped.
uint64_t ShiftFileEvents(int64_t shift, const TableSizes& before, Trace* trace) {
  uint64_t dropped = 0;
  auto shifted_out = [&](auto& event) {
    event.start_ns += shift;  // |start| <= 2^62 and |shift| <= 2^62: no overflow
    return !TimeWithinLimits(event.start_ns, event.dur_ns);
  };
  auto drop = [&](auto& events, size_t first) {
    auto it = std::remove_if(events.begin() + first, events.end(), shifted_out);
    dropped += static_cast<uint64_t>(events.end() - it);
    events.erase(it, events.end());
  };
  drop(trace->gpu, before.gpu);
  drop(trace->host, before.host);
  drop(trace->ops, before.ops);
  drop(trace->counters, before.counters);
  return dropped;
}

// The process that issued the file's CUDA calls: the one with most of them (ties: lowest pid).
void SetHostPid(const Trace& trace, size_t host_before, InputFile* f) {
  absl::flat_hash_map<int32_t, uint64_t> calls_per_pid;
  for (size_t i = host_before; i < trace.host.size(); ++i) {
    if (trace.host[i].type != HostCall::Type::kSync) ++calls_per_pid[trace.host[i].pid];
  }
  uint64_t best = 0;
  for (const auto& [pid, n] : calls_per_pid) {
    if (n > best || (n == best && pid < f->host_pid)) {
      best = n;
      f->host_pid = pid;
    }
  }
}

absl::Status Parse(ChunkSource* source, const std::string& label, Trace* trace,
                   TraceEventSink* sink, const ReadLimits& limits) {
  if (trace->files.size() >= 0xffff) {
    return absl::InvalidArgumentError("more than 65535 trace files in one analysis");
  }
  uint16_t file = static_cast<uint16_t>(trace->files.size());
  const TableSizes before = {trace->gpu.size(), trace->host.size(), trace->ops.size(),
                             trace->counters.size()};
  // In place from the start: a sink's analysis looks the file up while the events come.
  trace->files.emplace_back();
  trace->files.back().path = label;
  TraceHandler handler(trace, file, sink, limits);
  rapidjson::Reader reader;
  rapidjson::ParseResult result;
  size_t bytes = 0;
  absl::Status source_status;
  {
    PrefetchStream stream(source);
    result = reader.Parse<rapidjson::kParseNanAndInfFlag | rapidjson::kParseTrailingCommasFlag>(
        stream, handler);
    bytes = stream.bytes();
    source_status = stream.status();
  }
  if (absl::Status s = ParseOutcome(handler, result, source_status, label, limits); !s.ok()) {
    return s;
  }
  uint64_t invalid = handler.invalid_events() + handler.sink_invalid();
  // Align this file's clock with the first file's (our writer stores ts relative to its base).
  // Both bases lie in [0, kMaxTimeNs], so the shift fits; a shifted event can still leave the
  // model's range (a base a century off): those are dropped like any impossible time. A sink's
  // events were shifted as they went out (TraceHandler::AlignClock).
  int64_t shift = 0;
  if (handler.has_base_time()) {
    if (!trace->has_base_time) {
      trace->has_base_time = true;
      trace->base_time_ns = handler.base_time_ns();
    } else {
      shift = handler.base_time_ns() - trace->base_time_ns;
    }
  }
  if (shift != 0 && sink == nullptr) invalid += ShiftFileEvents(shift, before, trace);
  if (handler.start_ns() <= handler.end_ns()) {
    auto clamp = [](int64_t t) {
      return std::clamp<int64_t>(t, kMinTimeNs, kMaxTimeNs + kMaxDurationNs);
    };
    trace->Cover(clamp(SaturatingAdd(handler.start_ns(), shift)),
                 clamp(SaturatingAdd(handler.end_ns(), shift)));
  }
  InputFile& f = trace->files[file];
  f.format = handler.saw_profd() ? "profd" : "kineto";
  f.gzip = source->gzip();
  f.bytes_read = bytes;
  // A profd trace counts what its capture counted; any other trace every event it holds.
  f.events = handler.saw_profd() ? handler.records() : handler.events();
  f.invalid_events = invalid;
  if (sink == nullptr) SetHostPid(*trace, before.host, &f);
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadTraceFile(const std::string& path, Trace* trace, const ReadLimits& limits) {
  return StreamTraceFile(path, trace, nullptr, limits);
}

absl::Status StreamTraceFile(const std::string& path, Trace* tables, TraceEventSink* sink,
                             const ReadLimits& limits) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open trace ", path, ": ", std::strerror(errno),
                                            ". Give the path of a .json or .json.gz trace."));
  }
  gzbuffer(f, 1 << 20);
  GzFileSource source(f);
  return Parse(&source, path, tables, sink, limits);
}

absl::Status StreamTrace(const ReadChunk& read, const std::string& label, Trace* tables,
                         TraceEventSink* sink, const ReadLimits& limits) {
  FunctionSource source(read);
  return Parse(&source, label, tables, sink, limits);
}

absl::Status ReadTraceBuffer(std::string_view data, const std::string& label, Trace* trace,
                             const ReadLimits& limits) {
  MemorySource source(data);
  return Parse(&source, label, trace, nullptr, limits);
}

absl::StatusOr<Trace> ReadTraceFiles(const std::vector<std::string>& paths,
                                     const ReadLimits& limits) {
  Trace trace;
  for (const std::string& path : paths) {
    absl::Status s = ReadTraceFile(path, &trace, limits);
    if (!s.ok()) return s;
  }
  return trace;
}

}  // namespace profd::analysis
