// What an agent may say, checked before a message costs profd more than the frame it came in.
// The agent socket is open to every local user (0666), so each message is hostile until these
// checks pass: counts, ids, sizes and strings are bounded here, and event batches are checked by
// scanning their wire format, without building protobuf objects (the capture's pipeline thread
// parses them later). Plain functions of bytes, so that the unit tests and the fuzzers
// (tests/fuzz/) run exactly what the agent I/O thread runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "profd/v1/agent_channel.pb.h"
#include "profd/v1/agent_frame.h"

namespace profd {

// Why profd closed an agent connection for cause: the `reason` label of
// profd_agent_protocol_errors_total. A small fixed set, so the label stays cheap.
enum class AgentViolation : uint8_t {
  kFrameTooLarge,  // a frame over the limit of the connection's state
  kMalformed,      // not a well-formed AgentMessage
  kOverLimit,      // a count, size or id over its limit
  kInvalidField,   // a value that cannot be right: a control character, a repeated ordinal
  kNoHello,        // did not open with one hello in time
  kFlood,          // more messages per second than allowed
  kNotReading,     // does not read what profd sends it
  kPeerExited,     // the process that connected exited while another still held its socket
};
inline constexpr int kAgentViolationCount = 8;
const char* AgentViolationLabel(AgentViolation violation);

// An error Status that carries the violation (for the metric); ViolationOf reads it back
// (kMalformed for a status without one).
absl::Status AgentViolationError(AgentViolation violation, std::string message);
AgentViolation ViolationOf(const absl::Status& status);

struct AgentMessageLimits {
  // Hello and heartbeat. The Kubernetes names are bounded by Kubernetes itself.
  uint32_t max_devices = v1::kMaxAgentDevices;
  uint32_t max_device_ordinal = v1::kMaxAgentDevices - 1;  // the agent's counters are per ordinal
  size_t max_agent_version_bytes = 64;
  size_t max_hostname_bytes = 255;        // HOST_NAME_MAX
  size_t max_pod_name_bytes = 253;        // a DNS-1123 subdomain
  size_t max_pod_namespace_bytes = 63;    // a DNS-1123 label
  size_t max_container_name_bytes = 253;  // generous: Kubernetes allows 63
  size_t max_device_name_bytes = 255;     // the agent asks cuDeviceGetName for 255
  size_t max_device_uuid_bytes = 64;      // "GPU-" and 36 characters
  // Capture status and event batches.
  size_t max_capture_id_bytes = 512;  // profd makes them: time, hostname (<= 255), 8 hex
  size_t max_status_message_bytes = 4096;
  uint32_t max_batch_records = v1::kMaxBatchRecords;
  uint32_t max_batch_strings = v1::kMaxBatchStrings;
  uint32_t max_string_id = v1::kMaxStringId;
  size_t max_string_bytes = v1::kMaxStringBytes;
};

// One checked agent message. For hello, heartbeat and capture status the small message itself;
// for an event batch only what the I/O thread needs to route it.
struct CheckedAgentMessage {
  v1::AgentMessage::BodyCase kind = v1::AgentMessage::BODY_NOT_SET;
  v1::Hello hello;
  v1::Heartbeat heartbeat;
  v1::CaptureStatus status;
  // kEvents: the serialized EventBatch (a view into the frame) and its capture id.
  absl::string_view batch;
  std::string capture_id;
  uint32_t batch_records = 0;
};

// Checks one frame's AgentMessage (the bytes after the length header): exactly one body, and
// that body within the limits. Errors carry an AgentViolation and say which field, how big it
// was and what the limit is.
absl::StatusOr<CheckedAgentMessage> CheckAgentMessage(absl::string_view frame,
                                                      const AgentMessageLimits& limits);

// Checks a serialized EventBatch by scanning its wire format: well-formed at the top level, a
// capture id, at most max_batch_records events and max_batch_strings strings, string ids in
// 1..max_string_id and values of at most max_string_bytes, at most max_devices devices. The
// events themselves are skipped by their length (the pipeline parses them). Returns the count
// of events.
absl::StatusOr<uint32_t> CheckEventBatch(absl::string_view batch, const AgentMessageLimits& limits,
                                         std::string* capture_id);

// The checks of the parsed small messages (also used by CheckAgentMessage).
absl::Status CheckHello(const v1::Hello& hello, const AgentMessageLimits& limits);
absl::Status CheckHeartbeat(const v1::Heartbeat& heartbeat, const AgentMessageLimits& limits);
absl::Status CheckCaptureStatus(const v1::CaptureStatus& status, const AgentMessageLimits& limits);

}  // namespace profd
