// The only symbols libprofagent.so exports (exports.map): the CUDA injection entry point and the
// small C API for explicit linking.
#include <cstdlib>
#include <string>

#include "agent/agent.h"
#include "agent/capture_handler.h"
#include "agent/counters/launch_counters.h"
#include "agent/include/profagent.h"
#include "agent/log.h"
#include "profd/v1/agent_frame.h"

namespace profagent {
// Defined by the capture backend linked into the library (cupti/); may return nullptr.
CaptureHandler* CreateCaptureHandler(Agent* agent);
}  // namespace profagent

namespace {

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
    if (why_not.empty()) {
      agent->set_counters_fn([](profagent::wire::Heartbeat* hb) {
        profagent::LaunchCounters::Get().FillHeartbeat(hb);
        profagent::LaunchCounters::Get().Tick();
      });
    } else {
      profagent::Log(profagent::LogLevel::kInfo, "launch and memory counters off: %s",
                     why_not.c_str());
    }
  };
  profagent::Agent::StartOnce(options, &profagent::CreateCaptureHandler);
  return 0;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  try {
    Start(nullptr, /*injected=*/true);
  } catch (...) {
    // Never let the agent fail the application's cuInit.
  }
  return 1;
}

extern "C" __attribute__((visibility("default"))) int profagent_start(const char* socket_path) {
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
