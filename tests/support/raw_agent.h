// Test support: a hostile agent. It speaks the agent channel's real framing (agent_frame.h) on a
// raw socket from the test process and sends whatever a test builds: oversized or half frames,
// messages over every limit, floods. Non-blocking with deadlines, so a profd that stops reading
// (as it should) never hangs a test. profd sees it as the test process (SO_PEERCRED).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "profd/v1/agent_channel.pb.h"

namespace profd::testing {

class RawAgent {
 public:
  // Connects; throws if nothing listens there.
  explicit RawAgent(const std::string& socket_path);
  ~RawAgent();
  RawAgent(const RawAgent&) = delete;
  RawAgent& operator=(const RawAgent&) = delete;

  // Writes all of it; false when profd closed the connection or the deadline passed first.
  bool Send(absl::string_view bytes, absl::Duration timeout = absl::Seconds(5));
  bool SendMessage(const v1::AgentMessage& message, absl::Duration timeout = absl::Seconds(5));
  static std::string Frame(absl::string_view body);
  static std::string FrameHeader(uint32_t length);

  // Says hello and waits for profd's HelloAck.
  bool Register(const v1::Hello& hello, absl::Duration timeout = absl::Seconds(5));
  static v1::Hello DefaultHello(const std::string& pod_name = "raw");

  // The next message from profd; nothing at the deadline or once closed.
  std::optional<v1::DaemonMessage> Receive(absl::Duration timeout);
  // Waits for a StartCapture and returns its capture id ("" at the deadline).
  std::string AwaitStartCapture(absl::Duration timeout = absl::Seconds(5));
  // True once profd has closed the connection (end of stream, or reset) within the timeout;
  // messages profd sends meanwhile are read and dropped.
  bool WaitClosed(absl::Duration timeout);

  size_t bytes_sent() const { return sent_; }
  bool closed() const { return closed_; }

 private:
  bool ReadSome(absl::Time deadline);

  int fd_ = -1;
  std::string in_;
  size_t sent_ = 0;
  bool closed_ = false;
};

// A valid EventBatch message of `kernels` kernels named `name` (string id 1), for capture_id.
v1::AgentMessage KernelBatch(const std::string& capture_id, int kernels,
                             const std::string& name = "raw_kernel");
v1::AgentMessage Status(const std::string& capture_id, v1::CaptureState state);

}  // namespace profd::testing
