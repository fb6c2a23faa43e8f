#include "daemon/agents/agent_message_limits.h"

#include <bitset>
#include <initializer_list>
#include <optional>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"

namespace profd {
namespace {

using google::protobuf::io::CodedInputStream;

constexpr char kViolationPayload[] = "type.profd.dev/agent-violation";

// Protobuf wire types (https://protobuf.dev/programming-guides/encoding/).
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// The fields of AgentMessage.body and of EventBatch, by number (proto/profd/v1/*.proto).
enum AgentMessageField : uint32_t { kHello = 1, kHeartbeat = 2, kCaptureStatus = 3, kEvents = 4 };
enum EventBatchField : uint32_t {
  kCaptureId = 1,
  kSequence = 2,
  kStrings = 3,
  kFirstRecords = 4,  // kernels, memcpys, memsets, api_calls, syncs, memory_ops, overheads,
  kLastRecords = 11,  // markers: the events
  kDevices = 12,
  kClock = 13,
  kDropped = 14,
};

absl::Status Malformed(std::string message) {
  return AgentViolationError(AgentViolation::kMalformed, std::move(message));
}

absl::Status OverLimit(std::string message) {
  return AgentViolationError(AgentViolation::kOverLimit, std::move(message));
}

// Reads a length prefix and returns the bytes it covers; false when it runs past the end.
bool ReadLengthDelimited(CodedInputStream& in, absl::string_view whole, absl::string_view* out) {
  uint64_t length;
  if (!in.ReadVarint64(&length)) return false;
  size_t at = static_cast<size_t>(in.CurrentPosition());
  if (length > whole.size() - at) return false;
  *out = whole.substr(at, static_cast<size_t>(length));
  return in.Skip(static_cast<int>(length));
}

// Skips one value of a field profd does not look into. Groups (wire types 3, 4) are not in any
// profd message, so they are malformed here.
bool SkipValue(CodedInputStream& in, absl::string_view whole, uint32_t wire_type) {
  switch (wire_type) {
    case kVarint: {
      uint64_t ignored;
      return in.ReadVarint64(&ignored);
    }
    case kFixed64: {
      uint64_t ignored;
      return in.ReadLittleEndian64(&ignored);
    }
    case kFixed32: {
      uint32_t ignored;
      return in.ReadLittleEndian32(&ignored);
    }
    case kLengthDelimited: {
      absl::string_view ignored;
      return ReadLengthDelimited(in, whole, &ignored);
    }
    default:
      return false;
  }
}

// Walks the top-level fields of one message, calling on_field(number, wire_type) for each; the
// callback reads or skips the value. ReadTag() returns 0 both at the end and for a zero tag, so
// the position tells them apart.
template <typename OnField>
absl::Status ForEachField(CodedInputStream& in, absl::string_view whole, const char* what,
                          OnField on_field) {
  while (true) {
    size_t before = static_cast<size_t>(in.CurrentPosition());
    uint32_t tag = in.ReadTag();
    if (tag == 0) {
      if (before == whole.size()) return absl::OkStatus();
      return Malformed(absl::StrCat(what, ": invalid field tag at byte ", before));
    }
    uint32_t number = tag >> 3;
    if (number == 0) return Malformed(absl::StrCat(what, ": field number 0 at byte ", before));
    if (absl::Status s = on_field(number, tag & 7); !s.ok()) return s;
  }
}

// Counts the entries of repeated message fields without parsing them, so that a message listing
// millions of empty entries is refused before protobuf builds an object for each.
absl::Status CheckRepeatedCounts(absl::string_view message, const char* what,
                                 std::initializer_list<std::pair<uint32_t, const char*>> fields,
                                 uint32_t limit) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(message.data()),
                      static_cast<int>(message.size()));
  uint32_t counts[4] = {};
  absl::Status s = ForEachField(in, message, what, [&](uint32_t number, uint32_t wire_type) {
    size_t i = 0;
    for (const auto& [field, name] : fields) {
      if (field == number && wire_type == kLengthDelimited && i < 4) ++counts[i];
      ++i;
    }
    if (!SkipValue(in, message, wire_type)) {
      return Malformed(absl::StrCat(what, ": field ", number, " runs past the end"));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  size_t i = 0;
  for (const auto& [field, name] : fields) {
    if (counts[i] > limit) {
      return OverLimit(
          absl::StrCat(what, ".", name, " has ", counts[i], " entries, over the limit of ", limit));
    }
    ++i;
  }
  return absl::OkStatus();
}

// The first bytes of a value, for a message about it; the log escapes what is not printable.
std::string Preview(absl::string_view value) {
  constexpr size_t kPreview = 40;
  if (value.size() <= kPreview) return absl::StrCat("\"", value, "\"");
  return absl::StrCat("\"", value.substr(0, kPreview), "\"...");
}

// Text an agent sends is shown by profctl, in /metrics labels and in profd's log: bounded, and
// without control characters (a newline or an escape sequence there forges log lines or
// rewrites a terminal).
absl::Status CheckText(absl::string_view field, absl::string_view value, size_t limit) {
  if (value.size() > limit) {
    return OverLimit(
        absl::StrCat(field, " is ", value.size(), " bytes, over the limit of ", limit));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(value[i]);
    if (c < 0x20 || c == 0x7f) {
      return AgentViolationError(
          AgentViolation::kInvalidField,
          absl::StrCat(field, " ", Preview(value), " has a control character (0x",
                       absl::Hex(c, absl::kZeroPad2), ") at byte ", i,
                       ": agents send printable text"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDevices(absl::string_view what,
                          const google::protobuf::RepeatedPtrField<v1::DeviceInfo>& devices,
                          const AgentMessageLimits& limits) {
  if (static_cast<uint32_t>(devices.size()) > limits.max_devices) {
    return OverLimit(absl::StrCat(what, " has ", devices.size(), " entries, over the limit of ",
                                  limits.max_devices));
  }
  std::bitset<256> seen;
  for (int i = 0; i < devices.size(); ++i) {
    const v1::DeviceInfo& d = devices[i];
    std::string field = absl::StrCat(what, "[", i, "]");
    if (d.ordinal() > limits.max_device_ordinal || d.ordinal() >= seen.size()) {
      return OverLimit(absl::StrCat(field, ".ordinal is ", d.ordinal(), ", over the limit of ",
                                    limits.max_device_ordinal));
    }
    if (seen.test(d.ordinal())) {
      return AgentViolationError(
          AgentViolation::kInvalidField,
          absl::StrCat(field, ".ordinal ", d.ordinal(), " is listed twice: ordinals are unique"));
    }
    seen.set(d.ordinal());
    if (absl::Status s = CheckText(field + ".name", d.name(), limits.max_device_name_bytes);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckText(field + ".uuid", d.uuid(), limits.max_device_uuid_bytes);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// One StringDef: an id in 1..max_string_id and a value of at most max_string_bytes. The id is
// read as 64 bits so that a value past 32 bits cannot wrap to a small one.
absl::Status CheckStringDef(absl::string_view def, uint32_t index,
                            const AgentMessageLimits& limits) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(def.data()), static_cast<int>(def.size()));
  uint64_t id = 0;
  size_t value_bytes = 0;
  absl::Status s = ForEachField(in, def, "event batch string", [&](uint32_t number, uint32_t wt) {
    if (number == 1 && wt == kVarint) {
      if (!in.ReadVarint64(&id)) return Malformed("event batch string: truncated id");
    } else if (number == 2 && wt == kLengthDelimited) {
      absl::string_view value;
      if (!ReadLengthDelimited(in, def, &value)) {
        return Malformed("event batch string: value runs past the end");
      }
      value_bytes = value.size();
    } else if (!SkipValue(in, def, wt)) {
      return Malformed(absl::StrCat("event batch string: field ", number, " runs past the end"));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  if (id == 0 || id > limits.max_string_id) {
    return OverLimit(absl::StrCat("event batch strings[", index, "].id is ", id, ", outside 1..",
                                  limits.max_string_id));
  }
  if (value_bytes > limits.max_string_bytes) {
    return OverLimit(absl::StrCat("event batch strings[", index, "] (id ", id, ") is ", value_bytes,
                                  " bytes, over the limit of ", limits.max_string_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

const char* AgentViolationLabel(AgentViolation violation) {
  switch (violation) {
    case AgentViolation::kFrameTooLarge:
      return "frame_too_large";
    case AgentViolation::kMalformed:
      return "malformed";
    case AgentViolation::kOverLimit:
      return "over_limit";
    case AgentViolation::kInvalidField:
      return "invalid_field";
    case AgentViolation::kNoHello:
      return "no_hello";
    case AgentViolation::kFlood:
      return "flood";
    case AgentViolation::kNotReading:
      return "not_reading";
    case AgentViolation::kPeerExited:
      return "peer_exited";
  }
  return "malformed";
}

absl::Status AgentViolationError(AgentViolation violation, std::string message) {
  absl::Status status = absl::InvalidArgumentError(std::move(message));
  status.SetPayload(kViolationPayload, absl::Cord(AgentViolationLabel(violation)));
  return status;
}

AgentViolation ViolationOf(const absl::Status& status) {
  absl::optional<absl::Cord> label = status.GetPayload(kViolationPayload);
  if (!label) return AgentViolation::kMalformed;
  for (int v = 0; v < kAgentViolationCount; ++v) {
    if (*label == AgentViolationLabel(static_cast<AgentViolation>(v))) {
      return static_cast<AgentViolation>(v);
    }
  }
  return AgentViolation::kMalformed;
}

absl::Status CheckHello(const v1::Hello& hello, const AgentMessageLimits& limits) {
  const std::pair<const char*, std::pair<const std::string*, size_t>> texts[] = {
      {"hello.agent_version", {&hello.agent_version(), limits.max_agent_version_bytes}},
      {"hello.hostname", {&hello.hostname(), limits.max_hostname_bytes}},
      {"hello.pod_name", {&hello.pod_name(), limits.max_pod_name_bytes}},
      {"hello.pod_namespace", {&hello.pod_namespace(), limits.max_pod_namespace_bytes}},
      {"hello.container_name", {&hello.container_name(), limits.max_container_name_bytes}},
  };
  for (const auto& [field, text] : texts) {
    if (absl::Status s = CheckText(field, *text.first, text.second); !s.ok()) return s;
  }
  return CheckDevices("hello.devices", hello.devices(), limits);
}

absl::Status CheckHeartbeat(const v1::Heartbeat& heartbeat, const AgentMessageLimits& limits) {
  if (static_cast<uint32_t>(heartbeat.devices_size()) > limits.max_devices) {
    return OverLimit(absl::StrCat("heartbeat.devices has ", heartbeat.devices_size(),
                                  " entries, over the limit of ", limits.max_devices));
  }
  std::bitset<256> seen;
  for (int i = 0; i < heartbeat.devices_size(); ++i) {
    uint32_t device = heartbeat.devices(i).device();
    if (device > limits.max_device_ordinal || device >= seen.size()) {
      return OverLimit(absl::StrCat("heartbeat.devices[", i, "].device is ", device,
                                    ", over the limit of ", limits.max_device_ordinal));
    }
    if (seen.test(device)) {
      return AgentViolationError(
          AgentViolation::kInvalidField,
          absl::StrCat("heartbeat.devices[", i, "].device ", device, " is listed twice"));
    }
    seen.set(device);
  }
  if (absl::Status s = CheckText("heartbeat.recorder.detail", heartbeat.recorder().detail(),
                                 limits.max_status_message_bytes);
      !s.ok()) {
    return s;
  }
  return CheckDevices("heartbeat.device_infos", heartbeat.device_infos(), limits);
}

absl::Status CheckCaptureStatus(const v1::CaptureStatus& status, const AgentMessageLimits& limits) {
  if (absl::Status s =
          CheckText("capture_status.capture_id", status.capture_id(), limits.max_capture_id_bytes);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckText("capture_status.message", status.message(), limits.max_status_message_bytes);
      !s.ok()) {
    return s;
  }
  // CLOCK_REALTIME nanoseconds: profd subtracts and compares them as int64 (start latency, the
  // capture window); a time past 2^62 ns (year 2116) is no clock's.
  constexpr uint64_t kMaxRealtimeNs = uint64_t{1} << 62;
  for (const auto& [name, value] :
       {std::pair{"enabled_realtime_ns", status.enabled_realtime_ns()},
        std::pair{"disabled_realtime_ns", status.disabled_realtime_ns()},
        std::pair{"recorded_from_realtime_ns", status.recorded_from_realtime_ns()}}) {
    if (value >= kMaxRealtimeNs) {
      return AgentViolationError(AgentViolation::kInvalidField,
                                 absl::StrCat("capture_status.", name, " is ", value,
                                              ": not a CLOCK_REALTIME time (over 2^62 ns)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> CheckEventBatch(absl::string_view batch, const AgentMessageLimits& limits,
                                         std::string* capture_id) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(batch.data()),
                      static_cast<int>(batch.size()));
  uint32_t records = 0, strings = 0, devices = 0;
  bool has_capture_id = false;
  auto expect = [&](uint32_t number, uint32_t wire_type, uint32_t expected) {
    if (wire_type == expected) return absl::OkStatus();
    return Malformed(absl::StrCat("event batch field ", number, " has wire type ", wire_type,
                                  ", expected ", expected));
  };
  absl::Status s = ForEachField(in, batch, "event batch", [&](uint32_t number, uint32_t wt) {
    absl::string_view value;
    if (number == kCaptureId) {
      if (absl::Status e = expect(number, wt, kLengthDelimited); !e.ok()) return e;
      if (!ReadLengthDelimited(in, batch, &value)) {
        return Malformed("event batch capture_id runs past the end");
      }
      if (value.size() > limits.max_capture_id_bytes) {
        return OverLimit(absl::StrCat("event batch capture_id is ", value.size(),
                                      " bytes, over the limit of ", limits.max_capture_id_bytes));
      }
      capture_id->assign(value.data(), value.size());
      has_capture_id = true;
      return absl::OkStatus();
    }
    if (number == kStrings) {
      if (absl::Status e = expect(number, wt, kLengthDelimited); !e.ok()) return e;
      if (!ReadLengthDelimited(in, batch, &value)) {
        return Malformed("event batch string runs past the end");
      }
      if (++strings > limits.max_batch_strings) {
        return OverLimit(absl::StrCat("event batch has more than ", limits.max_batch_strings,
                                      " strings (the limit)"));
      }
      return CheckStringDef(value, strings - 1, limits);
    }
    if ((number >= kFirstRecords && number <= kLastRecords) || number == kDevices ||
        number == kClock) {
      if (absl::Status e = expect(number, wt, kLengthDelimited); !e.ok()) return e;
      if (!ReadLengthDelimited(in, batch, &value)) {
        return Malformed(absl::StrCat("event batch field ", number, " runs past the end"));
      }
      if (number == kDevices) ++devices;
      if (number <= kLastRecords) ++records;
      return absl::OkStatus();
    }
    if (number == kSequence || number == kDropped) {
      if (absl::Status e = expect(number, wt, kVarint); !e.ok()) return e;
    }
    // Fields profd does not know come from a newer agent: skipped, bounded by the frame.
    if (!SkipValue(in, batch, wt)) {
      return Malformed(absl::StrCat("event batch field ", number, " runs past the end"));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  if (records > limits.max_batch_records) {
    return OverLimit(absl::StrCat("event batch has ", records, " events, over the limit of ",
                                  limits.max_batch_records, " (agents cut batches at ",
                                  limits.max_batch_records / 2, ")"));
  }
  if (devices > limits.max_devices) {
    return OverLimit(absl::StrCat("event batch devices has ", devices,
                                  " entries, over the limit of ", limits.max_devices));
  }
  if (!has_capture_id || capture_id->empty()) {
    return Malformed("event batch without a capture_id");
  }
  return records;
}

namespace {

absl::StatusOr<CheckedAgentMessage> CheckAgentMessageBody(absl::string_view frame,
                                                          const AgentMessageLimits& limits) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(frame.data()),
                      static_cast<int>(frame.size()));
  CheckedAgentMessage out;
  absl::string_view body;
  int bodies = 0;
  absl::Status s = ForEachField(in, frame, "agent message", [&](uint32_t number, uint32_t wt) {
    if (number >= kHello && number <= kEvents) {
      if (wt != kLengthDelimited) {
        return Malformed(absl::StrCat("agent message body field ", number, " has wire type ", wt));
      }
      if (!ReadLengthDelimited(in, frame, &body)) {
        return Malformed("agent message body runs past the end of the frame");
      }
      out.kind = static_cast<v1::AgentMessage::BodyCase>(number);
      ++bodies;
      return absl::OkStatus();
    }
    if (!SkipValue(in, frame, wt)) {
      return Malformed(absl::StrCat("agent message field ", number, " runs past the end"));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  if (bodies != 1) {
    return Malformed(
        absl::StrCat(bodies, " bodies, expected one (hello, heartbeat, status or ", "events)"));
  }
  auto parse = [&](google::protobuf::MessageLite& message, const char* what) {
    if (message.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
      return absl::OkStatus();
    }
    return Malformed(absl::StrCat("not a valid ", what));
  };
  switch (out.kind) {
    case v1::AgentMessage::kHello:
      if (s = CheckRepeatedCounts(body, "hello", {{9, "devices"}}, limits.max_devices); !s.ok()) {
        return s;
      }
      if (s = parse(out.hello, "Hello"); !s.ok()) return s;
      if (s = CheckHello(out.hello, limits); !s.ok()) return s;
      break;
    case v1::AgentMessage::kHeartbeat:
      if (s = CheckRepeatedCounts(body, "heartbeat", {{2, "devices"}, {3, "device_infos"}},
                                  limits.max_devices);
          !s.ok()) {
        return s;
      }
      if (s = parse(out.heartbeat, "Heartbeat"); !s.ok()) return s;
      if (s = CheckHeartbeat(out.heartbeat, limits); !s.ok()) return s;
      break;
    case v1::AgentMessage::kCaptureStatus:
      if (s = parse(out.status, "CaptureStatus"); !s.ok()) return s;
      if (s = CheckCaptureStatus(out.status, limits); !s.ok()) return s;
      break;
    case v1::AgentMessage::kEvents: {
      absl::StatusOr<uint32_t> records = CheckEventBatch(body, limits, &out.capture_id);
      if (!records.ok()) return records.status();
      out.batch_records = *records;
      out.batch = body;
      break;
    }
    case v1::AgentMessage::BODY_NOT_SET:
      break;
  }
  return out;
}

}  // namespace

absl::StatusOr<CheckedAgentMessage> CheckAgentMessage(absl::string_view frame,
                                                      const AgentMessageLimits& limits) {
  absl::StatusOr<CheckedAgentMessage> checked = CheckAgentMessageBody(frame, limits);
  if (checked.ok() || ViolationOf(checked.status()) != AgentViolation::kMalformed) return checked;
  return Malformed(
      absl::StrCat("malformed message of ", frame.size(), " bytes: ", checked.status().message()));
}

}  // namespace profd
