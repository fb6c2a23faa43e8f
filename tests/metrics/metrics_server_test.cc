// The /metrics HTTP server on its own (daemon/metrics/metrics_server.h): what it answers (the
// text format, gzip when asked, keep-alive, pipelined requests, errors), and that slow or stuck
// clients cannot keep a scrape waiting: deadlines, the request-size cap and eviction at the
// connection cap, with short timeouts so the test is quick.
#include "daemon/metrics/metrics_server.h"

#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "tests/metrics/http_get.h"
#include "tests/metrics/slow_client.h"

namespace profd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A registry with `series` gauges, labelled like profd's per-process series.
std::shared_ptr<prometheus::Registry> Registry(int series) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& family = prometheus::BuildGauge()
                     .Name("profd_test_gauge")
                     .Help("A gauge for the test")
                     .Register(*registry);
  for (int i = 0; i < series; ++i) {
    family.Add({{"pid", std::to_string(100000 + i)}, {"pod", "llm-inference-7f9c6d"}}).Set(i);
  }
  return registry;
}

std::string Gunzip(const std::string& in) {
  z_stream zs{};
  inflateInit2(&zs, 15 + 16);
  std::string out;
  char buffer[65536];
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buffer);
    zs.avail_out = sizeof(buffer);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buffer, sizeof(buffer) - zs.avail_out);
  }
  inflateEnd(&zs);
  return rc == Z_STREAM_END ? out : "<not gzip>";
}

struct Response {
  std::string head, body;
};

// Splits one raw HTTP response (with Content-Length) off the front of `raw`.
bool TakeResponse(std::string* raw, Response* r) {
  size_t end = raw->find("\r\n\r\n");
  if (end == std::string::npos) return false;
  r->head = raw->substr(0, end);
  size_t at = r->head.find("Content-Length: ");
  if (at == std::string::npos) return false;
  size_t length = std::stoul(r->head.substr(at + 16));
  if (raw->size() < end + 4 + length) return false;
  r->body = raw->substr(end + 4, length);
  raw->erase(0, end + 4 + length);
  return true;
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void Start(MetricsServer::Options options = {}, int series = 10) {
    absl::StatusOr<std::unique_ptr<MetricsServer>> started =
        MetricsServer::Start("127.0.0.1:0", Registry(series), options);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
    url_ = "http://" + server_->address() + "/metrics";
  }

  // One request on a fresh connection; the raw answer up to the server's close.
  std::string Exchange(const std::string& request, int timeout_ms = 2000) {
    int fd = ConnectTo(server_->address());
    EXPECT_GE(fd, 0);
    SendAll(fd, request);
    std::string out = ReadUntilClosed(fd, timeout_ms);
    close(fd);
    return out;
  }

  std::unique_ptr<MetricsServer> server_;
  std::string url_;
};

TEST_F(MetricsServerTest, AnswersTheTextFormatPlainOrGzipped) {
  MetricsServer::Options options;
  options.reuse_window = absl::ZeroDuration();  // each request collects: the counters move
  Start(options);
  std::string plain = Exchange("GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
  Response r;
  ASSERT_TRUE(TakeResponse(&plain, &r)) << plain;
  EXPECT_THAT(r.head, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(r.head, HasSubstr("Content-Type: text/plain; charset=utf-8"));
  EXPECT_THAT(r.head, ::testing::Not(HasSubstr("Content-Encoding")));
  EXPECT_THAT(r.body, HasSubstr("# TYPE profd_test_gauge gauge\n"));
  EXPECT_THAT(r.body,
              HasSubstr("profd_test_gauge{pid=\"100003\",pod=\"llm-inference-7f9c6d\"} 3\n"));
  // The exposer's own counters come first, as with prometheus-cpp's Exposer.
  EXPECT_THAT(r.body, StartsWith("# HELP exposer_transferred_bytes_total"));
  EXPECT_THAT(r.body, HasSubstr("\nexposer_scrapes_total 0\n"));

  // Prometheus' header: gzip, and the same text once inflated.
  std::string zipped = Exchange(
      "GET /metrics HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n");
  Response z;
  ASSERT_TRUE(TakeResponse(&zipped, &z)) << zipped;
  EXPECT_THAT(z.head, HasSubstr("Content-Encoding: gzip"));
  std::string inflated = Gunzip(z.body);
  EXPECT_THAT(inflated, HasSubstr("\nexposer_scrapes_total 1\n"));
  EXPECT_THAT(inflated,
              HasSubstr("profd_test_gauge{pid=\"100009\",pod=\"llm-inference-7f9c6d\"} 9\n"));

  // gzip refused with q=0: plain.
  std::string refused = Exchange(
      "GET /metrics HTTP/1.1\r\nAccept-Encoding: gzip;q=0, identity\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(refused, ::testing::Not(HasSubstr("Content-Encoding")));

  // libcurl, as the other tests and Prometheus' own client would.
  absl::StatusOr<std::string> body = HttpGet(url_);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_THAT(*body, HasSubstr("profd_test_gauge{pid=\"100000\""));
}

// Requests within reuse_window share one collect; after it, a new one is made.
TEST_F(MetricsServerTest, ARecentScrapeIsReusedThenRenewed) {
  MetricsServer::Options options;
  options.reuse_window = absl::Milliseconds(300);
  Start(options);
  absl::StatusOr<std::string> first = HttpGet(url_);
  absl::StatusOr<std::string> second = HttpGet(url_);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_THAT(*second, HasSubstr("\nexposer_scrapes_total 0\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  absl::StatusOr<std::string> third = HttpGet(url_);
  ASSERT_TRUE(third.ok());
  EXPECT_THAT(*third, HasSubstr("\nexposer_scrapes_total 2\n"));
}

TEST_F(MetricsServerTest, KeepAlivePipeliningAndErrors) {
  Start();
  int fd = ConnectTo(server_->address());
  ASSERT_GE(fd, 0);
  // Three requests in one write: three answers in order, the connection kept until the last
  // asks to close.
  SendAll(fd,
          "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n"
          "GET /nothing HTTP/1.1\r\nHost: t\r\n\r\n"
          "HEAD /metrics?x=1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
  std::string raw = ReadUntilClosed(fd, 2000);
  close(fd);
  Response a, b, c;
  ASSERT_TRUE(TakeResponse(&raw, &a)) << raw;
  EXPECT_THAT(a.head, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(a.head, HasSubstr("Connection: keep-alive"));
  ASSERT_TRUE(TakeResponse(&raw, &b)) << raw;
  EXPECT_THAT(b.head, StartsWith("HTTP/1.1 404 Not Found"));
  // HEAD: the headers of the answer, no body.
  size_t end = raw.find("\r\n\r\n");
  ASSERT_NE(end, std::string::npos) << raw;
  EXPECT_THAT(raw, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(raw, HasSubstr("Connection: close"));
  EXPECT_EQ(raw.size(), end + 4) << "HEAD carried a body";

  EXPECT_THAT(Exchange("POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"),
              StartsWith("HTTP/1.1 405"));
  EXPECT_THAT(Exchange("GET /metrics HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789"),
              StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(Exchange("HELLO\r\n\r\n"), StartsWith("HTTP/1.1 400"));
  // A client that shuts down its side after the request still gets the answer.
  int half = ConnectTo(server_->address());
  SendAll(half, "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
  shutdown(half, SHUT_WR);
  EXPECT_THAT(ReadUntilClosed(half, 2000), StartsWith("HTTP/1.1 200 OK"));
  close(half);
  // HTTP/1.0 closes after the answer unless asked otherwise.
  std::string old = Exchange("GET /metrics HTTP/1.0\r\n\r\n");
  EXPECT_THAT(old, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(old, HasSubstr("Connection: close"));
}

TEST_F(MetricsServerTest, OversizedRequestIsRefusedAndClosed) {
  MetricsServer::Options options;
  options.max_request_bytes = 4096;
  Start(options);
  std::string answer =
      Exchange("GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(8192, 'p') + "\r\n\r\n");
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 431"));
  EXPECT_THAT(answer, HasSubstr("Connection: close"));
  EXPECT_GE(server_->dropped_connections(), 1u);
}

TEST_F(MetricsServerTest, UnfinishedRequestIsClosedAtItsDeadline) {
  MetricsServer::Options options;
  options.request_timeout = absl::Milliseconds(300);
  options.idle_timeout = absl::Milliseconds(600);
  Start(options);
  int slow = ConnectTo(server_->address());
  SendAll(slow, "GET /metrics HTTP/1.1\r\nHost: t\r\n");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(ClosedByPeer(slow, 3000)) << "an unfinished request held its connection";
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(waited, 0.2);
  EXPECT_LT(waited, 2.0);
  close(slow);
  EXPECT_EQ(server_->dropped_connections(), 1u);

  // A kept-alive connection trickling its next request gets the request deadline, not the idle
  // one.
  int trickle = ConnectTo(server_->address());
  SendAll(trickle, "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
  std::string first = ReadUntilClosed(trickle, 200);
  EXPECT_THAT(first, StartsWith("HTTP/1.1 200 OK"));
  SendAll(trickle, "G");
  EXPECT_TRUE(ClosedByPeer(trickle, 3000));
  close(trickle);
}

TEST_F(MetricsServerTest, AtTheCapTheOldestUnfinishedConnectionGoes) {
  MetricsServer::Options options;
  options.max_connections = 4;
  Start(options);
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {
    fds.push_back(ConnectTo(server_->address()));
    SendAll(fds.back(), "GET /metrics HTTP/1.1\r\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // A fifth connection: the first goes, the others stay.
  absl::StatusOr<std::string> body = HttpGet(url_);
  EXPECT_TRUE(body.ok()) << body.status();
  EXPECT_TRUE(ClosedByPeer(fds[0], 1000));
  for (int i = 1; i < 4; ++i) EXPECT_FALSE(ClosedByPeer(fds[i], 100)) << i;
  for (int fd : fds) close(fd);
}

// The attack of issue 12 on a server with many series: unfinished requests and clients that do
// not read their answers, renewed as soon as they are closed, while Prometheus scrapes.
TEST_F(MetricsServerTest, SlowClientsCannotKeepAScrapeWaiting) {
  MetricsServer::Options options;
  options.max_connections = 32;
  // A scrape that waited behind a slow client would wait out that client's deadline: the deadlines
  // are long enough that such a wait cannot pass for a slow machine's scrape.
  options.request_timeout = absl::Seconds(8);
  options.response_timeout = absl::Seconds(8);
  Start(options, /*series=*/5000);  // ~300 KB of text: answers do not fit a socket buffer
  SlowClients attack(server_->address(), /*unfinished=*/100, /*non_readers=*/20);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (int i = 0; i < 10; ++i) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::string> body = HttpGet(url_);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(body.ok()) << body.status();
    EXPECT_THAT(*body, HasSubstr("profd_test_gauge{pid=\"104999\""));
    EXPECT_LT(seconds, 4.0) << "scrape " << i << " waited behind slow clients";
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_GT(attack.opened(), 120) << "the attack was never renewed: nothing was closed";
}

}  // namespace
}  // namespace profd::testing
