// What /metrics shows: a prometheus::Collectable that builds every profd_* MetricFamily afresh on
// each scrape from snapshots — the GpuSampler's latest GpuSnapshot and the PmSampler's latest
// GpuCounterSnapshot (shared_ptr copies),
// AgentRegistry::List() (the registry's own copy under its mutex) and DaemonMetrics::Read().
//
// Why a Collectable and not prometheus-cpp Gauges kept up to date: the label sets here follow
// processes that come and go every second. With gauges, someone must notice each exit and
// Remove() its series from many families, and any miss leaves a stale series forever. Building
// from snapshots makes "series of processes that exit are removed" true by construction: an
// agent gone from the registry, or a pid gone from NVML's list, is simply not in the next scrape.
// The cost is a copy of the registry (~64 small protos) and building a few thousand series per
// scrape; tests/bench/metrics_scrape_bench.cc measures it (64 agents x 8 GPUs).
//
// Collect() runs on the exposer's HTTP threads, possibly two at once; it touches nothing but the
// thread-safe sources above. It never calls NVML.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "daemon/agents/agent_channel_server.h"
#include "daemon/agents/agent_registry.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/metrics/gpu_sampler.h"
#include "daemon/metrics/pm_sampler.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace profd {

class MetricsCollector : public prometheus::Collectable {
 public:
  struct Sources {
    std::string hostname;  // the `hostname` label on every series
    const AgentRegistry* registry = nullptr;
    const GpuSampler* gpus = nullptr;
    const DaemonMetrics* daemon = nullptr;
    // The agent channel's closes and refusals by reason, and its open connections; may be empty.
    std::function<AgentChannelCounters()> agent_channel;
    // Captures in progress, from their owner; when empty, DaemonMetrics' own count.
    std::function<int64_t()> captures_running;
    const PmSampler* counters = nullptr;  // GPU hardware counters; null when turned off
  };

  explicit MetricsCollector(Sources sources);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const Sources sources_;
};

}  // namespace profd
