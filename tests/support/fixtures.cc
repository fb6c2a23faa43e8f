#include "tests/support/fixtures.h"

#include <zlib.h>

#include <stdexcept>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "tests/support/subprocess.h"

namespace profd::testing {

std::vector<v1::EventBatch> ReadRecordedBatches(const std::string& path) {
  std::string data = ReadFileOrEmpty(path);
  if (data.empty()) throw std::runtime_error("fixture missing or empty: " + path);
  google::protobuf::io::ArrayInputStream raw(data.data(), static_cast<int>(data.size()));
  google::protobuf::io::CodedInputStream in(&raw);
  in.SetTotalBytesLimit(1 << 30);
  std::vector<v1::EventBatch> batches;
  uint32_t size;
  while (in.ReadVarint32(&size)) {
    auto limit = in.PushLimit(static_cast<int>(size));
    v1::EventBatch batch;
    if (!batch.ParseFromCodedStream(&in)) throw std::runtime_error("bad batch in " + path);
    in.PopLimit(limit);
    batches.push_back(std::move(batch));
  }
  return batches;
}

std::string ReadGzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open " + path);
  std::string text;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return text;
}

rapidjson::Document ReadGzipJson(const std::string& path) {
  const std::string text = ReadGzip(path);
  rapidjson::Document doc;
  doc.Parse(text.c_str());
  if (doc.HasParseError()) throw std::runtime_error("not JSON: " + path);
  return doc;
}

v1::EventBatch EveryKindOfEvent(uint64_t t0) {
  constexpr uint64_t k2To62 = uint64_t{1} << 62;
  v1::EventBatch b;
  auto str = [&](uint32_t id, std::string value) {
    v1::StringDef* s = b.add_strings();
    s->set_id(id);
    s->set_value(std::move(value));
  };
  str(1, "_Z17profd_test_kernelPii");
  str(2, "cudaLaunchKernel");
  str(3, "cuMemcpyHtoDAsync");
  str(4, "cudaMemsetAsync");
  str(5, "cudaStreamSynchronize");
  str(6,
      std::string("quote\" backslash\\ tab\t nl\n cr\r bell\x07 del\x7f bad\xff\xc0 ok\xc3\xa9"));
  str(7, "ProfilerStep#3");
  str(0xFFFFFFFF, "cuLaunchKernelEx");

  auto kernel = [&](uint64_t start, uint64_t end, uint32_t name) -> v1::Kernel* {
    v1::Kernel* k = b.add_kernels();
    k->set_start_ns(start);
    k->set_end_ns(end);
    k->set_name_id(name);
    return k;
  };
  v1::Kernel* k = kernel(t0 + 1001, t0 + 2999, 1);
  k->set_device(0);
  k->set_stream(7);
  k->set_correlation(42);
  k->set_context(1);
  k->set_grid_x(1024);
  k->set_grid_y(1);
  k->set_grid_z(1);
  k->set_block_x(256);
  k->set_block_y(1);
  k->set_block_z(1);
  k->set_registers_per_thread(32);
  k->set_static_shared_bytes(1024);
  k->set_dynamic_shared_bytes(48 << 10);
  k = kernel(t0 - 123456789, t0 - 1, 6);  // before the base: negative ts
  k->set_device(7);
  k->set_stream(UINT32_MAX);
  k->set_correlation(UINT32_MAX);
  k->set_context(UINT32_MAX);
  k->set_grid_x(INT32_MIN);
  k->set_grid_y(-1);
  k->set_grid_z(INT32_MAX);
  k->set_block_x(0);
  k->set_registers_per_thread(UINT32_MAX);
  k->set_static_shared_bytes(UINT32_MAX);
  k->set_dynamic_shared_bytes(UINT32_MAX);  // the sum is more than 32 bits
  k->set_graph_id(9);
  kernel(t0 + 5000, t0 + 4000, 999);  // ends before it starts, unknown name, no correlation
  kernel(k2To62, k2To62, 1)->set_correlation(3);
  kernel(k2To62 + 1, t0, 1);  // past 2^62: not written
  kernel(t0, UINT64_MAX, 1);
  kernel(0, 0, 0xFFFFFFFF)->set_correlation(1);  // start 0: CUPTI's "not measured", not written

  auto memcpy = [&](uint64_t start, uint64_t end, int copy, int src, int dst, uint64_t bytes) {
    v1::Memcpy* m = b.add_memcpys();
    m->set_start_ns(start);
    m->set_end_ns(end);
    m->set_copy_kind(static_cast<v1::CopyKind>(copy));
    m->set_src_kind(static_cast<v1::MemoryKind>(src));
    m->set_dst_kind(static_cast<v1::MemoryKind>(dst));
    m->set_bytes(bytes);
    m->set_device(1);
    m->set_stream(13);
    m->set_correlation(100 + b.memcpys_size());
  };
  for (int kind = -1; kind <= 11; ++kind) {
    memcpy(t0 + 10000 * kind, t0 + 10000 * kind + 700 + kind, kind, kind, 10 - kind,
           uint64_t{8} << (20 + kind % 5));
  }
  memcpy(t0, t0, 1, 1, 3, 8 << 20);            // zero duration: bandwidth 0
  memcpy(t0, t0 + 3, 2, 3, 1, UINT64_MAX);     // huge bandwidth
  memcpy(t0, t0 + 1000000000, 8, 3, 3, 1);     // tiny bandwidth
  memcpy(t0, t0 + 7, 10, 3, 3, 0);             // nothing copied
  memcpy(k2To62 + 5, k2To62 + 6, 1, 1, 3, 1);  // not written

  for (int kind = -1; kind <= 8; ++kind) {
    v1::Memset* m = b.add_memsets();
    m->set_start_ns(t0 + 333 * (kind + 1));
    m->set_end_ns(t0 + 333 * (kind + 1) + 1000 * kind);
    m->set_memory_kind(static_cast<v1::MemoryKind>(kind));
    m->set_bytes(uint64_t{12345} * (kind + 2));
    m->set_device(2);
    m->set_stream(kind + 20);
    m->set_correlation(kind == 4 ? 0 : 200 + kind);
  }

  auto api = [&](uint64_t start, uint64_t end, v1::ApiDomain domain, uint32_t name) {
    v1::ApiCall* a = b.add_api_calls();
    a->set_start_ns(start);
    a->set_end_ns(end);
    a->set_domain(domain);
    a->set_name_id(name);
    a->set_tid(4242 + name);
    a->set_correlation(42 + name);
    a->set_cbid(211 + name);
    return a;
  };
  api(t0 + 900, t0 + 1100, v1::API_DOMAIN_RUNTIME, 2);
  api(t0 + 1, t0 + 2, v1::API_DOMAIN_DRIVER, 3)->set_return_value(1);
  api(t0 + 2, t0 + 1, v1::API_DOMAIN_RUNTIME, 4)->set_return_value(UINT32_MAX);
  api(t0 + 3, t0 + 4, v1::API_DOMAIN_UNKNOWN, 5);
  api(t0 + 5, t0 + 6, v1::API_DOMAIN_DRIVER, 6);
  api(t0 + 7, t0 + 8, v1::API_DOMAIN_DRIVER, 0xFFFFFFFF);
  api(t0 + 9, t0 + 10, v1::API_DOMAIN_DRIVER, 12345);  // unknown name: no arrow
  api(t0 - 5, k2To62 + 1, v1::API_DOMAIN_RUNTIME, 2);  // not written

  for (int kind = -1; kind <= 5; ++kind) {
    v1::Synchronization* s = b.add_syncs();
    s->set_start_ns(t0 + 50000 + kind);
    s->set_end_ns(t0 + 60000 + 7 * kind);
    s->set_kind(static_cast<v1::SyncKind>(kind));
    s->set_correlation(300 + kind);
    s->set_stream(kind == 2 ? UINT32_MAX : kind + 1);
    s->set_context(kind + 10);
    s->set_device(kind == 3 ? 1 : 0);
  }

  auto marker = [&](uint64_t start, uint64_t end, uint32_t name) {
    v1::Marker* m = b.add_markers();
    m->set_start_ns(start);
    m->set_end_ns(end);
    m->set_name_id(name);
    m->set_tid(4242);
  };
  marker(t0 + 100, t0 + 200000, 7);
  marker(t0 + 150, t0 + 149, 6);
  marker(t0 + 160, t0 + 170, 77);
  marker(UINT64_MAX, t0, 7);  // not written

  auto memory = [&](uint64_t ts, uint32_t device, uint64_t address, uint64_t bytes, bool free,
                    int kind) {
    v1::MemoryOp* m = b.add_memory_ops();
    m->set_timestamp_ns(ts);
    m->set_device(device);
    m->set_address(address);
    m->set_bytes(bytes);
    m->set_is_free(free);
    m->set_memory_kind(static_cast<v1::MemoryKind>(kind));
  };
  memory(t0 + 10, 0, 0x7f0000000000, 1 << 20, false, 3);
  memory(t0 + 20, 0, 0x7f0000000000, 1 << 20, true, 3);
  memory(t0 + 30, UINT32_MAX, UINT64_MAX, UINT64_MAX, true, 9);
  memory(t0 - 30, 1, 0, 0, false, -2);
  memory(k2To62 + 1, 1, 0, 0, false, 1);  // not written

  for (uint32_t kind : {0u, 1u, 2u, UINT32_MAX}) {
    v1::Overhead* o = b.add_overheads();
    o->set_start_ns(t0 + 77 * kind % 1000);
    o->set_end_ns(t0 + 77 * kind % 1000 + 13);
    o->set_kind(kind);
    o->set_tid(kind == 1 ? 4242 : 99);
  }
  return b;
}

}  // namespace profd::testing
