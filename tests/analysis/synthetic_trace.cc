#include "tests/analysis/synthetic_trace.h"

#include <zlib.h>

#include <cstdio>
#include <random>
#include <stdexcept>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace profd::analysis::testing {
namespace {

struct Op {
  const char* aten;
  const char* kernel;
  double gpu_us;  // mean kernel duration
  uint32_t grid, block, regs, smem;
};

constexpr const char* kGemm =
    "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
    "segment_k_off_kernel__5x_cublas";
constexpr const char* kSmallGemm =
    "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize64x64x64_stage4_warpsize2x2x1_tensor16x8x16_"
    "kernel";
constexpr const char* kLayerNorm =
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::Half, float>(int, "
    "float, c10::Half const*, c10::Half const*, c10::Half const*, float*, float*, c10::Half*)";
constexpr const char* kGelu =
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::"
    "TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}"
    "::operator()() const::{lambda(c10::Half)#1}, at::detail::Array<char*, 2> >(int, "
    "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}"
    "::operator()() const::{lambda()#2}::operator()() const::{lambda(c10::Half)#1}, "
    "at::detail::Array<char*, 2>)";
constexpr const char* kAdd =
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::Half>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::Half>, "
    "at::detail::Array<char*, 3>)";
constexpr const char* kSoftmax =
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::Half, float, c10::Half, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::Half*, c10::Half const*, "
    "int)";
constexpr const char* kCopy =
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
    "{lambda()#7}::operator()() const::{lambda(c10::Half)#1}>(at::TensorIteratorBase&, at::"
    "native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
    "{lambda()#7}::operator()() const::{lambda(c10::Half)#1} const&)::{lambda(int)#1}>(int, "
    "at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::"
    "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::"
    "{lambda(c10::Half)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::"
    "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::"
    "{lambda(c10::Half)#1} const&)::{lambda(int)#1})";
constexpr const char* kEmbedding =
    "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::Half, long, unsigned int, "
    "2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::Half, unsigned int>, at::cuda::detail::"
    "TensorInfo<c10::Half const, unsigned int>, at::cuda::detail::TensorInfo<long const, "
    "unsigned int>, int, int, unsigned int, unsigned int, long)";

// One transformer block of GPT-2 small at batch 8 x 128 tokens, fp16 (durations in µs).
const Op kLayer[] = {
    {"aten::layer_norm", kLayerNorm, 4.0, 1024, 128, 28, 0},
    {"aten::addmm", kGemm, 26.0, 72, 384, 168, 201728},  // c_attn 768 -> 2304
    {"aten::contiguous", kCopy, 3.5, 4608, 128, 16, 0},
    {"aten::bmm", kSmallGemm, 8.0, 96, 128, 128, 49152},  // q @ k^T per head
    {"aten::_softmax", kSoftmax, 5.0, 1536, 128, 32, 0},
    {"aten::bmm", kSmallGemm, 7.5, 96, 128, 128, 49152},  // attn @ v
    {"aten::contiguous", kCopy, 3.5, 4608, 128, 16, 0},
    {"aten::addmm", kGemm, 11.0, 24, 384, 168, 201728},  // c_proj 768 -> 768
    {"aten::add", kAdd, 3.0, 1536, 128, 20, 0},
    {"aten::layer_norm", kLayerNorm, 4.0, 1024, 128, 28, 0},
    {"aten::addmm", kGemm, 34.0, 96, 384, 168, 201728},  // c_fc 768 -> 3072
    {"aten::gelu", kGelu, 6.0, 6144, 128, 24, 0},
    {"aten::addmm", kGemm, 33.0, 24, 384, 168, 201728},  // c_proj 3072 -> 768
    {"aten::add", kAdd, 3.0, 1536, 128, 20, 0},
};

class Generator {
 public:
  Generator(const SyntheticOptions& o, const std::function<void(const std::string&)>& sink)
      : o_(o), sink_(sink), rng_(o.seed) {}

  uint64_t Run() {
    sink_(
        "{\"schemaVersion\":1,\"deviceProperties\":[{\"id\":0,\"name\":\"NVIDIA H100 80GB "
        "HBM3\",\"totalGlobalMem\":85045968896,\"computeMajor\":9,\"computeMinor\":0,"
        "\"maxThreadsPerBlock\":1024,\"maxThreadsPerMultiprocessor\":2048,\"regsPerBlock\":"
        "65536,\"regsPerMultiprocessor\":65536,\"warpSize\":32,\"sharedMemPerBlock\":49152,"
        "\"sharedMemPerMultiprocessor\":233472,\"numSms\":132,\"sharedMemPerBlockOptin\":"
        "232448}],\"distributedInfo\":{\"backend\":\"nccl\",\"rank\":0,\"world_size\":1},"
        "\"record_shapes\":1,\"displayTimeUnit\":\"ms\",\"baseTimeNanoseconds\":"
        "1700000000000000000,\"traceEvents\":[\n");
    cpu_ = 1000.0;
    gpu_ = 0;
    for (int step = 0; step < o_.steps; ++step) Step(step);
    Flush();
    sink_("\n],\"traceName\":\"synthetic-gpt2.json\"}\n");
    return events_;
  }

 private:
  double Jitter(double mean, double spread = 0.15) {
    double u = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0);
    return mean * (1.0 + spread * (2 * u - 1));
  }

  void Event(const std::string& json) {
    if (!first_) buffer_ += ",\n";
    first_ = false;
    buffer_ += json;
    ++events_;
    if (buffer_.size() > (1 << 20)) Flush();
  }
  void Flush() {
    sink_(buffer_);
    buffer_.clear();
  }

  void Host(const char* cat, const std::string& name, double ts, double dur, int64_t corr) {
    Event(
        absl::StrFormat("{\"ph\":\"X\",\"cat\":\"%s\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,"
                        "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"cbid\":211,\"correlation\":%d}}",
                        cat, name, o_.pid, o_.pid, ts, dur, corr));
  }
  void CpuOp(const std::string& name, double ts, double dur) {
    if (!o_.cpu_ops) return;
    Event(
        absl::StrFormat("{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"%s\",\"pid\":%d,\"tid\":"
                        "%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"External id\":%d}}",
                        name, o_.pid, o_.pid, ts, dur, ++external_));
  }

  // An aten op on the CPU that launches one kernel; the GPU runs it when the stream frees up.
  void Launch(const Op& op) {
    double op_start = cpu_;
    double pre = Jitter(14.0, 0.3);  // dispatcher, Python, shape checks
    double api = Jitter(4.5, 0.3);
    int64_t corr = ++correlation_;
    double api_start = op_start + pre;
    Host("cuda_runtime", "cudaLaunchKernel", api_start, api, corr);
    double start = std::max(gpu_, api_start + api + Jitter(2.5, 0.4));
    double dur = Jitter(op.gpu_us, 0.1);
    Event(absl::StrFormat(
        "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"%s\",\"pid\":0,\"tid\":7,\"ts\":%.3f,"
        "\"dur\":%.3f,\"args\":{\"queued\":0,\"device\":0,\"context\":1,\"stream\":7,"
        "\"correlation\":%d,\"registers per thread\":%u,\"shared memory\":%u,\"grid\":[%u,1,1],"
        "\"block\":[%u,1,1]}}",
        op.kernel, start, dur, corr, op.regs, op.smem, op.grid, op.block));
    gpu_ = start + dur;
    cpu_ = api_start + api + Jitter(2.0, 0.3);
    CpuOp(op.aten, op_start, cpu_ - op_start);
  }

  void Copy(const char* kind, const char* src, const char* dst, uint64_t bytes, double gbps,
            bool blocking) {
    double api_start = cpu_ + Jitter(6.0);
    int64_t corr = ++correlation_;
    double start = std::max(gpu_, api_start + 3.0);
    double dur = 1.5 + bytes / (gbps * 1000.0);
    // cudaMemcpyAsync to pageable memory returns only when the copy is done.
    double api_end = blocking ? start + dur + 2.0 : api_start + Jitter(5.0);
    Host("cuda_runtime", "cudaMemcpyAsync", api_start, api_end - api_start, corr);
    Event(absl::StrFormat(
        "{\"ph\":\"X\",\"cat\":\"gpu_memcpy\",\"name\":\"Memcpy %s (%s -> %s)\",\"pid\":0,"
        "\"tid\":7,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"device\":0,\"context\":1,\"stream\":7,"
        "\"correlation\":%d,\"bytes\":%d,\"memory bandwidth (GB/s)\":%.3f}}",
        kind, src, dst, start, dur, corr, bytes, bytes / (dur * 1000.0)));
    gpu_ = start + dur;
    cpu_ = api_end + 1.0;
  }

  void Step(int step) {
    double step_start = cpu_;
    // Input ids to the device (pinned, non_blocking).
    Copy("HtoD", "Pinned", "Device", 8 * 128 * 8, 20.0, false);
    Launch({"aten::embedding", kEmbedding, 6.0, 1024, 128, 32, 0});
    Launch({"aten::embedding", kEmbedding, 6.0, 1024, 128, 32, 0});
    Launch({"aten::add", kAdd, 3.0, 1536, 128, 20, 0});
    for (int layer = 0; layer < o_.layers; ++layer) {
      for (const Op& op : kLayer) Launch(op);
    }
    Launch({"aten::layer_norm", kLayerNorm, 4.0, 1024, 128, 28, 0});
    Launch({"aten::linear", kGemm, 310.0, 786, 384, 168, 201728});  // lm_head 768 -> 50257
    Launch({"aten::argmax", kSoftmax, 9.0, 8, 1024, 32, 0});
    // next_token.item(): a pageable DtoH copy and a synchronize that waits for the GPU.
    Copy("DtoH", "Device", "Pageable", 64, 2.0, true);
    double sync_start = cpu_;  // nothing left to wait for: the copy already waited
    int64_t corr = ++correlation_;
    double sync_end = std::max(gpu_, sync_start) + 3.0;
    Host("cuda_runtime", "cudaStreamSynchronize", sync_start, sync_end - sync_start, corr);
    cpu_ = sync_end + Jitter(250.0, 0.2);  // sampling, request bookkeeping in Python
    Event(
        absl::StrFormat("{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#%d\","
                        "\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{}}",
                        step, o_.pid, o_.pid, step_start, cpu_ - step_start));
  }

  SyntheticOptions o_;
  const std::function<void(const std::string&)>& sink_;
  std::mt19937_64 rng_;
  std::string buffer_;
  bool first_ = true;
  uint64_t events_ = 0;
  int64_t correlation_ = 0;
  int64_t external_ = 0;
  double cpu_ = 0, gpu_ = 0;
};

}  // namespace

uint64_t GenerateGpt2LikeTrace(const SyntheticOptions& options,
                               const std::function<void(const std::string&)>& sink) {
  return Generator(options, sink).Run();
}

uint64_t WriteGpt2LikeTrace(const SyntheticOptions& options, const std::string& path) {
  if (absl::EndsWith(path, ".gz")) {
    gzFile f = gzopen(path.c_str(), "wb6");
    if (f == nullptr) throw std::runtime_error("cannot write " + path);
    uint64_t n = GenerateGpt2LikeTrace(options, [f](const std::string& s) {
      gzwrite(f, s.data(), static_cast<unsigned>(s.size()));
    });
    gzclose(f);
    return n;
  }
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot write " + path);
  uint64_t n = GenerateGpt2LikeTrace(
      options, [f](const std::string& s) { std::fwrite(s.data(), 1, s.size(), f); });
  std::fclose(f);
  return n;
}

}  // namespace profd::analysis::testing
