// Framing of the agent channel, shared by the agent and profd: a 4-byte little-endian length,
// then the message. The limit keeps a broken or hostile peer from making either side allocate
// without bound; it is the most either side ever accepts. profd accepts less, by what the
// connection may say at that point (--agent_max_frame_before_hello, _registered, _capturing).
#pragma once

#include <cstddef>
#include <cstdint>

namespace profd::v1 {

inline constexpr size_t kAgentFrameHeaderBytes = 4;
inline constexpr uint32_t kMaxAgentFrameBytes = 16u << 20;
// Limits both sides build in: profd closes a connection that exceeds them
// (daemon/agents/agent_message_limits.h), and the agent never does (it cuts a batch at half the
// records, stops defining strings past the last id and shortens a string that is too long).
inline constexpr uint32_t kMaxAgentDevices = 64;  // in a hello or heartbeat: LaunchCounters' table
inline constexpr uint32_t kMaxBatchRecords = 65536;       // events in one EventBatch
inline constexpr uint32_t kMaxBatchStrings = 65536;       // StringDefs in one EventBatch
inline constexpr uint32_t kMaxStringId = (1u << 20) - 1;  // StringDef ids are 1..kMaxStringId
inline constexpr uint32_t kMaxStringBytes = 64u << 10;    // one StringDef value
inline constexpr const char* kDefaultAgentSocket = "/run/profd/agent.sock";
inline constexpr const char* kAgentSocketEnv = "PROFD_AGENT_SOCKET";

inline void EncodeFrameHeader(uint32_t length, unsigned char* out) {
  out[0] = static_cast<unsigned char>(length);
  out[1] = static_cast<unsigned char>(length >> 8);
  out[2] = static_cast<unsigned char>(length >> 16);
  out[3] = static_cast<unsigned char>(length >> 24);
}

inline uint32_t DecodeFrameHeader(const unsigned char* in) {
  return static_cast<uint32_t>(in[0]) | (static_cast<uint32_t>(in[1]) << 8) |
         (static_cast<uint32_t>(in[2]) << 16) | (static_cast<uint32_t>(in[3]) << 24);
}

}  // namespace profd::v1
