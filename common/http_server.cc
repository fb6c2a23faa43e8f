#include "common/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace profd {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunk = 4096;

Clock::duration ToChrono(absl::Duration d) { return absl::ToChronoNanoseconds(d); }

// The request line and the headers the server and its handlers read.
struct RequestHead {
  HttpRequest request;
  std::string version, connection;
  bool chunked = false;
  bool bad_length = false;
  bool has_length = false;
  size_t content_length = 0;
};

// Parses the request line and headers (without the blank line that ends them). False: not
// HTTP/1.x.
bool ParseRequest(absl::string_view head, RequestHead* r) {
  std::vector<absl::string_view> lines = absl::StrSplit(head, '\n');
  if (lines.empty()) return false;
  std::vector<absl::string_view> first =
      absl::StrSplit(absl::StripTrailingAsciiWhitespace(lines[0]), ' ', absl::SkipEmpty());
  if (first.size() != 3 || !absl::StartsWith(first[2], "HTTP/1.")) return false;
  r->request.method = std::string(first[0]);
  absl::string_view target = first[1];
  r->request.path = std::string(target.substr(0, target.find('?')));
  if (size_t q = target.find('?'); q != absl::string_view::npos) {
    r->request.query = std::string(target.substr(q + 1));
  }
  r->version = std::string(first[2]);
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::string_view line = absl::StripTrailingAsciiWhitespace(lines[i]);
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    absl::string_view name = absl::StripAsciiWhitespace(line.substr(0, colon));
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    r->request.headers.emplace_back(absl::AsciiStrToLower(name), std::string(value));
    if (absl::EqualsIgnoreCase(name, "accept-encoding")) {
      r->request.accept_encoding = absl::StrCat(r->request.accept_encoding, ",", value);
    } else if (absl::EqualsIgnoreCase(name, "authorization")) {
      r->request.authorization = std::string(value);
    } else if (absl::EqualsIgnoreCase(name, "content-type")) {
      r->request.content_type = std::string(value);
    } else if (absl::EqualsIgnoreCase(name, "connection")) {
      r->connection = absl::AsciiStrToLower(value);
    } else if (absl::EqualsIgnoreCase(name, "transfer-encoding")) {
      r->chunked = true;
    } else if (absl::EqualsIgnoreCase(name, "content-length")) {
      size_t length = 0;
      // Two different lengths, or one that is not a number: the body's end is unknown.
      if (!absl::SimpleAtoi(value, &length) || (r->has_length && r->content_length != length)) {
        r->bad_length = true;
      }
      r->has_length = true;
      r->content_length = length;
    }
  }
  return true;
}

// "ip:port" of an accepted client ("[ip6]:port").
std::string PeerAddress(const sockaddr_storage& from) {
  char ip[INET6_ADDRSTRLEN] = "";
  if (from.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&from);
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
    return absl::StrCat("[", ip, "]:", ntohs(a->sin6_port));
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(&from);
  inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
  return absl::StrCat(ip, ":", ntohs(a->sin_port));
}

// The end of the headers in `in`: the index just past the blank line, or npos.
size_t HeadEnd(const std::string& in, size_t* head_size) {
  size_t crlf = in.find("\r\n\r\n");
  size_t lf = in.find("\n\n");
  if (crlf != std::string::npos && (lf == std::string::npos || crlf < lf)) {
    *head_size = crlf;
    return crlf + 4;
  }
  if (lf != std::string::npos) {
    *head_size = lf;
    return lf + 2;
  }
  return std::string::npos;
}

using TlsContext = std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)>;

// OpenSSL's last error, for a message.
std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  char text[256] = "unknown error";
  if (e != 0) ERR_error_string_n(e, text, sizeof(text));
  return text;
}

// The listener's TLS context from Options::Tls: TLS 1.2 or later, the certificate chain and its
// key, and the CA clients' certificates must come from when one is given.
absl::StatusOr<TlsContext> MakeTlsContext(const HttpServer::Options& options) {
  const HttpServer::Options::Tls& tls = options.tls;
  TlsContext ctx(SSL_CTX_new(TLS_server_method()), &SSL_CTX_free);
  if (!ctx) return absl::InternalError("cannot make a TLS context: " + OpenSslError());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  // SSL_write may take part of a buffer and be called again with the rest moved along.
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  auto failed = [&](const std::string& what, const std::string& path) {
    return absl::InvalidArgumentError(absl::StrCat("TLS for ", options.what, ": cannot use ", what,
                                                   " ", path, ": ", OpenSslError()));
  };
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), tls.cert_file.c_str()) != 1) {
    return failed("the certificate", tls.cert_file);
  }
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx.get()) != 1) {
    return failed("the key", tls.key_file);
  }
  if (!tls.client_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx.get(), tls.client_ca_file.c_str(), nullptr) != 1) {
      return failed("the client CA", tls.client_ca_file);
    }
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return ctx;
}

absl::StatusOr<int> Listen(const std::string& address, const HttpServer::Options& options,
                           std::string* bound) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.address_flag, "=", address, " is not host:port (e.g. 0.0.0.0:", options.usual_port,
        ", 127.0.0.1:", options.usual_port, "), nor 'none'"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  auto fail = [&](const std::string& why) {
    return absl::UnavailableError(absl::StrCat("cannot serve ", options.what, " on ", address, ": ",
                                               why,
                                               ". Is the port in use (another profd?) "
                                               "or the address not on this host?"));
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
      rc != 0) {
    return fail(gai_strerror(rc));
  }
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    // A deep backlog: at the connection cap, newcomers (Prometheus among them) wait there.
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1024) == 0) break;
    error = std::strerror(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  if (fd < 0) return fail(error);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  const int real_port = ss.ss_family == AF_INET6
                            ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                            : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  *bound = absl::StrCat(address.substr(0, colon), ":", real_port);
  return fd;
}

}  // namespace

// Everything the epoll thread owns. Only Stop() and dropped() are called from other threads.
class HttpServer::Loop {
 public:
  Loop(int listen_fd, Handler handler, const Options& options, TlsContext tls)
      : listen_fd_(listen_fd),
        handler_(std::move(handler)),
        options_(options),
        tls_(std::move(tls)) {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    Watch(listen_fd_, EPOLLIN, EPOLL_CTL_ADD);
    Watch(wake_fd_, EPOLLIN, EPOLL_CTL_ADD);
  }

  ~Loop() {
    for (auto& [fd, c] : connections_) {
      if (c.ssl != nullptr) SSL_free(c.ssl);
      close(fd);
    }
    close(listen_fd_);
    close(wake_fd_);
    close(epoll_fd_);
  }

  bool ok() const { return epoll_fd_ >= 0 && wake_fd_ >= 0; }
  uint64_t dropped() const { return dropped_.load(); }
  uint64_t tls_refused() const { return tls_refused_.load(); }

  void Stop() {
    stopping_.store(true);
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }

  void Run() {
    std::vector<epoll_event> events(64);
    while (!stopping_.load()) {
      int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), TimeoutMs());
      if (n < 0 && errno != EINTR) break;
      bool accept = false;
      for (int i = 0; i < n; ++i) {
        // The low half is the descriptor, the high half the connection's serial number: a
        // descriptor closed earlier in this round may already belong to a new connection.
        const int fd = static_cast<int>(events[i].data.u64 & 0xffffffff);
        const uint32_t serial = static_cast<uint32_t>(events[i].data.u64 >> 32);
        if (fd == wake_fd_) continue;
        if (fd == listen_fd_) {
          accept = true;
          continue;
        }
        auto it = connections_.find(fd);
        if (it == connections_.end() || it->second.serial != serial) continue;
        if (events[i].events & (EPOLLERR | EPOLLHUP)) {
          Close(fd, /*dropped=*/false);
        } else if (it->second.handshaking) {
          Handshake(it->second);
        } else if (it->second.writing) {
          Send(it->second);
        } else {
          Receive(it->second);
        }
      }
      // New connections after the requests of those already in: these cannot be evicted by a
      // burst of newcomers before their request is read.
      if (accept) Accept();
      // Requests that came pipelined behind an answer: one per connection and round, so that a
      // client sending many at once waits its turn like everyone else.
      std::vector<int> pipelined;
      pipelined.swap(pipelined_);
      for (int fd : pipelined) {
        auto it = connections_.find(fd);
        if (it != connections_.end() && !it->second.writing) HandleBuffered(it->second);
      }
      Expire();
    }
  }

 private:
  struct Connection {
    int fd = -1;
    uint32_t serial = 0;  // not reused for 2^32 connections, unlike fd
    bool writing = false;
    bool idle = false;           // kept alive, waiting for the next request
    Clock::time_point since;     // start of the current request or answer: eviction order
    Clock::time_point deadline;  // closed when it passes
    std::string in;              // received, not yet handled
    std::string peer;            // the client's address, for the handler
    std::string head;            // the answer being sent: status line and headers,
    std::shared_ptr<const std::string> body;  // and the body (none for HEAD)
    size_t sent = 0;                          // of head + body
    bool close_after = false;
    bool peer_done = false;  // the client shut down its sending side
    SSL* ssl = nullptr;      // TLS connections: OpenSSL's state of it
    bool handshaking = false;
  };

  void Watch(int fd, uint32_t events, int op, uint32_t serial = 0) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = (static_cast<uint64_t>(serial) << 32) | static_cast<uint32_t>(fd);
    epoll_ctl(epoll_fd_, op, fd, &ev);
  }

  int TimeoutMs() const {
    if (!pipelined_.empty()) return 0;
    Clock::time_point next = Clock::time_point::max();
    for (const auto& [fd, c] : connections_) next = std::min(next, c.deadline);
    if (accept_paused_) next = std::min(next, accept_resume_);
    if (next == Clock::time_point::max()) return -1;
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(ms, 0, 60'000));
  }

  void Accept() {
    for (;;) {
      if (static_cast<int>(connections_.size()) >= options_.max_connections && !MakeRoom()) {
        return;  // the rest wait in the kernel's backlog until a connection can go
      }
      sockaddr_storage from{};
      socklen_t from_len = sizeof(from);
      int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &from_len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: deadlines free some meanwhile.
          PauseAccepting(Clock::now() + std::chrono::milliseconds(100));
        }
        return;  // EAGAIN: all accepted
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      Connection& c = connections_[fd];
      c.fd = fd;
      c.serial = ++serials_;
      c.peer = PeerAddress(from);
      c.since = Clock::now();
      c.deadline = c.since + ToChrono(options_.request_timeout);
      Watch(fd, EPOLLIN, EPOLL_CTL_ADD, c.serial);
      if (tls_) {
        // The handshake first, under the request's deadline.
        c.ssl = SSL_new(tls_.get());
        if (c.ssl == nullptr || SSL_set_fd(c.ssl, fd) != 1) {
          Close(fd, /*dropped=*/true);
          continue;
        }
        SSL_set_accept_state(c.ssl);
        c.handshaking = true;
        Handshake(c);
        continue;
      }
      // A client like Prometheus sends its request right after connecting, and after a wait in
      // the backlog it is here already: answer it now.
      Receive(c);
    }
  }

  // The listening socket stays readable while connections wait in the backlog: stop watching it
  // until `until` (or until a connection closes) instead of spinning.
  void PauseAccepting(Clock::time_point until) {
    accept_paused_ = true;
    accept_resume_ = until;
    Watch(listen_fd_, 0, EPOLL_CTL_MOD);
  }

  // At the cap, room for one more: the connection waiting longest for its request goes first
  // (slow or idle clients), else the one taking longest to read its answer. Every connection
  // keeps its first eviction_grace, so a burst of new connections cannot push out one that has
  // not had the time to send its request; when all are that young, the newcomers wait in the
  // backlog (false).
  bool MakeRoom() {
    const Clock::time_point now = Clock::now();
    const Clock::time_point young = now - ToChrono(options_.eviction_grace);
    int victim = -1;
    bool victim_reading = false;
    Clock::time_point oldest = Clock::time_point::max();
    Clock::time_point first_to_age = Clock::time_point::max();
    for (const auto& [fd, c] : connections_) {
      first_to_age = std::min(first_to_age, c.since);
      if (c.since > young) continue;
      const bool reading = !c.writing;
      if ((reading && !victim_reading) || (reading == victim_reading && c.since < oldest)) {
        victim = fd;
        victim_reading = reading;
        oldest = c.since;
      }
    }
    if (victim < 0) {
      PauseAccepting(first_to_age + ToChrono(options_.eviction_grace));
      return false;
    }
    Close(victim, /*dropped=*/true);
    return true;
  }

  void Expire() {
    const Clock::time_point now = Clock::now();
    if (accept_paused_ && now >= accept_resume_) {
      accept_paused_ = false;
      Watch(listen_fd_, EPOLLIN, EPOLL_CTL_MOD);
      Accept();
    }
    std::vector<std::pair<int, bool>> expired;
    for (const auto& [fd, c] : connections_) {
      // An idle kept-alive connection that times out is no misbehaviour.
      if (now >= c.deadline) expired.emplace_back(fd, !(c.idle && c.in.empty()));
    }
    for (auto [fd, dropped] : expired) Close(fd, dropped);
  }

  void Close(int fd, bool dropped) {
    // Counted first: whoever sees the connection closed sees it counted.
    if (dropped) dropped_.fetch_add(1);
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    if (auto it = connections_.find(fd); it != connections_.end() && it->second.ssl != nullptr) {
      SSL_free(it->second.ssl);
    }
    close(fd);
    connections_.erase(fd);
    // A free slot (and descriptor): whoever waits in the backlog may come in now.
    if (accept_paused_) accept_resume_ = Clock::now();
  }

  // The TLS handshake, one step each time the socket is ready; then the request, which may have
  // come with the handshake's last flight. A failed handshake closes the connection, counted.
  void Handshake(Connection& c) {
    ERR_clear_error();
    const int r = SSL_do_handshake(c.ssl);
    if (r == 1) {
      c.handshaking = false;
      Watch(c.fd, EPOLLIN, EPOLL_CTL_MOD, c.serial);
      Receive(c);
      return;
    }
    switch (SSL_get_error(c.ssl, r)) {
      case SSL_ERROR_WANT_READ:
        Watch(c.fd, EPOLLIN, EPOLL_CTL_MOD, c.serial);
        return;
      case SSL_ERROR_WANT_WRITE:
        Watch(c.fd, EPOLLOUT, EPOLL_CTL_MOD, c.serial);
        return;
      default:
        tls_refused_.fetch_add(1);
        Close(c.fd, /*dropped=*/false);
        return;
    }
  }

  // recv, or SSL_read on a TLS connection, answering as recv does: bytes, 0 when the client is
  // done sending, -1 with errno (EAGAIN: nothing more yet).
  static ssize_t Read(Connection& c, char* buffer, size_t size) {
    if (c.ssl == nullptr) return recv(c.fd, buffer, size, 0);
    ERR_clear_error();
    const int n = SSL_read(c.ssl, buffer, static_cast<int>(size));
    if (n > 0) return n;
    switch (SSL_get_error(c.ssl, n)) {
      case SSL_ERROR_ZERO_RETURN:
        return 0;
      case SSL_ERROR_WANT_READ:
      case SSL_ERROR_WANT_WRITE:
        errno = EAGAIN;
        return -1;
      case SSL_ERROR_SYSCALL:
        if (errno == 0) return 0;  // the connection closed without TLS's close_notify
        return -1;
      default:
        errno = EPROTO;
        return -1;
    }
  }

  // sendmsg, or SSL_write of the first part on a TLS connection (the loop sends the rest), with
  // sendmsg's answers.
  static ssize_t Write(Connection& c, iovec* parts, int count) {
    if (c.ssl == nullptr) {
      msghdr message{};
      message.msg_iov = parts;
      message.msg_iovlen = count;
      return sendmsg(c.fd, &message, MSG_NOSIGNAL);
    }
    ERR_clear_error();
    const int n = SSL_write(c.ssl, parts[0].iov_base, static_cast<int>(parts[0].iov_len));
    if (n > 0) return n;
    switch (SSL_get_error(c.ssl, n)) {
      case SSL_ERROR_WANT_READ:
      case SSL_ERROR_WANT_WRITE:
        errno = EAGAIN;
        return -1;
      default:
        errno = EPIPE;
        return -1;
    }
  }

  void Receive(Connection& c) {
    char buffer[kReadChunk];
    for (;;) {
      ssize_t n = Read(c, buffer, sizeof(buffer));
      if (n == 0) {
        // The client is done sending. One that shut down its side after a whole request (nc -N,
        // some scripts) still gets its answer, then the connection closes.
        size_t head_size = 0;
        if (HeadEnd(c.in, &head_size) == std::string::npos) {
          Close(c.fd, /*dropped=*/false);
          return;
        }
        c.peer_done = true;
        break;
      }
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR) continue;
        Close(c.fd, /*dropped=*/false);
        return;
      }
      if (c.idle && c.in.empty()) {
        // A new request on a kept-alive connection: it gets the request deadline from now on.
        c.idle = false;
        c.since = Clock::now();
        c.deadline = std::min(c.deadline, c.since + ToChrono(options_.request_timeout));
      }
      c.in.append(buffer, static_cast<size_t>(n));
      if (c.in.size() > options_.max_request_bytes + options_.max_body_bytes) break;
    }
    HandleBuffered(c);
  }

  // Answers the request in c.in if its headers are complete.
  void HandleBuffered(Connection& c) {
    size_t head_size = 0;
    const size_t end = HeadEnd(c.in, &head_size);
    if (end == std::string::npos || end > options_.max_request_bytes) {
      if (c.in.size() > options_.max_request_bytes) {
        dropped_.fetch_add(1);
        Answer(c, 431, "Request Header Fields Too Large",
               absl::StrCat("request headers over ", options_.max_request_bytes, " bytes\n"),
               /*head=*/false, /*close=*/true);
      }
      return;
    }
    RequestHead request;
    const bool parsed = ParseRequest(absl::string_view(c.in).substr(0, head_size), &request);
    if (c.peer_done) request.connection = "close";
    if (!parsed) {
      c.in.clear();
      Answer(c, 400, "Bad Request", "expected an HTTP/1.x request line\n", false, true);
      return;
    }
    const bool head = request.request.method == "HEAD";
    if (request.chunked) {
      c.in.clear();
      Answer(c, 411, "Length Required",
             absl::StrCat(options_.what, " takes a body with a Content-Length only\n"), head, true);
      return;
    }
    if (request.bad_length || request.content_length > options_.max_body_bytes) {
      c.in.clear();
      // Reading the body would only cost.
      Answer(c, 413, "Content Too Large",
             options_.max_body_bytes == 0
                 ? absl::StrCat(options_.what, " takes no request body\n")
                 : absl::StrCat(options_.what, " takes request bodies of at most ",
                                options_.max_body_bytes, " bytes\n"),
             head, true);
      return;
    }
    if (c.in.size() - end < request.content_length) {
      // The body is still coming: the request deadline covers it too.
      if (c.peer_done) Close(c.fd, /*dropped=*/false);
      return;
    }
    request.request.body = c.in.substr(end, request.content_length);
    c.in.erase(0, end + request.content_length);
    const bool keep_alive = request.version == "HTTP/1.1" ? request.connection != "close"
                                                          : request.connection == "keep-alive";
    request.request.peer = c.peer;
    HttpResponse response = handler_(request.request);
    if (response.body == nullptr) response.body = std::make_shared<const std::string>();
    Answer(c, response, head, response.close || !keep_alive);
  }

  void Answer(Connection& c, int code, const char* reason, std::string text, bool head,
              bool close) {
    Answer(c, HttpResponse::Text(code, reason, std::move(text)), head, close);
  }

  void Answer(Connection& c, const HttpResponse& response, bool head, bool close) {
    c.head = absl::StrCat(
        "HTTP/1.1 ", response.code, " ", response.reason,
        "\r\nContent-Type: ", response.content_type, "\r\nContent-Length: ", response.body->size(),
        "\r\n", response.extra_headers, "Connection: ", close ? "close" : "keep-alive", "\r\n\r\n");
    c.body = head ? nullptr : response.body;
    c.sent = 0;
    c.close_after = close;
    c.writing = true;
    c.idle = false;
    c.since = Clock::now();
    c.deadline = c.since + ToChrono(options_.response_timeout);
    // Only EPOLLOUT while answering: what the client sends meanwhile waits in the kernel.
    Watch(c.fd, EPOLLOUT, EPOLL_CTL_MOD, c.serial);
    Send(c);
  }

  void Send(Connection& c) {
    const size_t body_size = c.body ? c.body->size() : 0;
    while (c.sent < c.head.size() + body_size) {
      iovec parts[2];
      int count = 0;
      if (c.sent < c.head.size()) {
        parts[count++] = {const_cast<char*>(c.head.data()) + c.sent, c.head.size() - c.sent};
      }
      if (body_size > 0) {
        const size_t from = c.sent > c.head.size() ? c.sent - c.head.size() : 0;
        parts[count++] = {const_cast<char*>(c.body->data()) + from, body_size - from};
      }
      ssize_t n = Write(c, parts, count);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // EPOLLOUT brings us back
        if (errno == EINTR) continue;
        Close(c.fd, /*dropped=*/false);
        return;
      }
      c.sent += static_cast<size_t>(n);
    }
    if (c.close_after) {
      // Half-close first so the client reads the whole answer rather than a reset (on TLS, with
      // its close_notify).
      if (c.ssl != nullptr) SSL_shutdown(c.ssl);
      shutdown(c.fd, SHUT_WR);
      Close(c.fd, /*dropped=*/false);
      return;
    }
    c.head.clear();
    c.body = nullptr;
    c.writing = false;
    c.idle = true;
    c.since = Clock::now();
    c.deadline = c.since + ToChrono(options_.idle_timeout);
    Watch(c.fd, EPOLLIN, EPOLL_CTL_MOD, c.serial);
    if (!c.in.empty()) {
      // A pipelined request already arrived: answered in the next round.
      c.idle = false;
      c.deadline = c.since + ToChrono(options_.request_timeout);
      pipelined_.push_back(c.fd);
    }
  }

  const int listen_fd_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  const Handler handler_;
  const Options options_;
  const TlsContext tls_;  // null: plain HTTP
  std::map<int, Connection> connections_;
  uint32_t serials_ = 0;
  std::vector<int> pipelined_;  // connections with a whole request buffered, to answer next
  bool accept_paused_ = false;
  Clock::time_point accept_resume_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> tls_refused_{0};
};

std::string HttpRequest::Header(absl::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (absl::EqualsIgnoreCase(key, name)) return value;
  }
  return "";
}

HttpResponse HttpResponse::Text(int code, std::string reason, std::string text, bool close) {
  HttpResponse response;
  response.code = code;
  response.reason = std::move(reason);
  response.body = std::make_shared<const std::string>(std::move(text));
  response.close = close;
  return response;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address,
                                                              Handler handler,
                                                              const Options& options) {
  TlsContext tls(nullptr, &SSL_CTX_free);
  if (!options.tls.cert_file.empty()) {
    absl::StatusOr<TlsContext> made = MakeTlsContext(options);
    if (!made.ok()) return made.status();
    tls = *std::move(made);
  }
  std::string bound;
  absl::StatusOr<int> fd = Listen(address, options, &bound);
  if (!fd.ok()) return fd.status();
  auto loop = std::make_unique<Loop>(*fd, std::move(handler), options, std::move(tls));
  if (!loop->ok()) {
    return absl::InternalError(absl::StrCat("cannot serve ", options.what, " on ", address,
                                            ": epoll/eventfd: ", std::strerror(errno)));
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(bound), std::move(loop)));
}

HttpServer::HttpServer(std::string address, std::unique_ptr<Loop> loop)
    : address_(std::move(address)), loop_(std::move(loop)) {
  thread_ = std::thread([l = loop_.get()] { l->Run(); });
}

HttpServer::~HttpServer() {
  loop_->Stop();
  if (thread_.joinable()) thread_.join();
}

uint64_t HttpServer::dropped_connections() const { return loop_->dropped(); }

uint64_t HttpServer::tls_refused() const { return loop_->tls_refused(); }

}  // namespace profd
