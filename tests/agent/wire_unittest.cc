// The agent writes the channel's messages with its own encoder; profd parses them with
// libprotobuf. These tests hold the two to the same .proto.
#include "agent/wire/agent_messages.h"
#include "gtest/gtest.h"
#include "profd/v1/agent_channel.pb.h"

namespace profagent::wire {
namespace {

TEST(WireTest, HelloParsesWithTheGeneratedClasses) {
  Hello hello;
  hello.agent_version = "1.2.3";
  hello.pid = 4242;
  hello.hostname = "node-7";
  hello.pod_name = "llm-7f9c";
  hello.pod_namespace = "serving";
  hello.container_name = "server";
  hello.cupti_version = 26;
  hello.cuda_driver_version = 13000;
  hello.injected = true;
  hello.start_realtime_ns = 1795971410516866363ull;
  DeviceInfo d;
  d.ordinal = 1;
  d.name = "NVIDIA H200";
  d.uuid = "GPU-783405c2-1881-8bd6-ee2a-637a2d6a639d";
  d.compute_major = 9;
  d.multiprocessors = 132;
  d.global_memory_bytes = 150109880320ull;
  d.max_shared_memory_per_block = 232448;
  hello.devices.push_back(d);
  std::string bytes;
  EncodeHello(hello, &bytes);

  profd::v1::AgentMessage message;
  ASSERT_TRUE(message.ParseFromString(bytes));
  ASSERT_EQ(message.body_case(), profd::v1::AgentMessage::kHello);
  const auto& h = message.hello();
  EXPECT_EQ(h.agent_version(), "1.2.3");
  EXPECT_EQ(h.pid(), 4242u);
  EXPECT_EQ(h.hostname(), "node-7");
  EXPECT_EQ(h.pod_name(), "llm-7f9c");
  EXPECT_EQ(h.pod_namespace(), "serving");
  EXPECT_EQ(h.container_name(), "server");
  EXPECT_EQ(h.cupti_version(), 26u);
  EXPECT_EQ(h.cuda_driver_version(), 13000u);
  EXPECT_TRUE(h.injected());
  EXPECT_EQ(h.start_realtime_ns(), 1795971410516866363ull);
  ASSERT_EQ(h.devices_size(), 1);
  EXPECT_EQ(h.devices(0).ordinal(), 1u);
  EXPECT_EQ(h.devices(0).name(), "NVIDIA H200");
  EXPECT_EQ(h.devices(0).uuid(), d.uuid);
  EXPECT_EQ(h.devices(0).compute_major(), 9u);
  EXPECT_EQ(h.devices(0).multiprocessors(), 132u);
  EXPECT_EQ(h.devices(0).global_memory_bytes(), 150109880320ull);
  EXPECT_EQ(h.devices(0).max_shared_memory_per_block(), 232448u);
}

TEST(WireTest, HeartbeatAndStatusParse) {
  Heartbeat hb;
  hb.realtime_ns = 7;
  hb.devices.push_back({0, 1000, 3, 1 << 20, 5 << 20});
  std::string bytes;
  EncodeHeartbeat(hb, &bytes);
  profd::v1::AgentMessage m;
  ASSERT_TRUE(m.ParseFromString(bytes));
  ASSERT_EQ(m.heartbeat().devices_size(), 1);
  EXPECT_EQ(m.heartbeat().devices(0).kernel_launches(), 1000u);
  EXPECT_EQ(m.heartbeat().devices(0).graph_launches(), 3u);
  EXPECT_EQ(m.heartbeat().devices(0).memory_peak_bytes(), 5u << 20);

  CaptureStatus s;
  s.capture_id = "c1";
  s.state = CaptureState::kFailed;
  s.error = CaptureError::kCuptiInUse;
  s.message = "held";
  s.events = 12;
  s.truncated = true;
  EncodeCaptureStatus(s, &bytes);
  ASSERT_TRUE(m.ParseFromString(bytes));
  EXPECT_EQ(m.capture_status().capture_id(), "c1");
  EXPECT_EQ(m.capture_status().state(), profd::v1::CAPTURE_STATE_FAILED);
  EXPECT_EQ(m.capture_status().error(), profd::v1::CAPTURE_ERROR_CUPTI_IN_USE);
  EXPECT_EQ(m.capture_status().events(), 12u);
  EXPECT_TRUE(m.capture_status().truncated());
}

TEST(WireTest, HeartbeatCarriesHowCuptiIsShared) {
  Heartbeat hb;
  hb.realtime_ns = 9;
  hb.has_cupti_sharing = true;
  CuptiSharing& s = hb.cupti_sharing;
  s.mode = CuptiSharingMode::kPartial;
  s.detail = "some libraries call CUPTI directly";
  s.clients = {"libtorch_cuda.so: CUPTI subscriber, shared through the agent",
               "libtorch_cuda.so: CUPTI activity tracing, on now"};
  s.other_tracing = true;
  s.other_tracer = "torch.profiler (Kineto in libtorch_cuda.so)";
  s.interposed = {"libtorch_cuda.so", "libtorch_cpu.so"};
  s.not_interposed = {"libfoo.so: its PLT uses REL relocations (unsupported)"};
  s.native_multiple_subscribers = true;
  s.captures_cut_short = 3;
  std::string bytes;
  EncodeHeartbeat(hb, &bytes);
  profd::v1::AgentMessage m;
  ASSERT_TRUE(m.ParseFromString(bytes));
  ASSERT_TRUE(m.heartbeat().has_cupti_sharing());
  const auto& p = m.heartbeat().cupti_sharing();
  EXPECT_EQ(p.mode(), profd::v1::CUPTI_SHARING_PARTIAL);
  EXPECT_EQ(p.detail(), s.detail);
  ASSERT_EQ(p.clients_size(), 2);
  EXPECT_EQ(p.clients(1), s.clients[1]);
  EXPECT_TRUE(p.other_tracing());
  EXPECT_EQ(p.other_tracer(), s.other_tracer);
  ASSERT_EQ(p.interposed_size(), 2);
  EXPECT_EQ(p.interposed(1), "libtorch_cpu.so");
  ASSERT_EQ(p.not_interposed_size(), 1);
  EXPECT_EQ(p.not_interposed(0), s.not_interposed[0]);
  EXPECT_TRUE(p.native_multiple_subscribers());
  EXPECT_EQ(p.captures_cut_short(), 3u);

  // Every mode means the same on both sides.
  for (auto [ours, theirs] :
       {std::pair{CuptiSharingMode::kShared, profd::v1::CUPTI_SHARING_SHARED},
        std::pair{CuptiSharingMode::kWaiting, profd::v1::CUPTI_SHARING_WAITING},
        std::pair{CuptiSharingMode::kNotShared, profd::v1::CUPTI_SHARING_NOT_SHARED},
        std::pair{CuptiSharingMode::kOff, profd::v1::CUPTI_SHARING_OFF}}) {
    hb.cupti_sharing.mode = ours;
    EncodeHeartbeat(hb, &bytes);
    ASSERT_TRUE(m.ParseFromString(bytes));
    EXPECT_EQ(m.heartbeat().cupti_sharing().mode(), theirs);
  }

  hb.has_cupti_sharing = false;  // an agent that says nothing: the field stays unset
  EncodeHeartbeat(hb, &bytes);
  ASSERT_TRUE(m.ParseFromString(bytes));
  EXPECT_FALSE(m.heartbeat().has_cupti_sharing());
}

TEST(WireTest, CutShortCaptureStatusParses) {
  CaptureStatus s;
  s.capture_id = "c2";
  s.state = CaptureState::kFinished;
  s.error = CaptureError::kCutShort;
  s.message = "cut short after 0.40 s of 2.00 s";
  std::string bytes;
  EncodeCaptureStatus(s, &bytes);
  profd::v1::AgentMessage m;
  ASSERT_TRUE(m.ParseFromString(bytes));
  EXPECT_EQ(m.capture_status().state(), profd::v1::CAPTURE_STATE_FINISHED);
  EXPECT_EQ(m.capture_status().error(), profd::v1::CAPTURE_ERROR_CUT_SHORT);
}

TEST(WireTest, DecodesWhatProfdSends) {
  profd::v1::DaemonMessage start;
  auto* s = start.mutable_start_capture();
  s->set_capture_id("20261129T165652Z-vm-1a1f3133");
  s->set_duration_ms(3000);
  s->add_kinds(profd::v1::ACTIVITY_KIND_KERNEL);
  s->add_kinds(profd::v1::ACTIVITY_KIND_NVTX);
  s->set_start_at_realtime_ns(99);
  s->set_max_events(1000000);
  s->set_flush_interval_ms(100);
  DaemonCommand command;
  ASSERT_TRUE(DecodeDaemonMessage(start.SerializeAsString(), &command));
  EXPECT_EQ(command.kind, DaemonCommand::Kind::kStartCapture);
  EXPECT_EQ(command.start.capture_id, "20261129T165652Z-vm-1a1f3133");
  EXPECT_EQ(command.start.duration_ms, 3000u);
  ASSERT_EQ(command.start.kinds.size(), 2u);  // packed on the wire
  EXPECT_EQ(command.start.kinds[0], ActivityKind::kKernel);
  EXPECT_EQ(command.start.kinds[1], ActivityKind::kNvtx);
  EXPECT_EQ(command.start.start_at_realtime_ns, 99u);
  EXPECT_EQ(command.start.max_events, 1000000u);
  EXPECT_EQ(command.start.flush_interval_ms, 100u);

  profd::v1::DaemonMessage ack;
  ack.mutable_hello_ack()->set_heartbeat_interval_ms(250);
  ASSERT_TRUE(DecodeDaemonMessage(ack.SerializeAsString(), &command));
  EXPECT_EQ(command.kind, DaemonCommand::Kind::kHelloAck);
  EXPECT_EQ(command.heartbeat_interval_ms, 250u);

  // Durations past 32 bits of milliseconds (49.7 days) arrive whole: a uint32 would have read
  // 4294969296 ms as 2000 ms.
  profd::v1::DaemonMessage long_start;
  long_start.mutable_start_capture()->set_capture_id("c10");
  long_start.mutable_start_capture()->set_duration_ms(4294969296);
  long_start.mutable_start_capture()->set_flush_interval_ms(int64_t{1} << 40);
  ASSERT_TRUE(DecodeDaemonMessage(long_start.SerializeAsString(), &command));
  EXPECT_EQ(command.start.duration_ms, 4294969296u);
  EXPECT_EQ(command.start.flush_interval_ms, uint64_t{1} << 40);

  profd::v1::DaemonMessage stop;
  stop.mutable_stop_capture()->set_capture_id("c9");
  ASSERT_TRUE(DecodeDaemonMessage(stop.SerializeAsString(), &command));
  EXPECT_EQ(command.kind, DaemonCommand::Kind::kStopCapture);
  EXPECT_EQ(command.stop_capture_id, "c9");
}

TEST(WireTest, RejectsTruncatedInput) {
  profd::v1::DaemonMessage start;
  start.mutable_start_capture()->set_capture_id("abcdef");
  std::string bytes = start.SerializeAsString();
  DaemonCommand command;
  EXPECT_FALSE(DecodeDaemonMessage(bytes.substr(0, bytes.size() - 2), &command));
  EXPECT_FALSE(DecodeDaemonMessage("\xff\xff\xff", &command));
}

}  // namespace
}  // namespace profagent::wire
