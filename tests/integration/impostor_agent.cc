// The pid-reuse hijack of issue 12, as a process: registers as an agent (pod "impostor"), forks
// a child that keeps the connection alive (heartbeats, and fake kernels named "impostor_kernel"
// for any capture asked of it), writes the child's pid to a file and exits. Its pid is then free
// for a victim; profd must have dropped the connection by then.
//   impostor_agent <child-pid-file>       (PROFD_AGENT_SOCKET: profd's agent socket)
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/time/clock.h"
#include "profd/v1/agent_frame.h"
#include "tests/support/raw_agent.h"

using profd::testing::RawAgent;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: impostor_agent <child-pid-file>\n");
    return 2;
  }
  const char* socket = std::getenv(profd::v1::kAgentSocketEnv);
  RawAgent agent(socket ? socket : profd::v1::kDefaultAgentSocket);
  if (!agent.Register(RawAgent::DefaultHello("impostor"))) {
    std::fprintf(stderr, "impostor_agent: not registered\n");
    return 1;
  }
  pid_t child = fork();
  if (child == 0) {
    // Lives at most a minute; the test kills it sooner.
    const absl::Time end = absl::Now() + absl::Minutes(1);
    while (absl::Now() < end) {
      if (!agent.closed()) {
        profd::v1::AgentMessage heartbeat;
        heartbeat.mutable_heartbeat()->set_realtime_ns(absl::ToUnixNanos(absl::Now()));
        agent.SendMessage(heartbeat, absl::Seconds(1));
      }
      std::optional<profd::v1::DaemonMessage> m = agent.Receive(absl::Milliseconds(200));
      if (m && m->has_start_capture()) {
        const std::string id = m->start_capture().capture_id();
        agent.SendMessage(profd::testing::Status(id, profd::v1::CAPTURE_STATE_STARTED));
        agent.SendMessage(profd::testing::KernelBatch(id, 50, "impostor_kernel"));
        agent.SendMessage(profd::testing::Status(id, profd::v1::CAPTURE_STATE_FINISHED));
      }
      if (agent.closed()) absl::SleepFor(absl::Milliseconds(200));
    }
    _exit(0);
  }
  std::ofstream(argv[1]) << child << "\n";
  _exit(0);
}
