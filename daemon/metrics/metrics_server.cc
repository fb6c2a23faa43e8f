#include "daemon/metrics/metrics_server.h"

#include <exception>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace profd {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, std::shared_ptr<prometheus::Collectable> collectable) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_address=", address,
                     " is not host:port (e.g. 0.0.0.0:9477, 127.0.0.1:9477), "
                     "nor 'none'"));
  }
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot serve /metrics on ", address, ": ", e.what(),
                                               ". Is the port in use (another profd?) "
                                               "or the address not on this host?"));
  }
  exposer->RegisterCollectable(collectable);
  std::vector<int> ports = exposer->GetListeningPorts();
  std::string bound = address;
  if (!ports.empty()) bound = absl::StrCat(address.substr(0, colon), ":", ports.front());
  return std::unique_ptr<MetricsServer>(
      new MetricsServer(std::move(exposer), std::move(collectable), std::move(bound)));
}

MetricsServer::MetricsServer(std::unique_ptr<prometheus::Exposer> exposer,
                             std::shared_ptr<prometheus::Collectable> collectable,
                             std::string address)
    : exposer_(std::move(exposer)),
      collectable_(std::move(collectable)),
      address_(std::move(address)) {}

MetricsServer::~MetricsServer() {
  // Stop serving before the collectable goes: civetweb's threads may be inside a scrape.
  exposer_.reset();
}

}  // namespace profd
