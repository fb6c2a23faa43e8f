// The agent's always-on counters, per device: kernel launches and CUDA graph launches (monotonic,
// for Prometheus rate()), device memory allocated now and its peak since the process started.
// Every call is counted (no sampling); the peak is updated on every allocation, so a peak between
// two heartbeats is never missed.
//
// Two routes feed them, chosen once when the agent starts (PROFD_AGENT_COUNTERS):
//  - entry points (the default): the CUDA launch and allocation entry points that the process's
//    libraries call are interposed (interpose/cuda_entry_points.h). No CUPTI at all: a few
//    nanoseconds per call, and torch.profiler, Kineto and Nsight see the process exactly as
//    without the agent.
//  - CUPTI callbacks on the driver API (PROFD_AGENT_COUNTERS=cupti, and the fall-back when no
//    library of the process launches through an entry point the agent can interpose, e.g. a
//    program linked with the static CUDA runtime): exact too, 3-9 % of a launch-bound loop. The
//    callbacks go through the CUPTI broker and step aside while another profiler in the process
//    traces CUDA activity (the counters then miss that time, and the heartbeat says so).
// PROFD_AGENT_COUNTERS=off counts nothing.
//
// The counting path is lock-free: atomics, a per-thread context->device cache and the
// AddressTable.
#pragma once

#include <cupti.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "agent/counters/address_table.h"
#include "agent/wire/agent_messages.h"
#include "profd/v1/agent_frame.h"

namespace profagent {

class LaunchCounters {
 public:
  // As many as profd takes in a heartbeat (agent_frame.h).
  static constexpr uint32_t kMaxDevices = profd::v1::kMaxAgentDevices;

  static LaunchCounters& Get();

  // What PROFD_AGENT_COUNTERS asks for (read once, at the first Get()).
  enum class Mode { kAuto, kEntryPoints, kCupti, kOff };
  Mode mode() const { return mode_; }
  // The entry points are to be interposed (before Enable decides the route).
  bool wants_entry_points() const { return mode_ == Mode::kAuto || mode_ == Mode::kEntryPoints; }

  // Agent thread, once: picks the route and starts counting. Returns "" or why counters are off.
  std::string Enable();
  // Stops and restarts counting (A/B overhead measurement, profagent_set_counters). False when
  // counters are not enabled.
  bool SetActive(bool active);
  wire::LaunchCounting route() const { return route_.load(std::memory_order_relaxed); }
  // The wrappers' question, on every call: is the entry-point route counting now?
  bool counting_entry_points() const { return entry_points_on_.load(std::memory_order_relaxed); }

  // Agent thread: the counters of every device seen so far.
  void FillHeartbeat(wire::Heartbeat* heartbeat) const;

  // The counting path (either route), exposed for tests: one successful call.
  void OnLaunch(uint32_t device, bool graph);
  void OnAlloc(uint32_t device, uint64_t key, uint64_t bytes);
  void OnFree(uint64_t key);  // from the device the allocation was counted on

 private:
  LaunchCounters();
  static void CUPTIAPI Callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                const void* data);
  std::string EnableCupti();

  struct Device {
    std::atomic<uint64_t> launches{0};
    std::atomic<uint64_t> graph_launches{0};
    std::atomic<uint64_t> allocated{0};
    std::atomic<uint64_t> peak{0};
    std::atomic<bool> seen{false};
  };

  Device devices_[kMaxDevices];
  const Mode mode_;
  std::atomic<wire::LaunchCounting> route_{wire::LaunchCounting::kOff};
  std::atomic<bool> entry_points_on_{false};
  AddressTable pointers_;  // device pointers, and cuMemCreate handles with the top bit set
  std::atomic<bool> subscribed_{false};  // the CUPTI route holds its callbacks
};

}  // namespace profagent
