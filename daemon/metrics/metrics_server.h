// The /metrics HTTP endpoint: a small event-driven HTTP/1.1 server (one epoll thread,
// non-blocking sockets) that serializes one prometheus-cpp Collectable with prometheus-cpp's
// TextSerializer, gzip-compressed when the client accepts it.
//
// Why not prometheus-cpp's Exposer: it serves through civetweb, which gives each connection a
// worker thread for as long as the client takes to send its request. /metrics listens on every
// interface, so two unfinished requests from anywhere on the network held both workers and kept
// Prometheus out for ~28 s, again and again (issue 12); civetweb has no setting that bounds a
// slow client short of one thread per client. Here no client can hold the thread: every
// connection has a deadline to send its request and one to take its answer, a request is capped
// in size, and past the connection cap the oldest unfinished connection makes room for the new.
// A scrape (Collect + serialize + gzip, a few ms) runs on that thread, one at a time, and is
// answered again to requests within reuse_window, so that a flood of requests cannot keep the
// thread collecting either.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"

namespace profd {

class MetricsServer {
 public:
  struct Options {
    // Open connections; one more evicts the oldest that has not got its whole answer yet
    // (unfinished requests first). Prometheus needs one per scraper.
    int max_connections = 64;
    // No connection is evicted this young: time enough for any client to send its request. When
    // all are younger, newcomers wait in the listen backlog.
    absl::Duration eviction_grace = absl::Milliseconds(100);
    // From accept (or from the first byte of a later request on a kept-alive connection) to the
    // end of the request's headers.
    absl::Duration request_timeout = absl::Seconds(5);
    // For the client to take the whole answer.
    absl::Duration response_timeout = absl::Seconds(10);
    // A kept-alive connection may wait this long for its next request (Prometheus scrapes every
    // 15-60 s and opens a new connection when the old one is gone).
    absl::Duration idle_timeout = absl::Seconds(120);
    // Request line and headers; a GET has no body.
    size_t max_request_bytes = 16 * 1024;
    // A scrape this recent is answered again instead of collected anew: requests in a flood, or
    // two Prometheus replicas, cost a copy each, not a collect. 0: collect for every request.
    absl::Duration reuse_window = absl::Milliseconds(100);
  };

  // address is host:port; port 0 takes a free one (tests). The error says what was asked and
  // why it failed (port in use, not permitted, malformed).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, std::shared_ptr<prometheus::Collectable> collectable,
      const Options& options);
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, std::shared_ptr<prometheus::Collectable> collectable) {
    return Start(address, std::move(collectable), Options());
  }
  ~MetricsServer();  // stops the thread and closes every connection

  // host:port as bound, with the real port when 0 was asked.
  const std::string& address() const { return address_; }

  // Connections closed by the server because they were too slow or too large, or evicted to make
  // room (any thread; tests and the log).
  uint64_t dropped_connections() const;

 private:
  class Loop;  // the epoll thread's state (metrics_server.cc)
  MetricsServer(std::string address, std::unique_ptr<Loop> loop);

  std::string address_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace profd
