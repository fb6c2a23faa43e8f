// A finished capture reaches the store typed (DescribeCapture from its CaptureInfo): the row
// must be the one the store makes from the folder's manifest.json (a restarted profd resumes
// pending captures that way), without reading back the traces the capture already digested.
#include <filesystem>

#include "common/atomic_file.h"
#include "common/proto_json.h"
#include "common/sha256.h"
#include "daemon/store/trace_store.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using testing::TempDir;

// A capture folder as CaptureOrchestrator writes it; returns its CaptureInfo.
v1::CaptureInfo WriteCapture(const std::string& folder) {
  std::filesystem::create_directories(folder);
  const std::string trace = "not really gzip, but bytes all the same";
  EXPECT_TRUE(WriteFileAtomically(folder + "/trace-777.json.gz", trace).ok());
  EXPECT_TRUE(WriteFileAtomically(folder + "/summary.json", "{}\n").ok());
  v1::CaptureInfo info;
  info.set_capture_id("20270115T080000Z-node-a-0000abcd");
  info.set_hostname("node-a");
  info.set_label("step 1000");
  info.set_requested_unix_ns(1'800'000'000'000'000'000);
  info.set_started_unix_ns(1'800'000'001'000'000'000);
  for (const char* pod : {"llm-1", "", "llm-1", "llm-2"}) {
    v1::ProcessCapture* p = info.add_processes();
    p->set_pid(777);
    p->set_pod_name(pod);
  }
  v1::TraceFile* file = info.add_files();
  file->set_name("trace-777.json.gz");
  file->set_path(folder + "/trace-777.json.gz");
  file->set_bytes(trace.size());
  file->set_sha256(Sha256Hex(trace));
  EXPECT_TRUE(WriteFileAtomically(folder + "/manifest.json", ProtoToJson(info)).ok());
  return info;
}

TEST(DescribeCaptureTest, TypedRowIsTheRowTheManifestGives) {
  TempDir dir;
  const std::string folder = dir.File("capture");
  v1::CaptureInfo info = WriteCapture(folder);

  v1::StoredTrace typed = store::DescribeCapture(info);
  ASSERT_TRUE(store::AddFolderFiles(folder, &typed).ok());
  absl::StatusOr<v1::StoredTrace> read = store::DescribeCaptureFolder(folder, "default-host");
  ASSERT_TRUE(read.ok()) << read.status();

  EXPECT_EQ(typed.SerializeAsString(), read->SerializeAsString()) << ProtoToJson(typed) << "\nvs\n"
                                                                  << ProtoToJson(*read);
  EXPECT_EQ(typed.started_unix_ns(), 1'800'000'001'000'000'000);
  ASSERT_EQ(typed.pods_size(), 2);
  EXPECT_EQ(typed.files_size(), 3);  // manifest.json, summary.json, trace-777.json.gz
}

TEST(DescribeCaptureTest, DigestsTheCaptureTookAreNotTakenAgain) {
  TempDir dir;
  const std::string folder = dir.File("capture");
  v1::CaptureInfo info = WriteCapture(folder);
  info.mutable_files(0)->set_sha256("taken-while-writing");

  v1::StoredTrace typed = store::DescribeCapture(info);
  ASSERT_TRUE(store::AddFolderFiles(folder, &typed).ok());
  for (const v1::StoredFile& f : typed.files()) {
    if (f.name() == "trace-777.json.gz") {
      EXPECT_EQ(f.sha256(), "taken-while-writing");
    } else if (f.name() == "summary.json") {
      EXPECT_EQ(f.sha256(), Sha256Hex("{}\n"));
    }
  }
}

}  // namespace
}  // namespace profd
