// The checks every agent message passes on profd's agent I/O thread (agent_message_limits.h):
// the inputs that crashed or bloated profd (issue 12) are refused with the field, its size and
// the limit, real batches recorded from a GPU capture pass, and event batches are read from
// their wire format without a protobuf object per event.
#include "daemon/agents/agent_message_limits.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profd/v1/agent_channel.pb.h"
#include "tests/support/fixtures.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using ::testing::HasSubstr;

const AgentMessageLimits kLimits;

std::string Frame(const v1::AgentMessage& message) { return message.SerializeAsString(); }

// Protobuf wire pieces, for inputs the generated classes cannot produce (ids past 32 bits,
// millions of entries, broken lengths).
std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
  return out;
}
std::string Field(uint32_t number, const std::string& bytes) {
  return Varint(number << 3 | 2) + Varint(bytes.size()) + bytes;
}
std::string VarintField(uint32_t number, uint64_t v) { return Varint(number << 3) + Varint(v); }
std::string EventsFrame(const std::string& batch) { return Field(4, batch); }

v1::Hello GoodHello() {
  v1::Hello hello;
  hello.set_agent_version("0.1.0");
  hello.set_hostname("node-17");
  hello.set_pod_name("llm-7f9c");
  hello.set_pod_namespace("serving");
  hello.set_container_name("server");
  for (uint32_t i = 0; i < 8; ++i) {
    v1::DeviceInfo* d = hello.add_devices();
    d->set_ordinal(i);
    d->set_name("NVIDIA H200");
    d->set_uuid("GPU-5f2c1a8e-0b7d-4c55-9a3e-2f1d6c7b8a90");
  }
  return hello;
}

absl::Status Check(const std::string& frame) { return CheckAgentMessage(frame, kLimits).status(); }

absl::Status CheckHelloMessage(const v1::Hello& hello) {
  v1::AgentMessage m;
  *m.mutable_hello() = hello;
  return Check(Frame(m));
}

void ExpectViolation(const absl::Status& status, AgentViolation violation,
                     const std::string& text) {
  ASSERT_FALSE(status.ok()) << "expected " << AgentViolationLabel(violation) << ": " << text;
  EXPECT_EQ(ViolationOf(status), violation) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(text));
}

TEST(AgentMessageLimitsTest, RealHelloPasses) {
  v1::AgentMessage m;
  *m.mutable_hello() = GoodHello();
  absl::StatusOr<CheckedAgentMessage> checked = CheckAgentMessage(Frame(m), kLimits);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked->kind, v1::AgentMessage::kHello);
  EXPECT_EQ(checked->hello.pod_name(), "llm-7f9c");
  EXPECT_EQ(checked->hello.devices_size(), 8);
}

TEST(AgentMessageLimitsTest, HelloTextsAreBoundedAndNamedWithTheirSizeAndLimit) {
  struct Case {
    const char* field;
    void (v1::Hello::*set)(const std::string&);
    size_t limit;
  };
  const Case cases[] = {
      {"hello.agent_version", &v1::Hello::set_agent_version, 64},
      {"hello.hostname", &v1::Hello::set_hostname, 255},
      {"hello.pod_name", &v1::Hello::set_pod_name, 253},
      {"hello.pod_namespace", &v1::Hello::set_pod_namespace, 63},
      {"hello.container_name", &v1::Hello::set_container_name, 253},
  };
  for (const Case& c : cases) {
    v1::Hello at_limit = GoodHello();
    (at_limit.*c.set)(std::string(c.limit, 'a'));
    EXPECT_TRUE(CheckHelloMessage(at_limit).ok()) << c.field;
    v1::Hello over = GoodHello();
    (over.*c.set)(std::string(c.limit + 1, 'a'));
    ExpectViolation(CheckHelloMessage(over), AgentViolation::kOverLimit,
                    std::string(c.field) + " is " + std::to_string(c.limit + 1) +
                        " bytes, over the limit of " + std::to_string(c.limit));
  }
  // The 5 MiB pod name that broke `profctl agents` for everyone.
  v1::Hello huge = GoodHello();
  huge.set_pod_name(std::string(5 << 20, 'p'));
  ExpectViolation(CheckHelloMessage(huge), AgentViolation::kOverLimit,
                  "hello.pod_name is 5242880 bytes, over the limit of 253");
}

TEST(AgentMessageLimitsTest, ControlCharactersInAgentTextAreRefused) {
  v1::Hello forged = GoodHello();
  forged.set_agent_version("0.1.0\nE 2026-11-30T00:00:00.000 profd] forged");
  ExpectViolation(CheckHelloMessage(forged), AgentViolation::kInvalidField,
                  "has a control character (0x0a) at byte 5");
  v1::Hello escape = GoodHello();
  escape.set_pod_name("\x1b[2Jpod");
  ExpectViolation(CheckHelloMessage(escape), AgentViolation::kInvalidField, "(0x1b) at byte 0");
  v1::Hello device = GoodHello();
  device.mutable_devices(3)->set_name("H200\r");
  ExpectViolation(CheckHelloMessage(device), AgentViolation::kInvalidField,
                  "hello.devices[3].name");
  // UTF-8 text is fine.
  v1::Hello utf8 = GoodHello();
  utf8.set_container_name("serveur-é");
  EXPECT_TRUE(CheckHelloMessage(utf8).ok());
}

TEST(AgentMessageLimitsTest, HelloDevicesAreBoundedUniqueAndCountedBeforeParsing) {
  v1::Hello many = GoodHello();
  many.clear_devices();
  for (uint32_t i = 0; i < 65; ++i) many.add_devices()->set_ordinal(i % 64);
  ExpectViolation(CheckHelloMessage(many), AgentViolation::kOverLimit,
                  "hello.devices has 65 entries, over the limit of 64");

  v1::Hello twice = GoodHello();
  twice.mutable_devices(5)->set_ordinal(2);
  ExpectViolation(CheckHelloMessage(twice), AgentViolation::kInvalidField,
                  "hello.devices[5].ordinal 2 is listed twice");
  v1::Hello far = GoodHello();
  far.mutable_devices(0)->set_ordinal(64);
  ExpectViolation(CheckHelloMessage(far), AgentViolation::kOverLimit,
                  "hello.devices[0].ordinal is 64, over the limit of 63");
  v1::Hello uuid = GoodHello();
  uuid.mutable_devices(1)->set_uuid(std::string(65, 'u'));
  ExpectViolation(CheckHelloMessage(uuid), AgentViolation::kOverLimit,
                  "hello.devices[1].uuid is 65 bytes, over the limit of 64");

  // A million empty device entries (2 bytes each on the wire, ~100 bytes each as objects):
  // counted on the wire and refused before protobuf builds any of them.
  std::string devices;
  for (int i = 0; i < 1000000; ++i) devices += Field(9, "");
  ExpectViolation(Check(Field(1, devices)), AgentViolation::kOverLimit,
                  "hello.devices has 1000000 entries, over the limit of 64");
}

TEST(AgentMessageLimitsTest, HeartbeatCountersAreBoundedAndUnique) {
  v1::AgentMessage m;
  v1::Heartbeat* hb = m.mutable_heartbeat();
  for (uint32_t i = 0; i < 8; ++i) hb->add_devices()->set_device(i);
  EXPECT_TRUE(Check(Frame(m)).ok());

  hb->add_devices()->set_device(3);
  ExpectViolation(Check(Frame(m)), AgentViolation::kInvalidField,
                  "heartbeat.devices[8].device 3 is listed twice");
  hb->mutable_devices(8)->set_device(40000);
  ExpectViolation(Check(Frame(m)), AgentViolation::kOverLimit,
                  "heartbeat.devices[8].device is 40000, over the limit of 63");

  // Counters for 40,000 devices made every scrape of /metrics take 11 s.
  std::string counters;
  for (uint32_t i = 0; i < 40000; ++i) counters += Field(2, VarintField(1, i));
  ExpectViolation(Check(Field(2, counters)), AgentViolation::kOverLimit,
                  "heartbeat.devices has 40000 entries, over the limit of 64");
}

TEST(AgentMessageLimitsTest, CaptureStatusTextIsBounded) {
  v1::AgentMessage m;
  m.mutable_capture_status()->set_capture_id("20261130T120000Z-node-17-0123abcd");
  m.mutable_capture_status()->set_message(std::string(4096, 'm'));
  EXPECT_TRUE(Check(Frame(m)).ok());
  m.mutable_capture_status()->set_message(std::string(4097, 'm'));
  ExpectViolation(Check(Frame(m)), AgentViolation::kOverLimit,
                  "capture_status.message is 4097 bytes, over the limit of 4096");
}

// profd subtracts these as int64 (start latency): 2^63 from an agent was a signed overflow.
TEST(AgentMessageLimitsTest, CaptureStatusTimesAreRealtimeClockTimes) {
  v1::AgentMessage m;
  m.mutable_capture_status()->set_capture_id("20261130T120000Z-node-17-0123abcd");
  m.mutable_capture_status()->set_enabled_realtime_ns(1796056307535806320u);
  m.mutable_capture_status()->set_disabled_realtime_ns(1796056308535806320u);
  EXPECT_TRUE(Check(Frame(m)).ok());
  m.mutable_capture_status()->set_enabled_realtime_ns(uint64_t{1} << 63);
  ExpectViolation(Check(Frame(m)), AgentViolation::kInvalidField,
                  "capture_status.enabled_realtime_ns is 9223372036854775808");
}

TEST(AgentMessageLimitsTest, RecordedBatchesOfARealCapturePass) {
  std::vector<v1::EventBatch> batches = testing::ReadRecordedBatches(
      testing::SourcePath("tests/fixtures/burst_1000_kernels.batches.pb"));
  ASSERT_FALSE(batches.empty());
  uint32_t events = 0;
  for (v1::EventBatch batch : batches) {
    batch.set_capture_id("20261130T120000Z-node-17-0123abcd");
    v1::AgentMessage m;
    *m.mutable_events() = batch;
    std::string frame = Frame(m);
    absl::StatusOr<CheckedAgentMessage> checked = CheckAgentMessage(frame, kLimits);
    ASSERT_TRUE(checked.ok()) << checked.status();
    EXPECT_EQ(checked->kind, v1::AgentMessage::kEvents);
    EXPECT_EQ(checked->capture_id, "20261130T120000Z-node-17-0123abcd");
    EXPECT_EQ(checked->batch_records,
              static_cast<uint32_t>(batch.kernels_size() + batch.memcpys_size() +
                                    batch.memsets_size() + batch.api_calls_size() +
                                    batch.syncs_size() + batch.memory_ops_size() +
                                    batch.overheads_size() + batch.markers_size()));
    // What goes to the pipeline is the EventBatch itself, unchanged.
    v1::EventBatch reparsed;
    ASSERT_TRUE(reparsed.ParseFromArray(checked->batch.data(), checked->batch.size()));
    EXPECT_EQ(reparsed.SerializeAsString(), batch.SerializeAsString());
    events += checked->batch_records;
  }
  EXPECT_EQ(events, 2008u);  // 1000 kernels + 1004 API calls + 4 GPU operations
}

std::string Batch(const std::string& fields) {
  return VarintField(2, 0) + Field(1, "cap-1") + fields;
}
std::string StringDef(uint64_t id, const std::string& value) {
  return Field(3, VarintField(1, id) + Field(2, value));
}

TEST(AgentMessageLimitsTest, StringIdsAreBoundedBeforeAnyTableGrows) {
  EXPECT_TRUE(
      Check(EventsFrame(Batch(StringDef(1, "k") + StringDef(kLimits.max_string_id, "k")))).ok());
  // 0xFFFFFFFF: resize(id + 1) wrapped to 0 and profd died of SIGSEGV.
  ExpectViolation(Check(EventsFrame(Batch(StringDef(0xFFFFFFFFu, "k")))),
                  AgentViolation::kOverLimit,
                  "event batch strings[0].id is 4294967295, outside 1..1048575");
  // 50,000,000 in a 30-byte message: a 3.1 GB string table.
  std::string small = EventsFrame(Batch(StringDef(50000000, "k")));
  EXPECT_LE(small.size(), 30u);
  ExpectViolation(Check(small), AgentViolation::kOverLimit,
                  "strings[0].id is 50000000, outside 1..1048575");
  // Past 32 bits: protobuf would keep the low bits (here 1); the check reads all 64.
  ExpectViolation(Check(EventsFrame(Batch(StringDef((1ull << 32) + 1, "k")))),
                  AgentViolation::kOverLimit, "id is 4294967297");
  ExpectViolation(Check(EventsFrame(Batch(StringDef(0, "k")))), AgentViolation::kOverLimit,
                  "id is 0, outside 1..");
}

TEST(AgentMessageLimitsTest, StringSizesAndCountsAreBounded) {
  EXPECT_TRUE(Check(EventsFrame(Batch(StringDef(7, std::string(64 << 10, 'x'))))).ok());
  ExpectViolation(Check(EventsFrame(Batch(StringDef(7, std::string((64 << 10) + 1, 'x'))))),
                  AgentViolation::kOverLimit,
                  "strings[0] (id 7) is 65537 bytes, over the limit of 65536");
  std::string many;
  for (uint32_t i = 1; i <= kLimits.max_batch_strings + 1; ++i) many += StringDef(i, "");
  ExpectViolation(Check(EventsFrame(Batch(many))), AgentViolation::kOverLimit,
                  "more than 65536 strings");
}

TEST(AgentMessageLimitsTest, EventsPerBatchAreBounded) {
  std::string at_limit;
  for (uint32_t i = 0; i < kLimits.max_batch_records; ++i) at_limit += Field(4 + i % 8, "");
  absl::StatusOr<CheckedAgentMessage> ok = CheckAgentMessage(EventsFrame(Batch(at_limit)), kLimits);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->batch_records, kLimits.max_batch_records);
  // Empty kernel records: 2 bytes on the wire, ~100 as objects. 8.4 M of them in one 16 MiB
  // frame took profd from 53 MiB to 990 MiB.
  ExpectViolation(Check(EventsFrame(Batch(at_limit + Field(4, "")))), AgentViolation::kOverLimit,
                  "event batch has 65537 events, over the limit of 65536 (agents cut batches at "
                  "32768)");
  std::string devices;
  for (int i = 0; i < 65; ++i) devices += Field(12, "");
  ExpectViolation(Check(EventsFrame(Batch(devices))), AgentViolation::kOverLimit,
                  "event batch devices has 65 entries, over the limit of 64");
}

TEST(AgentMessageLimitsTest, MalformedFramesAreRefusedAsSuch) {
  const std::pair<std::string, const char*> cases[] = {
      {"", "0 bodies, expected one"},
      {std::string(8, '\xff'), "invalid field tag"},
      {Field(2, "") + Field(2, ""), "2 bodies, expected one"},
      {VarintField(1, 5), "body field 1 has wire type 0"},
      {Varint(1 << 3 | 2) + Varint(1000) + "short", "runs past the end of the frame"},
      {std::string("\x2b", 1), "field 5 runs past the end"},                 // a group
      {std::string("\x00", 1), "invalid field tag at byte 0"},               // tag 0
      {EventsFrame(VarintField(2, 1)), "event batch without a capture_id"},  // no id
      {EventsFrame(Batch(VarintField(4, 1))), "event batch field 4 has wire type 0, expected 2"},
      {EventsFrame(Batch(Varint(3 << 3 | 2) + Varint(50))), "event batch string runs past"},
      {Field(2, Field(2, std::string("\x08\xff", 2))), "not a valid Heartbeat"},
  };
  for (const auto& [frame, text] : cases) {
    absl::Status s = Check(frame);
    ExpectViolation(s, AgentViolation::kMalformed, text);
    EXPECT_THAT(std::string(s.message()), HasSubstr("malformed message of "));
  }
}

TEST(AgentMessageLimitsTest, FieldsOfANewerAgentAreSkipped) {
  // Unknown fields, at the top and in a batch: a newer agent talking to this profd.
  std::string frame =
      EventsFrame(Batch(Field(99, "future") + VarintField(98, 7))) + Field(50, "also future");
  absl::StatusOr<CheckedAgentMessage> checked = CheckAgentMessage(frame, kLimits);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked->capture_id, "cap-1");
  EXPECT_EQ(checked->batch_records, 0u);
}

TEST(AgentMessageLimitsTest, ViolationsRoundTripThroughStatus) {
  std::set<std::string> labels;
  for (int v = 0; v < kAgentViolationCount; ++v) {
    AgentViolation violation = static_cast<AgentViolation>(v);
    labels.insert(AgentViolationLabel(violation));
    EXPECT_EQ(ViolationOf(AgentViolationError(violation, "x")), violation);
  }
  EXPECT_EQ(labels.size(), static_cast<size_t>(kAgentViolationCount));
  EXPECT_EQ(ViolationOf(absl::InternalError("no payload")), AgentViolation::kMalformed);
}

}  // namespace
}  // namespace profd
