// Test support: writes small Kineto-style Chrome JSON traces event by event, so each test states
// its trace (kernels, launch calls with correlation ids, copies, syncs) and the numbers it expects
// from it. Times are µs, as in the JSON.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace profd::analysis::testing {

struct KernelShape {
  std::array<uint32_t, 3> grid = {132, 1, 1};
  std::array<uint32_t, 3> block = {256, 1, 1};
  uint32_t registers = 32;
  uint32_t shared_memory = 0;
};

class KinetoTraceBuilder {
 public:
  KinetoTraceBuilder();

  // A kernel and, when api_dur_us > 0, the cudaLaunchKernel that queued it (same correlation).
  // Returns the correlation id.
  int64_t Launch(const std::string& kernel, double api_ts_us, double api_dur_us, double ts_us,
                 double dur_us, int device = 0, int stream = 7, const KernelShape& shape = {},
                 int pid = 100, int tid = 100);
  // A kernel with no launch call (GPU-only traces, graph replays). external_id >= 0 names the
  // CPU operator that launched it, as torch.profiler's traces do.
  void Kernel(const std::string& name, double ts_us, double dur_us, int device = 0, int stream = 7,
              const KernelShape& shape = {}, int64_t correlation = -1, int64_t external_id = -1);
  // What torch.profiler records for a kernel launched inside the CPU operator external_id: the
  // cudaLaunchKernel and the kernel, both carrying that External id. Returns the correlation id.
  int64_t OperatorLaunch(const std::string& kernel, int64_t external_id, double api_ts_us,
                         double api_dur_us, double ts_us, double dur_us, int pid = 100,
                         int tid = 100);
  // cudaMemcpyAsync (api) + "Memcpy HtoD (Pageable -> Device)" on the GPU.
  int64_t Copy(const std::string& kind, const std::string& src, const std::string& dst,
               double api_ts_us, double api_dur_us, double ts_us, double dur_us, uint64_t bytes,
               int device = 0, int stream = 7, int pid = 100, int tid = 100);
  void Memset(double ts_us, double dur_us, uint64_t bytes, int device = 0, int stream = 7);
  void Runtime(const std::string& name, double ts_us, double dur_us, int64_t correlation = -1,
               int pid = 100, int tid = 100, int64_t external_id = -1);
  void SyncRecord(const std::string& name, double ts_us, double dur_us, int pid = 100);
  void CpuOp(const std::string& name, double ts_us, double dur_us, int pid = 100, int tid = 100,
             int64_t external_id = 1);
  // A record_function range ("user_annotation"), e.g. ProfilerStep#3.
  void UserAnnotation(const std::string& name, double ts_us, double dur_us, int pid = 100,
                      int tid = 100, int64_t external_id = -1);
  // The profiler's own work ("overhead"), written by Kineto with pid -1 and tid 0.
  void Overhead(const std::string& name, double ts_us, double dur_us);
  // Adds a deviceProperties entry (H100 SXM numbers unless changed).
  void DeviceProperties(int id = 0, int num_sms = 132);
  // Any raw event object (e.g. with odd types).
  void Raw(const std::string& event_json) { events_.push_back(event_json); }

  // events_last puts "traceEvents" after the other top-level keys (as our writer and some
  // Kineto versions do); pytorch_style adds the extra top-level keys torch.profiler writes.
  std::string Json(bool events_last = false) const;
  void Write(const std::string& path, bool gzip, bool events_last = false) const;
  size_t size() const { return events_.size(); }

 private:
  int64_t next_correlation_ = 1;
  std::vector<std::string> events_;
  std::vector<std::string> devices_;
};

// Writes bytes to path, gzip-compressed when gzip is set.
void WriteFile(const std::string& path, const std::string& data, bool gzip);

}  // namespace profd::analysis::testing
