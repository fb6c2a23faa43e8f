// A stand-in for a GPU process in tests that run without a GPU: the real agent (channel,
// registration, heartbeats) with a capture backend that, instead of CUPTI, replays event batches
// recorded from a real capture (tests/fixtures/), shifted to the current time (the capture's
// --start-at, when it asks for one).
//   replay_agent <batches.pb> [--die-after-start | --never-finish | --repeat=N |
//                              --launch-until=FILE | --stretch=F]
// REPLAY_KERNEL_NAME=TEXT puts TEXT before every kernel's name (hostile names, in tests of what
// profctl shows).
// --never-finish: a stalled capture thread; it sends its batches, then ignores stop requests and
// never reports the capture's end (the agent thread keeps heartbeating).
// --repeat=N: the recording N times over, one after the other in time (a longer capture).
// --launch-until=FILE: the heartbeats count kernel launches on CUDA device 0, 1000 more in each,
// until FILE exists, then no more (a process that stops launching: the launch-rate alert's case).
// --stretch=F: every kernel runs F times as long (a slower rank of a job: the straggler).
// Its flight recorder (profctl recorder on) holds the recording, as if it had run since the
// recorder was turned on: a capture asked to begin before its request replays it once more there.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "profd/v1/agent_channel.pb.h"
#include "profd/v1/agent_frame.h"
#include "tests/support/fixtures.h"

namespace {

std::vector<profd::v1::EventBatch> g_batches;
bool g_die_after_start = false;
bool g_never_finish = false;
int g_repeat = 1;
std::string g_launch_until_file;
uint64_t g_launches = 0;
double g_stretch = 1;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

void Shift(profd::v1::EventBatch& b, int64_t d) {
  for (auto& k : *b.mutable_kernels()) {
    k.set_start_ns(k.start_ns() + d);
    k.set_end_ns(k.end_ns() + d);
  }
  for (auto& m : *b.mutable_memcpys()) {
    m.set_start_ns(m.start_ns() + d);
    m.set_end_ns(m.end_ns() + d);
  }
  for (auto& m : *b.mutable_memsets()) {
    m.set_start_ns(m.start_ns() + d);
    m.set_end_ns(m.end_ns() + d);
  }
  for (auto& a : *b.mutable_api_calls()) {
    a.set_start_ns(a.start_ns() + d);
    a.set_end_ns(a.end_ns() + d);
  }
  for (auto& s : *b.mutable_syncs()) {
    s.set_start_ns(s.start_ns() + d);
    s.set_end_ns(s.end_ns() + d);
  }
}

class ReplayHandler final : public profagent::CaptureHandler {
 public:
  explicit ReplayHandler(profagent::Agent* agent) : agent_(agent) {}

  void OnStartCapture(const profagent::wire::StartCapture& request) override {
    if (running_.exchange(true)) return;
    if (thread_.joinable()) thread_.join();
    stop_ = false;
    thread_ = std::thread([this, request] { Run(request); });
  }
  void OnStopCapture(const std::string&) override {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  void OnDisconnected() override { OnStopCapture(""); }
  uint32_t CuptiVersion() override { return 0; }
  void OnSetRecorder(const profagent::wire::SetRecorder& settings) override {
    std::lock_guard<std::mutex> lock(mu_);
    recorder_ = settings;
    recorder_.seconds = settings.seconds ? settings.seconds : 10;
    recorder_.max_bytes = settings.max_bytes ? settings.max_bytes : 64ull << 20;
    recorder_on_since_ = settings.on ? NowNs() : 0;
  }
  void ReportRecorder(profagent::wire::RecorderState* state) override {
    std::lock_guard<std::mutex> lock(mu_);
    state->on = recorder_.on;
    state->seconds = recorder_.seconds;
    state->max_bytes = recorder_.max_bytes;
    state->duty_on_ms = recorder_.duty_on_ms;
    state->duty_period_ms = recorder_.duty_period_ms;
    state->covered_since_realtime_ns = recorder_.on ? CoveredSinceLocked(NowNs()) : 0;
  }

 private:
  void SendStatus(const profagent::wire::CaptureStatus& s) {
    std::string m;
    profagent::wire::EncodeCaptureStatus(s, &m);
    agent_->Enqueue(std::move(m));
  }

  void Run(profagent::wire::StartCapture request) {
    // A common start (--start-at), as the CUPTI backend waits for it: stopped early, at once.
    if (request.start_at_realtime_ns > NowNs()) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::nanoseconds(request.start_at_realtime_ns - NowNs()),
                   [this] { return stop_; });
    }
    profagent::wire::CaptureStatus status;
    status.capture_id = request.capture_id;
    status.state = profagent::wire::CaptureState::kStarted;
    status.enabled_realtime_ns = NowNs();
    uint64_t recorded_from = RecordedFrom(request, status.enabled_realtime_ns);
    status.recorded_from_realtime_ns = recorded_from;
    SendStatus(status);
    if (g_die_after_start) {
      usleep(100000);
      _exit(3);
    }
    uint64_t first = UINT64_MAX, last = 0;
    for (const auto& b : g_batches) {
      for (const auto& k : b.kernels()) first = std::min<uint64_t>(first, k.start_ns());
      for (const auto& a : b.api_calls()) first = std::min<uint64_t>(first, a.start_ns());
      for (const auto& k : b.kernels()) last = std::max<uint64_t>(last, k.end_ns());
      for (const auto& a : b.api_calls()) last = std::max<uint64_t>(last, a.end_ns());
    }
    const int64_t shift =
        static_cast<int64_t>(status.enabled_realtime_ns + 1000000) - static_cast<int64_t>(first);
    const int64_t round = static_cast<int64_t>(last - first) + 1000000;
    // What the flight recorder held: the recording once, from where its coverage starts.
    std::vector<int64_t> shifts;
    if (recorded_from != 0) {
      shifts.push_back(static_cast<int64_t>(recorded_from + 1000000) - static_cast<int64_t>(first));
    }
    for (int r = 0; r < g_repeat; ++r) shifts.push_back(shift + r * round);
    uint64_t events = 0;
    for (int64_t by : shifts) {
      for (profd::v1::EventBatch b : g_batches) {
        Shift(b, by);
        b.set_capture_id(request.capture_id);
        events += b.kernels_size() + b.memcpys_size() + b.memsets_size() + b.api_calls_size() +
                  b.syncs_size();
        profd::v1::AgentMessage message;
        *message.mutable_events() = std::move(b);
        agent_->Enqueue(message.SerializeAsString());
      }
    }
    if (g_never_finish) return;  // running_ stays set: later captures are ignored too
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(request.duration_ms), [this] { return stop_; });
    }
    status.state = profagent::wire::CaptureState::kFinished;
    status.disabled_realtime_ns = NowNs();
    status.events = events;
    SendStatus(status);
    running_ = false;
  }

  // The recorder holds the last `seconds` of the time since it was turned on.
  uint64_t CoveredSinceLocked(uint64_t now) const {
    uint64_t span = recorder_.seconds * 1000000000ull;
    return std::max<uint64_t>(recorder_on_since_, now > span ? now - span : 0);
  }

  // Where the recorder's part of this capture starts (0: none).
  uint64_t RecordedFrom(const profagent::wire::StartCapture& request, uint64_t now) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!recorder_.on || request.before_ms == 0) return 0;
    uint64_t requested = request.requested_realtime_ns ? request.requested_realtime_ns : now;
    return std::max<uint64_t>(requested - request.before_ms * 1000000ull, CoveredSinceLocked(now));
  }

  profagent::Agent* const agent_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  profagent::wire::SetRecorder recorder_;  // guarded by mu_
  uint64_t recorder_on_since_ = 0;         // guarded by mu_
};

// Agent thread, at each heartbeat.
void CountLaunches(profagent::wire::Heartbeat* heartbeat) {
  if (access(g_launch_until_file.c_str(), F_OK) != 0) g_launches += 1000;
  profagent::wire::DeviceCounters device;
  device.device = 0;
  device.kernel_launches = g_launches;
  heartbeat->devices.push_back(device);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  g_batches = profd::testing::ReadRecordedBatches(argv[1]);
  if (const char* prefix = std::getenv("REPLAY_KERNEL_NAME"); prefix != nullptr) {
    std::set<uint32_t> kernel_names;
    for (const auto& b : g_batches) {
      for (const auto& k : b.kernels()) kernel_names.insert(k.name_id());
    }
    for (auto& b : g_batches) {
      for (auto& s : *b.mutable_strings()) {
        if (kernel_names.count(s.id()) > 0) s.set_value(prefix + s.value());
      }
    }
  }
  for (int i = 2; i < argc; ++i) {
    g_die_after_start |= std::strcmp(argv[i], "--die-after-start") == 0;
    g_never_finish |= std::strcmp(argv[i], "--never-finish") == 0;
    if (std::strncmp(argv[i], "--repeat=", 9) == 0) g_repeat = std::max(1, std::atoi(argv[i] + 9));
    if (std::strncmp(argv[i], "--launch-until=", 15) == 0) g_launch_until_file = argv[i] + 15;
    if (std::strncmp(argv[i], "--stretch=", 10) == 0) g_stretch = std::atof(argv[i] + 10);
  }
  if (g_stretch > 0 && g_stretch != 1) {
    for (auto& b : g_batches) {
      for (auto& k : *b.mutable_kernels()) {
        k.set_end_ns(
            k.start_ns() +
            static_cast<uint64_t>(static_cast<double>(k.end_ns() - k.start_ns()) * g_stretch));
      }
    }
  }
  profagent::AgentOptions options;
  const char* socket = std::getenv(profd::v1::kAgentSocketEnv);
  options.socket_path = socket ? socket : profd::v1::kDefaultAgentSocket;
  options.injected = true;
  profagent::Agent::StartOnce(options, [](profagent::Agent* agent) -> profagent::CaptureHandler* {
    if (!g_launch_until_file.empty()) agent->set_counters_fn(&CountLaunches);
    return new ReplayHandler(agent);
  });
  while (true) pause();
}
