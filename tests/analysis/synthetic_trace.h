// Test and benchmark support: a synthetic trace shaped like the seeds' GPT-2 small fp16
// inference under torch.profiler (per step: an input copy, 12 layers of a few GEMMs and many
// small elementwise/norm/softmax kernels each wrapped in aten ops, an lm_head GEMM, then a
// pageable logits copy and a stream synchronize from .item()). Deterministic for a seed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace profd::analysis::testing {

struct SyntheticOptions {
  int steps = 10;
  int layers = 12;
  uint64_t seed = 1;
  int pid = 4242;
  bool cpu_ops = true;  // aten:: operator events around launches, as torch.profiler writes
};

// Streams the JSON document through sink in pieces; returns the number of trace events.
uint64_t GenerateGpt2LikeTrace(const SyntheticOptions& options,
                               const std::function<void(const std::string&)>& sink);

// Writes it to path (gzip when the path ends in .gz); returns the number of events.
uint64_t WriteGpt2LikeTrace(const SyntheticOptions& options, const std::string& path);

}  // namespace profd::analysis::testing
