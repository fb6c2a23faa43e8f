// What sharing CUPTI adds on the hot path: the counters' launch callback called straight (as
// CUPTI called it before the broker) and through the broker's dispatch (as CUPTI calls it now),
// alone and with a Kineto-like subscriber of its own beside it (RESOURCE callbacks only).
// Prints ns per callback: median, min, max of 9 runs. CUPTI's own cost per callback (~3 % of a
// ~4 us launch, docs/measurements/overhead.md) is not in these numbers.
//   cupti_dispatch_bench [calls=20000000]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "agent/cupti/cupti_broker.h"
#include "tests/agent/cupti_fakes/fake_cupti.h"

namespace {

std::atomic<uint64_t> g_launches{0};

// As cheap as the counters' real callback path for a launch: one relaxed add.
void CUPTIAPI Counter(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {
  g_launches.fetch_add(1, std::memory_order_relaxed);
}

double NsPerCall(CUpti_CallbackFunc callback, void* userdata, long calls) {
  CUpti_CallbackData data{};
  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < calls; ++i) {
    callback(userdata, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data);
    asm volatile("" ::: "memory");
  }
  std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
  return took.count() / static_cast<double>(calls);
}

void Report(const char* what, CUpti_CallbackFunc callback, void* userdata, long calls) {
  std::vector<double> runs;
  for (int r = 0; r < 9; ++r) runs.push_back(NsPerCall(callback, userdata, calls));
  std::sort(runs.begin(), runs.end());
  std::printf("%-44s %6.2f ns/callback (min %.2f, max %.2f)\n", what, runs[4], runs[0], runs[8]);
}

}  // namespace

int main(int argc, char** argv) {
  long calls = argc > 1 ? std::atol(argv[1]) : 20000000;
  using profagent::CuptiBroker;
  CuptiBroker::Get().Interpose();
  std::string holder;
  CuptiBroker::Get().SubscribeAgent(&Counter, nullptr, &holder);
  CUpti_CallbackId launch = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
  CuptiBroker::Get().EnableAgentCallbacks(CUPTI_CB_DOMAIN_DRIVER_API, &launch, 1, true);
  CUpti_CallbackFunc dispatch = nullptr;
  void* broker = nullptr;
  if (!fakecupti_subscriber_callback(0, &dispatch, &broker)) {
    std::fprintf(stderr, "the broker did not subscribe\n");
    return 1;
  }
  Report("counters callback, direct (before)", &Counter, nullptr, calls);
  Report("through the broker, agent only", dispatch, broker, calls);
  if (fakekineto_init() != CUPTI_SUCCESS) {
    std::fprintf(stderr, "Kineto could not subscribe\n");
    return 1;
  }
  Report("through the broker, Kineto subscribed too", dispatch, broker, calls);
  return g_launches.load() == 0;
}
