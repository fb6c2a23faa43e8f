// The only symbols libprofagent.so exports (exports.map): the CUDA injection entry point and the
// small C API for explicit linking.
#include <atomic>
#include <cstdlib>
#include <string>

#include "agent/agent.h"
#include "agent/capture_handler.h"
#include "agent/counters/launch_counters.h"
#include "agent/cupti/cupti_broker.h"
#include "agent/include/profagent.h"
#include "agent/interpose/cuda_entry_points.h"
#include "agent/log.h"
#include "profd/v1/agent_frame.h"

namespace profagent {
// Defined by the capture backend linked into the library (cupti/); may return nullptr.
CaptureHandler* CreateCaptureHandler(Agent* agent);
}  // namespace profagent

namespace {

std::atomic<bool> g_counters_on{false};

// Before anything else in the process can reach CUPTI after CUDA starts: the libraries already
// loaded (PyTorch's, with Kineto) get their CUPTI imports pointed at the agent's broker, so
// torch.profiler keeps working beside the agent. Cheap (a walk of the loaded objects' relocations)
// and fail-closed: anything unexpected leaves an object alone and is reported.
void ShareCupti() {
  try {
    profagent::CuptiBroker::Get().Interpose();
  } catch (...) {
  }
}

// Right away too: the launch and allocation entry points of the libraries already loaded go
// through the counters before the application's first launch.
void CountCudaCalls() {
  try {
    profagent::CudaEntryPoints::Get().Interpose(/*tables=*/false);  // inside cuInit
  } catch (...) {
  }
}

int Start(const char* socket_path, bool injected) {
  profagent::AgentOptions options;
  if (socket_path != nullptr && socket_path[0] != '\0') {
    options.socket_path = socket_path;
  } else if (const char* env = std::getenv(profd::v1::kAgentSocketEnv); env && env[0] != '\0') {
    options.socket_path = env;
  } else {
    options.socket_path = profd::v1::kDefaultAgentSocket;
  }
  options.injected = injected;
  options.on_thread_start = [](profagent::Agent* agent) {
    std::string why_not = profagent::LaunchCounters::Get().Enable();
    g_counters_on.store(why_not.empty());
    if (!why_not.empty()) {
      profagent::Log(profagent::LogLevel::kInfo, "launch and memory counters off: %s",
                     why_not.c_str());
    }
    // The counters may just have loaded CUPTI: share it from now on.
    profagent::CuptiBroker::Get().Interpose();
    agent->set_counters_fn([](profagent::wire::Heartbeat* hb) {
      if (g_counters_on.load()) {
        profagent::LaunchCounters::Get().FillHeartbeat(hb);
      }
      hb->cupti_sharing = profagent::CuptiBroker::Get().Report();
      hb->has_cupti_sharing = true;
    });
  };
  // profd refuses a capture through Kineto while torch.profiler traces: it hears of a session's
  // start and end at once, not at the next heartbeat.
  profagent::CuptiBroker::Get().SetTracingListener([] {
    if (profagent::Agent* agent = profagent::Agent::Get()) agent->HeartbeatNow();
  });
  options.on_tick = [](profagent::Agent*) {
    profagent::CuptiBroker::Get().Tick();
    profagent::CudaEntryPoints::Get().Interpose();  // libraries loaded since the last tick
  };
  profagent::Agent::StartOnce(options, &profagent::CreateCaptureHandler);
  return 0;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  CountCudaCalls();
  ShareCupti();
  try {
    Start(nullptr, /*injected=*/true);
  } catch (...) {
    // Never let the agent fail the application's cuInit.
  }
  return 1;
}

extern "C" __attribute__((visibility("default"))) int profagent_start(const char* socket_path) {
  CountCudaCalls();
  ShareCupti();
  try {
    return Start(socket_path, /*injected=*/false);
  } catch (...) {
    return -1;
  }
}

extern "C" __attribute__((visibility("default"))) void profagent_stop(void) {
  if (profagent::Agent* agent = profagent::Agent::Get()) agent->RequestStop();
}

extern "C" __attribute__((visibility("default"))) int profagent_set_counters(int enabled) {
  return profagent::LaunchCounters::Get().SetActive(enabled != 0) ? 0 : -1;
}

extern "C" __attribute__((visibility("default"))) int profagent_set_recorder(
    int on, unsigned duty_on_ms, unsigned duty_period_ms) {
  profagent::Agent* agent = profagent::Agent::Get();
  if (agent == nullptr) return -1;
  profagent::wire::SetRecorder settings;
  settings.on = on != 0;
  settings.duty_on_ms = duty_on_ms;
  settings.duty_period_ms = duty_period_ms;
  agent->SetRecorder(settings);
  return 0;
}
