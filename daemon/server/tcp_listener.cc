#include "daemon/server/tcp_listener.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace profd {
namespace {

constexpr char kComponent[] = "grpc-tcp";
// A TLS record: type (22 = handshake), version (2 bytes), length (2 bytes), then the body, at
// most 2^14 bytes plus what compression or encryption may add (RFC 8446 5.1, RFC 5246 6.2.3).
constexpr unsigned char kTlsHandshake = 22;
constexpr size_t kTlsHeaderBytes = 5;
constexpr size_t kTlsMaxRecordBytes = (1u << 14) + 2048;

// host:port, [v6]:port or :port into its two parts; false when it is none of them.
bool SplitAddress(const std::string& address, std::string* host, std::string* port) {
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find("]:");
    if (close == std::string::npos) return false;
    *host = address.substr(1, close - 1);
    *port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos || address.find(':') != colon) return false;
    *host = address.substr(0, colon);
    *port = address.substr(colon + 1);
  }
  int number;
  return absl::SimpleAtoi(*port, &number) && number >= 0 && number <= 65535;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpListener>> TcpListener::Listen(TcpListenerOptions options) {
  std::string host, port;
  if (!SplitAddress(options.address, &host, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grpc_address=", options.address,
                     " is not HOST:PORT (0.0.0.0:7465, [::]:7465, node17:7465, :7465)"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  // No AI_ADDRCONFIG: it hides [::] on hosts whose only IPv6 address is ::1.
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--grpc_address=", options.address, ": cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  std::vector<addrinfo*> addresses;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) addresses.push_back(a);
  std::vector<int> fds;
  int bound_port = 0;
  std::string error;
  for (addrinfo* a : addresses) {
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (a->ai_family == AF_INET6) {
      // [::] alone serves IPv4 too, as gRPC's listener does; beside 0.0.0.0 it must not.
      int v6only = addresses.size() > 1 ? 1 : 0;
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
    }
    // Port 0: the kernel picks one for the first address, the others take the same.
    if (bound_port != 0) {
      if (a->ai_family == AF_INET) {
        reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_port = htons(bound_port);
      } else if (a->ai_family == AF_INET6) {
        reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_port = htons(bound_port);
      }
    }
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
      error = std::strerror(errno);
      close(fd);
      continue;
    }
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length);
    bound_port =
        ntohs(local.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&local)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&local)->sin_port);
    fds.push_back(fd);
  }
  freeaddrinfo(found);
  if (fds.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.address, ": ",
                                               error.empty() ? "no address" : error,
                                               " (in use, or not permitted)"));
  }
  return std::unique_ptr<TcpListener>(new TcpListener(std::move(options), fds, bound_port));
}

TcpListener::TcpListener(TcpListenerOptions options, std::vector<int> listen_fds, int port)
    : options_(std::move(options)), listen_fds_(std::move(listen_fds)), port_(port) {
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  max_pending_ = options_.max_pending;
  if (files.rlim_cur != RLIM_INFINITY) {
    max_pending_ = std::min<size_t>(max_pending_, std::max<rlim_t>(1, files.rlim_cur / 8));
  }
  max_pending_ = std::max<size_t>(1, max_pending_);
  if (max_pending_ < options_.max_pending) {
    LogWarning(kComponent,
               "at most %u TCP connections waiting for TLS, not %u "
               "(--grpc_max_pending_connections): profd may open %u files (RLIMIT_NOFILE) and "
               "they get an eighth",
               max_pending_, options_.max_pending, files.rlim_cur);
  }
}

TcpListener::~TcpListener() {
  Stop();
  for (int fd : listen_fds_) close(fd);
}

void TcpListener::Start(std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor) {
  acceptor_ = std::move(acceptor);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  for (int fd : listen_fds_) {
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  thread_ = std::thread([this] { Run(); });
}

void TcpListener::Stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
  thread_.join();
  for (const auto& [fd, held] : held_) close(fd);
  held_.clear();
  by_age_.clear();
  held_count_.store(0);
  close(epoll_fd_);
  close(wake_fd_);
}

TcpListener::Counters TcpListener::counters() const {
  Counters c;
  c.accepted = accepted_.load();
  c.handed_to_grpc = handed_.load();
  c.timed_out = timed_out_.load();
  c.evicted = evicted_.load();
  c.gone = gone_.load();
  c.held = held_count_.load();
  return c;
}

void TcpListener::Run() {
  // Descriptor held back for EMFILE: closing it lets one waiting connection be accepted and
  // closed, instead of the listening socket staying readable for ever.
  int spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
  epoll_event events[64];
  while (!stop_.load()) {
    int timeout_ms = -1;
    if (!by_age_.empty()) {
      const absl::Duration left = held_.at(by_age_.begin()->second).deadline - absl::Now();
      timeout_ms =
          static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(left) + 1, 0, 60 * 1000));
    }
    const int n = epoll_wait(epoll_fd_, events, 64, timeout_ms);
    const absl::Time now = absl::Now();
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) continue;
      if (std::find(listen_fds_.begin(), listen_fds_.end(), fd) != listen_fds_.end()) {
        // Out of descriptors with nothing held to give back: take one waiting connection off
        // the queue with the spare, then close it.
        if (!Accept(fd, now)) {
          close(spare);
          int dropped = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
          if (dropped >= 0) close(dropped);
          spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
          evicted_log_.Log("out of file descriptors: a TCP connection was closed at once");
        }
      } else if (held_.count(fd) > 0) {
        OnReadable(fd);
      }
    }
    while (!by_age_.empty() && held_.at(by_age_.begin()->second).deadline <= now) {
      const int fd = by_age_.begin()->second;
      timed_out_log_.Log(absl::StrCat("closed a TCP connection that sent no TLS record within ",
                                      absl::FormatDuration(options_.handshake_timeout),
                                      " (--grpc_handshake_timeout)"));
      Close(fd, &timed_out_);
    }
    evicted_log_.Summarize(now);
    timed_out_log_.Summarize(now);
  }
  if (spare >= 0) close(spare);
}

bool TcpListener::Accept(int listen_fd, absl::Time now) {
  // A bounded batch: the loop also has deadlines and held connections to serve.
  for (int i = 0; i < 256; ++i) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        if (by_age_.empty()) return false;
        Close(by_age_.begin()->second, &evicted_);
        continue;
      }
      return true;  // EAGAIN: the queue is empty (or the client left before the accept)
    }
    accepted_.fetch_add(1);
    if (held_.size() >= max_pending_) {
      evicted_log_.Log(
          absl::StrCat(max_pending_,
                       " TCP connections wait for TLS (--grpc_max_pending_connections): "
                       "closed the oldest"));
      Close(by_age_.begin()->second, &evicted_);
    }
    // Edge-triggered: each new segment wakes the loop once, while the bytes stay unread (peeked)
    // for gRPC.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    const uint64_t order = next_order_++;
    held_[fd] = Held{order, now + options_.handshake_timeout};
    by_age_[order] = fd;
    held_count_.store(held_.size());
  }
  return true;
}

void TcpListener::OnReadable(int fd) {
  unsigned char buf[kTlsHeaderBytes + kTlsMaxRecordBytes];
  const ssize_t n = recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
    Close(fd, &gone_);
    return;
  }
  if (n < 0) return;
  if (buf[0] == kTlsHandshake) {
    // A ClientHello sent in pieces: wait for all of its record (or the deadline).
    if (static_cast<size_t>(n) < kTlsHeaderBytes) return;
    const size_t length = (static_cast<size_t>(buf[3]) << 8) | buf[4];
    if (length <= kTlsMaxRecordBytes && static_cast<size_t>(n) < kTlsHeaderBytes + length) return;
  }
  // A whole first record, or bytes that are no TLS (gRPC's TLS handshake refuses them at once;
  // with --grpc_insecure_tcp they are HTTP/2).
  Hand(fd);
}

void TcpListener::Close(int fd, std::atomic<uint64_t>* reason) {
  auto it = held_.find(fd);
  if (it != held_.end()) {
    by_age_.erase(it->second.order);
    held_.erase(it);
  }
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  reason->fetch_add(1);
  held_count_.store(held_.size());
}

void TcpListener::Hand(int fd) {
  auto it = held_.find(fd);
  by_age_.erase(it->second.order);
  held_.erase(it);
  held_count_.store(held_.size());
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
  p.listener_fd = listen_fds_.front();
  p.fd = fd;
  // gRPC owns fd from here (and closes it, also when the server is not running).
  acceptor_->HandleNewConnection(&p);
  handed_.fetch_add(1);
}

}  // namespace profd
