// The /metrics endpoint: one prometheus-cpp Collectable serialized with prometheus-cpp's
// TextSerializer, gzip-compressed when the client accepts it, served by profd's HttpServer
// (common/http_server.h: one epoll thread that no slow client can hold).
//
// A scrape (Collect + serialize + gzip, a few ms) runs on the server's thread, one at a time, and
// is answered again to requests within reuse_window, so that a flood of requests cannot keep the
// thread collecting either.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/http_server.h"
#include "prometheus/collectable.h"

namespace profd {

class MetricsServer {
 public:
  struct Options : HttpServer::Options {
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

  // host:port as bound, with the real port when 0 was asked.
  const std::string& address() const { return server_->address(); }

  // Connections closed by the server because they were too slow or too large, or evicted to make
  // room (any thread; tests and the log).
  uint64_t dropped_connections() const { return server_->dropped_connections(); }

 private:
  class Page;  // the answers to /metrics (metrics_server.cc)
  explicit MetricsServer(std::unique_ptr<HttpServer> server) : server_(std::move(server)) {}

  std::unique_ptr<HttpServer> server_;
};

}  // namespace profd
