// Writes the seed corpora of the fuzz targets: slices of the recorded fixtures (tests/fixtures/,
// tests/analysis/fixtures/) small enough to mutate quickly, the fixtures themselves, and the
// inputs that crashed profd (kept here as code, so what each seed is stays readable).
//
//   make_fuzz_seeds SOURCE_DIR OUT_DIR   -> OUT_DIR/{trace_reader,event_batch,agent_frame}/
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "profd/v1/agent_channel.pb.h"
#include "profd/v1/agent_frame.h"
#include "profd/v1/events.pb.h"
#include "rapidjson/document.h"
#include "rapidjson/writer.h"
#include "tests/analysis/kineto_trace_builder.h"
#include "tests/support/fixtures.h"
#include "tests/support/subprocess.h"

namespace {

namespace fs = std::filesystem;
using profd::v1::AgentMessage;
using profd::v1::EventBatch;

std::string out_dir;

void Save(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(out_dir + "/" + target);
  std::ofstream(out_dir + "/" + target + "/" + name, std::ios::binary) << bytes;
}

std::string Gzip(const std::string& data) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, data.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string Gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open " + path);
  std::string text;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return text;
}

// The fixture's top object with only its first `events` trace events: the shapes of a real
// trace (profd's footer, deviceProperties, Kineto's args) in a few KB.
std::string Slice(const std::string& json, size_t events) {
  rapidjson::Document d;
  d.Parse(json.c_str());
  if (d.HasParseError() || !d.IsObject() || !d.HasMember("traceEvents")) {
    throw std::runtime_error("fixture is not a trace");
  }
  rapidjson::Value& ev = d["traceEvents"];
  while (ev.Size() > events) ev.PopBack();
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> w(out);
  d.Accept(w);
  return out.GetString();
}

// At most `keep` events of each kind, all strings and devices: a batch of a few KB.
EventBatch Trim(const EventBatch& b, int keep) {
  EventBatch t = b;
  auto trim = [keep](auto* field) {
    while (field->size() > keep) field->RemoveLast();
  };
  trim(t.mutable_kernels());
  trim(t.mutable_memcpys());
  trim(t.mutable_memsets());
  trim(t.mutable_api_calls());
  trim(t.mutable_syncs());
  trim(t.mutable_memory_ops());
  trim(t.mutable_overheads());
  trim(t.mutable_markers());
  return t;
}

std::string Delimited(const std::vector<EventBatch>& batches) {
  std::string out;
  for (const EventBatch& b : batches) {
    std::string bytes = b.SerializeAsString();
    uint64_t n = bytes.size();
    while (n >= 0x80) {
      out += static_cast<char>((n & 0x7f) | 0x80);
      n >>= 7;
    }
    out += static_cast<char>(n);
    out += bytes;
  }
  return out;
}

std::string Frame(const AgentMessage& m) {
  std::string out(profd::v1::kAgentFrameHeaderBytes, '\0');
  m.AppendToString(&out);
  profd::v1::EncodeFrameHeader(static_cast<uint32_t>(out.size() - 4),
                               reinterpret_cast<unsigned char*>(out.data()));
  return out;
}

AgentMessage Hello(const std::vector<profd::v1::DeviceInfo>& devices) {
  AgentMessage m;
  profd::v1::Hello* h = m.mutable_hello();
  h->set_agent_version("0.1.0");
  h->set_pid(1234);
  h->set_hostname("node-1");
  h->set_pod_name("llm-7f9c");
  h->set_pod_namespace("serving");
  h->set_container_name("server");
  h->set_cupti_version(24);
  h->set_cuda_driver_version(13000);
  h->set_injected(true);
  h->set_start_realtime_ns(1'764'000'000'000'000'000);
  for (const auto& d : devices) *h->add_devices() = d;
  return m;
}

void TraceReaderSeeds(const std::string& src) {
  namespace t = profd::analysis::testing;
  for (const char* fixture : {"tests/fixtures/burst_1000_kernels.trace.json.gz",
                              "tests/analysis/fixtures/gpt2_synthetic.json.gz"}) {
    std::string path = src + "/" + fixture;
    std::string json = Gunzip(path);
    std::string name = fs::path(fixture).stem().stem().string();
    std::string slice = Slice(json, 40);
    Save("trace_reader", name + ".slice.json", slice);
    // The gzip path with a valid stream to mutate. (Not the whole fixture: megabytes of JSON
    // per run would slow fuzzing a hundredfold; ctest reads the full fixtures elsewhere.)
    Save("trace_reader", name + ".slice.json.gz", Gzip(slice));
  }
  // Every category the reader knows, as torch.profiler writes them.
  t::KinetoTraceBuilder b;
  b.CpuOp("aten::linear", 0, 100);
  b.Launch("gemm", 10, 5, 20, 30, 0, 7, t::KernelShape{{264, 1, 1}, {256, 1, 1}, 64, 49152});
  b.Copy("HtoD", "Pageable", "Device", 60, 2, 62, 4, 4096);
  b.Copy("DtoH", "Device", "Pinned", 66, 2, 68, 4, 4096);
  b.Memset(70, 1, 256);
  b.SyncRecord("Stream Sync", 80, 10);
  b.Runtime("cudaDeviceSynchronize", 90, 5);
  b.DeviceProperties(0, 66);
  Save("trace_reader", "kineto_small.json", b.Json());
  Save("trace_reader", "kineto_events_last.json", b.Json(/*events_last=*/true));
  // Inputs that crashed profd or printed garbage (tests/analysis/hostile_trace_test.cc).
  Save(
      "trace_reader", "huge_block.json",
      R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":0,"dur":1,"args":{"grid":[1,1,1],"block":[65536,65536,32]}}]})");
  Save("trace_reader", "deep.json",
       std::string(R"({"traceEvents":[{"ph":"X","args":)") + std::string(200, '[') +
           std::string(200, ']') + "}]}");
  Save(
      "trace_reader", "nan_times.json",
      R"({"baseTimeNanoseconds":1764000000000000000,"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":NaN,"dur":-Infinity,"args":{"correlation":1099511627776}},{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":"stream 99999999999999999999","tid":1e300,"ts":1e300,"dur":5}]})");
  Save(
      "trace_reader", "bare_array.json",
      R"j([{"ph":"X","cat":"Kernel","name":"k","pid":0,"tid":"stream 7","ts":1.5,"dur":2.25},{"ph":"X","cat":"Memcpy","name":"Memcpy DtoH (Device -> Pageable)","ts":5,"dur":1,"args":{"bytes":1024,"copy kind":2,"src kind":3,"dst kind":1}},])j");
}

void BatchSeeds(const std::string& src) {
  std::vector<EventBatch> batches =
      profd::testing::ReadRecordedBatches(src + "/tests/fixtures/burst_1000_kernels.batches.pb");
  std::vector<EventBatch> trimmed;
  for (size_t i = 0; i < batches.size(); ++i) {
    trimmed.push_back(Trim(batches[i], 8));
    Save("event_batch", absl::StrCat("fixture_batch_", i, ".pb"), Delimited({trimmed.back()}));
  }
  Save("event_batch", "fixture_trimmed.pb", Delimited(trimmed));

  // The attacks on the string table and the writer (tests/trace/hostile_batch_unittest.cc).
  EventBatch hostile;
  auto def = [&](uint32_t id, const std::string& value) {
    auto* d = hostile.add_strings();
    d->set_id(id);
    d->set_value(value);
  };
  def(0xFFFFFFFFu, "_ZN7cutlass6KernelINS_4gemmEEEvT_");
  def(50'000'000u, "x");
  def(1, "control \x1b[31m\n\xc2\x9b and U+FFFF \xef\xbf\xbf");
  auto* k = hostile.add_kernels();
  k->set_name_id(0xFFFFFFFFu);
  k->set_start_ns(UINT64_MAX - 10);
  k->set_end_ns(UINT64_MAX);
  k->set_grid_x(-1);
  k->set_block_x(65536);
  k->set_block_y(65536);
  k->set_block_z(32);
  auto* a = hostile.add_api_calls();
  a->set_name_id(1);
  a->set_start_ns(1'764'000'000'000'000'000);
  a->set_end_ns(1'763'000'000'000'000'000);
  auto* m = hostile.add_memcpys();
  m->set_start_ns(1'764'000'000'000'000'000);
  m->set_end_ns(1'764'000'000'000'000'001);
  m->set_bytes(UINT64_MAX);
  m->set_copy_kind(static_cast<profd::v1::CopyKind>(1000));
  hostile.set_dropped_records(UINT64_MAX);
  Save("event_batch", "hostile.pb", Delimited({hostile, hostile}));

  // agent_frame: a connection's life, from hello to the last batch.
  std::vector<profd::v1::DeviceInfo> devices(batches.front().devices().begin(),
                                             batches.front().devices().end());
  std::string conn = Frame(Hello(devices));
  AgentMessage hb;
  hb.mutable_heartbeat()->set_realtime_ns(1'764'000'000'000'000'000);
  auto* c = hb.mutable_heartbeat()->add_devices();
  c->set_device(0);
  c->set_kernel_launches(1000);
  c->set_memory_allocated_bytes(1 << 30);
  hb.mutable_heartbeat()->set_launch_sample_every(10);
  for (const auto& d : devices) *hb.mutable_heartbeat()->add_device_infos() = d;
  conn += Frame(hb);
  AgentMessage started;
  started.mutable_capture_status()->set_capture_id("20260101T000000Z-node-1-00000000");
  started.mutable_capture_status()->set_state(profd::v1::CAPTURE_STATE_STARTED);
  conn += Frame(started);
  for (const EventBatch& b : trimmed) {
    AgentMessage e;
    *e.mutable_events() = b;
    conn += Frame(e);
  }
  AgentMessage finished = started;
  finished.mutable_capture_status()->set_state(profd::v1::CAPTURE_STATE_FINISHED);
  conn += Frame(finished);
  Save("agent_frame", "connection.bin", conn);
  AgentMessage bad;
  *bad.mutable_events() = hostile;
  Save("agent_frame", "hostile_batch.bin", Frame(Hello({})) + Frame(bad));
  Save("agent_frame", "no_hello.bin", Frame(hb));
  Save("agent_frame", "two_hellos.bin", Frame(Hello({})) + Frame(Hello({})));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s SOURCE_DIR OUT_DIR\n", argv[0]);
    return 2;
  }
  out_dir = argv[2];
  try {
    TraceReaderSeeds(argv[1]);
    BatchSeeds(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
