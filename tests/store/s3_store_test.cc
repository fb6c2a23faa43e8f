// TraceStore on a real S3-protocol server (s3rver on loopback) behind the SigV4-verifying proxy of
// ../shared/tools/s3-sigv4-proxy, once per rule a server may apply to a signed header the request
// lacks (ABSENT: empty, reject, minio, skip): single and multipart uploads, paged listings,
// reading back byte-identical, credentials, a refused signature, virtual-hosted style, multipart
// uploads an outage left behind, and the error messages a user meets.
#include <stdlib.h>
#include <sys/time.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "absl/time/clock.h"
#include "common/capture_id.h"
#include "common/sha256.h"
#include "daemon/store/s3_bucket.h"
#include "daemon/store/trace_import.h"
#include "daemon/store/trace_store.h"
#include "gtest/gtest.h"
#include "tests/store/store_test_util.h"

namespace profd::testing {
namespace {

using store::TraceStore;

class S3StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    if (!S3rverProcess::Installed()) return;
    s3rver_ = new S3rverProcess({"traces"});
    s3rver_->Start();
  }
  static void TearDownTestSuite() {
    delete s3rver_;
    s3rver_ = nullptr;
  }
  void SetUp() override {
    if (s3rver_ == nullptr) {
      GTEST_SKIP() << "s3rver is not installed: run scripts/setup.sh";
    }
    ASSERT_TRUE(SigV4ProxyProcess::Installed())
        << "the SigV4 proxy is not installed: run scripts/setup.sh (it needs ../shared beside "
           "the checkout)";
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    unsetenv("AWS_SESSION_TOKEN");
    proxy_ = std::make_unique<SigV4ProxyProcess>(s3rver_->endpoint(), GetParam());
    proxy_->Start();
  }

  store::S3Options Options(uint64_t part_size = 8 << 20) {
    store::S3Options o;
    o.endpoint = proxy_->endpoint();
    o.path_style = true;
    o.region = "us-east-1";
    o.part_size = part_size;
    o.connect_timeout = absl::Seconds(2);
    return o;
  }

  std::unique_ptr<TraceStore> Open(const std::string& uri, uint64_t part_size = 8 << 20) {
    auto s = TraceStore::Open(uri, Options(part_size));
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  }

  absl::StatusOr<v1::StoredTrace> PutCapture(TraceStore& store, const std::string& id,
                                             uint64_t padding = 0) {
    std::string folder = MakeCaptureFolder(scratch_.path(), id, "node-a", "llm-1", padding);
    auto described = store::DescribeCaptureFolder(folder, "node-a");
    if (!described.ok()) return described.status();
    return store.Put(*described, folder, /*may_move=*/true);
  }

  std::string ReadBack(TraceStore& store, const std::string& id, const std::string& file) {
    auto trace = store.Get(id);
    if (!trace.ok()) return trace.status().ToString();
    std::string out;
    absl::Status s = store.Read(*trace, file, [&](absl::string_view c) {
      out.append(c.data(), c.size());
      return absl::OkStatus();
    });
    return s.ok() ? out : s.ToString();
  }

  // Every request the proxy saw passed its checks.
  void ExpectAllAccepted() {
    EXPECT_EQ(proxy_->Refused(), 0) << proxy_->log();
    EXPECT_GT(proxy_->Accepted(), 0) << proxy_->log();
    EXPECT_EQ(proxy_->log().find("signedButAbsent"), std::string::npos) << proxy_->log();
  }

  static S3rverProcess* s3rver_;
  std::unique_ptr<SigV4ProxyProcess> proxy_;
  TempDir scratch_;
};

S3rverProcess* S3StoreTest::s3rver_ = nullptr;

TEST_P(S3StoreTest, SinglePutListGetRoundTrip) {
  auto store = Open("s3://traces/fleet");
  const std::string id = NewCaptureId("node-a", absl::Now());
  auto stored = PutCapture(*store, id);
  ASSERT_TRUE(stored.ok()) << stored.status() << "\n" << s3rver_->log();
  std::string day = id.substr(0, 4) + "/" + id.substr(4, 2) + "/" + id.substr(6, 2);
  EXPECT_EQ(stored->location(), "s3://traces/fleet/" + day + "/node-a/" + id + "/");

  // The keys, seen through a plain S3 listing.
  store::S3Options o = Options();
  o.bucket = "traces";
  store::S3Bucket bucket(o);
  auto listing = bucket.List("fleet/", /*delimited=*/false, absl::InfiniteFuture());
  ASSERT_TRUE(listing.ok()) << listing.status();
  std::vector<std::string> keys;
  for (const auto& obj : listing->objects) keys.push_back(obj.key);
  const std::string folder = "fleet/" + day + "/node-a/" + id + "/";
  EXPECT_NE(std::find(keys.begin(), keys.end(), folder + "manifest.json"), keys.end());
  EXPECT_NE(std::find(keys.begin(), keys.end(), folder + "summary.json"), keys.end());
  EXPECT_NE(std::find(keys.begin(), keys.end(), folder + "trace-777.json.gz"), keys.end());
  const std::string index_day = id.substr(0, 4) + "-" + id.substr(4, 2) + "-" + id.substr(6, 2);
  EXPECT_NE(std::find(keys.begin(), keys.end(), "fleet/_index/" + index_day + "/node-a.json"),
            keys.end());

  auto list = store->List({});
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_GE(list->size(), 1u);
  EXPECT_EQ(ReadBack(*store, id, "trace-777.json.gz"),
            ReadFile(scratch_.File(id + "/trace-777.json.gz")));
  EXPECT_EQ(ReadBack(*store, id, "manifest.json"), ReadFile(scratch_.File(id + "/manifest.json")));
  EXPECT_EQ(proxy_->log().find("?uploads"), std::string::npos) << "small files go up in one PUT";
  ExpectAllAccepted();
}

TEST_P(S3StoreTest, LargeTraceGoesUpInPartsAndComesBackIdentical) {
  auto store = Open("s3://traces/multipart", 5 << 20);
  const std::string id = NewCaptureId("node-a", absl::Now());
  auto stored = PutCapture(*store, id, /*padding=*/14 << 20);  // ~10.5 MiB gzip: 3 parts
  ASSERT_TRUE(stored.ok()) << stored.status() << "\n" << s3rver_->log();
  const std::string original = scratch_.File(id + "/trace-777.json.gz");
  ASSERT_GT(std::filesystem::file_size(original), 10u << 20);
  std::string back = ReadBack(*store, id, "trace-777.json.gz");
  EXPECT_EQ(Sha256Hex(back), Sha256File(original));
  EXPECT_EQ(back.size(), std::filesystem::file_size(original));
  const std::string log = proxy_->log();
  EXPECT_NE(log.find("?uploads"), std::string::npos) << log;
  EXPECT_NE(log.find("partNumber=3"), std::string::npos) << log;
  ExpectAllAccepted();
}

// The signature covers exactly the headers sent, so a server that reads a signed, absent header
// its own way (AWS: an error; MinIO: expect = 100-continue; Ceph RGW: left out) computes the same.
TEST_P(S3StoreTest, SignedHeadersAreExactlyTheHeadersSent) {
  auto store = Open("s3://traces/signed", 5 << 20);
  const std::string id = NewCaptureId("node-a", absl::Now());
  auto stored = PutCapture(*store, id, /*padding=*/7 << 20);  // PUTs, a multipart upload, GETs
  ASSERT_TRUE(stored.ok()) << stored.status() << "\n" << proxy_->log();
  EXPECT_EQ(ReadBack(*store, id, "summary.json"), ReadFile(scratch_.File(id + "/summary.json")));
  ExpectAllAccepted();
  EXPECT_NE(proxy_->log().find("\"signedHeaders\":\"content-md5;content-type;host;"
                               "x-amz-content-sha256;x-amz-date\""),
            std::string::npos)
      << proxy_->log();
}

TEST_P(S3StoreTest, WrongSecretSaysTheSignatureWasRefusedAndWhatWasSigned) {
  setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret", 1);
  auto store = Open("s3://traces/badsecret");
  auto stored = PutCapture(*store, NewCaptureId("node-a", absl::Now()));
  ASSERT_FALSE(stored.ok());
  const std::string m(stored.status().message());
  EXPECT_TRUE(absl::IsPermissionDenied(stored.status())) << stored.status();
  EXPECT_NE(m.find("signature refused"), std::string::npos) << m;
  EXPECT_NE(m.find("SignatureDoesNotMatch"), std::string::npos) << m;
  EXPECT_NE(m.find("signed the headers content-md5;content-type;host;x-amz-content-sha256;"
                   "x-amz-date"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("canonical request was:\nPUT\n/traces/badsecret/"), std::string::npos) << m;
  EXPECT_NE(m.find("AWS_SECRET_ACCESS_KEY"), std::string::npos) << m;
  EXPECT_EQ(m.find("refused the credentials"), std::string::npos) << m;
}

TEST_P(S3StoreTest, SessionTokenIsSignedAndSent) {
  setenv("AWS_SESSION_TOKEN", "a-token", 1);
  auto store = Open("s3://traces/token");
  auto stored = PutCapture(*store, NewCaptureId("node-a", absl::Now()));
  unsetenv("AWS_SESSION_TOKEN");
  // The proxy knows S3RVER without a token: a token it did not issue is InvalidToken, which
  // proves it arrived signed (an unsigned x-amz-* header is AccessDenied).
  ASSERT_FALSE(stored.ok());
  EXPECT_NE(stored.status().message().find("InvalidToken"), std::string::npos) << stored.status();
}

TEST_P(S3StoreTest, ListingsPage) {
  store::S3Options o = Options();
  o.list_page_size = 2;
  auto store = TraceStore::Open("s3://traces/paged", o);
  ASSERT_TRUE(store.ok()) << store.status();
  // Five hosts on one day: five index objects, listed two per page.
  const absl::Time day = absl::Now();
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    const std::string host = "host-" + std::to_string(i);
    ids.push_back(NewCaptureId(host, day));
    std::string folder = MakeCaptureFolder(scratch_.path(), ids.back(), host, "p", 0, day);
    auto described = store::DescribeCaptureFolder(folder, host);
    ASSERT_TRUE(described.ok()) << described.status();
    ASSERT_TRUE((*store)->Put(*described, folder, true).ok());
  }
  auto list = (*store)->List({});
  ASSERT_TRUE(list.ok()) << list.status() << "\n" << s3rver_->log();
  std::vector<std::string> listed;
  for (const auto& t : *list) listed.push_back(t.capture_id());
  for (const std::string& id : ids) {
    EXPECT_NE(std::find(listed.begin(), listed.end(), id), listed.end()) << id;
  }
  EXPECT_NE(proxy_->log().find("continuation-token="), std::string::npos) << proxy_->log();
  ExpectAllAccepted();
}

// A fleet's day: 40 hosts stored captures, 5 of them lately. `list --limit 5` reads the indexes
// written last, newest first, 16 at a time, and stops once no unread index can hold a newer
// capture: not one GET per host. (The index objects' LastModified, s3rver's file times, are set to
// when each host stored.)
TEST_P(S3StoreTest, ListReadsTheHostsThatStoredLatelyNotEveryHost) {
  const std::string prefix = "recent-" + GetParam();
  store::S3Options o = Options();
  o.bucket = "traces";
  store::S3Bucket bucket(o);
  const absl::Time noon =
      absl::FromCivil(absl::CivilSecond(2026, 1, 15, 12, 0, 0), absl::UTCTimeZone());
  std::vector<std::string> recent;
  for (int h = 0; h < 40; ++h) {
    const std::string host = "host-" + std::to_string(h);
    const absl::Time started =
        h < 5 ? noon + absl::Minutes(h) : noon - absl::Hours(4) + absl::Minutes(h);
    const std::string id = NewCaptureId(host, started);
    if (h < 5) recent.insert(recent.begin(), id);  // newest first
    const std::string key = prefix + "/_index/2026-01-15/" + host + ".json";
    ASSERT_TRUE(bucket
                    .PutBytes(key, absl::StrCat(R"({"traces":[{"captureId":")", id,
                                                R"(","hostname":")", host, R"(","startedUnixNs":")",
                                                absl::ToUnixNanos(started), R"("}]})"))
                    .ok());
    const std::string object = s3rver_->data_dir() + "/traces/" + key + "._S3rver_object";
    const timeval stored = absl::ToTimeval(started + absl::Minutes(1));
    const timeval times[2] = {stored, stored};
    ASSERT_EQ(utimes(object.c_str(), times), 0) << object;
  }
  auto store = TraceStore::Open("s3://traces/" + prefix, Options());
  ASSERT_TRUE(store.ok());
  const size_t log_before = proxy_->log().size();
  store::TraceFilter filter;
  filter.limit = 5;
  auto list = (*store)->List(filter);
  ASSERT_TRUE(list.ok()) << list.status();
  std::vector<std::string> listed;
  for (const auto& t : *list) listed.push_back(t.capture_id());
  EXPECT_EQ(listed, recent);
  auto index_reads = [&] {
    const std::string log = proxy_->log().substr(log_before);
    int reads = 0;
    for (size_t at = 0; (at = log.find("\"method\":\"GET\",\"rawUrl\":\"/traces/" + prefix +
                                           "/_index/2026-01-15/host-",
                                       at)) != std::string::npos;
         ++at) {
      ++reads;
    }
    return reads;
  };
  // The proxy writes its log line after it answers: the last reads may still be on their way.
  WaitFor([&] { return index_reads() >= 16; }, absl::Seconds(3));
  EXPECT_EQ(index_reads(), 16) << "one batch of 16 indexes, newest first, holds the 5 newest";

  // When the recent hosts cannot fill the limit, the older ones are read too.
  filter.limit = 10;
  auto more = (*store)->List(filter);
  ASSERT_TRUE(more.ok()) << more.status();
  ASSERT_EQ(more->size(), 10u);
  EXPECT_EQ((*more)[4].capture_id(), recent.back());
  EXPECT_EQ((*more)[5].hostname(), "host-39");
  EXPECT_EQ((*more)[9].hostname(), "host-35");
  ExpectAllAccepted();
}

// Virtual-hosted style through the proxy (Host "traces.localhost:port"), and an IP endpoint that
// has no host name to put the bucket in: path style, as the AWS SDKs do.
TEST_P(S3StoreTest, VirtualHostedStyleAndIpEndpoints) {
  store::S3Options o = Options();
  o.path_style = false;
  o.endpoint = "http://localhost:" + proxy_->endpoint().substr(proxy_->endpoint().rfind(':') + 1);
  auto vhost = TraceStore::Open("s3://traces/vhost", o);
  ASSERT_TRUE(vhost.ok());
  ASSERT_TRUE(PutCapture(**vhost, NewCaptureId("node-a", absl::Now())).ok());
  EXPECT_NE(proxy_->log().find("\"vhostBucket\":\"traces\""), std::string::npos) << proxy_->log();

  o.endpoint = proxy_->endpoint();  // http://127.0.0.1:port
  auto ip = TraceStore::Open("s3://traces/ip", o);
  ASSERT_TRUE(ip.ok());
  auto stored = PutCapture(**ip, NewCaptureId("node-a", absl::Now()));
  EXPECT_TRUE(stored.ok()) << stored.status();
  ExpectAllAccepted();
}

// An outage in the middle of a multipart upload: the abort cannot reach the service either, so the
// upload id stays recorded beside the file, and the next attempt (the spool's retry, or profd
// restarted) aborts it before it starts a new upload.
TEST_P(S3StoreTest, MultipartUploadLeftByAnOutageIsAbortedByTheNextAttempt) {
  const std::string file = scratch_.File("big.bin");
  {
    std::mt19937_64 random(7);
    std::string bytes(48 << 20, '\0');
    for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
      uint64_t v = random();
      std::memcpy(&bytes[i], &v, 8);
    }
    std::ofstream(file, std::ios::binary) << bytes;
  }
  store::S3Options o = Options(5 << 20);
  o.bucket = "traces";
  store::S3Bucket bucket(o);
  absl::Status first;
  std::thread upload([&] { first = bucket.PutFile("outage/big.bin", file, false); });
  // The service goes away once the upload has started (9 parts are still to go).
  ASSERT_TRUE(WaitFor([&] { return proxy_->log().find("partNumber=1&") != std::string::npos; },
                      absl::Seconds(30)));
  proxy_->Stop();
  upload.join();
  ASSERT_FALSE(first.ok()) << "the upload finished before the outage; nothing to test";
  EXPECT_TRUE(absl::IsUnavailable(first)) << first;
  const std::string record = store::MultipartRecordPath(file);
  const std::string recorded = ReadFile(record);
  ASSERT_NE(recorded.find("outage/big.bin\n"), std::string::npos) << recorded;
  const std::string upload_id =
      recorded.substr(recorded.find('\n') + 1, recorded.size() - recorded.find('\n') - 2);
  ASSERT_FALSE(upload_id.empty());

  proxy_->Start();
  absl::Status second = bucket.PutFile("outage/big.bin", file, false);
  ASSERT_TRUE(second.ok()) << second;
  const std::string log = proxy_->log();
  const size_t abort = log.find(
      "\"method\":\"DELETE\",\"rawUrl\":\"/traces/outage/big.bin?uploadId=" + upload_id + "\"");
  ASSERT_NE(abort, std::string::npos) << upload_id << "\n" << log;
  EXPECT_LT(abort, log.rfind("?uploads")) << "aborted before the new upload started";
  EXPECT_FALSE(std::filesystem::exists(record));
}

TEST_P(S3StoreTest, MissingBucketSaysNoSuchBucket) {
  auto store = Open("s3://no-such-bucket/x");
  auto stored = PutCapture(*store, NewCaptureId("node-a", absl::Now()));
  ASSERT_FALSE(stored.ok());
  EXPECT_TRUE(absl::IsNotFound(stored.status())) << stored.status();
  EXPECT_NE(stored.status().message().find("no such bucket"), std::string::npos) << stored.status();
  EXPECT_NE(stored.status().message().find("no-such-bucket"), std::string::npos);
  auto list = store->List({});
  ASSERT_FALSE(list.ok());
  EXPECT_NE(list.status().message().find("no such bucket"), std::string::npos) << list.status();
}

TEST_P(S3StoreTest, UnknownAccessKeySaysAccessDenied) {
  setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGKEY", 1);
  auto store = Open("s3://traces/denied");
  auto stored = PutCapture(*store, NewCaptureId("node-a", absl::Now()));
  ASSERT_FALSE(stored.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(stored.status())) << stored.status();
  EXPECT_NE(stored.status().message().find("access denied"), std::string::npos);
  EXPECT_NE(stored.status().message().find("InvalidAccessKeyId"), std::string::npos);
  EXPECT_NE(stored.status().message().find("AWS_ACCESS_KEY_ID"), std::string::npos);
}

TEST_P(S3StoreTest, UnreachableEndpointSaysUnreachable) {
  store::S3Options o = Options();
  o.endpoint = "http://127.0.0.1:" + std::to_string(FreeLoopbackPort());
  auto store = TraceStore::Open("s3://traces", o);
  ASSERT_TRUE(store.ok());
  auto stored = PutCapture(**store, NewCaptureId("node-a", absl::Now()));
  ASSERT_FALSE(stored.ok());
  EXPECT_TRUE(absl::IsUnavailable(stored.status())) << stored.status();
  EXPECT_NE(stored.status().message().find("unreachable"), std::string::npos);
  EXPECT_NE(stored.status().message().find(o.endpoint), std::string::npos);
}

TEST_P(S3StoreTest, SharedCredentialsFileAndProfile) {
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  std::ofstream(scratch_.File("credentials"))
      << "[default]\naws_access_key_id = AKIAWRONGKEY\naws_secret_access_key = x\n\n"
      << "[ci]\naws_access_key_id = S3RVER\naws_secret_access_key = S3RVER\n";
  setenv("AWS_SHARED_CREDENTIALS_FILE", scratch_.File("credentials").c_str(), 1);
  setenv("AWS_PROFILE", "ci", 1);
  auto store = Open("s3://traces/profile");
  EXPECT_TRUE(PutCapture(*store, NewCaptureId("node-a", absl::Now())).ok());

  setenv("AWS_PROFILE", "default", 1);
  auto denied = PutCapture(*store, NewCaptureId("node-a", absl::Now()));
  EXPECT_TRUE(absl::IsPermissionDenied(denied.status())) << denied.status();

  setenv("AWS_PROFILE", "absent", 1);
  auto none = PutCapture(*store, NewCaptureId("node-a", absl::Now()));
  EXPECT_TRUE(absl::IsUnauthenticated(none.status())) << none.status();
  EXPECT_NE(none.status().message().find("no AWS credentials"), std::string::npos);
  unsetenv("AWS_SHARED_CREDENTIALS_FILE");
  unsetenv("AWS_PROFILE");
}

INSTANTIATE_TEST_SUITE_P(AbsentModes, S3StoreTest, ::testing::ValuesIn(AbsentModes()),
                         [](const auto& info) { return info.param; });

// s3rver cannot be made to see a skewed clock (libcurl signs with the real time), so the mapping
// of S3's own error document is checked directly.
TEST(S3ErrorStatusTest, ClockSkewAndServerErrorsHaveTheirOwnMessages) {
  absl::Status skew = store::S3ErrorStatus(
      "uploading", "s3://b/k", 403,
      "<Error><Code>RequestTimeTooSkewed</Code><Message>The difference between the request time "
      "and the current time is too large.</Message></Error>");
  EXPECT_TRUE(absl::IsFailedPrecondition(skew));
  EXPECT_NE(skew.message().find("clock skew"), std::string::npos) << skew;
  EXPECT_NE(skew.message().find("NTP"), std::string::npos) << skew;
  absl::Status slow = store::S3ErrorStatus(
      "uploading", "s3://b/k", 503, "<Error><Code>SlowDown</Code><Message>x</Message></Error>");
  EXPECT_TRUE(absl::IsUnavailable(slow)) << slow;
  absl::Status region = store::S3ErrorStatus(
      "listing", "s3://b", 301,
      "<Error><Code>PermanentRedirect</Code><Message>use the right endpoint</Message></Error>");
  EXPECT_NE(region.message().find("--s3_region"), std::string::npos) << region;
}

}  // namespace
}  // namespace profd::testing
