// TraceStore on a real S3-protocol server (s3rver on loopback): single and multipart uploads,
// listing, reading back byte-identical, credentials, and the error messages a user meets.
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "absl/time/clock.h"
#include "daemon/common/capture_id.h"
#include "daemon/common/sha256.h"
#include "daemon/store/s3_bucket.h"
#include "daemon/store/trace_import.h"
#include "daemon/store/trace_store.h"
#include "gtest/gtest.h"
#include "tests/store/store_test_util.h"

namespace profd::testing {
namespace {

using store::TraceStore;

class S3StoreTest : public ::testing::Test {
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
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    unsetenv("AWS_SESSION_TOKEN");
  }

  store::S3Options Options(uint64_t part_size = 8 << 20) {
    store::S3Options o;
    o.endpoint = s3rver_->endpoint();
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

  static S3rverProcess* s3rver_;
  TempDir scratch_;
};

S3rverProcess* S3StoreTest::s3rver_ = nullptr;

TEST_F(S3StoreTest, SinglePutListGetRoundTrip) {
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
  auto listing = bucket.List("fleet/", /*delimited=*/false);
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
  EXPECT_EQ(s3rver_->log().find("?uploads"), std::string::npos) << "small files go up in one PUT";
}

TEST_F(S3StoreTest, LargeTraceGoesUpInPartsAndComesBackIdentical) {
  auto store = Open("s3://traces/multipart", 5 << 20);
  const std::string id = NewCaptureId("node-a", absl::Now());
  auto stored = PutCapture(*store, id, /*padding=*/14 << 20);  // ~10.5 MiB gzip: 3 parts
  ASSERT_TRUE(stored.ok()) << stored.status() << "\n" << s3rver_->log();
  const std::string original = scratch_.File(id + "/trace-777.json.gz");
  ASSERT_GT(std::filesystem::file_size(original), 10u << 20);
  std::string back = ReadBack(*store, id, "trace-777.json.gz");
  EXPECT_EQ(Sha256Hex(back), Sha256File(original));
  EXPECT_EQ(back.size(), std::filesystem::file_size(original));
  const std::string log = s3rver_->log();
  EXPECT_NE(log.find("?uploads"), std::string::npos) << log;
  EXPECT_NE(log.find("partNumber=3"), std::string::npos) << log;
}

TEST_F(S3StoreTest, MissingBucketSaysNoSuchBucket) {
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

TEST_F(S3StoreTest, UnknownAccessKeySaysAccessDenied) {
  setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGKEY", 1);
  auto store = Open("s3://traces/denied");
  auto stored = PutCapture(*store, NewCaptureId("node-a", absl::Now()));
  ASSERT_FALSE(stored.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(stored.status())) << stored.status();
  EXPECT_NE(stored.status().message().find("access denied"), std::string::npos);
  EXPECT_NE(stored.status().message().find("InvalidAccessKeyId"), std::string::npos);
  EXPECT_NE(stored.status().message().find("AWS_ACCESS_KEY_ID"), std::string::npos);
}

TEST_F(S3StoreTest, UnreachableEndpointSaysUnreachable) {
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

TEST_F(S3StoreTest, SharedCredentialsFileAndProfile) {
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
