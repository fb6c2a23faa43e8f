// libFuzzer target: the bytes an agent connection delivers to profd, as AgentChannelServer's
// I/O thread decodes them: 4-byte little-endian length frames (proto/profd/v1/agent_frame.h),
// each an AgentMessage; the first must be a Hello. What a frame carries then goes where profd
// sends it: Hello and Heartbeat into a real AgentRegistry (read back as `profctl agents` and
// /metrics list it), EventBatch into the capture pipeline (event_batch_fuzzer's path).
//
// The framing rules are AgentChannelServer::OnReadable's and HandleFrame's (a frame over the
// limit, a message that does not parse, no body, a first message that is not a hello, or a
// second hello close the connection); keep them in step with daemon/agents/.
#include <unistd.h>

#include <cstdint>
#include <string_view>

#include "absl/time/clock.h"
#include "daemon/agents/agent_registry.h"
#include "profd/v1/agent_channel.pb.h"
#include "profd/v1/agent_frame.h"
#include "tests/fuzz/capture_pipeline.h"

namespace {

constexpr profd::ConnectionId kConnection = 16;

// Returns false where profd closes the connection.
bool HandleFrame(std::string_view frame, bool* registered, profd::AgentRegistry* registry,
                 profd::fuzz::CapturePipeline* pipeline) {
  profd::v1::AgentMessage message;
  if (!message.ParseFromArray(frame.data(), static_cast<int>(frame.size())) ||
      message.body_case() == profd::v1::AgentMessage::BODY_NOT_SET) {
    return false;
  }
  // VALIDATION HOOK: the agent-message validation of daemon/agents/ (ids, counts, sizes and
  // strings bounded before anything is allocated for them) is called here, at the same point
  // AgentChannelServer::HandleFrame calls it, and a rejected message closes the connection:
  //   if (!ValidateAgentMessage(message, limits).ok()) return false;
  if (!*registered && message.body_case() != profd::v1::AgentMessage::kHello) return false;
  const absl::Time now = absl::Now();
  switch (message.body_case()) {
    case profd::v1::AgentMessage::kHello:
      if (*registered) return false;
      *registered = true;
      // SO_PEERCRED's pid and uid: this process, so the /proc identity lookup is real.
      registry->Register(kConnection, static_cast<uint32_t>(getpid()),
                         static_cast<uint32_t>(getuid()), message.hello(), now);
      return true;
    case profd::v1::AgentMessage::kHeartbeat:
      registry->Heartbeat(kConnection, message.heartbeat(), now);
      return true;
    case profd::v1::AgentMessage::kCaptureStatus:
      return true;  // only compared with the capture's state by the orchestrator
    case profd::v1::AgentMessage::kEvents:
      pipeline->Add(message.events());
      return true;
    case profd::v1::AgentMessage::BODY_NOT_SET:
      break;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  profd::AgentRegistry registry;
  profd::fuzz::CapturePipeline pipeline;
  bool registered = false;
  size_t pos = 0;
  while (in.size() - pos >= profd::v1::kAgentFrameHeaderBytes) {
    uint32_t length =
        profd::v1::DecodeFrameHeader(reinterpret_cast<const unsigned char*>(in.data() + pos));
    if (length > profd::v1::kMaxAgentFrameBytes) break;  // closed: oversized frame
    if (in.size() - pos - profd::v1::kAgentFrameHeaderBytes < length) break;  // partial frame
    std::string_view frame = in.substr(pos + profd::v1::kAgentFrameHeaderBytes, length);
    if (!HandleFrame(frame, &registered, &registry, &pipeline)) break;
    pos += profd::v1::kAgentFrameHeaderBytes + length;
  }
  // What the control plane and /metrics read of the registry.
  for (const profd::v1::AgentInfo& agent : registry.List()) {
    profd::fuzz::Check(registry.FindByPid(agent.pid()).has_value(), "listed agent found by pid");
    std::string bytes = agent.SerializeAsString();
    (void)bytes;
  }
  registry.Unregister(kConnection);
  pipeline.Finish();
  return 0;
}
