#include "daemon/store/trace_import.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "daemon/store/digest.h"
#include "google/protobuf/util/json_util.h"
#include "profd/v1/profd.pb.h"
#include "rapidjson/error/en.h"
#include "rapidjson/reader.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace profd::store {

namespace fs = std::filesystem;

namespace {

absl::Mutex summarizer_mu;
ImportSummarizer& Summarizer() {
  static auto* summarizer = new ImportSummarizer();  // never destroyed: used at exit too
  return *summarizer;
}

// A RapidJSON input stream over zlib's gzread, which reads gzip and plain files alike.
class GzReadStream {
 public:
  using Ch = char;
  explicit GzReadStream(gzFile file) : file_(file), buffer_(1 << 16) { Fill(); }
  Ch Peek() const { return pos_ < end_ ? buffer_[pos_] : '\0'; }
  Ch Take() {
    if (pos_ >= end_) return '\0';
    Ch c = buffer_[pos_++];
    ++count_;
    if (pos_ >= end_) Fill();
    return c;
  }
  size_t Tell() const { return count_; }
  bool error() const { return error_; }
  // Write side: unused by the reader.
  Ch* PutBegin() { return nullptr; }
  void Put(Ch) {}
  void Flush() {}
  size_t PutEnd(Ch*) { return 0; }

 private:
  void Fill() {
    int n = gzread(file_, buffer_.data(), static_cast<unsigned>(buffer_.size()));
    if (n < 0) error_ = true;
    pos_ = 0;
    end_ = n > 0 ? static_cast<size_t>(n) : 0;
  }
  gzFile file_;
  std::vector<char> buffer_;
  size_t pos_ = 0, end_ = 0, count_ = 0;
  bool error_ = false;
};

struct KernelStats {
  uint64_t count = 0;
  double total_ns = 0, min_ns = 0, max_ns = 0;
};

// Reads traceEvents one event at a time and keeps what the summary needs.
class SummaryHandler : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, SummaryHandler> {
 public:
  bool Default() { return Scalar(nullptr, 0, false); }
  bool Null() { return Scalar(nullptr, 0, false); }
  bool Bool(bool) { return Scalar(nullptr, 0, false); }
  bool Int(int v) { return Scalar(nullptr, v, true); }
  bool Uint(unsigned v) { return Scalar(nullptr, v, true); }
  bool Int64(int64_t v) { return Scalar(nullptr, static_cast<double>(v), true); }
  bool Uint64(uint64_t v) { return Scalar(nullptr, static_cast<double>(v), true); }
  bool Double(double v) { return Scalar(nullptr, v, true); }
  bool String(const char* s, rapidjson::SizeType n, bool) {
    std::string value(s, n);
    return Scalar(&value, 0, false);
  }
  bool Key(const char* s, rapidjson::SizeType n, bool) {
    key_.assign(s, n);
    return true;
  }
  bool StartObject() {
    ++depth_;
    if (in_events_ && depth_ == events_depth_ + 1) event_ = Event();
    if (in_events_ && depth_ == events_depth_ + 2 && key_ == "args") in_args_ = true;
    return true;
  }
  bool EndObject(rapidjson::SizeType) {
    if (in_events_ && depth_ == events_depth_ + 2) in_args_ = false;
    if (in_events_ && depth_ == events_depth_ + 1) FinishEvent();
    --depth_;
    return true;
  }
  bool StartArray() {
    ++depth_;
    // {"traceEvents": [...]} or a bare array of events (both open in Perfetto/chrome://tracing).
    if (!in_events_ && ((depth_ == 2 && key_ == "traceEvents") || (depth_ == 1))) {
      in_events_ = true;
      found_events_ = true;
      events_depth_ = depth_;
    }
    return true;
  }
  bool EndArray(rapidjson::SizeType) {
    if (in_events_ && depth_ == events_depth_) in_events_ = false;
    --depth_;
    return true;
  }

  bool found_events() const { return found_events_; }
  uint64_t events() const { return events_; }
  uint64_t kernels() const { return kernels_; }
  int64_t host_pid() const { return host_pid_; }
  int64_t base_time_ns() const { return base_time_ns_; }

  v1::CaptureSummary Summary() const {
    v1::CaptureSummary s;
    double window_ns = events_ > 0 && last_ns_ > first_ns_ ? last_ns_ - first_ns_ : 0;
    s.set_window_ns(static_cast<uint64_t>(window_ns));
    s.set_events(events_);
    for (const auto& [device, intervals] : kernel_intervals_) {
      std::vector<std::pair<double, double>> sorted = intervals;
      std::sort(sorted.begin(), sorted.end());
      double busy = 0, start = 0, end = -1;
      for (const auto& [b, e] : sorted) {
        if (b > end) {
          if (end > start) busy += end - start;
          start = b;
          end = e;
        } else {
          end = std::max(end, e);
        }
      }
      if (end > start) busy += end - start;
      v1::GpuSummary* gpu = s.add_gpus();
      gpu->set_device(static_cast<uint32_t>(device));
      gpu->set_kernels(intervals.size());
      gpu->set_busy_ratio(window_ns > 0 ? std::min(1.0, busy / window_ns) : 0);
    }
    std::vector<std::pair<std::string, KernelStats>> top(by_name_.begin(), by_name_.end());
    std::sort(top.begin(), top.end(),
              [](const auto& a, const auto& b) { return a.second.total_ns > b.second.total_ns; });
    if (top.size() > 20) top.resize(20);
    for (const auto& [name, k] : top) {
      v1::KernelSummary* out = s.add_top_kernels();
      out->set_name(name);
      out->set_count(k.count);
      out->set_total_ns(static_cast<uint64_t>(k.total_ns));
      out->set_min_ns(static_cast<uint64_t>(k.min_ns));
      out->set_max_ns(static_cast<uint64_t>(k.max_ns));
      out->set_avg_ns(k.count ? k.total_ns / static_cast<double>(k.count) : 0);
    }
    return s;
  }

 private:
  struct Event {
    std::string ph, cat, name;
    double ts = 0, dur = 0;
    bool has_ts = false;
    int64_t pid = -1, device = -1;
  };

  bool Scalar(const std::string* s, double number, bool is_number) {
    if (!in_events_) {
      if (depth_ == 1 && key_ == "baseTimeNanoseconds" && is_number) {
        base_time_ns_ = static_cast<int64_t>(number);
      }
      return true;
    }
    if (depth_ == events_depth_ + 1) {
      if (s != nullptr) {
        if (key_ == "ph") event_.ph = *s;
        if (key_ == "cat") event_.cat = *s;
        if (key_ == "name") event_.name = *s;
      } else if (is_number) {
        if (key_ == "ts") {
          event_.ts = number;
          event_.has_ts = true;
        }
        if (key_ == "dur") event_.dur = number;
        if (key_ == "pid") event_.pid = static_cast<int64_t>(number);
      }
    } else if (in_args_ && depth_ == events_depth_ + 2 && is_number && key_ == "device") {
      event_.device = static_cast<int64_t>(number);
    }
    return true;
  }

  void FinishEvent() {
    if (event_.ph == "M") return;  // metadata, not an event
    ++events_;
    // ts/dur are microseconds (Chrome trace format); the summary is in ns.
    double begin = event_.ts * 1000, end = (event_.ts + event_.dur) * 1000;
    if (event_.has_ts) {
      if (events_with_time_++ == 0) {
        first_ns_ = begin;
        last_ns_ = end;
      }
      first_ns_ = std::min(first_ns_, begin);
      last_ns_ = std::max(last_ns_, end);
    }
    if (host_pid_ < 0 && event_.pid >= 0 &&
        (event_.cat == "cuda_runtime" || event_.cat == "cpu_op" || event_.cat == "cuda_driver")) {
      host_pid_ = event_.pid;
    }
    std::string cat = absl::AsciiStrToLower(event_.cat);
    if (cat != "kernel" || event_.ph != "X") return;
    ++kernels_;
    int64_t device = event_.device >= 0 ? event_.device : std::max<int64_t>(event_.pid, 0);
    kernel_intervals_[device].emplace_back(begin, end);
    KernelStats& k = by_name_[event_.name];
    double dur = event_.dur * 1000;
    k.min_ns = k.count == 0 ? dur : std::min(k.min_ns, dur);
    k.max_ns = std::max(k.max_ns, dur);
    k.total_ns += dur;
    ++k.count;
  }

  int depth_ = 0;
  std::string key_;
  bool in_events_ = false, found_events_ = false, in_args_ = false;
  int events_depth_ = 0;
  Event event_;
  uint64_t events_ = 0, kernels_ = 0, events_with_time_ = 0;
  double first_ns_ = 0, last_ns_ = 0;
  int64_t host_pid_ = -1;
  int64_t base_time_ns_ = 0;
  std::map<int64_t, std::vector<std::pair<double, double>>> kernel_intervals_;
  std::map<std::string, KernelStats> by_name_;
};

bool IsGzip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char magic[2] = {};
  in.read(reinterpret_cast<char*>(magic), 2);
  return in.gcount() == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

absl::Status Gzip(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  gzFile out = gzopen(to.c_str(), "wb6");
  if (!in || out == nullptr) {
    if (out) gzclose(out);
    return absl::InternalError(absl::StrCat("cannot compress ", from, " into ", to));
  }
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    std::streamsize n = in.gcount();
    if (n > 0 && gzwrite(out, buffer.data(), static_cast<unsigned>(n)) != n) {
      gzclose(out);
      return absl::InternalError(absl::StrCat("cannot write ", to));
    }
  }
  if (gzclose(out) != Z_OK) return absl::InternalError(absl::StrCat("cannot write ", to));
  return absl::OkStatus();
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

void SetImportSummarizer(ImportSummarizer summarizer) {
  absl::MutexLock lock(&summarizer_mu);
  Summarizer() = std::move(summarizer);
}

std::string NewCaptureId(const std::string& hostname, absl::Time now) {
  std::string host;
  for (char c : hostname) host.push_back(absl::ascii_isalnum(c) || c == '-' ? c : '-');
  if (host.empty()) host = "host";
  std::random_device random;
  return absl::StrCat(absl::FormatTime("%Y%m%dT%H%M%SZ", now, absl::UTCTimeZone()), "-", host, "-",
                      absl::StrFormat("%08x", random()));
}

absl::StatusOr<ImportResult> BuildImportedCapture(const ImportRequest& request) {
  gzFile in = gzopen(request.input_path.c_str(), "rb");
  if (in == nullptr) return absl::InternalError(absl::StrCat("cannot open ", request.input_path));
  GzReadStream stream(in);
  SummaryHandler handler;
  rapidjson::Reader reader;
  rapidjson::ParseResult parsed = reader.Parse(stream, handler);
  bool read_error = stream.error();
  gzclose(in);
  if (read_error) {
    return absl::InvalidArgumentError(
        absl::StrCat(request.original_name, " is a damaged gzip file: cannot decompress it"));
  }
  if (!parsed) {
    return absl::InvalidArgumentError(absl::StrCat(
        request.original_name, " is not a Chrome trace JSON (plain or .gz): ",
        rapidjson::GetParseError_En(parsed.Code()), " at byte ", parsed.Offset(),
        " of the JSON. profctl import takes profd traces and PyTorch profiler / Kineto traces"));
  }
  if (!handler.found_events()) {
    return absl::InvalidArgumentError(absl::StrCat(
        request.original_name, " is JSON but has no traceEvents array: not a Chrome/Kineto trace"));
  }

  ImportResult result;
  result.events = handler.events();
  result.kernels = handler.kernels();
  result.trace_file = absl::StrCat("trace-", std::max<int64_t>(handler.host_pid(), 0), ".json.gz");
  const std::string trace_path = absl::StrCat(request.folder, "/", result.trace_file);
  if (IsGzip(request.input_path)) {
    std::error_code ec;
    fs::copy_file(request.input_path, trace_path, fs::copy_options::overwrite_existing, ec);
    if (ec)
      return absl::InternalError(absl::StrCat("cannot write ", trace_path, ": ", ec.message()));
  } else if (absl::Status s = Gzip(request.input_path, trace_path); !s.ok()) {
    return s;
  }

  std::string summary;
  ImportSummarizer summarizer;
  {
    absl::MutexLock lock(&summarizer_mu);
    summarizer = Summarizer();
  }
  if (summarizer) {
    absl::StatusOr<std::string> s = summarizer(trace_path);
    if (!s.ok()) return s.status();
    summary = *s;
  } else {
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    options.add_whitespace = true;
    (void)google::protobuf::util::MessageToJsonString(handler.Summary(), &summary, options);
  }
  const std::string summary_path = absl::StrCat(request.folder, "/summary.json");
  if (absl::Status s = WriteFile(summary_path, summary); !s.ok()) return s;

  const int64_t now_ns = absl::ToUnixNanos(absl::Now());
  rapidjson::StringBuffer text;
  rapidjson::Writer<rapidjson::StringBuffer> w(text);
  w.StartObject();
  w.Key("capture_id");
  w.String(request.capture_id.c_str());
  w.Key("hostname");
  w.String(request.hostname.c_str());
  w.Key("label");
  w.String(request.label.c_str());
  w.Key("source");
  w.String("import");
  w.Key("imported_from");
  w.String(request.original_name.c_str());
  w.Key("requested_unix_ns");
  w.Int64(now_ns);
  w.Key("started_unix_ns");
  w.Int64(handler.base_time_ns() > 0 ? handler.base_time_ns() : now_ns);
  w.Key("events");
  w.Uint64(result.events);
  w.Key("processes");
  w.StartArray();
  if (handler.host_pid() >= 0) {
    w.StartObject();
    w.Key("pid");
    w.Int64(handler.host_pid());
    w.EndObject();
  }
  w.EndArray();
  w.Key("files");
  w.StartArray();
  for (const std::string& name : {result.trace_file, std::string("summary.json")}) {
    std::string path = absl::StrCat(request.folder, "/", name);
    absl::StatusOr<std::string> sha = Sha256OfFile(path);
    if (!sha.ok()) return sha.status();
    std::error_code ec;
    w.StartObject();
    w.Key("name");
    w.String(name.c_str());
    w.Key("bytes");
    w.Uint64(fs::file_size(path, ec));
    w.Key("sha256");
    w.String(sha->c_str());
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  if (absl::Status s = WriteFile(absl::StrCat(request.folder, "/manifest.json"), text.GetString());
      !s.ok()) {
    return s;
  }
  return result;
}

}  // namespace profd::store
