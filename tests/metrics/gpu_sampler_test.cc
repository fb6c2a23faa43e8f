// GPU utilization as profd reads it from NVML (daemon/metrics/gpu_sampler.h). NVML's
// nvmlDeviceGetUtilizationRates is its last sample period alone, so a load busy 300 ms of every
// second read 0 in every 1 s scrape on an H200; profd now averages every sample NVML buffered
// since its previous read (UtilizationAverager). Checked here on:
//  - the buffers nvmlDeviceGetSamples returned on an H200 while a GEMM loop was busy 300 ms of
//    every 1.0, 0.7 and 1.3 s (tests/fixtures/h200_nvml_samples.txt, recorded by
//    tests/gpu/record_nvml_samples.py), replayed as the sampler reads them;
//  - buffers shaped like other GPUs' (a sample every 16.7 ms, 166.7 ms, uneven spacing);
//  - the whole path, sampler -> snapshot -> /metrics text, through the fake libnvidia-ml, with
//    and without nvmlDeviceGetSamples.
#include "daemon/metrics/gpu_sampler.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "daemon/metrics/metrics_collector.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "tests/support/fixtures.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using Interval = std::pair<uint64_t, uint64_t>;  // [start, end), microseconds

constexpr uint64_t kSecondUs = 1000000;

// The fraction of (lo, hi] in which one of the busy intervals ran: what was run, the truth.
double BusyFraction(const std::vector<Interval>& busy, uint64_t lo, uint64_t hi) {
  uint64_t sum = 0;
  for (const auto& [start, end] : busy) {
    const uint64_t a = std::max(start, lo), b = std::min(end, hi);
    if (b > a) sum += b - a;
  }
  return hi > lo ? static_cast<double>(sum) / static_cast<double>(hi - lo) : 0;
}

// NVML's buffer as a reader sees it: the samples stamped up to now, the newest `capacity` of
// them, those newer than last_seen.
class NvmlBuffer {
 public:
  NvmlBuffer(std::vector<NvmlUtilizationSample> samples, size_t capacity)
      : samples_(std::move(samples)), capacity_(capacity) {}

  std::vector<NvmlUtilizationSample> Read(uint64_t last_seen_us, uint64_t now_us) const {
    auto end = std::upper_bound(
        samples_.begin(), samples_.end(), now_us,
        [](uint64_t t, const NvmlUtilizationSample& s) { return t < s.timestamp_us; });
    auto begin = end - std::min<ptrdiff_t>(capacity_, end - samples_.begin());
    std::vector<NvmlUtilizationSample> out;
    for (auto it = begin; it != end; ++it) {
      if (it->timestamp_us > last_seen_us) out.push_back(*it);
    }
    return out;
  }

 private:
  std::vector<NvmlUtilizationSample> samples_;  // by timestamp
  size_t capacity_;
};

// The sampler's reads, every interval from first_read_us to end_us, through the averager it uses.
std::vector<UtilizationAverager::Window> ReadEvery(const NvmlBuffer& nvml, uint64_t first_read_us,
                                                   uint64_t end_us, uint64_t interval_us) {
  UtilizationAverager averager;
  std::vector<UtilizationAverager::Window> windows;
  for (uint64_t now = first_read_us; now <= end_us; now += interval_us) {
    if (auto w = averager.Add(nvml.Read(averager.last_seen_us(), now))) windows.push_back(*w);
  }
  return windows;
}

// Consecutive windows merged into spans of about `span_us` (a scrape every 15 s averaging the
// sampler's windows between, or rate() over the busy-seconds counter).
std::vector<UtilizationAverager::Window> Merge(const std::vector<UtilizationAverager::Window>& ws,
                                               uint64_t span_us) {
  std::vector<UtilizationAverager::Window> out;
  for (const auto& w : ws) {
    if (out.empty() || w.end_us - out.back().start_us > span_us) {
      out.push_back(w);
      continue;
    }
    auto& m = out.back();
    m.busy_seconds += w.busy_seconds;
    m.covered_seconds += w.covered_seconds;
    m.mean = m.busy_seconds / m.covered_seconds;
    m.end_us = w.end_us;
  }
  if (!out.empty() && out.back().end_us - out.back().start_us < span_us * 9 / 10) out.pop_back();
  return out;
}

// ---- The H200 recording -------------------------------------------------------------------------

struct Recording {
  std::vector<NvmlUtilizationSample> gpu;  // every GPU-utilization sample seen, by timestamp
  size_t buffer_size = 0;                  // what the first read (last seen 0) returned
  uint64_t first_read_us = 0;
  std::vector<Interval> busy;
  Interval setup{};  // start-up and warm-up: busy for an unknown part
  struct Phase {
    int period_ms;
    Interval span;
  };
  std::vector<Phase> phases;
};

Recording ReadRecording(const std::string& path) {
  Recording r;
  std::map<uint64_t, uint32_t> gpu;
  std::istringstream in(testing::ReadGzip(path));
  std::string line;
  int type = 0;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.empty() || f[0][0] == '#') continue;
    if (f[0] == "read") {
      type = std::stoi(f[1]);
      if (type == 1 && r.first_read_us == 0) {
        r.first_read_us = std::stoull(f[2]);
        r.buffer_size = std::stoul(f[5]);
      }
    } else if (f[0] == "s" && type == 1) {
      gpu[std::stoull(f[1])] = static_cast<uint32_t>(std::stoul(f[2]));
    } else if (f[0] == "busy") {
      r.busy.push_back({std::stoull(f[1]), std::stoull(f[2])});
    } else if (f[0] == "setup") {
      r.setup = {std::stoull(f[1]), std::stoull(f[2])};
    } else if (f[0] == "phase") {
      r.phases.push_back({std::stoi(f[1]), {std::stoull(f[3]), std::stoull(f[4])}});
    }
  }
  for (const auto& [t, v] : gpu) r.gpu.push_back({t, v});
  return r;
}

TEST(UtilizationAveragerTest, RecordedH200BuffersReadWhatRanInEverySecondAndEvery15Seconds) {
  const Recording r = ReadRecording(testing::SourcePath("tests/fixtures/h200_nvml_samples.txt"));
  ASSERT_GT(r.gpu.size(), 200u);
  ASSERT_EQ(r.phases.size(), 3u);
  ASSERT_GT(r.busy.size(), 20u);
  const NvmlBuffer nvml(r.gpu, r.buffer_size);
  const uint64_t end = r.phases.back().span.second + 2 * kSecondUs;
  // The sampler's reads fall anywhere relative to NVML's samples and the load.
  for (uint64_t offset : {0, 100000, 250000, 500000, 750000}) {
    SCOPED_TRACE(absl::StrCat("reads from ", offset / 1000, " ms after the first"));
    const auto windows = ReadEvery(nvml, r.first_read_us + offset, end, kSecondUs);
    int checked = 0, in_1s_phase = 0;
    for (const auto& w : windows) {
      if (w.start_us < r.setup.second) continue;  // before the load: its truth is unknown
      const double truth = BusyFraction(r.busy, w.start_us, w.end_us);
      EXPECT_NEAR(w.mean, truth, 0.03) << "window " << w.start_us << ".." << w.end_us;
      EXPECT_NEAR(w.covered_seconds, 1.0, 0.25);
      ++checked;
      const Interval& p = r.phases[0].span;  // busy 300 ms of every 1.0 s
      if (w.start_us >= p.first && w.end_us <= p.second) {
        ++in_1s_phase;
        EXPECT_GT(w.mean, 0.25) << "a 1 s window of the 1.0 s load read " << w.mean;
        EXPECT_LT(w.mean, 0.35);
      }
    }
    EXPECT_GE(checked, 28);
    EXPECT_GE(in_1s_phase, 5);
    std::vector<UtilizationAverager::Window> after_setup;
    for (const auto& w : windows) {
      if (w.start_us >= r.setup.second) after_setup.push_back(w);
    }
    const auto spans = Merge(after_setup, 15 * kSecondUs);
    EXPECT_EQ(spans.size(), 2u);
    for (const auto& s : spans) {
      EXPECT_NEAR(s.mean, BusyFraction(r.busy, s.start_us, s.end_us), 0.02);
    }
  }
}

// The old reading, the newest sample alone (what nvmlDeviceGetUtilizationRates returns), misses
// the same load by far: the recording shows the problem this fixes.
TEST(UtilizationAveragerTest, RecordedH200NewestSampleAloneMissesThePeriodicLoad) {
  const Recording r = ReadRecording(testing::SourcePath("tests/fixtures/h200_nvml_samples.txt"));
  const Interval& p = r.phases[0].span;
  const NvmlBuffer nvml(r.gpu, r.buffer_size);
  int reads = 0, off_by_far = 0;
  for (uint64_t now = p.first + kSecondUs; now + kSecondUs <= p.second; now += kSecondUs) {
    const auto newest = nvml.Read(0, now).back();
    const double truth = BusyFraction(r.busy, now - kSecondUs, now);
    ++reads;
    if (std::abs(newest.percent / 100.0 - truth) > 0.2) ++off_by_far;
  }
  EXPECT_GE(reads, 5);
  EXPECT_GE(off_by_far, reads - 1);
}

// The first read after start gets NVML's whole buffer (71 samples, 14 s on the H200), with
// whatever ran before profd: only its last second counts.
TEST(UtilizationAveragerTest, RecordedH200FirstReadCoversTheLastSecond) {
  const Recording r = ReadRecording(testing::SourcePath("tests/fixtures/h200_nvml_samples.txt"));
  const NvmlBuffer nvml(r.gpu, r.buffer_size);
  const auto first = nvml.Read(0, r.first_read_us);
  EXPECT_EQ(first.size(), r.buffer_size);
  UtilizationAverager averager;
  auto w = averager.Add(first);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->end_us, first.back().timestamp_us);
  EXPECT_EQ(w->start_us, first.back().timestamp_us - kSecondUs);
  EXPECT_NEAR(w->covered_seconds, 1.0, 1e-9);
  EXPECT_EQ(averager.last_seen_us(), first.back().timestamp_us);
}

// ---- Buffers shaped like other GPUs' ------------------------------------------------------------

struct Shape {
  const char* name;
  uint64_t spacing_us;  // NVML's sample period on that GPU
  double jitter;        // its spread, a fraction of the spacing
  size_t capacity;      // samples NVML keeps
  uint64_t load_period_us;
};

void PrintTo(const Shape& shape, std::ostream* os) { *os << shape.name; }

// A load busy 30% of every period, NVML's samples of it (each the busy percent of the time since
// the one before, rounded as NVML rounds), and what ran.
struct Synthetic {
  std::vector<NvmlUtilizationSample> samples;
  std::vector<Interval> busy;
};

Synthetic Make(const Shape& shape, uint64_t t0, uint64_t length_us) {
  Synthetic s;
  const uint64_t busy_us = shape.load_period_us * 3 / 10;
  for (uint64_t t = t0 + 137000; t < t0 + length_us; t += shape.load_period_us) {
    s.busy.push_back({t, t + busy_us});
  }
  std::mt19937 random(42);
  std::uniform_real_distribution<double> spread(-shape.jitter, shape.jitter);
  uint64_t previous = t0;
  for (uint64_t t = t0 + shape.spacing_us; t < t0 + length_us;) {
    const double percent = 100 * BusyFraction(s.busy, previous, t);
    s.samples.push_back({t, static_cast<uint32_t>(std::lround(percent))});
    previous = t;
    t += static_cast<uint64_t>(static_cast<double>(shape.spacing_us) * (1 + spread(random)));
  }
  return s;
}

class ShapedBuffersTest : public ::testing::TestWithParam<Shape> {};

TEST_P(ShapedBuffersTest, EverySecondAndEvery15SecondsReadWhatRan) {
  const Shape& shape = GetParam();
  const uint64_t t0 = 1'796'000'000'000'000;  // NVML's timestamps are CLOCK_REALTIME us
  const Synthetic s = Make(shape, t0, 62 * kSecondUs);
  const NvmlBuffer nvml(s.samples, shape.capacity);
  for (uint64_t offset : {0, 330000, 710000}) {
    SCOPED_TRACE(absl::StrCat("reads from ", offset / 1000, " ms"));
    const auto windows = ReadEvery(nvml, t0 + kSecondUs + offset, t0 + 61 * kSecondUs, kSecondUs);
    ASSERT_GE(windows.size(), 59u);
    for (const auto& w : windows) {
      const double truth = BusyFraction(s.busy, w.start_us, w.end_us);
      EXPECT_NEAR(w.mean, truth, 0.03)
          << "window " << (w.start_us - t0) / 1000 << ".." << (w.end_us - t0) / 1000 << " ms";
      // A window spans whole sample periods, so it is 1 s give or take one of them, and holds
      // at least 300 ms minus that of a load busy 300 ms every second: never 0.
      if (shape.load_period_us == kSecondUs) {
        EXPECT_GT(w.mean, 0.1) << "a 1 s window of a load busy 300 ms every second read ~0";
      }
    }
    const auto spans = Merge(windows, 15 * kSecondUs);
    EXPECT_GE(spans.size(), 3u);
    for (const auto& span : spans) {
      EXPECT_NEAR(span.mean, BusyFraction(s.busy, span.start_us, span.end_us), 0.03);
      EXPECT_NEAR(span.mean, 0.3, 0.03);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    NvmlSamplePeriods, ShapedBuffersTest,
    ::testing::Values(Shape{"every_16_7ms_period_700ms", 16667, 0.05, 120, 700000},
                      Shape{"every_16_7ms_period_1000ms", 16667, 0.05, 120, 1000000},
                      Shape{"every_16_7ms_period_1300ms", 16667, 0.05, 120, 1300000},
                      Shape{"every_166_7ms_period_700ms", 166667, 0.05, 100, 700000},
                      Shape{"every_166_7ms_period_1000ms", 166667, 0.05, 100, 1000000},
                      Shape{"every_166_7ms_period_1300ms", 166667, 0.05, 100, 1300000},
                      Shape{"uneven_100ms_period_1000ms", 100000, 0.6, 100, 1000000}),
    [](const ::testing::TestParamInfo<Shape>& info) { return std::string(info.param.name); });

// Samples spaced unevenly: short idle periods and long busy ones. A plain average of the values
// would say 0.5; the time was 90% busy.
TEST(UtilizationAveragerTest, EachSampleWeighsAsLongAsItsPeriod) {
  UtilizationAverager averager;
  std::vector<NvmlUtilizationSample> samples;
  uint64_t t = 1'000'000'000;
  samples.push_back({t, 0});  // the first read's oldest: only a start
  while (samples.size() < 11) {
    t += 20000;
    samples.push_back({t, 0});
    t += 180000;
    samples.push_back({t, 100});
  }
  averager.Add(samples);  // first read
  std::vector<NvmlUtilizationSample> next;
  for (int i = 0; i < 5; ++i) {
    t += 20000;
    next.push_back({t, 0});
    t += 180000;
    next.push_back({t, 100});
  }
  auto w = averager.Add(next);
  ASSERT_TRUE(w.has_value());
  EXPECT_DOUBLE_EQ(w->mean, 0.9);
  EXPECT_DOUBLE_EQ(w->covered_seconds, 1.0);
  EXPECT_DOUBLE_EQ(w->busy_seconds, 0.9);
}

TEST(UtilizationAveragerTest, AShortFirstBufferCoversWhatItHolds) {
  UtilizationAverager one;
  EXPECT_FALSE(one.Add({{5'000'000, 100}}).has_value()) << "one sample: its period is unknown";
  EXPECT_EQ(one.last_seen_us(), 5'000'000u);
  auto next = one.Add({{5'200'000, 100}, {5'400'000, 0}});
  ASSERT_TRUE(next.has_value());
  EXPECT_DOUBLE_EQ(next->mean, 0.5);
  EXPECT_EQ(next->start_us, 5'000'000u);

  UtilizationAverager three;
  auto w = three.Add({{5'000'000, 100}, {5'200'000, 0}, {5'400'000, 100}});
  ASSERT_TRUE(w.has_value());
  EXPECT_DOUBLE_EQ(w->mean, 0.5);
  EXPECT_DOUBLE_EQ(w->covered_seconds, 0.4);
}

// A first sample straddling the first window's start counts for the part inside it.
TEST(UtilizationAveragerTest, TheFirstWindowStartsOneSecondBeforeTheNewestSample) {
  UtilizationAverager averager;
  std::vector<NvmlUtilizationSample> samples;
  for (uint64_t t = 10'000'000; t <= 24'000'000; t += 300'000) {
    samples.push_back({t, t <= 22'900'000 ? 100u : 0u});  // busy long ago, idle in the last second
  }
  auto w = averager.Add(samples);
  ASSERT_TRUE(w.has_value());
  // Newest 23'800'000, so the window starts at 22'800'000: 100 ms of the busy sample at
  // 22'900'000 (its period began at 22'600'000), then idle.
  EXPECT_EQ(w->start_us, 22'800'000u);
  EXPECT_DOUBLE_EQ(w->covered_seconds, 1.0);
  EXPECT_DOUBLE_EQ(w->mean, 0.1);
}

// Samples lost (the sampler slower than NVML's buffer, or NVML skipping): the sample after the
// gap counts for at most a second, and the mean is over the time the samples cover.
TEST(UtilizationAveragerTest, AGapLongerThanASecondCountsForASecond) {
  UtilizationAverager averager;
  averager.Add({{1'000'000, 0}, {1'200'000, 0}});
  auto w = averager.Add({{6'200'000, 100}, {6'400'000, 0}});
  ASSERT_TRUE(w.has_value());
  EXPECT_DOUBLE_EQ(w->covered_seconds, 1.2);
  EXPECT_DOUBLE_EQ(w->busy_seconds, 1.0);
}

TEST(UtilizationAveragerTest, OldDuplicateAndEmptySamplesAreIgnored) {
  UtilizationAverager averager;
  averager.Add({{1'000'000, 0}, {1'200'000, 50}});
  // Unsorted, a repeat of the last one seen, an unfilled slot (0), a duplicate timestamp.
  auto w =
      averager.Add({{1'600'000, 100}, {1'200'000, 50}, {0, 100}, {1'400'000, 0}, {1'400'000, 0}});
  ASSERT_TRUE(w.has_value());
  EXPECT_DOUBLE_EQ(w->covered_seconds, 0.4);
  EXPECT_DOUBLE_EQ(w->mean, 0.5);
  EXPECT_FALSE(averager.Add({{1'600'000, 100}, {1'000'000, 0}}).has_value());
  EXPECT_FALSE(averager.Add({}).has_value());
  EXPECT_EQ(averager.last_seen_us(), 1'600'000u);
}

// ---- The sampler through the fake libnvidia-ml to /metrics
// ---------------------------------------

// GPU 0 of the fake is busy 37% steadily; GPU 1 is busy the first 300 ms of every second
// (tests/metrics/fake_nvml.cc).
class FakeNvmlTest : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("FAKE_NVML_SAMPLES_UNSUPPORTED"); }

  // The next `n` snapshots the sampler publishes after the first.
  static std::vector<std::shared_ptr<const GpuSnapshot>> Snapshots(GpuSampler& sampler, int n) {
    std::vector<std::shared_ptr<const GpuSnapshot>> out;
    EXPECT_TRUE(sampler.WaitUntilSettled(absl::Seconds(10)));
    auto last = sampler.snapshot();
    const absl::Time deadline = absl::Now() + absl::Seconds(n * 3 + 5);
    while (static_cast<int>(out.size()) < n && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
      auto s = sampler.snapshot();
      if (s != last) out.push_back(last = s);
    }
    EXPECT_EQ(static_cast<int>(out.size()), n);
    return out;
  }

  static std::string Text(GpuSampler& sampler) {
    MetricsCollector::Sources sources;
    sources.hostname = "node-a";
    sources.gpus = &sampler;
    return prometheus::TextSerializer().Serialize(MetricsCollector(sources).Collect());
  }
};

constexpr char kGpu0[] =
    "gpu=\"0\",hostname=\"node-a\",model=\"Fake GPU (profd test)\","
    "uuid=\"GPU-00000000-0000-0000-0000-000000000000\"";
constexpr char kGpu1[] =
    "gpu=\"1\",hostname=\"node-a\",model=\"Fake GPU (profd test)\","
    "uuid=\"GPU-11111111-1111-1111-1111-111111111111\"";

double ValueOf(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  EXPECT_NE(at, std::string::npos) << series << " not in\n" << text;
  if (at == std::string::npos) return NAN;
  return std::stod(text.substr(at + series.size() + 2));
}

// The issue, end to end: a load busy 300 ms of every second, read every second, reads ~0.3 in
// every read (the last sample period alone read 0 or 1), and the busy-seconds counter grows by
// the busy time.
TEST_F(FakeNvmlTest, APeriodicLoadReadsItsBusyFractionInEveryOneSecondRead) {
  GpuSampler sampler({testing::BuildPath("tests/metrics/libfake_nvml.so"), absl::Seconds(1)});
  sampler.Start();
  const auto snapshots = Snapshots(sampler, 4);
  ASSERT_EQ(snapshots.size(), 4u);
  for (const auto& s : snapshots) {
    ASSERT_EQ(s->gpus.size(), 2u);
    EXPECT_NEAR(*s->gpus[0].utilization, 0.37, 1e-9);
    EXPECT_NEAR(*s->gpus[0].memory_bandwidth_utilization, 0.12, 1e-9);
    // The window is the time between two of the sampler's reads: 1 s, give or take how late
    // this busy machine wakes the sampler.
    EXPECT_GT(*s->gpus[1].utilization, 0.2);
    EXPECT_LT(*s->gpus[1].utilization, 0.45);
  }
  // GPU 0's busy seconds are 37% of the time the windows covered, whatever it was; GPU 1's must
  // be 30% of the same time, give or take one 20 ms sample at each end.
  const auto& first = snapshots.front()->gpus;
  const auto& last = snapshots.back()->gpus;
  const double covered = (*last[0].busy_seconds_total - *first[0].busy_seconds_total) / 0.37;
  EXPECT_GT(covered, 2.5);
  EXPECT_NEAR((*last[1].busy_seconds_total - *first[1].busy_seconds_total) / covered, 0.30, 0.03);
  EXPECT_NEAR((*last[1].memory_bandwidth_busy_seconds_total -
               *first[1].memory_bandwidth_busy_seconds_total) /
                  covered,
              0.12, 0.02);

  const std::string text = Text(sampler);
  EXPECT_EQ(ValueOf(text, absl::StrCat("profd_gpu_utilization_ratio{", kGpu0, "}")), 0.37);
  const double gpu1 = ValueOf(text, absl::StrCat("profd_gpu_utilization_ratio{", kGpu1, "}"));
  EXPECT_GT(gpu1, 0.2);
  EXPECT_LT(gpu1, 0.45);
  EXPECT_GT(ValueOf(text, absl::StrCat("profd_gpu_busy_seconds_total{", kGpu1, "}")), 0.5);
  EXPECT_THAT(text, HasSubstr("# TYPE profd_gpu_busy_seconds_total counter"));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("\nprofd_gpu_memory_bandwidth_busy_seconds_total{",
                                           kGpu1, "} ")));
  EXPECT_EQ(
      ValueOf(text, "profd_nvml_errors_total{hostname=\"node-a\",call=\"nvmlDeviceGetSamples\"}"),
      0);
}

// A library without nvmlDeviceGetSamples (an old driver): NVML's last sample period, as before,
// one line in the log saying so and what it means, and no busy-seconds counter.
TEST_F(FakeNvmlTest, WithoutGetSamplesUtilizationIsTheLastSamplePeriodAndTheLogSaysSo) {
  ::testing::internal::CaptureStderr();
  std::vector<std::shared_ptr<const GpuSnapshot>> snapshots;
  std::string text;
  {
    GpuSampler sampler(
        {testing::BuildPath("tests/metrics/libfake_nvml_no_samples.so"), absl::Milliseconds(100)});
    sampler.Start();
    snapshots = Snapshots(sampler, 3);
    text = Text(sampler);
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(snapshots.size(), 3u);
  for (const auto& s : snapshots) {
    EXPECT_NEAR(*s->gpus[0].utilization, 0.37, 1e-9);
    const double gpu1 = *s->gpus[1].utilization;
    EXPECT_TRUE(gpu1 == 0 || gpu1 == 1) << gpu1;
    EXPECT_FALSE(s->gpus[0].busy_seconds_total.has_value());
    EXPECT_EQ(s->errors_by_call.count("nvmlDeviceGetSamples"), 0u);
  }
  EXPECT_THAT(text, Not(HasSubstr("profd_gpu_busy_seconds_total")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("\nprofd_gpu_utilization_ratio{", kGpu0, "} 0.37\n")));
  EXPECT_THAT(log, HasSubstr("does not export nvmlDeviceGetSamples; "
                             "profd_gpu_utilization_ratio and "
                             "profd_gpu_memory_bandwidth_utilization_ratio read "
                             "nvmlDeviceGetUtilizationRates instead"));
  EXPECT_EQ(log.find("nvmlDeviceGetSamples"), log.rfind("nvmlDeviceGetSamples")) << log;
}

// One GPU that answers NOT_SUPPORTED falls back alone, logged once and counted once.
TEST_F(FakeNvmlTest, AGpuWithoutSamplesFallsBackAloneAndIsNotAskedAgain) {
  setenv("FAKE_NVML_SAMPLES_UNSUPPORTED", "1", 1);
  ::testing::internal::CaptureStderr();
  std::vector<std::shared_ptr<const GpuSnapshot>> snapshots;
  {
    GpuSampler sampler(
        {testing::BuildPath("tests/metrics/libfake_nvml.so"), absl::Milliseconds(100)});
    sampler.Start();
    snapshots = Snapshots(sampler, 3);
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(snapshots.size(), 3u);
  for (const auto& s : snapshots) {
    EXPECT_TRUE(s->gpus[0].busy_seconds_total.has_value());
    EXPECT_FALSE(s->gpus[1].busy_seconds_total.has_value());
    const double gpu1 = *s->gpus[1].utilization;
    EXPECT_TRUE(gpu1 == 0 || gpu1 == 1) << gpu1;
    EXPECT_EQ(s->errors_by_call.at("nvmlDeviceGetSamples"), 1u);
  }
  EXPECT_THAT(log, HasSubstr("GPU 1 does not support nvmlDeviceGetSamples"));
  EXPECT_THAT(log, HasSubstr("read nvmlDeviceGetUtilizationRates instead"));
  EXPECT_EQ(log.find("does not support"), log.rfind("does not support")) << log;
}

}  // namespace
}  // namespace profd
