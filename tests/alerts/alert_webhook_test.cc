// The webhook as Alertmanager meets it: profd's HTTP server on a loopback port and the receiver
// behind it, with the orchestrator's Start replaced by a recorder (the real one:
// tests/integration/alert_capture_test). Bearer tokens, malformed notifications, the answer's
// decisions, the request counts and the alert kept in the capture request.
#include "daemon/alerts/alert_webhook.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/metrics/http_get.h"

namespace profd::alerts {
namespace {

using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

constexpr char kToken[] = "s3cret-token-0123456789";

std::string Notification(const std::string& status, const std::string& pid,
                         const std::string& starts = "2026-12-01T22:10:03Z") {
  return absl::StrReplaceAll(R"({"version": "4", "groupKey": "{}:{pid=\"PID\"}", "status": "STATUS",
    "receiver": "profd", "externalURL": "http://am:9093", "groupLabels": {"pid": "PID"},
    "alerts": [{"status": "STATUS", "labels": {"alertname": "LaunchRateCollapsed", "pid": "PID",
      "hostname": "node-7"}, "annotations": {"profd_capture_duration": "2s", "runbook": "r"},
      "startsAt": "STARTS", "generatorURL": "http://prom/graph", "fingerprint": "fp-PID"}]})",
                             {{"STATUS", status}, {"PID", pid}, {"STARTS", starts}});
}

class AlertWebhookTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AlertWebhookOptions options;
    options.token = kToken;
    options.capture.node = "node-7";
    options.policy.cooldown = absl::Minutes(10);
    AlertCaptures captures;
    captures.start = [this](const v1::CaptureRequest& r) -> absl::StatusOr<std::string> {
      if (refuse_) return absl::NotFoundError("no process 99 on node-7");
      started_.push_back(r);
      return absl::StrCat("capture-", started_.size());
    };
    captures.is_running = [](const std::string&) { return false; };
    webhook_ = std::make_unique<AlertWebhook>(options, captures, [this] { return now_; });
    HttpServer::Options http;
    http.what = "the alert webhook";
    http.max_body_bytes = 64 * 1024;
    absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(
        "127.0.0.1:0", [this](const HttpRequest& r) { return webhook_->Handle(r); }, http);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    url_ = absl::StrCat("http://", server_->address(), kWebhookPath);
  }

  testing::HttpResult Post(const std::string& body, const std::string& token = kToken,
                           const std::string& path = kWebhookPath) {
    return testing::HttpPost(absl::StrCat("http://", server_->address(), path), body,
                             {absl::StrCat("Authorization: Bearer ", token)});
  }
  uint64_t Requests(const std::string& result) const {
    for (const auto& [name, count] : webhook_->counts().requests) {
      if (name == result) return count;
    }
    return ~0ull;
  }
  uint64_t Decisions(const std::string& decision) const {
    for (const auto& [name, count] : webhook_->counts().decisions) {
      if (name == decision) return count;
    }
    return ~0ull;
  }

  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
  bool refuse_ = false;
  std::vector<v1::CaptureRequest> started_;
  std::unique_ptr<AlertWebhook> webhook_;
  std::unique_ptr<HttpServer> server_;
  std::string url_;
};

TEST_F(AlertWebhookTest, WithoutTheTokenNothingIsReadAndEachRefusalIsCounted) {
  testing::HttpResult none = testing::HttpPost(url_, Notification("firing", "42"), {});
  EXPECT_EQ(none.status, 401) << none.error;
  EXPECT_THAT(none.body, HasSubstr("a bearer token is required"));
  EXPECT_EQ(Post(Notification("firing", "42"), "wrong-token-0123456789").status, 401);
  EXPECT_EQ(Post(Notification("firing", "42"), std::string(kToken) + "x").status, 401);
  EXPECT_EQ(testing::HttpPost(url_, Notification("firing", "42"),
                              {absl::StrCat("Authorization: Basic ", kToken)})
                .status,
            401);
  EXPECT_TRUE(started_.empty());
  EXPECT_EQ(Requests("unauthorized"), 4u);
  EXPECT_EQ(Requests("accepted"), 0u);
  // The scheme is case-insensitive (RFC 9110).
  EXPECT_EQ(testing::HttpPost(url_, Notification("firing", "42"),
                              {absl::StrCat("Authorization: bearer ", kToken)})
                .status,
            200);
}

TEST_F(AlertWebhookTest, MalformedNotificationsAre400WithTheReasonAndStartNothing) {
  testing::HttpResult r = Post("{\"version\": \"4\", \"alerts\": []}");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("not an Alertmanager webhook notification (payload version 4): "
                                "groupKey: missing"));
  EXPECT_EQ(Post("not json").status, 400);
  EXPECT_EQ(Requests("bad_request"), 2u);
  EXPECT_TRUE(started_.empty());
  // A later good one goes through: nothing was left behind.
  EXPECT_EQ(Post(Notification("firing", "42")).status, 200);
  EXPECT_EQ(started_.size(), 1u);
}

TEST_F(AlertWebhookTest, OnlyPostToTheWebhookPathAndBodiesAreBounded) {
  EXPECT_EQ(Post(Notification("firing", "42"), kToken, "/metrics").status, 404);
  absl::StatusOr<std::string> get = testing::HttpGet(url_);
  EXPECT_THAT(get.status().message(), HasSubstr("HTTP 405"));
  testing::HttpResult big = Post(std::string(65 * 1024, ' '));
  EXPECT_EQ(big.status, 413);
  EXPECT_THAT(big.body, HasSubstr("the alert webhook takes request bodies of at most 65536 bytes"));
  EXPECT_EQ(Requests("not_found"), 1u);
  EXPECT_EQ(Requests("method_not_allowed"), 1u);
}

TEST_F(AlertWebhookTest, AFiringAlertStartsOneCaptureWithTheAlertInIt) {
  testing::HttpResult r = Post(Notification("firing", "42"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.body, HasSubstr(R"("decision":"started","capture_id":"capture-1")"));
  ASSERT_EQ(started_.size(), 1u);
  const v1::CaptureRequest& request = started_[0];
  EXPECT_EQ(request.pids_size(), 1);
  EXPECT_EQ(request.pids(0), 42u);
  EXPECT_EQ(request.duration_ms(), 2000);
  const v1::CaptureAlert& alert = request.alert();
  EXPECT_EQ(alert.name(), "LaunchRateCollapsed");
  EXPECT_EQ(alert.labels().at("pid"), "42");
  EXPECT_EQ(alert.annotations().at("runbook"), "r");
  EXPECT_EQ(alert.generator_url(), "http://prom/graph");
  EXPECT_EQ(alert.group_key(), "{}:{pid=\"42\"}");
  EXPECT_EQ(alert.fingerprint(), "fp-42");
  EXPECT_EQ(alert.receiver(), "profd");
  EXPECT_EQ(alert.external_url(), "http://am:9093");
  EXPECT_EQ(alert.starts_at_unix_ns(), absl::ToUnixNanos(absl::FromUnixSeconds(1796163003)));

  // Alertmanager's repeat, a new firing of the group within the cooldown, a resolved one.
  EXPECT_THAT(Post(Notification("firing", "42")).body, HasSubstr(R"("decision":"deduplicated")"));
  now_ += absl::Minutes(1);
  EXPECT_THAT(Post(Notification("firing", "42", "2026-12-01T22:20:00Z")).body,
              HasSubstr(R"("decision":"cooled_down")"));
  EXPECT_THAT(Post(Notification("resolved", "42")).body, HasSubstr(R"("decision":"resolved")"));
  // Another node's alert, and one the orchestrator refuses: said, counted, nothing started.
  std::string other = absl::StrReplaceAll(Notification("firing", "43"), {{"node-7", "node-8"}});
  EXPECT_THAT(Post(other).body, HasSubstr("names another node than this one (node-7)"));
  refuse_ = true;
  EXPECT_THAT(Post(Notification("firing", "99")).body,
              HasSubstr("the capture was refused: no process 99 on node-7"));
  EXPECT_EQ(started_.size(), 1u);
  EXPECT_THAT(
      webhook_->counts().decisions,
      UnorderedElementsAre(Pair("started", 1u), Pair("deduplicated", 1u), Pair("cooled_down", 1u),
                           Pair("rate_limited", 0u), Pair("refused", 2u), Pair("resolved", 1u)));
  EXPECT_EQ(Requests("accepted"), 6u);
}

// Sends `pieces` to address over one connection, 200 ms apart, and reads the answer until the
// server closes.
std::string Exchange(const std::string& address, const std::vector<std::string>& pieces) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i > 0) usleep(200000);
    EXPECT_EQ(send(fd, pieces[i].data(), pieces[i].size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(pieces[i].size()));
  }
  std::string answer;
  char buffer[4096];
  for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) answer.append(buffer, n);
  close(fd);
  return answer;
}

// Alertmanager's Go client sends headers and body in one write; other clients, and a slow network,
// split them: the body is read until its Content-Length, across reads, within the request
// deadline.
TEST_F(AlertWebhookTest, ABodyInPiecesIsReadWhole) {
  const std::string body = Notification("firing", "77");
  const std::string head =
      absl::StrCat("POST /alerts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ", kToken,
                   "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n");
  const std::string answer =
      Exchange(server_->address(), {head + body.substr(0, 40), body.substr(40)});
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(answer, HasSubstr(R"("decision":"started")"));
  ASSERT_EQ(started_.size(), 1u);
  EXPECT_EQ(started_[0].pids(0), 77u);
}

// A body whose end is not known from one Content-Length is not read at all.
TEST_F(AlertWebhookTest, BodiesWithoutOneLengthAreRefused) {
  const std::string auth = absl::StrCat("Authorization: Bearer ", kToken, "\r\n");
  EXPECT_THAT(Exchange(server_->address(),
                       {absl::StrCat("POST /alerts HTTP/1.1\r\n", auth,
                                     "Content-Length: 0\r\nContent-Length: 5\r\n\r\nhello")}),
              ::testing::StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(Exchange(server_->address(),
                       {absl::StrCat("POST /alerts HTTP/1.1\r\n", auth,
                                     "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")}),
              ::testing::StartsWith("HTTP/1.1 411"));
  EXPECT_TRUE(started_.empty());
}

}  // namespace
}  // namespace profd::alerts
