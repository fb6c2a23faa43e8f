#include "daemon/kineto/kineto_ipc_server.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/mutex.h"
#include "daemon/kineto/kineto_wire.h"
#include "daemon/log.h"

namespace profd::kineto {
namespace {

constexpr char kComponent[] = "kineto-ipc";
// Kineto's polls are 76 bytes; anything near this is not Kineto.
constexpr size_t kMaxDatagramBytes = 4096;
// Datagrams read per wake-up before the loop looks at expiries again.
constexpr int kMaxDatagramsPerWake = 256;

}  // namespace

KinetoIpcServer::KinetoIpcServer(KinetoIpcOptions options) : options_(std::move(options)) {
  socket_path_ = options_.socket_dir + "/" + kDaemonEndpoint;
}

KinetoIpcServer::~KinetoIpcServer() { Stop(); }

absl::Status KinetoIpcServer::Start() {
  sockaddr_un addr{};
  if (socket_path_.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("Kineto socket path ", socket_path_,
                                                   " is longer than ", sizeof(addr.sun_path) - 1,
                                                   " bytes: choose a shorter --kineto_socket_dir"));
  }
  std::error_code ec;
  std::filesystem::create_directories(options_.socket_dir, ec);
  struct stat st;
  if (lstat(options_.socket_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--kineto_socket_dir=", options_.socket_dir, " is not a folder (",
                     ec ? ec.message() : "a symbolic link or a file", ")"));
  }
  // Every process binds its own endpoint in this folder, whatever its uid: world-writable, and
  // sticky so that no one can remove another's socket (or profd's).
  chmod(options_.socket_dir.c_str(), 01777);
  // Replies are sent to names inside this very folder, whatever its path comes to mean later.
  dir_fd_ = open(options_.socket_dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd_ < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot open --kineto_socket_dir=", options_.socket_dir, ": ", std::strerror(errno)));
  }
  // Anything already at the daemon's name is stale (an earlier profd) or planted: it goes.
  unlink(socket_path_.c_str());
  fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(fd_);
    fd_ = -1;
    return absl::UnavailableError(
        absl::StrCat("cannot bind the Kineto socket ", socket_path_, ": ", std::strerror(err)));
  }
  chmod(socket_path_.c_str(), 0666);  // processes of any user send to it
  // The kernel then attaches the sender's real pid/uid to every datagram.
  int on = 1;
  setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on));
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  thread_ = std::thread([this] { Run(); });
  LogInfo(kComponent,
          "serving Kineto's daemon protocol on %s (processes: KINETO_USE_DAEMON=1 "
          "KINETO_IPC_SOCKET_DIR=%s)",
          socket_path_, options_.socket_dir);
  return absl::OkStatus();
}

void KinetoIpcServer::Stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
  thread_.join();
  close(fd_);
  close(wake_fd_);
  close(dir_fd_);
  dir_fd_ = -1;
  unlink(socket_path_.c_str());
  std::map<uint32_t, Offer> offers;
  {
    MutexLock lock(&mutex_);
    offers.swap(offers_);
  }
  for (auto& [pid, offer] : offers) {
    if (offer.on_expired) offer.on_expired();
  }
}

namespace {
bool Alive(const KinetoClient& c) { return !c.process->Exited(); }
}  // namespace

absl::Status KinetoIpcServer::Make(uint32_t pid, Offer offer) {
  MutexLock lock(&mutex_);
  auto it = clients_.find(pid);
  if (it == clients_.end() || !Alive(it->second)) {
    return absl::NotFoundError(
        absl::StrCat("pid ", pid, " has not polled profd's Kineto socket ", socket_path_));
  }
  offers_[pid] = std::move(offer);
  return absl::OkStatus();
}

bool KinetoIpcServer::Withdraw(uint32_t pid) {
  MutexLock lock(&mutex_);
  return offers_.erase(pid) > 0;
}

std::optional<KinetoClient> KinetoIpcServer::Find(uint32_t pid) const {
  MutexLock lock(&mutex_);
  auto it = clients_.find(pid);
  if (it == clients_.end() || !Alive(it->second)) return std::nullopt;
  return it->second;
}

std::vector<KinetoClient> KinetoIpcServer::Clients() const {
  MutexLock lock(&mutex_);
  std::vector<KinetoClient> out;
  out.reserve(clients_.size());
  for (const auto& [pid, client] : clients_) {
    if (Alive(client)) out.push_back(client);
  }
  return out;
}

void KinetoIpcServer::Run() {
  char buf[kMaxDatagramBytes];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
  pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (!stop_.load()) {
    poll(fds, 2, 250);
    for (int i = 0; i < kMaxDatagramsPerWake; ++i) {
      sockaddr_un from{};
      iovec iov{buf, sizeof(buf)};
      msghdr msg{};
      msg.msg_name = &from;
      msg.msg_namelen = sizeof(from);
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      ssize_t n = recvmsg(fd_, &msg, MSG_DONTWAIT | MSG_TRUNC);
      if (n < 0) break;
      const ucred* cred = nullptr;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
          cred = reinterpret_cast<const ucred*>(CMSG_DATA(c));
        }
      }
      const size_t path_len =
          msg.msg_namelen > offsetof(sockaddr_un, sun_path)
              ? strnlen(from.sun_path, msg.msg_namelen - offsetof(sockaddr_un, sun_path))
              : 0;
      const std::string endpoint(from.sun_path, path_len);
      if (cred == nullptr || cred->pid <= 0 || static_cast<size_t>(n) > sizeof(buf)) {
        protocol_errors_.fetch_add(1);
        continue;
      }
      // Kineto binds <dir>/dynoconfigclient<uuid>: one name in the folder. Anything else (outside
      // the folder, in a folder a process made inside it, "..") is not a Kineto of this folder
      // (Kineto ends the process on a reply from elsewhere) and is never answered.
      const std::string prefix = options_.socket_dir + "/";
      const std::string name = endpoint.rfind(prefix, 0) == 0 ? endpoint.substr(prefix.size()) : "";
      if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
        protocol_errors_.fetch_add(1);
        refused_log_.Log(absl::StrCat("not answering pid ", cred->pid, " (uid ", cred->uid,
                                      "): it sends from ",
                                      endpoint.empty() ? "an unnamed socket" : endpoint,
                                      ", not from a socket of its own in ", options_.socket_dir));
        continue;
      }
      OnDatagram(std::string_view(buf, static_cast<size_t>(n)), static_cast<uint32_t>(cred->pid),
                 cred->uid, endpoint, absl::Now());
    }
    uint64_t drained;
    while (read(wake_fd_, &drained, sizeof(drained)) > 0) {
    }
    Expire(absl::Now());
    refused_log_.Summarize(absl::Now());
    clients_log_.Summarize(absl::Now());
  }
}

void KinetoIpcServer::OnDatagram(std::string_view bytes, uint32_t pid, uint32_t uid,
                                 const std::string& endpoint, absl::Time now) {
  absl::StatusOr<KinetoDatagram> datagram = DecodeKinetoDatagram(bytes);
  std::optional<Offer> deliver;
  int endpoint_fd = -1;
  KinetoClient client;
  {
    MutexLock lock(&mutex_);
    Rate& rate = rates_[pid];
    if (now - rate.window_start >= absl::Seconds(1)) rate = Rate{now, 0};
    if (++rate.count > options_.max_polls_per_second) {
      protocol_errors_.fetch_add(1);
      return;
    }
    if (!datagram.ok()) {
      protocol_errors_.fetch_add(1);
      if (rate.count == 1) {
        refused_log_.Log(
            absl::StrCat("dropped a datagram from pid ", pid, ": ", datagram.status().message()));
      }
      return;
    }
    if (!datagram->is_request) return;
    auto it = clients_.find(pid);
    if (it != clients_.end() && !Alive(it->second)) {
      // The pid now belongs to another process: what was offered to the old one is not its.
      offers_.erase(pid);
      clients_.erase(it);
      it = clients_.end();
    }
    if (it == clients_.end()) {
      if (clients_.size() >= options_.max_clients) {
        auto oldest = clients_.begin();
        for (auto c = clients_.begin(); c != clients_.end(); ++c) {
          if (c->second.last_poll < oldest->second.last_poll) oldest = c;
        }
        offers_.erase(oldest->first);
        clients_.erase(oldest);
      }
      // Pinned now, or not served: a sender that has already exited has nothing to trace.
      absl::StatusOr<std::shared_ptr<const PeerProcess>> process =
          PeerProcess::OfPid(static_cast<pid_t>(pid), uid, PeerProcess::BootTicksNow());
      if (!process.ok()) return;
      it = clients_.emplace(pid, KinetoClient{}).first;
      it->second.pid = pid;
      it->second.first_poll = now;
      it->second.process = *std::move(process);
      clients_log_.Log(absl::StrCat("Kineto in pid ", pid, " (pid ", datagram->request.pids[0],
                                    " in its namespace) polls for traces"));
    } else {
      it->second.poll_period = now - it->second.last_poll;
    }
    KinetoClient& c = it->second;
    c.uid = uid;
    c.ns_pid = datagram->request.pids[0];
    c.job_id = datagram->request.job_id;
    c.endpoint = endpoint;
    c.last_poll = now;
    ++c.polls;
    c.busy = datagram->request.type == 0;
    client = c;
    auto offer = offers_.find(pid);
    if (offer != offers_.end() && (datagram->request.type & kRequestActivities) != 0) {
      // Checked before the offer is taken: a refused endpoint leaves it for the process's next
      // poll from its own socket, or to expire as if it had never polled.
      absl::StatusOr<int> opened =
          OpenEndpoint(endpoint.substr(options_.socket_dir.size() + 1), uid);
      if (!opened.ok()) {
        protocol_errors_.fetch_add(1);
        refused_log_.Log(absl::StrCat("not answering pid ", pid, " (uid ", uid, ") at ", endpoint,
                                      ": ", opened.status().message()));
        return;
      }
      endpoint_fd = *opened;
      deliver = std::move(offer->second);
      offers_.erase(offer);
    }
  }
  if (!deliver) return;
  Reply(endpoint_fd, endpoint, deliver->config(now));
  if (deliver->on_delivered) deliver->on_delivered(client, now);
}

absl::StatusOr<int> KinetoIpcServer::OpenEndpoint(const std::string& name, uint32_t uid) const {
  // O_PATH | O_NOFOLLOW opens a symbolic link itself, never what it points to.
  const int fd = openat(dir_fd_, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open it: ", std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("fstat: ", std::strerror(err)));
  }
  if (!S_ISSOCK(st.st_mode)) {
    close(fd);
    return absl::PermissionDeniedError(
        S_ISLNK(st.st_mode) ? "it is a symbolic link now, not the socket it sent from"
                            : "it is not a socket");
  }
  if (st.st_uid != uid) {
    close(fd);
    return absl::PermissionDeniedError(absl::StrCat("the socket there belongs to uid ", st.st_uid,
                                                    ", not to the sender's uid ", uid));
  }
  return fd;
}

void KinetoIpcServer::Reply(int endpoint_fd, const std::string& endpoint,
                            const std::string& config) {
  const std::string bytes = EncodeKinetoMessage("req", config);
  // The socket checked in OpenEndpoint, through its descriptor: the kernel resolves
  // /proc/self/fd/N to that very inode, so nothing put at the name since is reached.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = absl::StrCat("/proc/self/fd/", endpoint_fd);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  // Never blocks: a client whose queue is full misses this reply and gets the config again only
  // if it is offered again.
  if (sendto(fd_, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
             reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
    refused_log_.Log(absl::StrCat("cannot answer ", endpoint, ": ", std::strerror(errno)));
  }
  close(endpoint_fd);
}

void KinetoIpcServer::Expire(absl::Time now) {
  std::vector<Offer> expired;
  {
    MutexLock lock(&mutex_);
    for (auto it = offers_.begin(); it != offers_.end();) {
      if (it->second.expires < now) {
        expired.push_back(std::move(it->second));
        it = offers_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = clients_.begin(); it != clients_.end();) {
      if (now - it->second.last_poll > options_.client_timeout || !Alive(it->second)) {
        it = clients_.erase(it);
      } else {
        ++it;
      }
    }
    // One entry per sending process, also for those that only ever sent garbage.
    for (auto it = rates_.begin(); it != rates_.end();) {
      it = now - it->second.window_start > absl::Seconds(2) ? rates_.erase(it) : std::next(it);
    }
  }
  for (Offer& offer : expired) {
    if (offer.on_expired) offer.on_expired();
  }
}

}  // namespace profd::kineto
