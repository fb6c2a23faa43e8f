#include "daemon/metrics/metrics_server.h"

#include <chrono>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/gzip_stream.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "prometheus/summary.h"
#include "prometheus/text_serializer.h"

namespace profd {
namespace {

using Clock = std::chrono::steady_clock;

// True when an Accept-Encoding value admits gzip: a "gzip" (or "*") entry without q=0.
bool AcceptsGzip(absl::string_view value) {
  for (absl::string_view entry : absl::StrSplit(value, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(entry, ';');
    absl::string_view coding = absl::StripAsciiWhitespace(parts[0]);
    if (!absl::EqualsIgnoreCase(coding, "gzip") && coding != "*") continue;
    bool refused = false;
    for (size_t i = 1; i < parts.size(); ++i) {
      absl::string_view param = absl::StripAsciiWhitespace(parts[i]);
      if (absl::ConsumePrefix(&param, "q=") || absl::ConsumePrefix(&param, "Q=")) {
        double q = 1;
        refused = absl::SimpleAtod(param, &q) && q <= 0;
      }
    }
    if (!refused) return true;
  }
  return false;
}

}  // namespace

// The server thread's state for /metrics: the last scrape and the exposer's own counters.
class MetricsServer::Page {
 public:
  Page(std::shared_ptr<prometheus::Collectable> collectable, absl::Duration reuse_window)
      : collectable_(std::move(collectable)),
        reuse_window_(absl::ToChronoNanoseconds(reuse_window)),
        // The counters prometheus-cpp's exposer kept about itself, so /metrics reads as before.
        exposer_registry_(std::make_shared<prometheus::Registry>()),
        bytes_transferred_(prometheus::BuildCounter()
                               .Name("exposer_transferred_bytes_total")
                               .Help("Transferred bytes to metrics services")
                               .Register(*exposer_registry_)
                               .Add({})),
        scrapes_(prometheus::BuildCounter()
                     .Name("exposer_scrapes_total")
                     .Help("Number of times metrics were scraped")
                     .Register(*exposer_registry_)
                     .Add({})),
        latencies_(
            prometheus::BuildSummary()
                .Name("exposer_request_latencies")
                .Help("Latencies of serving scrape requests, in microseconds")
                .Register(*exposer_registry_)
                .Add({}, prometheus::Summary::Quantiles{{0.5, 0.05}, {0.9, 0.01}, {0.99, 0.001}})) {
  }

  HttpResponse Answer(const HttpRequest& request) {
    const bool head = request.method == "HEAD";
    if (request.method != "GET" && !head) {
      return HttpResponse::Text(405, "Method Not Allowed", "/metrics answers GET and HEAD\n",
                                /*close=*/true);
    }
    if (request.path != "/metrics") {
      return HttpResponse::Text(404, "Not Found", "profd serves /metrics only\n");
    }
    const Clock::time_point start = Clock::now();
    HttpResponse response;
    response.body = Body(AcceptsGzip(request.accept_encoding));
    if (response.body != plain_) response.extra_headers = "Content-Encoding: gzip\r\n";
    // Counted after serializing, as the exposer did: the first scrape reads 0.
    bytes_transferred_.Increment(static_cast<double>(response.body->size()));
    scrapes_.Increment();
    latencies_.Observe(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    return response;
  }

 private:
  // The exposition text, plain or gzipped. A scrape made less than reuse_window ago is answered
  // again rather than made anew: a flood of complete requests then costs a copy, not a collect
  // and a serialization each.
  std::shared_ptr<const std::string> Body(bool gzip) {
    const Clock::time_point now = Clock::now();
    if (plain_ == nullptr || now - made_at_ >= reuse_window_) {
      std::vector<prometheus::MetricFamily> families = exposer_registry_->Collect();
      std::vector<prometheus::MetricFamily> more = collectable_->Collect();
      families.insert(families.end(), std::make_move_iterator(more.begin()),
                      std::make_move_iterator(more.end()));
      plain_ =
          std::make_shared<const std::string>(prometheus::TextSerializer().Serialize(families));
      gzipped_ = nullptr;
      made_at_ = now;
    }
    if (!gzip) return plain_;
    // Level 1: the text repeats its label sets line after line, so the fastest level already
    // shrinks it about tenfold, and a scrape stays a few ms.
    if (gzipped_ == nullptr) {
      gzipped_ = std::make_shared<const std::string>(GzipStream::Gzip(*plain_));
    }
    return gzipped_->empty() ? plain_ : gzipped_;
  }

  std::shared_ptr<prometheus::Collectable> collectable_;
  const Clock::duration reuse_window_;
  std::shared_ptr<prometheus::Registry> exposer_registry_;
  prometheus::Counter& bytes_transferred_;
  prometheus::Counter& scrapes_;
  prometheus::Summary& latencies_;
  std::shared_ptr<const std::string> plain_, gzipped_;  // the last scrape, see Body()
  Clock::time_point made_at_;
};

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, std::shared_ptr<prometheus::Collectable> collectable,
    const Options& options) {
  auto page = std::make_shared<Page>(std::move(collectable), options.reuse_window);
  HttpServer::Options http = options;
  http.what = "/metrics";
  http.address_flag = "--metrics_address";
  http.max_body_bytes = 0;  // a scrape is a GET
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(
      address, [page](const HttpRequest& request) { return page->Answer(request); }, http);
  if (!server.ok()) return server.status();
  return std::unique_ptr<MetricsServer>(new MetricsServer(*std::move(server)));
}

}  // namespace profd
