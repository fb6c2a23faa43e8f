// The /metrics HTTP endpoint: prometheus-cpp's pull Exposer (civetweb) serving one Collectable.
// civetweb runs its own two worker threads; a scrape calls Collectable::Collect() on one of them.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

namespace profd {

class MetricsServer {
 public:
  // address is host:port; port 0 takes a free one (tests). The error says what was asked and
  // why it failed (port in use, not permitted, malformed).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, std::shared_ptr<prometheus::Collectable> collectable);
  ~MetricsServer();

  // host:port as bound, with the real port when 0 was asked.
  const std::string& address() const { return address_; }

 private:
  MetricsServer(std::unique_ptr<prometheus::Exposer> exposer,
                std::shared_ptr<prometheus::Collectable> collectable, std::string address);

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Collectable> collectable_;  // the exposer holds only a weak_ptr
  std::string address_;
};

}  // namespace profd
