// Spool: reserve -> write -> submit -> background upload, the size cap, and resuming after a
// restart. The broken store is a real one: an S3 store whose endpoint has nothing listening.
#include "daemon/store/spool.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "absl/time/clock.h"
#include "common/capture_id.h"
#include "common/sha256.h"
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

namespace write_error {

// Fails the death-test child with a message the parent shows.
[[noreturn]] void Fail(const std::string& why) {
  std::cerr << "FAILED: " << why << std::endl;
  std::exit(1);
}

void Limit(rlim_t bytes) {
  rlimit limit{bytes, RLIM_INFINITY};
  if (setrlimit(RLIMIT_FSIZE, &limit) != 0) Fail("setrlimit");
}

// Runs in a child (EXPECT_EXIT): the file size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes the
// kernel refuse the spool's copy of a capture with EFBIG, the same path a full disk (ENOSPC)
// takes, with no mount needed. The capture folder is on another file system than the spool, so
// the spool copies rather than hard-links.
void SpoolUnderAFileSizeLimit(const std::string& spool_dir, const std::string& capture_dir,
                              const std::string& store_dir) {
  signal(SIGXFSZ, SIG_IGN);
  auto local = TraceStore::Open("file://" + store_dir, store::S3Options());
  if (!local.ok()) Fail(std::string(local.status().message()));
  store::SpoolOptions options;
  options.dir = spool_dir;
  options.capture_dir = capture_dir;
  options.retry_initial = absl::Milliseconds(50);
  options.retry_max = absl::Milliseconds(200);
  options.hostname = "node-a";
  auto take = [&](const std::string& id) {
    const std::string folder = MakeCaptureFolder(capture_dir, id, "node-a", "llm-1", 64 << 10);
    absl::StatusOr<v1::StoredTrace> described = store::DescribeCaptureFolder(folder, "node-a");
    if (!described.ok()) Fail(std::string(described.status().message()));
    return std::make_pair(folder, *described);
  };
  const std::string marker = std::string("/") + store::kUnspooledMarker;

  // 1. Refused while the limit holds: kept, said, counted, listed; taken once it is lifted.
  auto spool = Spool::Open(options, local->get());
  if (!spool.ok()) Fail(std::string(spool.status().message()));
  const std::string first = "20260102T030405Z-node-a-00000001";
  auto [folder, described] = take(first);
  Limit(4096);
  absl::StatusOr<v1::StoredTrace> queued = (*spool)->SubmitCopy(described, folder);
  if (queued.ok()) Fail("spooled despite the file size limit");
  const std::string said(queued.status().message());
  if (said.find("File too large (EFBIG)") == std::string::npos) Fail("no EFBIG in: " + said);
  if (said.find("kept in " + folder) == std::string::npos) Fail("no folder in: " + said);
  store::SpoolStats stats = (*spool)->stats();
  if (stats.waiting_for_room != 1 || stats.write_failures_total < 1 || stats.pending != 0) {
    Fail("stats: waiting " + std::to_string(stats.waiting_for_room) + ", failures " +
         std::to_string(stats.write_failures_total));
  }
  if (!(*spool)->Holds(first)) Fail("the spool does not hold the waiting capture");
  std::vector<v1::StoredTrace> listed = (*spool)->Pending();
  if (listed.size() != 1 || listed[0].state() != v1::TRACE_STATE_WAITING_FOR_ROOM) {
    Fail("not listed as waiting for room");
  }
  if (!fs::exists(folder + marker)) Fail("no mark in " + folder);
  absl::SleepFor(absl::Milliseconds(300));  // retried meanwhile, and refused again
  if ((*spool)->stats().write_failures_total < 2) Fail("not retried");
  Limit(RLIM_INFINITY);
  if (!WaitFor([&] { return (*local)->Get(first).ok(); }, absl::Seconds(10))) {
    Fail("not stored once the limit was lifted");
  }
  if (fs::exists(folder + marker)) Fail("mark left in " + folder);
  if ((*spool)->stats().waiting_for_room != 0) Fail("still counted as waiting");

  // 2. Refused, then profd stops: the next start finds the mark and takes it.
  const std::string second = "20260102T030406Z-node-a-00000002";
  auto [folder2, described2] = take(second);
  Limit(4096);
  if ((*spool)->SubmitCopy(described2, folder2).ok()) Fail("second spooled despite the limit");
  spool->reset();
  Limit(RLIM_INFINITY);
  auto reopened = Spool::Open(options, local->get());
  if (!reopened.ok()) Fail(std::string(reopened.status().message()));
  if (!WaitFor([&] { return (*local)->Get(second).ok(); }, absl::Seconds(10))) {
    Fail("not stored after the restart");
  }
  if (fs::exists(folder2 + marker)) Fail("mark left in " + folder2);
  std::exit(0);
}

}  // namespace write_error

// A write into the spool that fails (here EFBIG from RLIMIT_FSIZE, in a child process) no longer
// loses the capture: it stays in its folder, marked, the error names the errno, and it is taken
// when writes work again, without and with a restart.
TEST(SpoolWriteErrorTest, AFailedWriteKeepsTheCaptureAndRetriesIt) {
  TempDir spool, store;
  // /dev/shm is a tmpfs: another file system than TempDir's, so the spool has to copy.
  struct stat shm, tmp;
  if (stat("/dev/shm", &shm) != 0 || stat(spool.path().c_str(), &tmp) != 0 ||
      shm.st_dev == tmp.st_dev || access("/dev/shm", W_OK) != 0) {
    GTEST_SKIP() << "needs a writable /dev/shm on another file system than " << spool.path()
                 << " (so the spool copies the capture instead of hard-linking it)";
  }
  char pattern[] = "/dev/shm/profd-captures-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string captures = pattern;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(write_error::SpoolUnderAFileSizeLimit(spool.path(), captures, store.path()),
              ::testing::ExitedWithCode(0), "");
  fs::remove_all(captures);
}

}  // namespace
}  // namespace profd::testing
