// Test support: a real Prometheus (/usr/bin/prometheus) on a free loopback port, in a temp
// folder of its own, with the shipped deploy/prometheus/prometheus-static.yml and its rule files,
// scraping one profd and evaluating its rules every second.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace profd::testing {

// Replaces `from` (which must occur, else the test fails) everywhere in text.
void MustReplace(std::string& text, const std::string& from, const std::string& to);

class PrometheusServer {
 public:
  struct Options {
    std::string metrics_address;  // profd's /metrics
    // Where alerts go (the shipped config's Alertmanager, localhost:9093, otherwise).
    std::string alertmanager_address;
    // Edits of the shipped rule files before Prometheus reads them: {file, from, to}, `from`
    // must occur (shorter windows for a test).
    struct Edit {
      std::string file, from, to;
    };
    std::vector<Edit> rule_edits;
  };
  explicit PrometheusServer(const std::string& metrics_address)
      : PrometheusServer(Options{metrics_address, "", {}}) {}
  explicit PrometheusServer(const Options& options);
  ~PrometheusServer();

  const std::string& address() const { return address_; }
  std::string log() const;

  // The instant vector's size; -1 (and a test failure) when Prometheus rejects the expression.
  int Count(const std::string& expr) const;
  // The first sample's value, or NaN when there is none.
  double Value(const std::string& expr) const;

 private:
  TempDir dir_;
  std::string address_;
  std::unique_ptr<Subprocess> process_;
};

}  // namespace profd::testing
