// The capture folder's manifest entries: a trace's size and SHA-256 come from the bytes as the
// writer writes them, and must be those of the file on disk (profctl get and the store check
// them); summary.json and manifest.json are written whole.
#include "daemon/capture/capture_folder.h"

#include <filesystem>
#include <tuple>

#include "common/sha256.h"
#include "gtest/gtest.h"
#include "tests/support/fixtures.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using testing::TempDir;

TEST(CaptureFolderTest, TraceDigestIsTakenWhileWritingAndMatchesTheFile) {
  for (auto [format, name, manifest_format] :
       {std::tuple{TraceFormat::kChromeJson, "trace-465.json.gz", "chrome-json-gz"},
        std::tuple{TraceFormat::kPerfetto, "trace-465.pftrace.gz", "perfetto-pb-gz"}}) {
    SCOPED_TRACE(name);
    TempDir dir;
    CaptureFolder folder(dir.File("capture"));  // created with the first trace
    TraceProcess process;
    process.pid = 465;
    process.capture_id = "fixture";
    auto writer = folder.CreateTrace(process, format, 1);
    ASSERT_TRUE(writer.ok()) << writer.status();
    StringTable names;
    for (const v1::EventBatch& b : testing::ReadRecordedBatches(
             testing::SourcePath("tests/fixtures/burst_1000_kernels.batches.pb"))) {
      names.Add(b);
      ASSERT_TRUE((*writer)->Write(b, names).ok());
    }
    ASSERT_TRUE((*writer)->Finish({}).ok());

    EXPECT_EQ(TraceFileName(465, format), name);
    v1::TraceFile file = folder.Describe(name, TraceFormatOf(format).manifest_format, 465);
    EXPECT_EQ(file.path(), dir.File(std::string("capture/") + name));
    EXPECT_EQ(file.format(), manifest_format);
    EXPECT_EQ(file.pid(), 465u);
    EXPECT_GT(file.bytes(), 1000u);
    EXPECT_EQ(file.bytes(), std::filesystem::file_size(file.path()));
    EXPECT_EQ(file.bytes(), (*writer)->compressed_bytes());
    EXPECT_EQ(file.sha256(), *Sha256OfFile(file.path()));
  }
}

TEST(CaptureFolderTest, FilesWrittenByOthersAreReadOnceForTheirDigest) {
  TempDir dir;
  CaptureFolder folder(dir.path());
  v1::CaptureInfo info;
  info.set_capture_id("20270115T080000Z-node-00000001");
  ASSERT_TRUE(folder.WriteManifest(info).ok());
  v1::TraceFile file = folder.Describe("manifest.json", kKinetoTraceManifestFormat, 7);
  EXPECT_EQ(file.bytes(), std::filesystem::file_size(dir.File("manifest.json")));
  EXPECT_EQ(file.sha256(), *Sha256OfFile(dir.File("manifest.json")));
  EXPECT_FALSE(std::filesystem::exists(dir.File("manifest.json.tmp")));
}

}  // namespace
}  // namespace profd
