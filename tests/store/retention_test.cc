// Retention: the policy (oldest first, age then size), --capture_dir pruned only of captures the
// store has (a store that is down keeps everything), a capped local store, and a real profd whose
// capture folder goes once stored while `profctl report ID` still finds the capture.
#include "daemon/store/retention.h"

#include <stdlib.h>

#include <filesystem>

#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/capture_id.h"
#include "gtest/gtest.h"
#include "tests/store/store_test_util.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

namespace fs = std::filesystem;
using store::RetainedCapture;
using store::Retention;
using store::RetentionLimits;
using store::Spool;
using store::TraceStore;

std::vector<std::string> Ids(const std::vector<RetainedCapture>& captures) {
  std::vector<std::string> ids;
  for (const auto& c : captures) ids.push_back(c.id);
  return ids;
}

TEST(RetentionPolicyTest, AgeFirstThenOldestUntilUnderTheCapSkippingTheProtected) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  std::vector<RetainedCapture> captures = {{"new", 100, now - absl::Hours(1)},
                                           {"old", 100, now - absl::Hours(100)},
                                           {"mid", 100, now - absl::Hours(10)},
                                           {"older", 100, now - absl::Hours(200)}};
  auto all = [](const RetainedCapture&) { return true; };
  RetentionLimits age;
  age.max_age = absl::Hours(72);
  EXPECT_EQ(Ids(ChooseForDeletion(captures, age, now, all)),
            (std::vector<std::string>{"older", "old"}));
  RetentionLimits size;
  size.max_bytes = 150;
  EXPECT_EQ(Ids(ChooseForDeletion(captures, size, now, all)),
            (std::vector<std::string>{"older", "old", "mid"}));
  // One that may not go still counts: the next oldest go in its place, and the cap may stay
  // exceeded rather than lose it.
  auto not_old = [](const RetainedCapture& c) { return c.id != "old"; };
  EXPECT_EQ(Ids(ChooseForDeletion(captures, size, now, not_old)),
            (std::vector<std::string>{"older", "mid", "new"}));
  EXPECT_TRUE(ChooseForDeletion(captures, RetentionLimits(), now, all).empty());
}

class RetentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
  }

  std::unique_ptr<Spool> OpenSpool(TraceStore* store) {
    store::SpoolOptions options;
    options.dir = spool_dir_.path();
    options.retry_initial = absl::Milliseconds(50);
    options.retry_max = absl::Milliseconds(200);
    options.hostname = "node-a";
    auto spool = Spool::Open(options, store);
    EXPECT_TRUE(spool.ok()) << spool.status();
    return *std::move(spool);
  }

  // A finished capture folder in --capture_dir, handed to the spool as profd does, written
  // `age` ago.
  std::string Capture(Spool& spool, absl::Duration age) {
    const std::string id = NewCaptureId("node-a", absl::Now());
    const std::string folder = MakeCaptureFolder(capture_dir_.path(), id, "node-a", "llm-1");
    auto described = store::DescribeCaptureFolder(folder, "node-a");
    EXPECT_TRUE(described.ok()) << described.status();
    EXPECT_TRUE(spool.SubmitCopy(*described, folder).ok());
    Age(folder, age);
    return id;
  }

  static void Age(const std::string& folder, absl::Duration age) {
    fs::last_write_time(
        folder, fs::file_time_type::clock::now() - std::chrono::seconds(absl::ToInt64Seconds(age)));
  }

  bool Kept(const std::string& id) { return fs::exists(capture_dir_.File(id)); }

  TempDir capture_dir_, spool_dir_, store_dir_;
};

TEST_F(RetentionTest, CaptureDirKeepsWhatTheStoreHasNot) {
  auto local = *TraceStore::Open("file://" + store_dir_.path(), store::S3Options());
  auto spool = OpenSpool(local.get());
  const std::string old_a = Capture(*spool, absl::Hours(100));
  const std::string old_b = Capture(*spool, absl::Hours(90));
  const std::string young = Capture(*spool, absl::Minutes(5));
  ASSERT_TRUE(WaitFor([&] { return spool->stats().uploaded_total == 3; }, absl::Seconds(10)));
  // Folders without a manifest: a capture being written (young) and one a crash left (old).
  fs::create_directories(capture_dir_.File("writing"));
  fs::create_directories(capture_dir_.File("crashed"));
  Age(capture_dir_.File("crashed"), absl::Hours(80));
  // Not in the store at all (its upload never happened): kept whatever its age.
  const std::string unstored = NewCaptureId("node-a", absl::Now() - absl::Hours(200));
  MakeCaptureFolder(capture_dir_.path(), unstored, "node-a", "llm-1");
  Age(capture_dir_.File(unstored), absl::Hours(200));

  store::RetentionOptions options;
  options.capture_dir = capture_dir_.path();
  options.capture_dir_limits.max_age = absl::Hours(72);
  Retention retention(options, spool.get(), local.get());
  retention.Sweep();
  EXPECT_FALSE(Kept(old_a));
  EXPECT_FALSE(Kept(old_b));
  EXPECT_TRUE(Kept(young));
  EXPECT_TRUE(Kept("writing"));
  EXPECT_FALSE(Kept("crashed"));
  EXPECT_TRUE(Kept(unstored));
  store::RetentionStats stats = retention.capture_dir_stats();
  EXPECT_TRUE(stats.active);
  EXPECT_EQ(stats.pruned_total, 3u);
  EXPECT_EQ(stats.kept, 3u);
  EXPECT_GT(stats.pruned_bytes_total, 0u);
  // The store still has them: deleting the folder lost nothing.
  EXPECT_TRUE(local->Get(old_a).ok());
}

TEST_F(RetentionTest, StoreDownKeepsEveryCaptureOverTheCap) {
  store::S3Options s3;
  s3.endpoint = "http://127.0.0.1:" + std::to_string(FreeLoopbackPort());
  s3.path_style = true;
  s3.connect_timeout = absl::Seconds(2);
  auto down = *TraceStore::Open("s3://traces", s3);
  auto spool = OpenSpool(down.get());
  const std::string a = Capture(*spool, absl::Hours(100));
  const std::string b = Capture(*spool, absl::Hours(100));
  store::RetentionOptions options;
  options.capture_dir = capture_dir_.path();
  options.capture_dir_limits.max_age = absl::Hours(1);
  options.capture_dir_limits.max_bytes = 1;
  Retention retention(options, spool.get(), down.get());
  retention.Sweep();
  EXPECT_TRUE(Kept(a));
  EXPECT_TRUE(Kept(b));
  EXPECT_EQ(retention.capture_dir_stats().pruned_total, 0u);
  EXPECT_GT(retention.capture_dir_stats().kept_bytes, 1u);  // over the cap, on purpose
}

TEST_F(RetentionTest, CappedLocalStoreDropsItsOldestCaptures) {
  auto local = *TraceStore::Open("file://" + store_dir_.path(), store::S3Options());
  TempDir scratch;
  const absl::Time now = absl::Now();
  std::vector<std::string> ids;
  for (int days : {5, 3, 1, 0}) {
    const absl::Time started = now - absl::Hours(24 * days) - absl::Minutes(1);
    const std::string id = NewCaptureId("node-a", started);
    const std::string folder =
        MakeCaptureFolder(scratch.path(), id, "node-a", "llm-1", /*padding=*/0, started);
    auto described = store::DescribeCaptureFolder(folder, "node-a");
    ASSERT_TRUE(described.ok());
    ASSERT_TRUE(local->Put(*described, folder, false).ok());
    ids.push_back(id);
  }
  // Another host's capture in the same store is its profd's to prune, not ours.
  const absl::Time long_ago = now - absl::Hours(24 * 9);
  const std::string other = NewCaptureId("node-b", long_ago);
  auto other_described = store::DescribeCaptureFolder(
      MakeCaptureFolder(scratch.path(), other, "node-b", "llm-2", 0, long_ago), "node-b");
  ASSERT_TRUE(local->Put(*other_described, scratch.File(other), false).ok());
  const uint64_t one = local->Get(ids[3])->bytes();

  store::RetentionOptions options;
  options.capture_dir = capture_dir_.path();
  options.hostname = "node-a";
  options.store_limits.max_age = absl::Hours(24 * 4);
  options.store_limits.max_bytes = 2 * one + one / 2;  // room for two
  Retention retention(options, nullptr, local.get());
  retention.Sweep();
  EXPECT_FALSE(local->Get(ids[0]).ok());  // 5 days: over the age
  EXPECT_FALSE(local->Get(ids[1]).ok());  // 3 days: the oldest over the size cap
  EXPECT_TRUE(local->Get(ids[2]).ok());
  EXPECT_TRUE(local->Get(ids[3]).ok());
  EXPECT_TRUE(local->Get(other).ok());
  store::TraceFilter mine;
  mine.hostname = "node-a";
  EXPECT_EQ(local->List(mine)->size(), 2u);
  // The folder is gone from the disk too.
  auto removed = store::DescribeCaptureFolder(scratch.File(ids[0]), "node-a");
  EXPECT_FALSE(
      fs::exists(fs::path(std::string(absl::StripPrefix(local->LocationOf(*removed), "file://")))));
  EXPECT_EQ(retention.store_stats().pruned_total, 2u);
  EXPECT_EQ(retention.store_stats().kept_bytes, 2 * one);
}

// profd with a 1-byte cap: a capture's folder goes once it is stored, and the capture is still
// reported from the store.
TEST(RetentionProfdTest, CaptureFolderGoesOnceStoredAndStaysReportable) {
  ProfdProcess profd({"--capture_retention_bytes=1", "--retention_interval=50ms"});
  profd.Start();
  auto agent = std::make_unique<Subprocess>(
      std::vector<std::string>{BuildPath("tests/integration/replay_agent"),
                               SourcePath("tests/fixtures/burst_1000_kernels.batches.pb")},
      std::map<std::string, std::string>{{"PROFD_AGENT_SOCKET", profd.agent_socket()}});
  ASSERT_TRUE(WaitFor([&] { return profd.ProfctlJson({"agents"})["agents"].Size() == 1; },
                      absl::Seconds(5)));
  rapidjson::Document c = profd.ProfctlJson({"capture", "--all", "--duration", "300ms"});
  ASSERT_STREQ(c["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd.log();
  const std::string id = c["capture_id"].GetString();
  const std::string folder = fs::path(c["files"][0]["path"].GetString()).parent_path().string();
  ASSERT_TRUE(WaitFor([&] { return !fs::exists(folder); }, absl::Seconds(20))) << profd.log();
  // Logged just after the folder goes.
  EXPECT_TRUE(
      WaitFor([&] { return profd.log().find("deleted capture folder " + id) != std::string::npos; },
              absl::Seconds(5)))
      << profd.log();
  RunResult report = profd.Profctl({"report", id});
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("profd_test_kernel"), std::string::npos) << report.out;
}

}  // namespace
}  // namespace profd::testing
