#include "daemon/agents/agent_channel_server.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/log.h"
#include "profd/v1/agent_frame.h"

namespace profd {
namespace {

constexpr ConnectionId kListenTag = 1;
constexpr ConnectionId kWakeTag = 2;
constexpr char kComponent[] = "agent-channel";
// A peer that does not read what we send is cut off past this much queued output.
constexpr size_t kMaxQueuedOutput = 4u << 20;

}  // namespace

AgentChannelServer::AgentChannelServer(AgentChannelOptions options, AgentRegistry* registry)
    : options_(std::move(options)), registry_(registry) {}

AgentChannelServer::~AgentChannelServer() { Stop(); }

absl::Status AgentChannelServer::Start() {
  sockaddr_un addr{};
  if (options_.socket_path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("agent socket path is longer than ",
                                                   sizeof(addr.sun_path) - 1,
                                                   " bytes: ", options_.socket_path));
  }
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::path(options_.socket_path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  // A socket file left by a previous profd blocks bind; anything else at that path is not ours.
  struct stat st;
  if (lstat(options_.socket_path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          options_.socket_path, " exists and is not a socket; choose another --agent_socket"));
    }
    unlink(options_.socket_path.c_str());
  }
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, options_.socket_path.c_str(), options_.socket_path.size() + 1);
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot bind agent socket ", options_.socket_path,
                                               ": ", std::strerror(errno)));
  }
  chmod(options_.socket_path.c_str(), options_.socket_mode);
  if (listen(listen_fd_, 128) != 0) {
    return absl::InternalError(absl::StrCat("listen: ", std::strerror(errno)));
  }
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.u64 = kWakeTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  thread_ = std::thread([this] { Run(); });
  LogInfo(kComponent, "listening for agents on %s", options_.socket_path);
  return absl::OkStatus();
}

void AgentChannelServer::Stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
  thread_.join();
  while (!connections_.empty()) Close(connections_.begin()->first, "profd shutting down", false);
  close(listen_fd_);
  close(epoll_fd_);
  close(wake_fd_);
  unlink(options_.socket_path.c_str());
}

bool AgentChannelServer::Send(ConnectionId connection, const v1::DaemonMessage& message) {
  std::string frame(profd::v1::kAgentFrameHeaderBytes, '\0');
  message.AppendToString(&frame);
  profd::v1::EncodeFrameHeader(static_cast<uint32_t>(frame.size() - v1::kAgentFrameHeaderBytes),
                               reinterpret_cast<unsigned char*>(frame.data()));
  {
    absl::MutexLock lock(&outbox_mutex_);
    if (!live_.contains(connection)) return false;
    outbox_.emplace_back(connection, std::move(frame));
  }
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
  return true;
}

void AgentChannelServer::Run() {
  epoll_event events[64];
  absl::Time next_reap = absl::Now() + absl::Seconds(1);
  while (!stop_.load()) {
    int n = epoll_wait(epoll_fd_, events, 64, 500);
    for (int i = 0; i < n; ++i) {
      ConnectionId tag = events[i].data.u64;
      if (tag == kListenTag) {
        Accept();
      } else if (tag == kWakeTag) {
        uint64_t drained;
        while (read(wake_fd_, &drained, sizeof(drained)) > 0) {
        }
      } else {
        auto it = connections_.find(tag);
        if (it == connections_.end()) continue;
        if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
          OnReadable(tag, it->second);
          it = connections_.find(tag);
          if (it == connections_.end()) continue;
        }
        if (events[i].events & EPOLLOUT) Flush(tag, it->second);
      }
    }
    DrainOutbox();
    if (absl::Now() >= next_reap) {
      ReapSilent();
      next_reap = absl::Now() + absl::Seconds(1);
    }
  }
}

void AgentChannelServer::Accept() {
  while (true) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.pid <= 0) {
      LogWarning(kComponent, "rejecting a connection whose peer credentials cannot be read");
      close(fd);
      continue;
    }
    ConnectionId id = next_id_++;
    Connection& c = connections_[id];
    c.fd = fd;
    c.pid = static_cast<uint32_t>(cred.pid);
    c.uid = cred.uid;
    c.last_seen = absl::Now();
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = id;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    absl::MutexLock lock(&outbox_mutex_);
    live_[id] = true;
  }
}

void AgentChannelServer::OnReadable(ConnectionId id, Connection& c) {
  char buf[64 * 1024];
  while (true) {
    ssize_t n = recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      if (c.in.size() < sizeof(buf)) continue;
      break;  // parse what we have before reading more: bounds memory per connection
    }
    if (n == 0) {
      // A peer that half-closes (shutdown(SHUT_WR)) or exits lands here; a partial frame is lost.
      Close(id,
            c.registered   ? "agent disconnected"
            : c.in.empty() ? "connection closed before hello"
                           : "connection closed in the middle of a frame",
            !c.registered && !c.in.empty());
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    Close(id, absl::StrCat("read failed: ", std::strerror(errno)), false);
    return;
  }
  size_t pos = 0;
  while (c.in.size() - pos >= v1::kAgentFrameHeaderBytes) {
    uint32_t length =
        v1::DecodeFrameHeader(reinterpret_cast<const unsigned char*>(c.in.data() + pos));
    if (length > options_.max_frame_bytes) {
      Close(id,
            absl::StrCat("frame of ", length, " bytes exceeds the ", options_.max_frame_bytes,
                         "-byte limit (not a profd agent, or a corrupt stream)"),
            true);
      return;
    }
    if (c.in.size() - pos - v1::kAgentFrameHeaderBytes < length) break;
    if (!HandleFrame(id, c,
                     std::string_view(c.in).substr(pos + v1::kAgentFrameHeaderBytes, length))) {
      return;  // closed
    }
    pos += v1::kAgentFrameHeaderBytes + length;
  }
  c.in.erase(0, pos);
  // More may be waiting if we stopped reading early; epoll is level-triggered, so it comes back.
}

bool AgentChannelServer::HandleFrame(ConnectionId id, Connection& c, std::string_view frame) {
  v1::AgentMessage message;
  if (!message.ParseFromArray(frame.data(), static_cast<int>(frame.size())) ||
      message.body_case() == v1::AgentMessage::BODY_NOT_SET) {
    Close(id, absl::StrCat("malformed message of ", frame.size(), " bytes"), true);
    return false;
  }
  absl::Time now = absl::Now();
  c.last_seen = now;
  if (!c.registered && message.body_case() != v1::AgentMessage::kHello) {
    Close(id, "first message was not a hello", true);
    return false;
  }
  switch (message.body_case()) {
    case v1::AgentMessage::kHello: {
      if (c.registered) {
        Close(id, "second hello on one connection", true);
        return false;
      }
      c.registered = true;
      registry_->Register(id, c.pid, c.uid, message.hello(), now);
      LogInfo(kComponent, "agent registered: pid %u (agent %s, %d GPU(s))", c.pid,
              message.hello().agent_version(), message.hello().devices_size());
      v1::DaemonMessage ack;
      ack.mutable_hello_ack()->set_daemon_version(PROFD_VERSION);
      ack.mutable_hello_ack()->set_heartbeat_interval_ms(
          static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval)));
      std::string out(v1::kAgentFrameHeaderBytes, '\0');
      ack.AppendToString(&out);
      v1::EncodeFrameHeader(static_cast<uint32_t>(out.size() - v1::kAgentFrameHeaderBytes),
                            reinterpret_cast<unsigned char*>(out.data()));
      c.out += out;
      return Flush(id, c);
    }
    case v1::AgentMessage::kHeartbeat:
      registry_->Heartbeat(id, message.heartbeat(), now);
      return true;
    case v1::AgentMessage::kCaptureStatus:
      if (sink_) sink_->OnCaptureStatus(id, c.pid, message.capture_status());
      return true;
    case v1::AgentMessage::kEvents:
      if (sink_) sink_->OnEventBatch(id, c.pid, std::move(*message.mutable_events()));
      return true;
    case v1::AgentMessage::BODY_NOT_SET:
      break;
  }
  return true;
}

bool AgentChannelServer::Flush(ConnectionId id, Connection& c) {
  while (c.out_offset < c.out.size()) {
    ssize_t n = send(c.fd, c.out.data() + c.out_offset, c.out.size() - c.out_offset,
                     MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      c.out_offset += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    Close(id, absl::StrCat("write failed: ", std::strerror(errno)), false);
    return false;
  }
  if (c.out_offset == c.out.size()) {
    c.out.clear();
    c.out_offset = 0;
  } else if (c.out.size() - c.out_offset > kMaxQueuedOutput) {
    Close(id, "agent is not reading its messages", true);
    return false;
  }
  UpdateInterest(id, c);
  return true;
}

void AgentChannelServer::UpdateInterest(ConnectionId id, Connection& c) {
  bool want_write = c.out_offset < c.out.size();
  if (want_write == c.want_write) return;
  c.want_write = want_write;
  epoll_event ev{};
  ev.events = want_write ? (EPOLLIN | EPOLLOUT) : EPOLLIN;
  ev.data.u64 = id;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
}

void AgentChannelServer::DrainOutbox() {
  std::vector<std::pair<ConnectionId, std::string>> pending;
  {
    absl::MutexLock lock(&outbox_mutex_);
    pending.swap(outbox_);
  }
  for (auto& [id, frame] : pending) {
    auto it = connections_.find(id);
    if (it == connections_.end()) continue;
    it->second.out += frame;
    Flush(id, it->second);
  }
}

void AgentChannelServer::Close(ConnectionId id, const std::string& reason, bool protocol_error) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  if (protocol_error) {
    protocol_errors_.fetch_add(1);
    LogWarning(kComponent, "closing connection from pid %u: %s", c.pid, reason);
  } else if (c.registered) {
    LogInfo(kComponent, "agent pid %u gone: %s", c.pid, reason);
  }
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  close(c.fd);
  if (c.registered) {
    registry_->Unregister(id);
    if (sink_) sink_->OnAgentGone(id, c.pid);
  }
  connections_.erase(it);
  absl::MutexLock lock(&outbox_mutex_);
  live_.erase(id);
}

void AgentChannelServer::ReapSilent() {
  absl::Time cutoff = absl::Now() - options_.agent_timeout;
  std::vector<ConnectionId> silent;
  for (const auto& [id, c] : connections_) {
    if (c.last_seen < cutoff) silent.push_back(id);
  }
  for (ConnectionId id : silent) {
    Close(id,
          absl::StrCat("no message for ", absl::FormatDuration(options_.agent_timeout),
                       connections_[id].registered ? " (missed heartbeats)" : " (no hello)"),
          !connections_[id].registered);
  }
}

}  // namespace profd
