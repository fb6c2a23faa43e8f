// TraceStore on a local directory (the default store): key layout, index, filters, reads.
#include "daemon/store/trace_store.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/capture_id.h"
#include "daemon/store/trace_import.h"
#include "gtest/gtest.h"
#include "tests/store/store_test_util.h"

namespace profd::testing {
namespace {

namespace fs = std::filesystem;
using store::TraceStore;

std::unique_ptr<TraceStore> OpenLocal(const std::string& root) {
  auto s = TraceStore::Open("file://" + root, store::S3Options());
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

v1::StoredTrace PutCapture(TraceStore& store, const std::string& scratch, const std::string& id,
                           const std::string& host, const std::string& pod,
                           absl::Time started = absl::Now()) {
  std::string folder = MakeCaptureFolder(scratch, id, host, pod, 0, started);
  auto described = store::DescribeCaptureFolder(folder, "default-host");
  EXPECT_TRUE(described.ok()) << described.status();
  auto stored = store.Put(*described, folder, /*may_move=*/false);
  EXPECT_TRUE(stored.ok()) << stored.status();
  return *stored;
}

TEST(TraceStoreTest, LocalStoreUsesTheFleetKeyLayoutAndReadsBack) {
  TempDir root, scratch;
  auto store = OpenLocal(root.path());
  const std::string id = NewCaptureId("node-a", absl::Now());
  v1::StoredTrace stored = PutCapture(*store, scratch.path(), id, "node-a", "llm-1");

  // <yyyy>/<mm>/<dd>/<hostname>/<capture-id>/ with the files, and the host's day index beside.
  std::string day = absl::StrCat(id.substr(0, 4), "/", id.substr(4, 2), "/", id.substr(6, 2));
  std::string folder = absl::StrCat(root.path(), "/", day, "/node-a/", id);
  for (const char* f : {"manifest.json", "summary.json", "trace-777.json.gz"}) {
    EXPECT_TRUE(fs::exists(folder + "/" + f)) << folder << "/" << f;
  }
  EXPECT_TRUE(fs::exists(absl::StrCat(root.path(), "/_index/", id.substr(0, 4), "-",
                                      id.substr(4, 2), "-", id.substr(6, 2), "/node-a.json")));
  EXPECT_EQ(stored.location(), "file://" + folder + "/");
  EXPECT_EQ(stored.state(), v1::TRACE_STATE_STORED);
  ASSERT_EQ(stored.pods_size(), 1);
  EXPECT_EQ(stored.pods(0), "serving/llm-1");

  auto got = store->Get(id);
  ASSERT_TRUE(got.ok()) << got.status();
  std::string bytes;
  ASSERT_TRUE(store
                  ->Read(*got, "trace-777.json.gz",
                         [&](absl::string_view c) {
                           bytes.append(c.data(), c.size());
                           return absl::OkStatus();
                         })
                  .ok());
  EXPECT_EQ(bytes, ReadFile(scratch.File(id + "/trace-777.json.gz")));
  EXPECT_TRUE(absl::IsNotFound(
      store->Read(*got, "../../etc/passwd", [](absl::string_view) { return absl::OkStatus(); })));
}

TEST(TraceStoreTest, ListFiltersByHostPodAndTimeNewestFirst) {
  TempDir root, scratch;
  auto store = OpenLocal(root.path());
  absl::Time now = absl::Now();
  std::string old_id = NewCaptureId("node-a", now - absl::Hours(50));
  std::string a = NewCaptureId("node-a", now - absl::Minutes(5));
  std::string b = NewCaptureId("node-b", now);
  PutCapture(*store, scratch.path(), old_id, "node-a", "llm-1", now - absl::Hours(50));
  PutCapture(*store, scratch.path(), a, "node-a", "llm-1", now - absl::Minutes(5));
  PutCapture(*store, scratch.path(), b, "node-b", "embed-2", now);

  auto all = store->List({});
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].capture_id(), b);
  EXPECT_EQ((*all)[1].capture_id(), a);
  EXPECT_EQ((*all)[2].capture_id(), old_id);
  store::TraceFilter by_host;
  by_host.hostname = "node-b";
  auto b_only = store->List(by_host);
  ASSERT_TRUE(b_only.ok());
  ASSERT_EQ(b_only->size(), 1u);
  EXPECT_EQ((*b_only)[0].capture_id(), b);

  store::TraceFilter by_pod;
  by_pod.pod = "llm-1";
  EXPECT_EQ(store->List(by_pod)->size(), 2u);
  by_pod.pod = "serving/embed-2";
  EXPECT_EQ(store->List(by_pod)->size(), 1u);
  by_pod.pod = "nope";
  EXPECT_EQ(store->List(by_pod)->size(), 0u);

  store::TraceFilter limited;
  limited.limit = 1;
  auto one = store->List(limited);
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].capture_id(), b);

  store::TraceFilter recent;
  recent.since = now - absl::Hours(1);
  auto last_hour = store->List(recent);
  ASSERT_EQ(last_hour->size(), 2u);
  EXPECT_EQ((*last_hour)[1].capture_id(), a);
  recent.since = now + absl::Minutes(1);
  EXPECT_EQ(store->List(recent)->size(), 0u);

  EXPECT_TRUE(store->Get(old_id).ok());
  EXPECT_TRUE(absl::IsNotFound(store->Get(NewCaptureId("node-a", now)).status()));
}

TEST(TraceStoreTest, RejectsBadIdsAndUris) {
  EXPECT_TRUE(absl::IsInvalidArgument(store::ValidateCaptureId("../etc")));
  EXPECT_TRUE(absl::IsInvalidArgument(store::ValidateCaptureId("")));
  EXPECT_TRUE(store::ValidateCaptureId("20261129T120000Z-node-a-0badcafe").ok());

  auto bad = TraceStore::Open("ftp://somewhere", store::S3Options());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("s3://bucket"), std::string::npos);
  EXPECT_FALSE(TraceStore::Open("s3://", store::S3Options()).ok());
  EXPECT_FALSE(TraceStore::Open("file://relative/path", store::S3Options()).ok());
  store::S3Options tiny;
  tiny.part_size = 1 << 20;
  auto small_parts = TraceStore::Open("s3://b/p", tiny);
  ASSERT_FALSE(small_parts.ok());
  EXPECT_NE(small_parts.status().message().find("5 MiB"), std::string::npos);
}

TEST(TraceStoreTest, FolderWithoutManifestIsRefused) {
  TempDir dir;
  fs::create_directories(dir.File("x"));
  auto d = store::DescribeCaptureFolder(dir.File("x"), "h");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("manifest.json"), std::string::npos);
}

}  // namespace
}  // namespace profd::testing
