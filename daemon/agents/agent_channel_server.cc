#include "daemon/agents/agent_channel_server.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/mutex.h"
#include "daemon/log.h"
#include "profd/v1/agent_frame.h"

namespace profd {
namespace {

constexpr ConnectionId kListenTag = 1;
constexpr ConnectionId kWakeTag = 2;
// A connection's pidfd is in the epoll set as its id with this bit set.
constexpr uint64_t kPidfdTag = 1ull << 63;
constexpr char kComponent[] = "agent-channel";
// profd sends an agent a few small messages (hello ack, start and stop capture): a peer that
// lets this much pile up is not reading them.
constexpr size_t kMaxQueuedOutput = 256u << 10;
// Read at most this much from one connection before serving the others; epoll is
// level-triggered, so the rest comes back at the next turn.
constexpr size_t kReadSlice = 1u << 20;
// Agents cut event batches at ~1 MiB (agent/cupti/cupti_capture.cc) plus one record and its
// strings: a smaller capture frame would close real agents.
constexpr uint32_t kMinCaptureFrame = 2u << 20;

std::string FrameOf(const google::protobuf::MessageLite& message) {
  std::string frame(v1::kAgentFrameHeaderBytes, '\0');
  message.AppendToString(&frame);
  v1::EncodeFrameHeader(static_cast<uint32_t>(frame.size() - v1::kAgentFrameHeaderBytes),
                        reinterpret_cast<unsigned char*>(frame.data()));
  return frame;
}

absl::Status CheckOptions(const AgentChannelOptions& o) {
  if (o.max_frame_before_hello > o.max_frame_registered ||
      o.max_frame_registered > o.max_frame_capturing ||
      o.max_frame_capturing > v1::kMaxAgentFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("agent frame limits must grow with what a connection may send: "
                     "--agent_max_frame_before_hello (",
                     o.max_frame_before_hello, ") <= --agent_max_frame_registered (",
                     o.max_frame_registered, ") <= --agent_max_frame_capturing (",
                     o.max_frame_capturing, ") <= ", v1::kMaxAgentFrameBytes));
  }
  if (o.max_frame_before_hello < 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--agent_max_frame_before_hello is ", o.max_frame_before_hello,
                     " bytes: a hello with its devices needs up to 4096 (the default is 64KiB)"));
  }
  if (o.max_frame_capturing < kMinCaptureFrame) {
    return absl::InvalidArgumentError(
        absl::StrCat("--agent_max_frame_capturing is ", o.max_frame_capturing,
                     " bytes: agents send ~1MiB event ", "batches, so it must be at least ",
                     kMinCaptureFrame, " (the default is 4MiB)"));
  }
  if (o.max_buffered_bytes < o.max_frame_capturing) {
    return absl::InvalidArgumentError(
        absl::StrCat("--agent_max_buffered_bytes (", o.max_buffered_bytes,
                     ") must hold at least one frame of --agent_max_frame_capturing (",
                     o.max_frame_capturing, ")"));
  }
  if (o.max_backlog_bytes_per_connection == 0 || o.max_backlog_bytes == 0 ||
      o.max_connections == 0) {
    return absl::InvalidArgumentError(
        "--agent_max_backlog_bytes(_per_connection) and --agent_max_connections must be more "
        "than 0");
  }
  // Heartbeats alone must stay well under the message rate, or every agent is a flood.
  double heartbeats_per_second = 1.0 / absl::ToDoubleSeconds(o.heartbeat_interval);
  if (o.max_messages_per_second < 4 * heartbeats_per_second + 10) {
    return absl::InvalidArgumentError(
        absl::StrCat("--agent_max_messages_per_second is ", o.max_messages_per_second,
                     ": with --heartbeat_interval=", absl::FormatDuration(o.heartbeat_interval),
                     " it must be at least ", 4 * heartbeats_per_second + 10,
                     " or every agent would be closed as a flood"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* AgentRejectionLabel(AgentRejection rejection) {
  switch (rejection) {
    case AgentRejection::kMaxConnections:
      return "max_connections";
    case AgentRejection::kUidShare:
      return "uid_share";
    case AgentRejection::kNoIdentity:
      return "no_identity";
    case AgentRejection::kNoFileDescriptors:
      return "no_file_descriptors";
  }
  return "no_identity";
}

AgentChannelServer::AgentChannelServer(AgentChannelOptions options, AgentRegistry* registry)
    : options_(std::move(options)), registry_(registry) {}

AgentChannelServer::~AgentChannelServer() { Stop(); }

absl::Status AgentChannelServer::Start() {
  if (absl::Status s = CheckOptions(options_); !s.ok()) return s;
  sockaddr_un addr{};
  if (options_.socket_path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("agent socket path is longer than ",
                                                   sizeof(addr.sun_path) - 1,
                                                   " bytes: ", options_.socket_path));
  }
  // Each connection holds two descriptors (socket, pidfd). Agents get at most half of what profd
  // may open, so gRPC, /metrics, the store and the trace files always have the other half: with
  // 1024 open files, 1,100 idle agents once made gRPC's accept fail (issue 12).
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  const size_t fit = files.rlim_cur == RLIM_INFINITY ? options_.max_connections
                                                     : static_cast<size_t>(files.rlim_cur / 4);
  max_connections_ = std::max<size_t>(1, std::min(options_.max_connections, fit));
  // One uid may take three quarters: on Kubernetes every pod often runs as the same uid (root, or
  // 1000), so its share is the node's; the last quarter stays for everyone else.
  max_connections_per_uid_ = options_.max_connections_per_uid == 0
                                 ? std::max<size_t>(1, max_connections_ * 3 / 4)
                                 : std::min(options_.max_connections_per_uid, max_connections_);
  if (max_connections_ < options_.max_connections) {
    LogWarning(kComponent,
               "at most %u agent connections, not %u (--agent_max_connections): profd may open "
               "%u files (RLIMIT_NOFILE) and an agent takes two, from at most half of them; "
               "raise LimitNOFILE for more",
               max_connections_, options_.max_connections, files.rlim_cur);
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
  spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.u64 = kWakeTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  backlog_ = std::make_shared<PipelineBacklog>(options_.max_backlog_bytes_per_connection,
                                               options_.max_backlog_bytes);
  backlog_->set_wake([this] { Wake(); });
  thread_ = std::thread([this] { Run(); });
  LogInfo(kComponent, "listening for agents on %s (at most %u connections, %u per uid)",
          options_.socket_path, max_connections_, max_connections_per_uid_);
  return absl::OkStatus();
}

void AgentChannelServer::Stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  Wake();
  thread_.join();
  // Batches still queued in captures give their bytes back later: the wake fd is closing.
  backlog_->set_wake(nullptr);
  while (!connections_.empty()) {
    Close(connections_.begin()->first, "profd shutting down", std::nullopt);
  }
  close(listen_fd_);
  close(epoll_fd_);
  close(wake_fd_);
  if (spare_fd_ >= 0) close(spare_fd_);
  unlink(options_.socket_path.c_str());
}

void AgentChannelServer::Wake() {
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

bool AgentChannelServer::Send(ConnectionId connection, const v1::DaemonMessage& message) {
  std::string frame = FrameOf(message);
  {
    MutexLock lock(&outbox_mutex_);
    if (!live_.contains(connection)) return false;
    outbox_.emplace_back(connection, std::move(frame));
  }
  Wake();
  return true;
}

uint64_t AgentChannelServer::protocol_errors() const {
  uint64_t total = 0;
  for (const auto& n : closed_for_cause_) total += n.load();
  return total;
}

AgentChannelCounters AgentChannelServer::counters() const {
  AgentChannelCounters out;
  for (int i = 0; i < kAgentViolationCount; ++i) out.closed_for_cause[i] = closed_for_cause_[i];
  for (int i = 0; i < kAgentRejectionCount; ++i) out.rejected[i] = rejected_[i];
  out.connections = open_connections_.load();
  out.paused = paused_connections_.load();
  out.buffered_bytes = buffered_bytes_seen_.load();
  out.backlog_bytes = backlog_ != nullptr ? backlog_->total() : 0;
  return out;
}

void AgentChannelServer::Run() {
  epoll_event events[64];
  absl::Time next_reap = absl::Now() + absl::Seconds(1);
  while (!stop_.load()) {
    int n = epoll_wait(epoll_fd_, events, 64, 250);
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kListenTag) {
        Accept();
      } else if (tag == kWakeTag) {
        uint64_t drained;
        while (read(wake_fd_, &drained, sizeof(drained)) > 0) {
        }
      } else if (tag & kPidfdTag) {
        OnProcessExited(tag & ~kPidfdTag);
      } else {
        auto it = connections_.find(tag);
        if (it == connections_.end()) continue;
        if ((events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && it->second.reading()) {
          OnReadable(tag, it->second);
          it = connections_.find(tag);
          if (it == connections_.end()) continue;
        }
        if (events[i].events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) Flush(tag, it->second);
      }
    }
    DrainOutbox();
    ResumePaused();
    paused_connections_.store(buffer_waiters_.size() + backlog_paused_.size());
    buffered_bytes_seen_.store(buffered_bytes_);
    if (absl::Now() >= next_reap) {
      Reap();
      next_reap = absl::Now() + absl::Seconds(1);
    }
  }
}

void AgentChannelServer::Reject(AgentRejection rejection, const std::string& why) {
  rejected_[static_cast<int>(rejection)].fetch_add(1);
  refused_log_.Log(
      absl::StrCat("refused an agent connection (", AgentRejectionLabel(rejection), "): ", why));
}

void AgentChannelServer::Accept() {
  while (true) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if ((errno == EMFILE || errno == ENFILE) && spare_fd_ >= 0) {
        // Out of descriptors: the listener would stay readable and epoll would spin. Give up the
        // spare, take the connection off the backlog and close it, take the spare back.
        close(spare_fd_);
        int refused = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (refused >= 0) close(refused);
        spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
        Reject(AgentRejection::kNoFileDescriptors,
               "profd is out of file descriptors (raise LimitNOFILE, or lower "
               "--agent_max_connections)");
        if (refused >= 0 && spare_fd_ >= 0) continue;
      }
      return;  // EAGAIN: the backlog is empty
    }
    if (connections_.size() >= max_connections_) {
      close(fd);
      Reject(
          AgentRejection::kMaxConnections,
          absl::StrCat(max_connections_, " agent connections are open (--agent_max_connections)"));
      continue;
    }
    absl::StatusOr<std::shared_ptr<const PeerProcess>> peer = PeerProcess::OfSocket(fd);
    if (!peer.ok()) {
      close(fd);
      Reject(AgentRejection::kNoIdentity, std::string(peer.status().message()));
      continue;
    }
    const uid_t uid = (*peer)->uid();
    size_t& of_uid = connections_of_uid_[uid];
    if (of_uid >= max_connections_per_uid_) {
      close(fd);
      Reject(AgentRejection::kUidShare,
             absl::StrCat("uid ", uid, " (pid ", (*peer)->pid(), ") has ", of_uid,
                          " agent connections open already (--agent_max_connections_per_uid)"));
      continue;
    }
    ++of_uid;
    const ConnectionId id = next_id_++;
    const absl::Time now = absl::Now();
    Connection& c = connections_[id];
    c.fd = fd;
    c.peer = *std::move(peer);
    c.accepted = c.last_seen = c.tokens_at = now;
    c.tokens = options_.max_messages_per_second;
    open_connections_.fetch_add(1);
    UpdateInterest(id, c);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = id | kPidfdTag;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c.peer->pidfd(), &ev);
    MutexLock lock(&outbox_mutex_);
    live_.insert(id);
  }
}

void AgentChannelServer::OnReadable(ConnectionId id, Connection& c) {
  size_t budget = kReadSlice;
  while (budget > 0 && c.reading()) {
    if (c.frame == nullptr) {
      if (c.header_bytes < v1::kAgentFrameHeaderBytes) {
        ssize_t n = recv(c.fd, c.header + c.header_bytes,
                         v1::kAgentFrameHeaderBytes - c.header_bytes, MSG_DONTWAIT);
        if (!Received(id, c, n)) return;
        c.header_bytes += static_cast<size_t>(n);
        budget -= std::min(budget, static_cast<size_t>(n));
        if (c.header_bytes < v1::kAgentFrameHeaderBytes) continue;
      }
      if (!StartFrame(id, c)) return;  // closed, or waiting for room
    }
    if (c.frame_bytes < c.frame_length) {
      ssize_t n =
          recv(c.fd, c.frame.get() + c.frame_bytes, c.frame_length - c.frame_bytes, MSG_DONTWAIT);
      if (!Received(id, c, n)) return;
      c.frame_bytes += static_cast<size_t>(n);
      budget -= std::min(budget, static_cast<size_t>(n));
    }
    if (c.frame_bytes == c.frame_length) {
      std::unique_ptr<char[]> frame = std::move(c.frame);
      const uint32_t length = c.frame_length;
      c.header_bytes = c.frame_bytes = c.frame_length = 0;
      const bool open = HandleFrame(id, c, std::move(frame), length);
      // The buffer is out of the read buffers now: freed, or in its capture's backlog.
      buffered_bytes_ -= length;
      if (!open) return;
    }
  }
}

// Whether recv got bytes; otherwise the connection is closed (end, error) or has no more now.
bool AgentChannelServer::Received(ConnectionId id, Connection& c, ssize_t n) {
  if (n > 0) return true;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  if (n < 0) {
    Close(id, absl::StrCat("read failed: ", std::strerror(errno)), std::nullopt);
    return false;
  }
  // The peer closed (or half-closed with shutdown(SHUT_WR)); a partial frame is lost.
  const bool mid_frame = c.header_bytes > 0;
  if (c.registered) {
    Close(id, "agent disconnected", std::nullopt);
  } else if (mid_frame) {
    Close(id, "connection closed in the middle of a frame", AgentViolation::kMalformed);
  } else {
    Close(id, "connection closed before hello", std::nullopt);
  }
  return false;
}

// The length is known: check it against what this connection may send now, then take room for
// its buffer. False when the connection was closed or waits for room.
bool AgentChannelServer::StartFrame(ConnectionId id, Connection& c) {
  c.frame_length = v1::DecodeFrameHeader(c.header);
  uint32_t limit = options_.max_frame_before_hello;
  const char* flag = "--agent_max_frame_before_hello; a hello is a few hundred bytes";
  if (c.registered) {
    limit = options_.max_frame_registered;
    flag = "--agent_max_frame_registered; only the target of a running capture sends more";
    // The registry is asked only for large frames: it takes a lock.
    if (c.frame_length > limit && registry_->IsCapturing(id)) {
      limit = options_.max_frame_capturing;
      flag = "--agent_max_frame_capturing; agents cut event batches at ~1MiB";
    }
  }
  if (c.frame_length > limit) {
    Close(id,
          absl::StrCat("frame of ", c.frame_length, " bytes exceeds the ", limit, "-byte limit ",
                       c.registered ? "for this connection" : "before hello", " (", flag,
                       "): not a profd agent, or a corrupt stream"),
          AgentViolation::kFrameTooLarge);
    return false;
  }
  return TakeBufferRoom(id, c);
}

// Allocates the frame's buffer, at its length and once, if the read buffers have room for it;
// otherwise the connection stops being read until they do (first come, first served).
bool AgentChannelServer::TakeBufferRoom(ConnectionId id, Connection& c) {
  const bool first = buffer_waiters_.empty() || buffer_waiters_.front() == id;
  if (!first || buffered_bytes_ + c.frame_length > options_.max_buffered_bytes) {
    if (!c.waiting_for_buffer) {
      c.waiting_for_buffer = true;
      buffer_waiters_.push_back(id);
      UpdateInterest(id, c);
    }
    return false;
  }
  if (c.waiting_for_buffer) {
    buffer_waiters_.pop_front();
    c.waiting_for_buffer = false;
    c.last_seen = absl::Now();  // it was profd that was not listening
    UpdateInterest(id, c);
  }
  buffered_bytes_ += c.frame_length;
  c.frame = std::make_unique_for_overwrite<char[]>(c.frame_length);
  c.frame_bytes = 0;
  return true;
}

bool AgentChannelServer::TakeToken(Connection& c, absl::Time now) {
  const double rate = options_.max_messages_per_second;
  c.tokens = std::min(rate, c.tokens + rate * absl::ToDoubleSeconds(now - c.tokens_at));
  c.tokens_at = now;
  if (c.tokens < 1) return false;
  c.tokens -= 1;
  return true;
}

bool AgentChannelServer::HandleFrame(ConnectionId id, Connection& c, std::unique_ptr<char[]> frame,
                                     uint32_t length) {
  absl::StatusOr<CheckedAgentMessage> message =
      CheckAgentMessage(absl::string_view(frame.get(), length), options_.message_limits);
  if (!message.ok()) {
    Close(id, std::string(message.status().message()), ViolationOf(message.status()));
    return false;
  }
  const absl::Time now = absl::Now();
  c.last_seen = now;
  const uint32_t pid = static_cast<uint32_t>(c.peer->pid());
  if (!c.registered && message->kind != v1::AgentMessage::kHello) {
    Close(id, "first message was not a hello", AgentViolation::kNoHello);
    return false;
  }
  // Event batches of a running capture come as fast as the process makes them; their flow is
  // bounded by the backlog. Everything else is a few messages a second.
  const bool capture_data =
      message->kind == v1::AgentMessage::kEvents && registry_->IsCapturing(id);
  if (!capture_data && !TakeToken(c, now)) {
    Close(id,
          absl::StrCat("more than ", options_.max_messages_per_second,
                       " messages a second (--agent_max_messages_per_second)"),
          AgentViolation::kFlood);
    return false;
  }
  switch (message->kind) {
    case v1::AgentMessage::kHello: {
      if (c.registered) {
        Close(id, "second hello on one connection", AgentViolation::kNoHello);
        return false;
      }
      absl::StatusOr<AgentRegistry::Registered> registered =
          registry_->Register(id, c.peer, message->hello, now);
      if (!registered.ok()) {
        Close(id, absl::StrCat("not registered: ", registered.status().message()), std::nullopt);
        return false;
      }
      c.registered = true;
      lifecycle_log_.Log(absl::StrFormat(
          "agent registered: pid %u (%s, uid %u, agent %s, %d GPU(s))%s", pid, registered->comm,
          c.peer->uid(), message->hello.agent_version(), message->hello.devices_size(),
          registered->pod_conflict.empty() ? "" : "; " + registered->pod_conflict));
      // One live agent per process: the newer connection is the one the process uses now (an
      // agent that reconnects), the older one is stale.
      if (registered->replaces) {
        Close(*registered->replaces, "replaced by a newer connection from the same process",
              std::nullopt);
      }
      v1::DaemonMessage ack;
      ack.mutable_hello_ack()->set_daemon_version(PROFD_VERSION);
      ack.mutable_hello_ack()->set_heartbeat_interval_ms(
          absl::ToInt64Milliseconds(options_.heartbeat_interval));
      c.out += FrameOf(ack);
      return Flush(id, c);
    }
    case v1::AgentMessage::kHeartbeat:
      registry_->Heartbeat(id, message->heartbeat, now);
      return true;
    case v1::AgentMessage::kCaptureStatus:
      if (sink_) sink_->OnCaptureStatus(id, pid, message->status);
      return true;
    case v1::AgentMessage::kEvents:
      if (sink_ && capture_data) {
        sink_->OnEventBatch(
            id, pid,
            AgentEventBatch(std::move(frame), length, message->batch,
                            std::move(message->capture_id), message->batch_records, backlog_, id));
      }
      if (backlog_->Full(id)) {
        if (!c.backlog_logged) {
          c.backlog_logged = true;
          LogInfo(kComponent,
                  "not reading pid %u until its capture catches up: its event batches waiting "
                  "to be written reached --agent_max_backlog_bytes_per_connection (%u bytes) or "
                  "all agents' reached --agent_max_backlog_bytes (%u)",
                  pid, options_.max_backlog_bytes_per_connection, options_.max_backlog_bytes);
        }
        c.backlog_full = true;
        backlog_paused_.insert(id);
        UpdateInterest(id, c);
      }
      return true;
    case v1::AgentMessage::BODY_NOT_SET:
      break;
  }
  return true;
}

// The process that connected has exited. If its socket is closed everywhere (POLLHUP), what it
// sent before is still read to the end. If another process still holds the socket (a child it
// forked, or one it passed the descriptor to), the connection is closed now: whatever comes from
// it can no longer be attributed to a process, and its pid may soon be someone else's.
void AgentChannelServer::OnProcessExited(ConnectionId id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  // The pidfd stays readable (level-triggered): one notice is all it has to say.
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.peer->pidfd(), nullptr);
  pollfd p{c.fd, POLLIN | POLLRDHUP, 0};
  poll(&p, 1, 0);
  if (p.revents & POLLHUP) return;
  const pid_t pid = c.peer->pid();
  Close(id,
        absl::StrCat("process ", pid,
                     " exited but its agent connection is still open in another process (a child, "
                     "or one it passed the socket to): closed, so that nothing can speak for pid ",
                     pid, " once it is reused"),
        AgentViolation::kPeerExited);
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
    Close(id, absl::StrCat("write failed: ", std::strerror(errno)), std::nullopt);
    return false;
  }
  if (c.out_offset == c.out.size()) {
    c.out.clear();
    c.out_offset = 0;
  } else if (c.out.size() - c.out_offset > kMaxQueuedOutput) {
    Close(id, "agent is not reading its messages", AgentViolation::kNotReading);
    return false;
  }
  UpdateInterest(id, c);
  return true;
}

// epoll watches what the connection needs now: input while profd reads it, output while some is
// queued. A connection profd does not read and has nothing to send is out of the set, so a peer
// that hangs up meanwhile does not make epoll spin.
void AgentChannelServer::UpdateInterest(ConnectionId id, Connection& c) {
  uint32_t want = 0;
  if (c.reading()) want |= EPOLLIN;
  if (c.out_offset < c.out.size()) want |= EPOLLOUT;
  if (want == c.epoll_events) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = id;
  const int op = want == 0 ? EPOLL_CTL_DEL : c.epoll_events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  epoll_ctl(epoll_fd_, op, c.fd, &ev);
  c.epoll_events = want;
}

void AgentChannelServer::DrainOutbox() {
  std::vector<std::pair<ConnectionId, std::string>> pending;
  {
    MutexLock lock(&outbox_mutex_);
    pending.swap(outbox_);
  }
  for (auto& [id, frame] : pending) {
    auto it = connections_.find(id);
    if (it == connections_.end()) continue;
    it->second.out += frame;
    Flush(id, it->second);
  }
}

void AgentChannelServer::ResumePaused() {
  // Room in the read buffers, in the order the connections asked for it.
  while (!buffer_waiters_.empty()) {
    auto it = connections_.find(buffer_waiters_.front());
    if (it == connections_.end()) {
      buffer_waiters_.pop_front();
      continue;
    }
    if (!TakeBufferRoom(it->first, it->second)) break;
  }
  // Captures that have caught up with their connections.
  for (auto id_it = backlog_paused_.begin(); id_it != backlog_paused_.end();) {
    auto it = connections_.find(*id_it);
    if (it == connections_.end() || !backlog_->Full(*id_it)) {
      if (it != connections_.end()) {
        it->second.backlog_full = false;
        it->second.last_seen = absl::Now();  // it was profd that was not listening
        UpdateInterest(it->first, it->second);
      }
      id_it = backlog_paused_.erase(id_it);
    } else {
      ++id_it;
    }
  }
}

void AgentChannelServer::Close(ConnectionId id, const std::string& reason,
                               std::optional<AgentViolation> violation) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  const pid_t pid = c.peer->pid();
  if (violation) {
    closed_for_cause_[static_cast<int>(*violation)].fetch_add(1);
    closed_log_.Log(absl::StrCat("closing connection from pid ", pid, " (uid ", c.peer->uid(),
                                 "): ", reason, " [", AgentViolationLabel(*violation), "]"));
  } else if (c.registered) {
    lifecycle_log_.Log(absl::StrCat("agent pid ", pid, " gone: ", reason));
  }
  if (c.epoll_events != 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.peer->pidfd(), nullptr);  // ENOENT after an exit: fine
  close(c.fd);
  if (c.frame != nullptr) buffered_bytes_ -= c.frame_length;
  if (c.waiting_for_buffer) std::erase(buffer_waiters_, id);
  backlog_paused_.erase(id);
  auto of_uid = connections_of_uid_.find(c.peer->uid());
  if (of_uid != connections_of_uid_.end() && --of_uid->second == 0) {
    connections_of_uid_.erase(of_uid);
  }
  if (c.registered) {
    registry_->Unregister(id);
    if (sink_) sink_->OnAgentGone(id, static_cast<uint32_t>(pid));
  }
  connections_.erase(it);
  open_connections_.fetch_sub(1);
  MutexLock lock(&outbox_mutex_);
  live_.erase(id);
}

void AgentChannelServer::Reap() {
  const absl::Time now = absl::Now();
  closed_log_.Summarize(now);
  refused_log_.Summarize(now);
  lifecycle_log_.Summarize(now);
  std::vector<std::pair<ConnectionId, bool>> late;  // id, registered
  for (const auto& [id, c] : connections_) {
    if (!c.reading()) continue;  // profd is not reading it: its silence is profd's
    if (!c.registered && now - c.accepted > options_.hello_timeout) late.emplace_back(id, false);
    if (c.registered && now - c.last_seen > options_.agent_timeout) late.emplace_back(id, true);
  }
  for (const auto& [id, registered] : late) {
    if (registered) {
      Close(id,
            absl::StrCat("no message for ", absl::FormatDuration(options_.agent_timeout),
                         " (missed heartbeats)"),
            std::nullopt);
    } else {
      Close(id,
            absl::StrCat("no hello within ", absl::FormatDuration(options_.hello_timeout),
                         " of connecting (--agent_hello_timeout)"),
            AgentViolation::kNoHello);
    }
  }
}

}  // namespace profd
