// Spool: reserve -> write -> submit -> background upload, the size cap, and resuming after a
// restart. The broken store is a real one: an S3 store whose endpoint has nothing listening.
#include "daemon/store/spool.h"

#include <stdlib.h>

#include <filesystem>

#include "absl/time/clock.h"
#include "daemon/common/capture_id.h"
#include "daemon/common/sha256.h"
#include "daemon/store/trace_import.h"
#include "gtest/gtest.h"
#include "tests/store/store_test_util.h"

namespace profd::testing {
namespace {

namespace fs = std::filesystem;
using store::Spool;
using store::TraceStore;

class SpoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    local_ = *TraceStore::Open("file://" + store_dir_.path(), store::S3Options());
    store::S3Options s3;
    s3.endpoint = "http://127.0.0.1:" + std::to_string(FreeLoopbackPort());
    s3.path_style = true;
    s3.connect_timeout = absl::Seconds(2);
    down_ = *TraceStore::Open("s3://traces", s3);
  }

  std::unique_ptr<Spool> OpenSpool(TraceStore* store, uint64_t max_bytes = 1 << 30) {
    store::SpoolOptions options;
    options.dir = spool_dir_.path();
    options.max_bytes = max_bytes;
    options.retry_initial = absl::Milliseconds(50);
    options.retry_max = absl::Milliseconds(200);
    options.hostname = "node-a";
    auto spool = Spool::Open(options, store);
    EXPECT_TRUE(spool.ok()) << spool.status();
    return *std::move(spool);
  }

  // Reserve, write the capture's files into the reserved folder, submit.
  std::string Capture(Spool& spool, uint64_t padding = 0) {
    std::string id = NewCaptureId("node-a", absl::Now());
    auto folder = spool.Reserve(id, 4096 + padding);
    EXPECT_TRUE(folder.ok()) << folder.status();
    EXPECT_EQ(
        MakeCaptureFolder(fs::path(*folder).parent_path().string(), id, "node-a", "llm-1", padding),
        *folder);
    originals_[id] = Sha256File(*folder + "/trace-777.json.gz");
    auto queued = spool.Submit(id);
    EXPECT_TRUE(queued.ok()) << queued.status();
    return id;
  }

  std::string StoredSha(TraceStore& store, const std::string& id) {
    auto trace = store.Get(id);
    if (!trace.ok()) return trace.status().ToString();
    Sha256 sha;
    absl::Status s = store.Read(*trace, "trace-777.json.gz", [&](absl::string_view c) {
      sha.Update(c);
      return absl::OkStatus();
    });
    return s.ok() ? sha.HexDigest() : s.ToString();
  }

  TempDir spool_dir_, store_dir_;
  std::unique_ptr<TraceStore> local_, down_;
  std::map<std::string, std::string> originals_;
};

TEST_F(SpoolTest, SubmittedCaptureArrivesInTheStoreAndLeavesTheSpool) {
  auto spool = OpenSpool(local_.get());
  std::string id = Capture(*spool);
  ASSERT_TRUE(WaitFor([&] { return spool->stats().uploaded_total == 1; }, absl::Seconds(10)));
  EXPECT_EQ(StoredSha(*local_, id), originals_[id]);
  store::SpoolStats stats = spool->stats();
  EXPECT_EQ(stats.pending, 0u);
  EXPECT_EQ(stats.bytes, 0u);
  EXPECT_FALSE(fs::exists(spool_dir_.File("pending/" + id)));
  EXPECT_FALSE(spool->FindPending(id).has_value());
}

TEST_F(SpoolTest, FullSpoolRefusesNewCapturesAndKeepsFinishedOnes) {
  auto spool = OpenSpool(down_.get(), /*max_bytes=*/64 << 10);
  std::vector<std::string> kept;
  absl::Status refused;
  for (int i = 0; i < 20 && refused.ok(); ++i) {
    std::string id = NewCaptureId("node-a", absl::Now());
    auto folder = spool->Reserve(id, 16 << 10);
    if (!folder.ok()) {
      refused = folder.status();
      break;
    }
    MakeCaptureFolder(fs::path(*folder).parent_path().string(), id, "node-a", "llm-1", 12 << 10);
    ASSERT_TRUE(spool->Submit(id).ok());
    kept.push_back(id);
  }
  ASSERT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_NE(refused.message().find("spool full"), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("--spool_max_bytes"), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("never dropped"), std::string::npos) << refused;
  EXPECT_GE(kept.size(), 2u);
  store::SpoolStats stats = spool->stats();
  EXPECT_EQ(stats.refused_total, 1u);
  EXPECT_EQ(stats.pending, kept.size());
  for (const std::string& id : kept) {
    EXPECT_TRUE(fs::exists(spool_dir_.File("pending/" + id + "/manifest.json"))) << id;
  }
  EXPECT_FALSE(spool->CheckSpace(16 << 10).ok());
}

TEST_F(SpoolTest, RestartResumesPendingUploadsByteIdentical) {
  std::vector<std::string> ids;
  std::string unfinished = NewCaptureId("node-a", absl::Now()) + "-x";
  {
    auto spool = OpenSpool(down_.get());
    ids.push_back(Capture(*spool));
    ids.push_back(Capture(*spool, 3 << 20));
    ASSERT_TRUE(spool->Reserve(unfinished, 100).ok());
    ASSERT_TRUE(
        WaitFor([&] { return spool->stats().upload_failures_total >= 2; }, absl::Seconds(20)));
    store::SpoolStats stats = spool->stats();
    EXPECT_NE(stats.last_error.find("unreachable"), std::string::npos) << stats.last_error;
    EXPECT_EQ(stats.pending, 2u);
    EXPECT_EQ(stats.uploaded_total, 0u);
    auto pending = spool->Pending();
    ASSERT_EQ(pending.size(), 2u);
    EXPECT_EQ(pending[0].state(), v1::TRACE_STATE_SPOOLED);
    EXPECT_NE(pending[0].upload_error().find("unreachable"), std::string::npos);
  }  // "profd stops" with two uploads pending and one capture half-written

  auto spool = OpenSpool(local_.get());
  EXPECT_FALSE(fs::exists(spool_dir_.File("incoming/" + unfinished)));
  ASSERT_TRUE(WaitFor([&] { return spool->stats().uploaded_total == 2; }, absl::Seconds(20)));
  for (const std::string& id : ids) EXPECT_EQ(StoredSha(*local_, id), originals_[id]) << id;
}

TEST_F(SpoolTest, ReserveChecksIdsAndAbandonFreesTheSpace) {
  auto spool = OpenSpool(down_.get(), 1 << 20);
  EXPECT_TRUE(absl::IsInvalidArgument(spool->Reserve("../escape", 1).status()));
  std::string id = NewCaptureId("node-a", absl::Now());
  ASSERT_TRUE(spool->Reserve(id, 900 << 10).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(spool->Reserve(id, 1).status()));
  EXPECT_TRUE(absl::IsResourceExhausted(spool->CheckSpace(200 << 10)));
  // A submit without a manifest is refused and the reservation stays.
  auto no_manifest = spool->Submit(id);
  EXPECT_TRUE(absl::IsFailedPrecondition(no_manifest.status())) << no_manifest.status();
  EXPECT_EQ(spool->stats().reserved, 1u);
  spool->Abandon(id);
  EXPECT_EQ(spool->stats().reserved, 0u);
  EXPECT_TRUE(spool->CheckSpace(200 << 10).ok());
  EXPECT_FALSE(fs::exists(spool_dir_.File("incoming/" + id)));
}

}  // namespace
}  // namespace profd::testing
