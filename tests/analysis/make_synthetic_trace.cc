// Writes the synthetic GPT-2-like trace: make_synthetic_trace OUT.json[.gz] [steps] [seed].
// Regenerates tests/analysis/fixtures/gpt2_synthetic.json.gz (10 steps, seed 1).
#include <cstdio>
#include <cstdlib>

#include "tests/analysis/synthetic_trace.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT.json[.gz] [steps] [seed]\n", argv[0]);
    return 2;
  }
  profd::analysis::testing::SyntheticOptions o;
  if (argc > 2) o.steps = std::atoi(argv[2]);
  if (argc > 3) o.seed = std::strtoull(argv[3], nullptr, 10);
  uint64_t n = profd::analysis::testing::WriteGpt2LikeTrace(o, argv[1]);
  std::printf("%s: %llu events\n", argv[1], static_cast<unsigned long long>(n));
  return 0;
}
