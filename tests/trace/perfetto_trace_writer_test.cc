// PerfettoTraceWriter against Perfetto's schema and against the JSON trace of the same batches.
// Each trace is decoded with tests/support/perfetto/perfetto_subset.proto (Perfetto's field
// numbers and types) and read as a reader does it (tests/support/perfetto/perfetto_trace.h):
// incremental state, clock snapshot, track descriptions, slices matched in time order. Then every
// slice must be the JSON trace's event with the same row, name, start and end to the nanosecond,
// the same arguments, and the same launch -> GPU arrows.
#include "daemon/trace/perfetto_trace_writer.h"

#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/trace/capture_analysis.h"
#include "daemon/trace/chrome_trace_writer.h"
#include "daemon/trace/trace_repair.h"
#include "gtest/gtest.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "tests/support/fixtures.h"
#include "tests/support/perfetto/perfetto_trace.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using testing::PerfettoTraceContents;
using testing::TempDir;

// Writes the batches in the format; returns the file.
std::string Write(TraceFormat format, const TempDir& dir, const TraceProcess& process,
                  const std::vector<v1::EventBatch>& batches,
                  const std::vector<GpuCounterReading>& counters = {},
                  const TraceWriter::Footer& footer = {}) {
  const std::string path = dir.File(TraceFileName(process.pid, format));
  auto writer = TraceWriter::Create(format, path, process);
  EXPECT_TRUE(writer.ok()) << writer.status();
  StringTable names;
  for (const v1::EventBatch& b : batches) {
    names.Add(b);
    EXPECT_TRUE((*writer)->Write(b, names).ok());
  }
  if (!counters.empty()) {
    EXPECT_TRUE((*writer)->WriteCounters(0, counters).ok());
  }
  EXPECT_TRUE((*writer)->Finish(footer).ok());
  return path;
}

// A slice as both formats can say it: its row, name, times (ns since the base) and arguments.
using Row = std::string;
struct Slice {
  Row row;
  std::string name;
  int64_t start = 0, end = 0;
  std::map<std::string, std::string> args;
  bool operator<(const Slice& o) const {
    return std::tie(row, start, end, name) < std::tie(o.row, o.start, o.end, o.name);
  }
};

// µs with three decimals ("1234.567", "-0.001") as ns, exactly (numbers are read as their text).
int64_t MicrosText(const rapidjson::Value& v) {
  std::string text = v.GetString();
  const bool negative = text[0] == '-';
  if (negative) text.erase(0, 1);
  const size_t dot = text.find('.');
  int64_t whole = 0, frac = 0;
  EXPECT_TRUE(absl::SimpleAtoi(text.substr(0, dot), &whole)) << text;
  if (dot != std::string::npos) {
    std::string f = text.substr(dot + 1);
    f.resize(3, '0');
    EXPECT_TRUE(absl::SimpleAtoi(f, &frac)) << text;
  }
  const int64_t ns = whole * 1000 + frac;
  return negative ? -ns : ns;
}

// An argument's text: numbers as written, grid and block as [x,y,z].
std::string ArgText(const rapidjson::Value& v) {
  if (v.IsString()) return v.GetString();
  if (v.IsBool()) return v.GetBool() ? "true" : "false";
  std::vector<std::string> items;
  for (const auto& item : v.GetArray()) items.push_back(item.GetString());
  return absl::StrCat("[", absl::StrJoin(items, ","), "]");
}

struct Flows {
  std::multiset<uint64_t> starts, ends;
};

// The JSON trace's "X" events by row (host thread "thread T", "GPU d stream s", or for syncs,
// all on the process's row 0 there, "CUDA synchronization, stream s") and its arrows.
std::vector<Slice> JsonSlices(const std::string& path, uint32_t pid, Flows* flows) {
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseNumbersAsStringsFlag>(testing::ReadGzip(path).c_str());
  std::vector<Slice> out;
  for (const auto& e : doc["traceEvents"].GetArray()) {
    const std::string ph = e["ph"].GetString();
    if (ph == "s") flows->starts.insert(std::stoull(e["id"].GetString()));
    if (ph == "f") flows->ends.insert(std::stoull(e["id"].GetString()));
    if (ph != "X") continue;
    Slice s;
    const std::string p = e["pid"].GetString(), tid = e["tid"].GetString();
    const std::string cat = e["cat"].GetString();
    if (cat == "cuda_sync") {
      s.row = absl::StrCat("CUDA synchronization, stream ", e["args"]["stream"].GetString());
    } else if (p == absl::StrCat(pid)) {
      s.row = absl::StrCat("thread ", tid);
    } else {
      s.row = absl::StrCat("GPU ", p, " stream ", tid);
    }
    s.name = e["name"].GetString();
    s.start = MicrosText(e["ts"]);
    s.end = s.start + MicrosText(e["dur"]);
    if (e.HasMember("args")) {
      for (const auto& a : e["args"].GetObject()) {
        const std::string key = a.name.GetString();
        if (key == "device" || (key == "stream" && cat != "cuda_sync")) continue;  // the row
        s.args[key] = ArgText(a.value);
      }
    }
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<Slice> PerfettoSlices(const PerfettoTraceContents& trace, int64_t base, Flows* flows) {
  std::vector<Slice> out;
  for (const auto& [uuid, t] : trace.tracks) {
    Row row = t.name.substr(0, t.name.find(" (overlap "));  // a row's lanes are that row
    if (t.parent != 0 && trace.tracks.at(t.parent).name.starts_with("GPU ")) {
      row = absl::StrCat(trace.tracks.at(t.parent).name, " ", row);
    }
    for (const auto& s : t.slices) {
      out.push_back({row, s.name, static_cast<int64_t>(s.start) - base,
                     static_cast<int64_t>(s.end) - base, s.args});
      // A slice with an arrow carries its correlation id as the flow's id only (its low 32
      // bits: the file's own bits are above).
      for (const auto& flow : {s.flows, s.terminating_flows}) {
        if (!flow.empty()) {
          out.back().args.try_emplace("correlation", absl::StrCat(flow[0] & 0xffffffffu));
        }
      }
      for (uint64_t f : s.flows) flows->starts.insert(f & 0xffffffffu);
      for (uint64_t f : s.terminating_flows) flows->ends.insert(f & 0xffffffffu);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void ExpectSameSlices(const std::vector<Slice>& json, const std::vector<Slice>& perfetto) {
  ASSERT_EQ(json.size(), perfetto.size());
  for (size_t i = 0; i < json.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("slice ", i, ": ", json[i].row, " ", json[i].name));
    EXPECT_EQ(perfetto[i].row, json[i].row);
    EXPECT_EQ(perfetto[i].name, json[i].name);
    EXPECT_EQ(perfetto[i].start, json[i].start);
    EXPECT_EQ(perfetto[i].end, json[i].end);
    for (const auto& [key, value] : json[i].args) {
      auto it = perfetto[i].args.find(key);
      ASSERT_NE(it, perfetto[i].args.end()) << key;
      if (key == "memory bandwidth (GB/s)") {
        EXPECT_NEAR(std::stod(it->second), std::stod(value), 1e-5 * std::stod(value) + 1e-9);
      } else {
        EXPECT_EQ(it->second, value) << key;
      }
    }
    EXPECT_EQ(perfetto[i].args.size(), json[i].args.size());
  }
}

TEST(PerfettoTraceWriterTest, RecordedCaptureReadsAsTheJsonTraceSays) {
  std::vector<v1::EventBatch> batches = testing::ReadRecordedBatches(
      testing::SourcePath("tests/fixtures/burst_1000_kernels.batches.pb"));
  TraceProcess process;
  process.pid = 465;
  process.comm = "python3";
  process.command_line = "python3 burst.py";
  process.capture_id = "fixture";
  process.base_time_ns = static_cast<int64_t>(batches[0].clock().realtime_ns());
  TempDir dir;
  const std::string json = Write(TraceFormat::kChromeJson, dir, process, batches);
  const std::string pb = Write(TraceFormat::kPerfetto, dir, process, batches);

  PerfettoTraceContents trace = testing::ReadPerfettoTrace(pb);
  EXPECT_TRUE(trace.problems.empty()) << absl::StrJoin(trace.problems, "\n");
  EXPECT_EQ(trace.realtime_at_origin, static_cast<uint64_t>(process.base_time_ns));
  Flows json_flows, perfetto_flows;
  std::vector<Slice> from_json = JsonSlices(json, process.pid, &json_flows);
  ASSERT_GT(from_json.size(), 2000u);  // 1,000 kernels and their launches
  ExpectSameSlices(from_json, PerfettoSlices(trace, process.base_time_ns, &perfetto_flows));
  EXPECT_EQ(perfetto_flows.starts, json_flows.starts);
  EXPECT_EQ(perfetto_flows.ends, json_flows.ends);
  const testing::PerfettoTrack* p = trace.Find("python3 (pid 465)");
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->is_process);
  EXPECT_EQ(p->pid, 465);
  // The footer: the capture's facts on the process's track.
  ASSERT_EQ(p->instants.size(), 1u);
  EXPECT_EQ(p->instants[0].name, "profd capture");
  EXPECT_EQ(p->instants[0].args.at("capture_id"), "fixture");
  uint64_t events = 0;
  for (const auto& b : batches) {
    events += b.kernels_size() + b.memcpys_size() + b.memsets_size() + b.api_calls_size() +
              b.syncs_size() + b.markers_size() + b.memory_ops_size() + b.overheads_size();
  }
  EXPECT_EQ(p->instants[0].args.at("events"), absl::StrCat(events));
}

TEST(PerfettoTraceWriterTest, EveryKindOfEventAtTheEdgesReadsAsTheJsonTraceSays) {
  const uint64_t t0 = 1764520000123456789;
  TraceProcess process;
  process.pid = 4242;
  process.comm = "py\"thon\n";
  process.capture_id = "20261130T120000Z-node-0123abcd";
  process.base_time_ns = static_cast<int64_t>(t0 - 1000);
  v1::EventBatch second = testing::EveryKindOfEvent(t0 + 1000000);
  second.clear_strings();  // ids from the first batch still name its events
  const std::vector<v1::EventBatch> batches = {testing::EveryKindOfEvent(t0), second};
  TraceWriter::Footer footer;
  footer.dropped_records = 17;
  footer.truncated = true;
  v1::DeviceInfo d;
  d.set_ordinal(1);
  d.set_name("NVIDIA H200");
  footer.devices = {d};
  TempDir dir;
  const std::string json = Write(TraceFormat::kChromeJson, dir, process, batches, {}, footer);
  const std::string pb = Write(TraceFormat::kPerfetto, dir, process, batches, {}, footer);

  PerfettoTraceContents trace = testing::ReadPerfettoTrace(pb);
  EXPECT_TRUE(trace.problems.empty()) << absl::StrJoin(trace.problems, "\n");
  Flows json_flows, perfetto_flows;
  std::vector<Slice> from_json = JsonSlices(json, process.pid, &json_flows);
  ExpectSameSlices(from_json, PerfettoSlices(trace, process.base_time_ns, &perfetto_flows));
  EXPECT_EQ(perfetto_flows.starts, json_flows.starts);
  EXPECT_EQ(perfetto_flows.ends, json_flows.ends);

  // Memory operations are instants on their GPU's memory track; the footer says the drops.
  size_t memory_ops = 0;
  for (const auto& [uuid, t] : trace.tracks) {
    if (t.name == "GPU memory") memory_ops += t.instants.size();
  }
  EXPECT_EQ(memory_ops, 2 * 4u);  // 5 per batch, one past 2^62
  const testing::PerfettoTrack* p = trace.Find("py\"thon\n (pid 4242)");
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->instants.size(), 1u);
  EXPECT_EQ(p->instants[0].args.at("dropped_records"), "17");
  EXPECT_EQ(p->instants[0].args.at("truncated"), "true");
  const testing::PerfettoTrack* gpu1 = trace.Find("GPU 1");
  ASSERT_NE(gpu1, nullptr);
  ASSERT_EQ(gpu1->instants.size(), 1u);
  EXPECT_EQ(gpu1->instants[0].args.at("name"), "NVIDIA H200");
}

TEST(PerfettoTraceWriterTest, CounterSamplesAreCounterTracksUnderTheirGpu) {
  TraceProcess process;
  process.pid = 7;
  process.base_time_ns = 1'000'000'000'000;
  std::vector<GpuCounterReading> readings(3);
  for (size_t i = 0; i < readings.size(); ++i) {
    readings[i].start_ns = 1'000'000'000'000 + i * 1'000'000;
    readings[i].end_ns = readings[i].start_ns + 1'000'000;
    readings[i].values.fill(std::numeric_limits<float>::quiet_NaN());
    readings[i].values[0] = 0.25f * static_cast<float>(i);  // sm_active ratio
    readings[i].values[kGpuCounters - 1] = 1e9f;            // a bytes/s counter
  }
  TempDir dir;
  PerfettoTraceContents trace =
      testing::ReadPerfettoTrace(Write(TraceFormat::kPerfetto, dir, process, {}, readings));
  EXPECT_TRUE(trace.problems.empty()) << absl::StrJoin(trace.problems, "\n");
  const testing::PerfettoTrack* ratio =
      trace.Find(absl::StrCat("GPU 0 ", std::string(GpuCounterTraceName(0))));
  const testing::PerfettoTrack* bytes =
      trace.Find(absl::StrCat("GPU 0 ", std::string(GpuCounterTraceName(kGpuCounters - 1))));
  ASSERT_NE(ratio, nullptr);
  ASSERT_NE(bytes, nullptr);
  EXPECT_TRUE(ratio->is_counter);
  EXPECT_EQ(trace.tracks.at(ratio->parent).name, "GPU 0");
  EXPECT_EQ(bytes->unit, "B/s");
  ASSERT_EQ(ratio->counter_values.size(), 3u);
  EXPECT_EQ(ratio->counter_values[2].first, readings[2].start_ns);
  EXPECT_DOUBLE_EQ(ratio->counter_values[2].second, 0.5);
  ASSERT_EQ(bytes->counter_values.size(), 3u);
  EXPECT_DOUBLE_EQ(bytes->counter_values[1].second, 1e9);
  size_t counter_tracks = 0;
  for (const auto& [uuid, t] : trace.tracks) counter_tracks += t.is_counter;
  EXPECT_EQ(counter_tracks, 2u) << "unmeasured counters get no track";
}

// profd killed mid-capture: the packets that decompress whole are kept, the rest dropped, and
// what stays reads.
TEST(PerfettoTraceWriterTest, ACutTraceIsRepairedToItsWholePackets) {
  std::vector<v1::EventBatch> batches = testing::ReadRecordedBatches(
      testing::SourcePath("tests/fixtures/burst_1000_kernels.batches.pb"));
  TraceProcess process;
  process.pid = 465;
  process.base_time_ns = static_cast<int64_t>(batches[0].clock().realtime_ns());
  TempDir dir;
  const std::string pb = Write(TraceFormat::kPerfetto, dir, process, batches);
  const std::string whole = testing::ReadFileOrEmpty(pb);
  const size_t packets = testing::ReadPerfettoTrace(pb).packets;
  auto untouched = RepairPerfettoTrace(pb);
  ASSERT_TRUE(untouched.ok()) << untouched.status();
  EXPECT_FALSE(untouched->repaired);
  for (size_t cut : {whole.size() / 3, 2 * whole.size() / 3}) {
    SCOPED_TRACE(cut);
    const std::string path = dir.File(absl::StrCat("cut-", cut, ".pftrace.gz"));
    std::ofstream(path, std::ios::binary) << whole.substr(0, cut);
    auto repaired = RepairPerfettoTrace(path);
    ASSERT_TRUE(repaired.ok()) << repaired.status();
    EXPECT_TRUE(repaired->repaired);
    PerfettoTraceContents trace = testing::ReadPerfettoTrace(path);
    EXPECT_EQ(trace.packets, repaired->events);
    EXPECT_GT(trace.packets, 3u);
    EXPECT_LT(trace.packets, packets);
    // Slices cut in two leave a BEGIN without its END; nothing else may be wrong.
    for (const std::string& problem : trace.problems) {
      EXPECT_NE(problem.find("never ended"), std::string::npos) << problem;
    }
  }
}

// What the sequence interns is bounded whatever the agent sends: past the cap of distinct names
// or argument values (65,536; 1,000 here, through the same code) they are written inline, and
// the trace still reads as the JSON says.
TEST(PerfettoTraceWriterTest, InterningIsBoundedAndWhatIsPastItIsWrittenInline) {
  constexpr size_t kCap = 1000;
  const uint64_t t0 = 1764520000000000000;
  v1::EventBatch b;
  for (uint32_t i = 0; i < kCap + 100; ++i) {
    v1::Overhead* o = b.add_overheads();  // each its own name: "CUPTI overhead: kind <i>"
    o->set_start_ns(t0 + 10 * i);
    o->set_end_ns(t0 + 10 * i + 5);
    o->set_kind(i);
    o->set_tid(9);
    v1::Kernel* k = b.add_kernels();  // each its own grid
    k->set_start_ns(t0 + 10 * i);
    k->set_end_ns(t0 + 10 * i + 5);
    k->set_grid_x(static_cast<int32_t>(i));
    k->set_name_id(100'000 + i);  // ids past the dense range, none defined: empty names
  }
  TraceProcess process;
  process.pid = 5;
  process.base_time_ns = static_cast<int64_t>(t0);
  TempDir dir;
  const std::string json = Write(TraceFormat::kChromeJson, dir, process, {b});
  const std::string pb = dir.File(TraceFileName(process.pid, TraceFormat::kPerfetto));
  auto writer = PerfettoTraceWriter::Create(pb, process, 1, nullptr, kCap);
  ASSERT_TRUE(writer.ok()) << writer.status();
  StringTable names;
  names.Add(b);
  ASSERT_TRUE((*writer)->Write(b, names).ok());
  ASSERT_TRUE((*writer)->Finish({}).ok());
  PerfettoTraceContents trace = testing::ReadPerfettoTrace(pb);
  EXPECT_TRUE(trace.problems.empty()) << absl::StrJoin(trace.problems, "\n");
  Flows json_flows, perfetto_flows;
  ExpectSameSlices(JsonSlices(json, process.pid, &json_flows),
                   PerfettoSlices(trace, process.base_time_ns, &perfetto_flows));
}

// One host thread's slices that overlap without nesting (an NVTX range popped inside a call, an
// overhead record straddling two calls): a reader pairs a track's ENDs with its BEGINs in time
// order, so each must end where the JSON trace says, which needs lanes on the thread's row too.
TEST(PerfettoTraceWriterTest, OverlappingSlicesOfAHostThreadKeepTheirOwnEnds) {
  const uint64_t t0 = 1764520000000000000;
  v1::EventBatch b;
  auto name = [&](uint32_t id, const std::string& text) {
    v1::StringDef* d = b.add_strings();
    d->set_id(id);
    d->set_value(text);
  };
  name(1, "step");
  name(2, "cudaMemcpy");
  name(3, "forward");
  auto marker = [&](uint64_t start, uint64_t end, uint32_t name_id) {
    v1::Marker* m = b.add_markers();
    m->set_start_ns(t0 + start);
    m->set_end_ns(t0 + end);
    m->set_name_id(name_id);
    m->set_tid(9);
  };
  auto call = [&](uint64_t start, uint64_t end, uint32_t correlation) {
    v1::ApiCall* a = b.add_api_calls();
    a->set_start_ns(t0 + start);
    a->set_end_ns(t0 + end);
    a->set_name_id(2);
    a->set_correlation(correlation);
    a->set_tid(9);
  };
  call(10, 20, 1);    // inside "step"
  call(50, 150, 2);   // starts inside "step", ends after it
  call(160, 170, 3);  // after both
  marker(0, 100, 1);  // "step", written after the calls it holds
  marker(40, 60, 3);  // "forward": overlaps the second call's start only
  v1::Overhead* o = b.add_overheads();
  o->set_start_ns(t0 + 15);
  o->set_end_ns(t0 + 55);  // straddles the first two calls
  o->set_tid(9);
  TraceProcess process;
  process.pid = 21;
  process.base_time_ns = static_cast<int64_t>(t0);
  TempDir dir;
  const std::string json = Write(TraceFormat::kChromeJson, dir, process, {b});
  const std::string pb = Write(TraceFormat::kPerfetto, dir, process, {b});
  PerfettoTraceContents trace = testing::ReadPerfettoTrace(pb);
  EXPECT_TRUE(trace.problems.empty()) << absl::StrJoin(trace.problems, "\n");
  Flows json_flows, perfetto_flows;
  ExpectSameSlices(JsonSlices(json, process.pid, &json_flows),
                   PerfettoSlices(trace, process.base_time_ns, &perfetto_flows));
  // The lanes are the thread's: under its track, so the rows stay together.
  const testing::PerfettoTrack* thread = trace.Find("thread 9");
  ASSERT_NE(thread, nullptr);
  EXPECT_TRUE(thread->is_thread);
  size_t lanes = 0;
  for (const auto& [uuid, t] : trace.tracks) {
    if (t.name.starts_with("thread 9 (overlap ")) {
      ++lanes;
      EXPECT_EQ(t.parent, thread->uuid);
    }
  }
  EXPECT_GT(lanes, 0u);
  EXPECT_LE(lanes, 3u) << "nested slices share a lane";
}

// A CUDA graph launch is one call and many kernels with its correlation id: one arrow from the
// launch to each kernel, as the JSON trace's flow events draw them.
TEST(PerfettoTraceWriterTest, AGraphLaunchDrawsOneArrowPerKernel) {
  const uint64_t t0 = 1764520000000000000;
  v1::EventBatch b;
  v1::StringDef* d = b.add_strings();
  d->set_id(1);
  d->set_value("cudaGraphLaunch");
  d = b.add_strings();
  d->set_id(2);
  d->set_value("graph_kernel");
  v1::ApiCall* launch = b.add_api_calls();
  launch->set_start_ns(t0 + 100);
  launch->set_end_ns(t0 + 200);
  launch->set_name_id(1);
  launch->set_correlation(77);
  launch->set_tid(3);
  for (int i = 0; i < 3; ++i) {
    v1::Kernel* k = b.add_kernels();
    k->set_start_ns(t0 + 1000 + 100 * i);
    k->set_end_ns(t0 + 1050 + 100 * i);
    k->set_name_id(2);
    k->set_correlation(77);
    k->set_graph_id(5);
    k->set_stream(7);
  }
  TraceProcess process;
  process.pid = 22;
  process.base_time_ns = static_cast<int64_t>(t0);
  TempDir dir;
  PerfettoTraceContents trace =
      testing::ReadPerfettoTrace(Write(TraceFormat::kPerfetto, dir, process, {b}));
  EXPECT_TRUE(trace.problems.empty()) << absl::StrJoin(trace.problems, "\n");
  const testing::PerfettoTrack* thread = trace.Find("thread 3");
  ASSERT_NE(thread, nullptr);
  std::set<uint64_t> kernel_starts;
  for (const testing::PerfettoArrow& arrow : trace.arrows) {
    EXPECT_EQ(arrow.from_track, thread->uuid);
    EXPECT_EQ(arrow.from_start, t0 + 100);
    kernel_starts.insert(arrow.to_start);
  }
  EXPECT_EQ(trace.arrows.size(), 3u);
  EXPECT_EQ(kernel_starts, (std::set<uint64_t>{t0 + 1000, t0 + 1100, t0 + 1200}));
}

// The agent may define a string id again with another text: events after it carry the new text,
// in the trace (as in the JSON trace) and in the report read back from it.
TEST(PerfettoTraceWriterTest, ARedefinedStringIdTakesItsNewText) {
  const uint64_t t0 = 1764520000000000000;
  auto batch = [&](uint64_t at, const std::string& text) {
    v1::EventBatch b;
    v1::StringDef* d = b.add_strings();
    d->set_id(5);
    d->set_value(text);
    v1::Kernel* k = b.add_kernels();
    k->set_start_ns(at);
    k->set_end_ns(at + 10);
    k->set_name_id(5);
    k->set_correlation(static_cast<uint32_t>(at - t0));
    return b;
  };
  const std::vector<v1::EventBatch> batches = {
      batch(t0, "first_kernel"), batch(t0 + 100, "second_kernel"), batch(t0 + 200, "first_kernel")};
  TraceProcess process;
  process.pid = 23;
  process.base_time_ns = static_cast<int64_t>(t0);
  TempDir dir;
  const std::string json = Write(TraceFormat::kChromeJson, dir, process, batches);
  const std::string pb = Write(TraceFormat::kPerfetto, dir, process, batches);
  PerfettoTraceContents trace = testing::ReadPerfettoTrace(pb);
  EXPECT_TRUE(trace.problems.empty()) << absl::StrJoin(trace.problems, "\n");
  Flows json_flows, perfetto_flows;
  std::vector<Slice> from_json = JsonSlices(json, process.pid, &json_flows);
  ASSERT_EQ(from_json.size(), 3u);
  EXPECT_EQ(from_json[1].name, "second_kernel");
  ExpectSameSlices(from_json, PerfettoSlices(trace, process.base_time_ns, &perfetto_flows));
  // profd's own reader (a repaired capture's report) names them the same.
  absl::StatusOr<analysis::Report> report = AnalyzeTraceFilesOfAnyFormat({pb});
  ASSERT_TRUE(report.ok()) << report.status();
  std::map<std::string, uint64_t> counts;
  for (const auto& k : report->top_kernels) counts[k.name] = k.stats.count;
  EXPECT_EQ(counts, (std::map<std::string, uint64_t>{{"first_kernel", 2}, {"second_kernel", 1}}));
}

// The traces of two processes of one capture opened together (concatenated: a Trace is its
// packets): their packet sequences, tracks and arrows must not be taken for each other's.
TEST(PerfettoTraceWriterTest, TwoProcessesTracesKeepApartWhenMerged) {
  std::vector<v1::EventBatch> batches = testing::ReadRecordedBatches(
      testing::SourcePath("tests/fixtures/burst_1000_kernels.batches.pb"));
  TempDir dir;
  std::vector<PerfettoTraceContents> traces;
  for (uint32_t pid : {465u, 466u}) {
    TraceProcess process;
    process.pid = pid;
    process.hostname = "node-1";
    process.capture_id = "20261201T120000Z-node-1-0123abcd";
    process.base_time_ns = static_cast<int64_t>(batches[0].clock().realtime_ns());
    TempDir one;
    traces.push_back(
        testing::ReadPerfettoTrace(Write(TraceFormat::kPerfetto, one, process, batches)));
    EXPECT_TRUE(traces.back().problems.empty()) << absl::StrJoin(traces.back().problems, "\n");
  }
  EXPECT_NE(traces[0].sequence_id, traces[1].sequence_id);
  std::set<uint64_t> uuids, flows;
  size_t tracks = 0, flow_ids = 0;
  for (const PerfettoTraceContents& t : traces) {
    for (const auto& [uuid, track] : t.tracks) {
      uuids.insert(uuid);
      ++tracks;
      for (const auto& slice : track.slices) {
        for (uint64_t f : slice.flows) {
          flows.insert(f);
          ++flow_ids;
        }
      }
    }
  }
  EXPECT_EQ(uuids.size(), tracks) << "a track uuid used by both files";
  EXPECT_GT(flow_ids, 1000u);
  EXPECT_EQ(flows.size(), flow_ids) << "an arrow id used by both files";
}

}  // namespace
}  // namespace profd
