// Test support: an agent without a GPU that still has counters. It speaks the real agent channel
// (framed AgentMessage protos) from a thread of the test process, sending a Hello with one
// device and a Heartbeat every 200 ms whose kernel-launch counter grows, so that the
// launch-rate and memory series exist on a host where the real agent (no CUDA) reports none.
// profd sees it as the test process (SO_PEERCRED).
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "profd/v1/agent_channel.pb.h"

namespace profd::testing {

class WireAgent {
 public:
  // Connects and says hello; the heartbeats start at once. Throws if profd is not there.
  WireAgent(const std::string& agent_socket, v1::Hello hello, uint32_t device,
            uint64_t memory_peak_bytes);
  ~WireAgent();  // stops and closes: profd unregisters it

 private:
  void Send(const v1::AgentMessage& message);
  void Run();

  int fd_ = -1;
  uint32_t device_;
  uint64_t memory_peak_bytes_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace profd::testing
