// The seam between the agent's channel to profd (agent.h) and whatever runs captures in the
// process (the CUPTI capture, cupti/). Keeps the channel free of CUPTI and testable without it.
#pragma once

#include <cstdint>
#include <string>

#include "agent/wire/agent_messages.h"

namespace profagent {

class CaptureHandler {
 public:
  virtual ~CaptureHandler() = default;

  // Called on the agent thread; must return quickly (the capture runs on its own thread) and
  // report through Agent::Enqueue.
  virtual void OnStartCapture(const wire::StartCapture& request) = 0;
  virtual void OnStopCapture(const std::string& capture_id) = 0;
  // profd went away: a running capture is cancelled, its events have nowhere to go.
  virtual void OnDisconnected() = 0;
  // The CUPTI version for the hello message (0 when CUPTI is not loaded).
  virtual uint32_t CuptiVersion() = 0;
  // The flight recorder: on or off (any thread, returns at once), and its state for the heartbeat
  // (agent thread).
  virtual void OnSetRecorder(const wire::SetRecorder& settings) = 0;
  virtual void ReportRecorder(wire::RecorderState* state) = 0;
};

}  // namespace profagent
