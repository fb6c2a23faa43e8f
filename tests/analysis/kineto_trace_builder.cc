#include "tests/analysis/kineto_trace_builder.h"

#include <zlib.h>

#include <cstdio>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace profd::analysis::testing {
namespace {

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string Shape(const KernelShape& s) {
  return absl::StrFormat(
      ",\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"registers per thread\":%u,"
      "\"shared memory\":%u",
      s.grid[0], s.grid[1], s.grid[2], s.block[0], s.block[1], s.block[2], s.registers,
      s.shared_memory);
}

}  // namespace

KinetoTraceBuilder::KinetoTraceBuilder() = default;

int64_t KinetoTraceBuilder::Launch(const std::string& kernel, double api_ts_us, double api_dur_us,
                                   double ts_us, double dur_us, int device, int stream,
                                   const KernelShape& shape, int pid, int tid) {
  int64_t corr = next_correlation_++;
  if (api_dur_us > 0) Runtime("cudaLaunchKernel", api_ts_us, api_dur_us, corr, pid, tid);
  Kernel(kernel, ts_us, dur_us, device, stream, shape, corr);
  return corr;
}

void KinetoTraceBuilder::Kernel(const std::string& name, double ts_us, double dur_us, int device,
                                int stream, const KernelShape& shape, int64_t correlation,
                                int64_t external_id) {
  std::string corr = correlation >= 0 ? absl::StrCat(",\"correlation\":", correlation) : "";
  if (external_id >= 0) absl::StrAppend(&corr, ",\"External id\":", external_id);
  events_.push_back(absl::StrFormat(
      "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":%s,\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
      "\"dur\":%.3f,\"args\":{\"queued\":0,\"device\":%d,\"context\":1,\"stream\":%d%s%s}}",
      Quote(name), device, stream, ts_us, dur_us, device, stream, corr, Shape(shape)));
}

int64_t KinetoTraceBuilder::OperatorLaunch(const std::string& kernel, int64_t external_id,
                                           double api_ts_us, double api_dur_us, double ts_us,
                                           double dur_us, int pid, int tid) {
  int64_t corr = next_correlation_++;
  Runtime("cudaLaunchKernel", api_ts_us, api_dur_us, corr, pid, tid, external_id);
  Kernel(kernel, ts_us, dur_us, 0, 7, {}, corr, external_id);
  return corr;
}

int64_t KinetoTraceBuilder::Copy(const std::string& kind, const std::string& src,
                                 const std::string& dst, double api_ts_us, double api_dur_us,
                                 double ts_us, double dur_us, uint64_t bytes, int device,
                                 int stream, int pid, int tid) {
  int64_t corr = next_correlation_++;
  Runtime("cudaMemcpyAsync", api_ts_us, api_dur_us, corr, pid, tid);
  events_.push_back(absl::StrFormat(
      "{\"ph\":\"X\",\"cat\":\"gpu_memcpy\",\"name\":\"Memcpy %s (%s -> %s)\",\"pid\":%d,"
      "\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"device\":%d,\"context\":1,\"stream\":%d,"
      "\"correlation\":%d,\"bytes\":%d,\"memory bandwidth (GB/s)\":%.3f}}",
      kind, src, dst, device, stream, ts_us, dur_us, device, stream, corr, bytes,
      dur_us > 0 ? bytes / (dur_us * 1000) : 0));
  return corr;
}

void KinetoTraceBuilder::Memset(double ts_us, double dur_us, uint64_t bytes, int device,
                                int stream) {
  events_.push_back(absl::StrFormat(
      "{\"ph\":\"X\",\"cat\":\"gpu_memset\",\"name\":\"Memset (Device)\",\"pid\":%d,\"tid\":%d,"
      "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"device\":%d,\"stream\":%d,\"bytes\":%d}}",
      device, stream, ts_us, dur_us, device, stream, bytes));
}

void KinetoTraceBuilder::Runtime(const std::string& name, double ts_us, double dur_us,
                                 int64_t correlation, int pid, int tid, int64_t external_id) {
  if (correlation < 0) correlation = next_correlation_++;
  std::string ext = external_id >= 0 ? absl::StrCat(",\"External id\":", external_id) : "";
  events_.push_back(absl::StrFormat(
      "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":%s,\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
      "\"dur\":%.3f,\"args\":{\"cbid\":211,\"correlation\":%d%s}}",
      Quote(name), pid, tid, ts_us, dur_us, correlation, ext));
}

void KinetoTraceBuilder::SyncRecord(const std::string& name, double ts_us, double dur_us, int pid) {
  events_.push_back(absl::StrFormat(
      "{\"ph\":\"X\",\"cat\":\"cuda_sync\",\"name\":%s,\"pid\":%d,\"tid\":0,\"ts\":%.3f,"
      "\"dur\":%.3f,\"args\":{\"stream\":7,\"device\":0}}",
      Quote(name), pid, ts_us, dur_us));
}

void KinetoTraceBuilder::CpuOp(const std::string& name, double ts_us, double dur_us, int pid,
                               int tid, int64_t external_id) {
  events_.push_back(absl::StrFormat(
      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":%s,\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
      "\"dur\":%.3f,\"args\":{\"External id\":%d,\"Record function id\":0}}",
      Quote(name), pid, tid, ts_us, dur_us, external_id));
}

void KinetoTraceBuilder::UserAnnotation(const std::string& name, double ts_us, double dur_us,
                                        int pid, int tid, int64_t external_id) {
  std::string ext = external_id >= 0 ? absl::StrCat("\"External id\":", external_id) : "";
  events_.push_back(
      absl::StrFormat("{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":%s,\"pid\":%d,\"tid\":%d,"
                      "\"ts\":%.3f,\"dur\":%.3f,\"args\":{%s}}",
                      Quote(name), pid, tid, ts_us, dur_us, ext));
}

void KinetoTraceBuilder::Overhead(const std::string& name, double ts_us, double dur_us) {
  events_.push_back(absl::StrFormat(
      "{\"ph\":\"X\",\"cat\":\"overhead\",\"name\":%s,\"pid\":-1,\"tid\":0,\"ts\":%.3f,"
      "\"dur\":%.3f}",
      Quote(name), ts_us, dur_us));
}

void KinetoTraceBuilder::DeviceProperties(int id, int num_sms) {
  devices_.push_back(absl::StrFormat(
      "{\"id\":%d,\"name\":\"NVIDIA H100 80GB HBM3\",\"totalGlobalMem\":85045968896,"
      "\"computeMajor\":9,\"computeMinor\":0,\"maxThreadsPerBlock\":1024,"
      "\"maxThreadsPerMultiprocessor\":2048,\"regsPerBlock\":65536,"
      "\"regsPerMultiprocessor\":65536,\"warpSize\":32,\"sharedMemPerBlock\":49152,"
      "\"sharedMemPerMultiprocessor\":233472,\"numSms\":%d,\"sharedMemPerBlockOptin\":232448}",
      id, num_sms));
}

std::string KinetoTraceBuilder::Json(bool events_last) const {
  std::string events = absl::StrCat("\"traceEvents\":[\n", absl::StrJoin(events_, ",\n"), "\n]");
  std::string other =
      absl::StrCat("\"schemaVersion\":1,\"deviceProperties\":[", absl::StrJoin(devices_, ","),
                   "],\"distributedInfo\":{\"backend\":\"nccl\",\"rank\":0,\"world_size\":1},"
                   "\"record_shapes\":1,\"with_stack\":{\"nested\":[1,2,{\"x\":null}]},"
                   "\"displayTimeUnit\":\"ms\",\"baseTimeNanoseconds\":1700000000000000000");
  return events_last ? absl::StrCat("{", other, ",", events, "}\n")
                     : absl::StrCat("{", events, ",", other, "}\n");
}

void KinetoTraceBuilder::Write(const std::string& path, bool gzip, bool events_last) const {
  WriteFile(path, Json(events_last), gzip);
}

void WriteFile(const std::string& path, const std::string& data, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb6");
    if (f == nullptr || gzwrite(f, data.data(), static_cast<unsigned>(data.size())) !=
                            static_cast<int>(data.size())) {
      throw std::runtime_error("cannot write " + path);
    }
    gzclose(f);
    return;
  }
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(data.data(), 1, data.size(), f) != data.size()) {
    throw std::runtime_error("cannot write " + path);
  }
  std::fclose(f);
}

}  // namespace profd::analysis::testing
