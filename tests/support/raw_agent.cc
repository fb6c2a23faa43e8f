#include "tests/support/raw_agent.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

#include "absl/time/clock.h"
#include "profd/v1/agent_frame.h"

namespace profd::testing {
namespace {

int MillisUntil(absl::Time deadline) {
  int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return ms < 0 ? 0 : static_cast<int>(ms > 1000 ? 1000 : ms);
}

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

RawAgent::RawAgent(const std::string& socket_path) {
  // Connects blocking (a full listen backlog then waits instead of failing), then works
  // non-blocking.
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    close(fd_);
    throw std::runtime_error("RawAgent: cannot connect to " + socket_path + ": " +
                             std::strerror(err));
  }
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

RawAgent::~RawAgent() { close(fd_); }

std::string RawAgent::FrameHeader(uint32_t length) {
  std::string header(v1::kAgentFrameHeaderBytes, '\0');
  v1::EncodeFrameHeader(length, reinterpret_cast<unsigned char*>(header.data()));
  return header;
}

std::string RawAgent::Frame(absl::string_view body) {
  return FrameHeader(static_cast<uint32_t>(body.size())) + std::string(body);
}

bool RawAgent::Send(absl::string_view bytes, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      sent_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (absl::Now() >= deadline) return false;
      pollfd p{fd_, POLLOUT, 0};
      poll(&p, 1, MillisUntil(deadline));
      continue;
    }
    closed_ = true;  // EPIPE, ECONNRESET: profd closed it
    return false;
  }
  return true;
}

bool RawAgent::SendMessage(const v1::AgentMessage& message, absl::Duration timeout) {
  return Send(Frame(message.SerializeAsString()), timeout);
}

v1::Hello RawAgent::DefaultHello(const std::string& pod_name) {
  v1::Hello hello;
  hello.set_agent_version("0.1.0");
  hello.set_hostname("test-host");
  hello.set_pod_name(pod_name);
  hello.set_pod_namespace("attack");
  return hello;
}

bool RawAgent::Register(const v1::Hello& hello, absl::Duration timeout) {
  v1::AgentMessage m;
  *m.mutable_hello() = hello;
  if (!SendMessage(m, timeout)) return false;
  std::optional<v1::DaemonMessage> ack = Receive(timeout);
  return ack.has_value() && ack->has_hello_ack();
}

// Reads what is there, waiting until the deadline for something; false once closed.
bool RawAgent::ReadSome(absl::Time deadline) {
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, MillisUntil(deadline)) <= 0) return !closed_;
  char buf[64 * 1024];
  ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
  if (n > 0) {
    in_.append(buf, static_cast<size_t>(n));
    return true;
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  closed_ = true;  // end of stream, or reset
  return false;
}

std::optional<v1::DaemonMessage> RawAgent::Receive(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (in_.size() >= v1::kAgentFrameHeaderBytes) {
      uint32_t length = v1::DecodeFrameHeader(reinterpret_cast<const unsigned char*>(in_.data()));
      if (in_.size() >= v1::kAgentFrameHeaderBytes + length) {
        v1::DaemonMessage message;
        message.ParseFromArray(in_.data() + v1::kAgentFrameHeaderBytes, static_cast<int>(length));
        in_.erase(0, v1::kAgentFrameHeaderBytes + length);
        return message;
      }
    }
    if (absl::Now() >= deadline || !ReadSome(deadline)) return std::nullopt;
  }
}

std::string RawAgent::AwaitStartCapture(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::optional<v1::DaemonMessage> m = Receive(deadline - absl::Now());
    if (!m) return "";
    if (m->has_start_capture()) return m->start_capture().capture_id();
  }
  return "";
}

bool RawAgent::WaitClosed(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!closed_ && absl::Now() < deadline) {
    ReadSome(deadline);
    in_.clear();
  }
  return closed_;
}

v1::AgentMessage KernelBatch(const std::string& capture_id, int kernels, const std::string& name) {
  v1::AgentMessage m;
  v1::EventBatch* b = m.mutable_events();
  b->set_capture_id(capture_id);
  v1::StringDef* s = b->add_strings();
  s->set_id(1);
  s->set_value(name);
  const uint64_t start = NowNs();
  for (int i = 0; i < kernels; ++i) {
    v1::Kernel* k = b->add_kernels();
    k->set_start_ns(start + 2000ull * i);
    k->set_end_ns(start + 2000ull * i + 1000);
    k->set_stream(7);
    k->set_correlation(static_cast<uint32_t>(i + 1));
    k->set_name_id(1);
    k->set_grid_x(1);
    k->set_grid_y(1);
    k->set_grid_z(1);
    k->set_block_x(128);
    k->set_block_y(1);
    k->set_block_z(1);
  }
  return m;
}

v1::AgentMessage Status(const std::string& capture_id, v1::CaptureState state) {
  v1::AgentMessage m;
  v1::CaptureStatus* s = m.mutable_capture_status();
  s->set_capture_id(capture_id);
  s->set_state(state);
  if (state == v1::CAPTURE_STATE_STARTED) s->set_enabled_realtime_ns(NowNs());
  if (state == v1::CAPTURE_STATE_FINISHED) s->set_disabled_realtime_ns(NowNs());
  return m;
}

}  // namespace profd::testing
