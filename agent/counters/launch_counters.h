// The agent's always-on counters, per device: kernel launches and CUDA graph launches (monotonic,
// for Prometheus rate()), device memory allocated now and its peak since the process started.
//
// Fed by CUPTI driver-API callbacks on the application threads that make the calls, counted once
// (runtime launches reach the driver; only the driver layer is counted) and only when the call
// succeeded. The callback path is lock-free: atomics, a per-thread context->device cache and the
// AddressTable. The peak is updated on every allocation, so a peak between two heartbeats is
// never missed.
//
// What it costs decides how launches are counted (docs/OVERHEAD.md): a CUPTI launch callback
// costs 3-9 % of a launch-bound loop, so by default (PROFD_AGENT_COUNTERS=sampled) launches are
// counted in short windows at random offsets, a tenth of the time, and scaled up by a sampler
// thread (launch_sampler.h). Memory calls are rare and always counted exactly.
// PROFD_AGENT_COUNTERS=exact counts every launch, =memory counts no launches, =off holds no
// CUPTI at all.
//
// The callbacks come through the CUPTI broker (cupti/cupti_broker.h), which holds CUPTI's one
// subscriber and shares it with torch.profiler's Kineto and other CUPTI clients of the process.
// PROFD_AGENT_COUNTERS=off keeps CUPTI out of an idle agent altogether.
#pragma once

#include <cupti.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "agent/counters/address_table.h"
#include "agent/counters/launch_sampler.h"
#include "agent/wire/agent_messages.h"
#include "profd/v1/agent_frame.h"

namespace profagent {

class LaunchCounters {
 public:
  // As many as profd takes in a heartbeat (agent_frame.h).
  static constexpr uint32_t kMaxDevices = profd::v1::kMaxAgentDevices;

  static LaunchCounters& Get();

  // Agent thread, once: loads CUPTI and subscribes. Returns "" or why counters are off.
  std::string Enable();
  // Turns the callbacks off and on again without giving up the subscription (A/B overhead
  // measurement, profagent_set_counters). False when counters are not enabled.
  bool SetActive(bool active);
  // 1 exact, N sampled a time share of 1/N, 0 no launch counting.
  uint32_t launch_sample_every() const { return sample_every_; }

  // Agent thread: the counters of every device seen so far (launches estimated when sampled).
  void FillHeartbeat(wire::Heartbeat* heartbeat) const;

  // The sampler's step, exposed for tests: one window of `watched_ns` has just closed; fold what
  // it saw into the estimates.
  void FoldWindow(uint64_t period_ns, uint64_t watched_ns);

  // The callback path, exposed for tests: one successful driver call.
  void OnLaunch(uint32_t device, bool graph);
  void OnAlloc(uint32_t device, uint64_t key, uint64_t bytes);
  void OnFree(uint32_t device, uint64_t key);

 private:
  LaunchCounters() = default;
  static void CUPTIAPI Callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                const void* data);

  struct Device {
    std::atomic<uint64_t> launches{0};  // seen by the callbacks
    std::atomic<uint64_t> graph_launches{0};
    std::atomic<uint64_t> allocated{0};
    std::atomic<uint64_t> peak{0};
    std::atomic<bool> seen{false};
    // Sampled mode: the sampler thread's estimates, published for the heartbeat.
    SampledCount launches_estimate;
    SampledCount graph_launches_estimate;
    std::atomic<uint64_t> launches_reported{0};
    std::atomic<uint64_t> graph_launches_reported{0};
  };
  void EnableLaunchCallbacks(bool on);
  // The sampler thread: one window per period while active.
  void SampleLoop();

  Device devices_[kMaxDevices];
  uint32_t sample_every_ = 0;             // set by Enable, before any callback
  std::atomic<bool> active_{false};       // SetActive
  std::atomic<bool> launches_on_{false};  // launch callbacks enabled now
  AddressTable pointers_;  // device pointers, and cuMemCreate handles with the top bit set
  std::atomic<bool> subscribed_{false};
};

}  // namespace profagent
