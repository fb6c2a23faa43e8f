// A small event-driven HTTP/1.1 server (one epoll thread, non-blocking sockets) for profd's
// listeners that face the network: /metrics (daemon/metrics/metrics_server.h) and the
// Alertmanager webhook (daemon/alerts/alert_webhook.h). It owns the connections; a Handler owns
// the answers. Optionally over TLS (OpenSSL, non-blocking: the handshake is one more state of a
// connection, under the same deadlines), with client certificates required or not.
//
// Why not civetweb (prometheus-cpp's Exposer): it gives each connection a worker thread for as
// long as the client takes to send its request, so two unfinished requests from anywhere on the
// network held both workers and kept Prometheus out for ~28 s, again and again; civetweb has no
// setting that bounds a slow client short of one thread per client. Here no client can hold the
// thread: every connection has a deadline to send its request (headers and body) and one to take
// its answer, headers and body are capped in size, and past the connection cap the oldest
// unfinished connection makes room for the new. The handler runs on the epoll thread, one request
// at a time: it must answer in milliseconds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace profd {

struct HttpRequest {
  std::string method;  // GET, HEAD, POST, ...
  std::string path;    // the target without its query
  std::string query;   // after the '?', as sent (not decoded)
  std::string accept_encoding;
  std::string authorization;  // the Authorization header's value, as sent
  std::string content_type;
  std::string body;  // at most Options::max_body_bytes
  // Every header as sent, names in lower case (within Options::max_request_bytes).
  std::vector<std::pair<std::string, std::string>> headers;
  std::string peer;  // the client's address, "ip:port" ("[ip6]:port")

  // The value of the first header of that name (any case); "" when there is none.
  std::string Header(absl::string_view name) const;
};

struct HttpResponse {
  int code = 200;
  std::string reason = "OK";
  // Shared by every connection it is being sent to: a stuck reader holds a reference, not a copy.
  std::shared_ptr<const std::string> body;
  std::string content_type = "text/plain; charset=utf-8";
  std::string extra_headers;  // whole lines, each ending in \r\n
  bool close = false;         // close the connection after this answer

  static HttpResponse Text(int code, std::string reason, std::string text, bool close = false);
};

class HttpServer {
 public:
  // Epoll thread. HEAD requests are answered with the headers of what the handler returns.
  using Handler = std::function<HttpResponse(const HttpRequest& request)>;

  struct Options {
    // For messages: what is served ("/metrics") and the flag that names the address.
    std::string what = "/metrics";
    std::string address_flag = "--metrics_address";
    int usual_port = 9477;  // in the examples of a malformed address's message
    // Open connections; one more evicts the oldest that has not got its whole answer yet
    // (unfinished requests first). Prometheus needs one per scraper.
    int max_connections = 64;
    // No connection is evicted this young: time enough for any client to send its request. When
    // all are younger, newcomers wait in the listen backlog.
    absl::Duration eviction_grace = absl::Milliseconds(100);
    // From accept (or from the first byte of a later request on a kept-alive connection) to the
    // end of the request's body.
    absl::Duration request_timeout = absl::Seconds(5);
    // For the client to take the whole answer.
    absl::Duration response_timeout = absl::Seconds(10);
    // A kept-alive connection may wait this long for its next request (Prometheus scrapes every
    // 15-60 s and opens a new connection when the old one is gone).
    absl::Duration idle_timeout = absl::Seconds(120);
    // Request line and headers.
    size_t max_request_bytes = 16 * 1024;
    // A request body (Content-Length; chunked bodies are refused with 411). 0: no request may
    // have one (413).
    size_t max_body_bytes = 0;
    // TLS: PEM files, read at Start (cert_file empty: plain HTTP). With client_ca_file, every
    // client must present a certificate that CA signed (mutual TLS); a handshake that fails
    // closes the connection and is counted (tls_refused).
    struct Tls {
      std::string cert_file, key_file, client_ca_file;
    };
    Tls tls;
  };

  // address is host:port; port 0 takes a free one (tests). The error says what was asked and
  // why it failed (port in use, not permitted, malformed).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address,
                                                           Handler handler, const Options& options);
  ~HttpServer();  // stops the thread and closes every connection

  // host:port as bound, with the real port when 0 was asked.
  const std::string& address() const { return address_; }

  // Connections closed by the server because they were too slow or too large, or evicted to make
  // room (any thread; tests and the log).
  uint64_t dropped_connections() const;
  // Connections whose TLS handshake failed: no or an untrusted client certificate, not TLS at all
  // (any thread; /metrics).
  uint64_t tls_refused() const;

 private:
  class Loop;  // the epoll thread's state (http_server.cc)
  HttpServer(std::string address, std::unique_ptr<Loop> loop);

  std::string address_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace profd
