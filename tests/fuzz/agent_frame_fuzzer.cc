// libFuzzer target: the bytes an agent connection delivers to profd, as AgentChannelServer's
// I/O thread decodes them: 4-byte little-endian length frames (proto/profd/v1/agent_frame.h),
// each an AgentMessage; the first must be a Hello. What a frame carries then goes where profd
// sends it: Hello and Heartbeat into a real AgentRegistry (read back as `profctl agents` and
// /metrics list it), EventBatch into the capture pipeline (event_batch_fuzzer's path).
//
// The framing rules are AgentChannelServer::OnReadable's and HandleFrame's (a frame over the
// limit, a message CheckAgentMessage refuses, a first message that is not a hello, or a second
// hello close the connection); keep them in step with daemon/agents/.
#include <unistd.h>

#include <cstdint>
#include <string_view>

#include "absl/time/clock.h"
#include "daemon/agents/agent_channel_server.h"
#include "daemon/agents/agent_message_limits.h"
#include "daemon/agents/agent_registry.h"
#include "profd/v1/agent_channel.pb.h"
#include "profd/v1/agent_frame.h"
#include "tests/fuzz/capture_pipeline.h"

namespace {

constexpr profd::ConnectionId kConnection = 16;

// Returns false where profd closes the connection. The message goes through the channel's own
// check (daemon/agents/agent_message_limits.h) first, as in AgentChannelServer::HandleFrame:
// nothing is parsed into objects or allocated for it before that.
bool HandleFrame(std::string_view frame, bool* registered, profd::AgentRegistry* registry,
                 profd::fuzz::CapturePipeline* pipeline) {
  absl::StatusOr<profd::CheckedAgentMessage> checked = profd::CheckAgentMessage(
      absl::string_view(frame.data(), frame.size()), profd::AgentMessageLimits{});
  if (!checked.ok()) return false;
  if (!*registered && checked->kind != profd::v1::AgentMessage::kHello) return false;
  const absl::Time now = absl::Now();
  switch (checked->kind) {
    case profd::v1::AgentMessage::kHello:
      if (*registered) return false;
      *registered = true;
      // SO_PEERCRED's pid and uid: this process, so the /proc identity lookup is real.
      registry->Register(kConnection, static_cast<uint32_t>(getpid()),
                         static_cast<uint32_t>(getuid()), checked->hello, now);
      return true;
    case profd::v1::AgentMessage::kHeartbeat:
      registry->Heartbeat(kConnection, checked->heartbeat, now);
      return true;
    case profd::v1::AgentMessage::kCaptureStatus:
      return true;  // only compared with the capture's state by the orchestrator
    case profd::v1::AgentMessage::kEvents: {
      // Parsed on the capture's thread in profd; here, right away.
      profd::v1::EventBatch batch;
      if (!batch.ParseFromArray(checked->batch.data(), static_cast<int>(checked->batch.size()))) {
        return false;
      }
      pipeline->Add(batch);
      return true;
    }
    default:
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
    // The channel's limits by state (AgentChannelOptions): a hello, then frames as large as a
    // capture's batches may be.
    const profd::AgentChannelOptions limits;
    if (length > (registered ? limits.max_frame_capturing : limits.max_frame_before_hello)) {
      break;  // closed: oversized frame
    }
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
