// CUPTI records built in memory, as CUPTI lays them out, go through the agent's converter; the
// batch it writes is parsed with the generated classes.
#include "agent/cupti/activity_converter.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "agent/cupti/cupti_library.h"
#include "daemon/agents/agent_message_limits.h"
#include "gtest/gtest.h"
#include "profd/v1/agent_channel.pb.h"

namespace profagent {
namespace {

// The real CUPTI resolves API names (it loads without a GPU).
const char* RealApiName(CUpti_CallbackDomain domain, uint32_t cbid) {
  const CuptiLibrary& cupti = LoadCupti();
  const char* name = nullptr;
  if (cupti.loaded && cupti.GetCallbackName(domain, cbid, &name) == CUPTI_SUCCESS) return name;
  return nullptr;
}

profd::v1::EventBatch Take(ActivityConverter& c, uint64_t dropped = 0) {
  std::string bytes;
  uint64_t clock[3] = {1, 2, 3};
  c.TakeBatch(dropped, clock, nullptr, &bytes);
  profd::v1::AgentMessage m;
  EXPECT_TRUE(m.ParseFromString(bytes));
  EXPECT_EQ(m.body_case(), profd::v1::AgentMessage::kEvents);
  return m.events();
}

CUpti_ActivityKernel10 Kernel(const char* name, uint64_t start, uint64_t end, uint32_t corr) {
  CUpti_ActivityKernel10 k;
  std::memset(&k, 0, sizeof(k));
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = name;
  k.start = start;
  k.end = end;
  k.deviceId = 0;
  k.streamId = 7;
  k.correlationId = corr;
  k.gridX = 128;
  k.gridY = 1;
  k.gridZ = 1;
  k.blockX = 256;
  k.blockY = 1;
  k.blockZ = 1;
  k.registersPerThread = 32;
  k.staticSharedMemory = 1024;
  k.dynamicSharedMemory = 2048;
  k.graphId = 0;
  return k;
}

TEST(ActivityConverterTest, KernelsCarryEverythingAndNamesAreSentOnce) {
  static const char kName[] = "_Z17profd_test_kernelPii";
  ActivityConverter c("cap-1", &RealApiName, 0);
  auto k1 = Kernel(kName, 1000, 2500, 11);
  auto k2 = Kernel(kName, 3000, 3100, 12);
  k2.graphId = 5;
  c.Add(reinterpret_cast<CUpti_Activity*>(&k1));
  c.Add(reinterpret_cast<CUpti_Activity*>(&k2));
  EXPECT_EQ(c.pending_events(), 2u);
  profd::v1::EventBatch b = Take(c, 3);
  EXPECT_EQ(b.capture_id(), "cap-1");
  EXPECT_EQ(b.sequence(), 0u);
  EXPECT_EQ(b.dropped_records(), 3u);
  EXPECT_EQ(b.clock().cupti_ns(), 3u);
  ASSERT_EQ(b.strings_size(), 1);  // interned: one definition for two kernels
  EXPECT_EQ(b.strings(0).value(), kName);
  ASSERT_EQ(b.kernels_size(), 2);
  const auto& k = b.kernels(0);
  EXPECT_EQ(k.name_id(), b.strings(0).id());
  EXPECT_EQ(k.start_ns(), 1000u);
  EXPECT_EQ(k.end_ns(), 2500u);
  EXPECT_EQ(k.stream(), 7u);
  EXPECT_EQ(k.correlation(), 11u);
  EXPECT_EQ(k.grid_x(), 128);
  EXPECT_EQ(k.block_x(), 256);
  EXPECT_EQ(k.registers_per_thread(), 32u);
  EXPECT_EQ(k.static_shared_bytes(), 1024u);
  EXPECT_EQ(k.dynamic_shared_bytes(), 2048u);
  EXPECT_EQ(b.kernels(1).graph_id(), 5u);

  // Next batch: the name is not sent again.
  auto k3 = Kernel(kName, 4000, 4100, 13);
  c.Add(reinterpret_cast<CUpti_Activity*>(&k3));
  profd::v1::EventBatch b2 = Take(c);
  EXPECT_EQ(b2.sequence(), 1u);
  EXPECT_EQ(b2.strings_size(), 0);
  EXPECT_EQ(b2.kernels(0).name_id(), b.strings(0).id());
  EXPECT_EQ(c.total_events(), 3u);
}

TEST(ActivityConverterTest, RuntimeApiNamesLoseTheVersionSuffix) {
  ASSERT_TRUE(LoadCupti().loaded) << LoadCupti().error;
  ActivityConverter c("cap", &RealApiName, 0);
  CUpti_ActivityAPI api;
  std::memset(&api, 0, sizeof(api));
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  api.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
  api.start = 10;
  api.end = 20;
  api.threadId = 77;
  api.correlationId = 11;
  c.Add(reinterpret_cast<CUpti_Activity*>(&api));
  CUpti_ActivityAPI drv = api;
  drv.kind = CUPTI_ACTIVITY_KIND_DRIVER;
  drv.cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
  c.Add(reinterpret_cast<CUpti_Activity*>(&drv));
  profd::v1::EventBatch b = Take(c);
  ASSERT_EQ(b.api_calls_size(), 2);
  std::map<uint32_t, std::string> names;
  for (const auto& s : b.strings()) names[s.id()] = s.value();
  EXPECT_EQ(names[b.api_calls(0).name_id()], "cudaLaunchKernel");
  EXPECT_EQ(b.api_calls(0).domain(), profd::v1::API_DOMAIN_RUNTIME);
  EXPECT_EQ(b.api_calls(0).tid(), 77u);
  EXPECT_EQ(names[b.api_calls(1).name_id()], "cuLaunchKernel");
  EXPECT_EQ(b.api_calls(1).domain(), profd::v1::API_DOMAIN_DRIVER);
  EXPECT_EQ(ActivityConverter::StripVersionSuffix("cudaMemcpy_v3020"), "cudaMemcpy");
  EXPECT_EQ(ActivityConverter::StripVersionSuffix("cuMemAlloc_v2"), "cuMemAlloc");
  EXPECT_EQ(ActivityConverter::StripVersionSuffix("my_vector"), "my_vector");
}

TEST(ActivityConverterTest, CopiesMemsetsSyncsAndMemory) {
  ActivityConverter c("cap", nullptr, 0);
  CUpti_ActivityMemcpy6 m;
  std::memset(&m, 0, sizeof(m));
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  m.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  m.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  m.bytes = 8u << 20;
  m.start = 100;
  m.end = 900;
  m.streamId = 7;
  c.Add(reinterpret_cast<CUpti_Activity*>(&m));
  CUpti_ActivityMemset4 s;
  std::memset(&s, 0, sizeof(s));
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s.bytes = 4096;
  s.value = 0;
  s.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  c.Add(reinterpret_cast<CUpti_Activity*>(&s));
  CUpti_ActivitySynchronization2 y;
  std::memset(&y, 0, sizeof(y));
  y.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  y.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  y.streamId = 0xffffffffu;  // CUPTI's "not applicable"
  y.start = 5;
  y.end = 50;
  c.Add(reinterpret_cast<CUpti_Activity*>(&y));
  CUpti_ActivityMemory4 mem;
  std::memset(&mem, 0, sizeof(mem));
  mem.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  mem.memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
  mem.bytes = 1 << 20;
  mem.address = 0xdead0000;
  c.Add(reinterpret_cast<CUpti_Activity*>(&mem));
  profd::v1::EventBatch b = Take(c);
  ASSERT_EQ(b.memcpys_size(), 1);
  EXPECT_EQ(b.memcpys(0).copy_kind(), profd::v1::COPY_KIND_HTOD);
  EXPECT_EQ(b.memcpys(0).src_kind(), profd::v1::MEMORY_KIND_PAGEABLE);
  EXPECT_EQ(b.memcpys(0).dst_kind(), profd::v1::MEMORY_KIND_DEVICE);
  EXPECT_EQ(b.memcpys(0).bytes(), 8u << 20);
  ASSERT_EQ(b.memsets_size(), 1);
  EXPECT_EQ(b.memsets(0).bytes(), 4096u);
  ASSERT_EQ(b.syncs_size(), 1);
  EXPECT_EQ(b.syncs(0).kind(), profd::v1::SYNC_KIND_STREAM_SYNCHRONIZE);
  EXPECT_EQ(b.syncs(0).stream(), 0u);
  ASSERT_EQ(b.memory_ops_size(), 1);
  EXPECT_TRUE(b.memory_ops(0).is_free());
  EXPECT_EQ(b.memory_ops(0).address(), 0xdead0000u);
}

TEST(ActivityConverterTest, NvtxRangesArePairedAcrossBatches) {
  ActivityConverter c("cap", nullptr, 0);
  CUpti_ActivityMarker2 start;
  std::memset(&start, 0, sizeof(start));
  start.kind = CUPTI_ACTIVITY_KIND_MARKER;
  start.flags = CUPTI_ACTIVITY_FLAG_MARKER_START;
  start.id = 9;
  start.timestamp = 100;
  start.name = "forward";
  start.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  start.objectId.pt.threadId = 55;
  c.Add(reinterpret_cast<CUpti_Activity*>(&start));
  EXPECT_EQ(Take(c).markers_size(), 0);  // open: nothing to send yet
  CUpti_ActivityMarker2 end = start;
  end.flags = CUPTI_ACTIVITY_FLAG_MARKER_END;
  end.timestamp = 400;
  end.name = nullptr;
  c.Add(reinterpret_cast<CUpti_Activity*>(&end));
  profd::v1::EventBatch b = Take(c);
  ASSERT_EQ(b.markers_size(), 1);
  EXPECT_EQ(b.markers(0).start_ns(), 100u);
  EXPECT_EQ(b.markers(0).end_ns(), 400u);
  EXPECT_EQ(b.markers(0).tid(), 55u);
  EXPECT_NE(b.markers(0).name_id(), 0u);
}

TEST(ActivityConverterTest, StopsAtTheEventCapAndSaysSo) {
  ActivityConverter c("cap", nullptr, 2);
  for (uint32_t i = 0; i < 5; ++i) {
    auto k = Kernel("k", i * 10, i * 10 + 5, i);
    c.Add(reinterpret_cast<CUpti_Activity*>(&k));
  }
  EXPECT_EQ(c.total_events(), 2u);
  EXPECT_TRUE(c.truncated());
  EXPECT_EQ(Take(c).kernels_size(), 2);
}

// profd closes a connection whose batch has more events than it accepts, or a string id or text
// past its limits (daemon/agents/agent_message_limits.h): the converter never makes one.
TEST(ActivityConverterTest, BatchesStayWithinWhatProfdAccepts) {
  ActivityConverter c("cap", nullptr, 0);
  CUpti_ActivityMemset4 m;
  std::memset(&m, 0, sizeof(m));
  m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  size_t added = 0;
  while (!c.BatchFull(1u << 20)) {
    c.Add(reinterpret_cast<CUpti_Activity*>(&m));
    ++added;
  }
  // Tiny records: the event count, not the 1 MiB, cuts the batch, at half profd's limit.
  EXPECT_EQ(added, ActivityConverter::kBatchRecords);
  EXPECT_EQ(ActivityConverter::kBatchRecords * 2, profd::v1::kMaxBatchRecords);
  std::string bytes;
  c.TakeBatch(0, nullptr, nullptr, &bytes);
  absl::StatusOr<profd::CheckedAgentMessage> checked =
      profd::CheckAgentMessage(bytes, profd::AgentMessageLimits{});
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked->batch_records, ActivityConverter::kBatchRecords);
}

TEST(ActivityConverterTest, LongNamesAreCutAtACharacterBoundary) {
  // A 70 KB name whose 65,536th byte falls inside a 3-byte character.
  std::string name(profd::v1::kMaxStringBytes - 1, 'a');
  while (name.size() < 70000) name += "\xe6\x9d\xb1";  // 東
  ActivityConverter c("cap", nullptr, 0);
  auto k = Kernel(name.c_str(), 1, 2, 3);
  c.Add(reinterpret_cast<CUpti_Activity*>(&k));
  std::string bytes;
  c.TakeBatch(0, nullptr, nullptr, &bytes);
  ASSERT_TRUE(profd::CheckAgentMessage(bytes, profd::AgentMessageLimits{}).ok());
  profd::v1::AgentMessage message;
  ASSERT_TRUE(message.ParseFromString(bytes));  // still valid UTF-8
  const std::string& sent = message.events().strings(0).value();
  EXPECT_EQ(sent.size(), profd::v1::kMaxStringBytes - 1);
  EXPECT_EQ(sent, name.substr(0, sent.size()));
}

TEST(ActivityConverterTest, NamesPastTheLastStringIdAreLeftOut) {
  // A distinct name pointer per kernel: one string each, until ids run out.
  std::vector<char> names(2 * (profd::v1::kMaxStringId + 8), '\0');
  ActivityConverter c("cap", nullptr, 0);
  std::string bytes;
  uint32_t last_id = 0;
  for (uint32_t i = 0; i < profd::v1::kMaxStringId + 4; ++i) {
    names[2 * i] = 'k';
    auto k = Kernel(&names[2 * i], i, i + 1, i);
    c.Add(reinterpret_cast<CUpti_Activity*>(&k));
    if (c.BatchFull(1u << 20) || i == profd::v1::kMaxStringId + 3) {
      c.TakeBatch(0, nullptr, nullptr, &bytes);
      ASSERT_TRUE(profd::CheckAgentMessage(bytes, profd::AgentMessageLimits{}).ok());
      profd::v1::AgentMessage message;
      ASSERT_TRUE(message.ParseFromString(bytes));
      for (const auto& s : message.events().strings()) last_id = std::max(last_id, s.id());
      if (i == profd::v1::kMaxStringId + 3) {
        const auto& kernels = message.events().kernels();
        EXPECT_EQ(kernels[kernels.size() - 1].name_id(), 0u);  // no name rather than no agent
      }
    }
  }
  EXPECT_EQ(last_id, profd::v1::kMaxStringId);
}

}  // namespace
}  // namespace profagent
