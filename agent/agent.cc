#include "agent/agent.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "agent/cuda_devices.h"
#include "agent/log.h"
#include "profd/v1/agent_frame.h"

namespace profagent {
namespace {

constexpr uint32_t kMinBackoffMs = 100;
constexpr uint32_t kMaxBackoffMs = 5000;

std::atomic<Agent*> g_agent{nullptr};
std::mutex g_start_mutex;  // only StartOnce takes it, never an application hot path

uint64_t NowNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// A decimal number below 2^31, and nothing else.
bool ParseUint(const std::string& text, uint32_t* out) {
  if (text.empty() || text.size() > 10) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > INT32_MAX) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

}  // namespace

Agent* Agent::StartOnce(const AgentOptions& options, CaptureHandlerFactory make_handler) {
  std::lock_guard<std::mutex> lock(g_start_mutex);
  if (Agent* existing = g_agent.load()) return existing;
  auto* agent = new Agent(options);  // intentionally leaked: see the class comment
  if (make_handler != nullptr) agent->capture_handler_.store(make_handler(agent));
  g_agent.store(agent);
  pthread_atfork(nullptr, nullptr, &Agent::AtForkChild);
  agent->thread_ = std::thread([agent] { agent->Run(); });
  agent->thread_.detach();
  return agent;
}

Agent* Agent::Get() { return g_agent.load(); }

Agent::Agent(const AgentOptions& options) : options_(options) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  hello_.agent_version = PROFD_VERSION;
  hello_.pid = static_cast<uint32_t>(getpid());
  hello_.hostname = host;
  hello_.pod_name = Env("POD_NAME");
  hello_.pod_namespace = Env("POD_NAMESPACE");
  hello_.container_name = Env("CONTAINER_NAME");
  hello_.injected = options.injected;
  // A rank of a distributed job, as torchrun (and most launchers) tell the process: the trace
  // then carries it for HTA's multi-rank analysis.
  uint32_t rank = 0, world_size = 0, local_rank = 0;
  if (ParseUint(Env("RANK"), &rank) && ParseUint(Env("WORLD_SIZE"), &world_size) &&
      world_size > 0 && rank < world_size) {
    hello_.distributed = true;
    hello_.rank = rank;
    hello_.world_size = world_size;
    hello_.local_rank = ParseUint(Env("LOCAL_RANK"), &local_rank) ? local_rank : 0;
  }
  hello_.start_realtime_ns = NowNs(CLOCK_REALTIME);
}

// In a forked child the agent thread does not exist and the socket belongs to the parent's
// registration. The child stays silent: a CUDA child must exec anyway, and an exec'd child with
// CUDA_INJECTION64_PATH set gets an agent of its own.
void Agent::AtForkChild() {
  Agent* agent = g_agent.load();
  if (agent == nullptr) return;
  agent->stop_.store(true);
  agent->connected_.store(false);
  if (agent->socket_fd_ >= 0) close(agent->socket_fd_);
  agent->socket_fd_ = -1;
}

void Agent::RequestStop() {
  stop_.store(true);
  Wake();
}

void Agent::SetRecorder(const wire::SetRecorder& settings) {
  CaptureHandler* handler = capture_handler_.load();
  if (handler == nullptr) return;
  handler->OnSetRecorder(settings);
  HeartbeatNow();
}

void Agent::HeartbeatNow() {
  heartbeat_now_.store(true);
  Wake();
}

void Agent::Wake() {
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

bool Agent::Enqueue(std::string message) {
  if (!connected_.load(std::memory_order_relaxed)) return false;
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    if (queued_bytes_ + message.size() > options_.max_queued_bytes) return false;
    queued_bytes_ += message.size();
    queue_.push_back(std::move(message));
  }
  Wake();
  return true;
}

bool Agent::Connect() {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (options_.socket_path.size() >= sizeof(addr.sun_path)) {
    close(fd);
    return false;
  }
  std::memcpy(addr.sun_path, options_.socket_path.c_str(), options_.socket_path.size() + 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (!warned_unreachable_) {
      Log(LogLevel::kInfo, "profd not reachable at %s (%s); retrying in the background",
          options_.socket_path.c_str(), std::strerror(errno));
      warned_unreachable_ = true;
    }
    close(fd);
    return false;
  }
  socket_fd_ = fd;
  warned_unreachable_ = false;
  connected_.store(true);
  Log(LogLevel::kInfo, "connected to profd at %s", options_.socket_path.c_str());
  return true;
}

void Agent::Disconnect(const char* why) {
  Log(LogLevel::kInfo, "disconnected from profd: %s", why);
  connected_.store(false);
  if (socket_fd_ >= 0) close(socket_fd_);
  socket_fd_ = -1;
  in_buffer_.clear();
  out_frame_.clear();
  out_offset_ = 0;
  devices_sent_ = false;
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    queue_.clear();
    queued_bytes_ = 0;
  }
  if (CaptureHandler* handler = capture_handler_.load()) handler->OnDisconnected();
}

void Agent::SendHello() {
  CudaDriverView cuda = QueryCudaDevices();
  hello_.devices = cuda.devices;
  hello_.cuda_driver_version = cuda.driver_version;
  devices_sent_ = cuda.initialized;
  if (CaptureHandler* handler = capture_handler_.load())
    hello_.cupti_version = handler->CuptiVersion();
  std::string message;
  wire::EncodeHello(hello_, &message);
  std::lock_guard<std::mutex> lock(queue_mutex_);
  queued_bytes_ += message.size();
  queue_.push_front(std::move(message));
}

void Agent::SendHeartbeat() {
  wire::Heartbeat hb;
  hb.realtime_ns = NowNs(CLOCK_REALTIME);
  if (!devices_sent_) {
    // cuInit may have completed since the hello: tell profd the devices once they are known.
    CudaDriverView cuda = QueryCudaDevices();
    if (cuda.initialized) {
      hb.device_infos = std::move(cuda.devices);
      devices_sent_ = true;
    }
  }
  if (CountersFn fn = counters_fn_.load()) fn(&hb);
  if (CaptureHandler* handler = capture_handler_.load()) handler->ReportRecorder(&hb.recorder);
  std::string message;
  wire::EncodeHeartbeat(hb, &message);
  std::lock_guard<std::mutex> lock(queue_mutex_);
  queued_bytes_ += message.size();
  queue_.push_back(std::move(message));
}

bool Agent::ReadFrames() {
  char buf[64 * 1024];
  while (true) {
    ssize_t n = recv(socket_fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      in_buffer_.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {
      Disconnect("profd closed the connection");
      return false;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    Disconnect(std::strerror(errno));
    return false;
  }
  size_t pos = 0;
  while (in_buffer_.size() - pos >= profd::v1::kAgentFrameHeaderBytes) {
    uint32_t length = profd::v1::DecodeFrameHeader(
        reinterpret_cast<const unsigned char*>(in_buffer_.data() + pos));
    if (length > profd::v1::kMaxAgentFrameBytes) {
      Disconnect("oversized frame from profd");
      return false;
    }
    if (in_buffer_.size() - pos - profd::v1::kAgentFrameHeaderBytes < length) break;
    Dispatch(std::string_view(in_buffer_).substr(pos + profd::v1::kAgentFrameHeaderBytes, length));
    if (socket_fd_ < 0) return false;
    pos += profd::v1::kAgentFrameHeaderBytes + length;
  }
  in_buffer_.erase(0, pos);
  return true;
}

void Agent::Dispatch(std::string_view frame) {
  wire::DaemonCommand command;
  if (!wire::DecodeDaemonMessage(frame, &command)) {
    Log(LogLevel::kWarning, "ignoring a malformed message from profd (%zu bytes)", frame.size());
    return;
  }
  CaptureHandler* handler = capture_handler_.load();
  switch (command.kind) {
    case wire::DaemonCommand::Kind::kHelloAck:
      if (command.heartbeat_interval_ms >= 10)
        heartbeat_interval_ms_ = command.heartbeat_interval_ms;
      break;
    case wire::DaemonCommand::Kind::kStartCapture:
      if (handler != nullptr) {
        handler->OnStartCapture(command.start);
      } else {
        wire::CaptureStatus status;
        status.capture_id = command.start.capture_id;
        status.state = wire::CaptureState::kFailed;
        status.error = wire::CaptureError::kCuptiUnavailable;
        status.message = "this agent was started without a capture backend";
        std::string message;
        wire::EncodeCaptureStatus(status, &message);
        Enqueue(std::move(message));
      }
      break;
    case wire::DaemonCommand::Kind::kStopCapture:
      if (handler != nullptr) handler->OnStopCapture(command.stop_capture_id);
      break;
    case wire::DaemonCommand::Kind::kSetRecorder:
      SetRecorder(command.recorder);
      break;
    case wire::DaemonCommand::Kind::kUnknown:
      break;  // a newer profd: ignore what we do not know
  }
}

bool Agent::WritePending() {
  while (true) {
    if (out_offset_ == out_frame_.size()) {
      std::string body;
      {
        std::lock_guard<std::mutex> lock(queue_mutex_);
        if (queue_.empty()) return true;
        body = std::move(queue_.front());
        queue_.pop_front();
        queued_bytes_ -= body.size();
      }
      if (body.size() > profd::v1::kMaxAgentFrameBytes) {
        Log(LogLevel::kWarning, "dropping a %zu-byte message over the frame limit", body.size());
        continue;
      }
      out_frame_.resize(profd::v1::kAgentFrameHeaderBytes);
      profd::v1::EncodeFrameHeader(static_cast<uint32_t>(body.size()),
                                   reinterpret_cast<unsigned char*>(out_frame_.data()));
      out_frame_ += body;
      out_offset_ = 0;
    }
    ssize_t n = send(socket_fd_, out_frame_.data() + out_offset_, out_frame_.size() - out_offset_,
                     MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      out_offset_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    Disconnect(n == 0 ? "send returned 0" : std::strerror(errno));
    return false;
  }
}

void Agent::Run() {
  pthread_setname_np(pthread_self(), "profagent");
  if (options_.on_thread_start != nullptr) options_.on_thread_start(this);
  while (!stop_.load()) {
    uint64_t now = NowNs(CLOCK_MONOTONIC);
    if (options_.on_tick != nullptr && now >= next_tick_ns_) {
      options_.on_tick(this);
      next_tick_ns_ = now + heartbeat_interval_ms_ * 1000000ull;
    }
    if (socket_fd_ < 0) {
      if (!Connect()) {
        backoff_ms_ = std::min(kMaxBackoffMs, std::max(kMinBackoffMs, backoff_ms_ * 2));
        pollfd wake{wake_fd_, POLLIN, 0};
        poll(&wake, 1, static_cast<int>(backoff_ms_));
        uint64_t drained;
        while (read(wake_fd_, &drained, sizeof(drained)) > 0) {
        }
        continue;
      }
      backoff_ms_ = 0;
      SendHello();
      next_heartbeat_ns_ = now + 50'000'000ull;  // the first one soon, with devices if known
    }

    bool pending;
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      pending = !queue_.empty();
    }
    pending = pending || out_offset_ < out_frame_.size();
    pollfd fds[2] = {{socket_fd_, static_cast<short>(POLLIN | (pending ? POLLOUT : 0)), 0},
                     {wake_fd_, POLLIN, 0}};
    if (heartbeat_now_.exchange(false)) next_heartbeat_ns_ = now;
    int timeout_ms = now >= next_heartbeat_ns_
                         ? 0
                         : static_cast<int>((next_heartbeat_ns_ - now) / 1000000ull) + 1;
    int ready = poll(fds, 2, timeout_ms);
    if (ready < 0 && errno != EINTR) {
      Disconnect(std::strerror(errno));
      continue;
    }
    if (fds[1].revents & POLLIN) {
      uint64_t drained;
      while (read(wake_fd_, &drained, sizeof(drained)) > 0) {
      }
      if (heartbeat_now_.exchange(false)) next_heartbeat_ns_ = 0;
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      if (!ReadFrames()) continue;
    }
    if (!WritePending()) continue;
    if (NowNs(CLOCK_MONOTONIC) >= next_heartbeat_ns_) {
      SendHeartbeat();
      next_heartbeat_ns_ = NowNs(CLOCK_MONOTONIC) + heartbeat_interval_ms_ * 1000000ull;
      if (!WritePending()) continue;
    }
  }
  if (socket_fd_ >= 0 && connected_.load()) Disconnect("agent stopped");
}

}  // namespace profagent
