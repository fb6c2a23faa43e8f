// A shared store is untrusted input: anyone holding any node's credentials can write the bucket
// (and every profd sharing a local store folder can write it). A capture planted there whose index
// names a file "./../planted.json" must not make `profctl get` or `profctl report` write outside
// their folder, nor make profd read outside the capture's keys: the real profd and profctl, the
// capture planted in s3rver (behind the SigV4-verifying proxy, signed, as a node would write it)
// and in a file:// store folder.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/file_name.h"
#include "common/sha256.h"
#include "daemon/store/trace_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/store/store_test_util.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// A capture of another "host" on 2026-01-02: its index row, and the bytes of each file.
constexpr char kDay[] = "2026/01/02";
constexpr char kIndex[] = "_index/2026-01-02/evil.json";
constexpr char kPlantedId[] = "20260102T030405Z-evil-0badc0de";
// From `get -o <scratch>/a/out` this name leads to <scratch>/a/planted.json, and profctl's
// temporary ".<name>.part" to <scratch>/planted.json.part: both folders exist.
constexpr char kEvilName[] = "./../planted.json";
constexpr char kPayload[] = R"({"traceEvents": [], "planted": "by whoever holds a node's key"})";

std::string PlantedIndex() {
  const std::string manifest = R"({"capture_id": "20260102T030405Z-evil-0badc0de"})";
  return absl::StrCat(
      R"({"traces": [{"capture_id": ")", kPlantedId,
      R"(", "hostname": "evil", "started_unix_ns": "1767323045000000000", "state": )",
      R"("TRACE_STATE_STORED", "source": "capture", "files": [)", R"({"name": "manifest.json", )",
      R"("bytes": ")", manifest.size(), R"(", "sha256": ")", Sha256Hex(manifest), R"("}, )",
      R"({"name": ")", kEvilName, R"(", "bytes": ")", std::string(kPayload).size(),
      R"(", "sha256": ")", Sha256Hex(kPayload), R"("}]}]})");
}

std::string PlantedManifest() { return R"({"capture_id": "20260102T030405Z-evil-0badc0de"})"; }

class HostileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(scratch_.File("a"));
    out_ = scratch_.File("a/out");
  }

  // What profctl get and report may not do with the planted capture, whichever store holds it.
  void ExpectRefusedAndNothingOutside(const ProfdProcess& profd) {
    RunResult get = profd.Profctl({"get", kPlantedId, "-o", out_});
    EXPECT_NE(get.exit_code, 0) << get.out << get.err;
    EXPECT_THAT(get.out, Not(HasSubstr("checksums verified")));
    EXPECT_THAT(get.err, HasSubstr(kPlantedId));
    EXPECT_THAT(get.err, HasSubstr("./../planted.json"));
    EXPECT_THAT(get.err, HasSubstr("not a plain file name"));
    EXPECT_FALSE(fs::exists(scratch_.File("a/planted.json"))) << "written outside " << out_;
    EXPECT_FALSE(fs::exists(scratch_.File("planted.json.part"))) << "written outside " << out_;
    EXPECT_FALSE(fs::exists(scratch_.File("planted.json")));

    RunResult report = profd.Profctl({"report", kPlantedId});
    EXPECT_NE(report.exit_code, 0) << report.out << report.err;
    EXPECT_THAT(report.err, HasSubstr(kPlantedId));
    EXPECT_THAT(report.err, HasSubstr("not a plain file name"));

    // profd refuses the row itself, saying which capture and which name.
    RunResult show = profd.Profctl({"show", kPlantedId});
    EXPECT_NE(show.exit_code, 0) << show.out;
    EXPECT_THAT(show.err, HasSubstr("is refused"));
    EXPECT_THAT(show.err, HasSubstr("./../planted.json"));
    EXPECT_THAT(profd.log(), HasSubstr("is refused"));
    // And `list` still lists everything else.
    RunResult list = profd.Profctl({"list"});
    EXPECT_EQ(list.exit_code, 0) << list.err;
    EXPECT_THAT(list.out, Not(HasSubstr(kPlantedId)));
  }

  TempDir scratch_;
  std::string out_;
};

TEST_F(HostileStoreTest, AFileNamedOutsideTheFolderInAnS3IndexIsRefused) {
  if (!S3rverProcess::Installed()) GTEST_SKIP() << "s3rver is not installed: run scripts/setup.sh";
  ASSERT_TRUE(SigV4ProxyProcess::Installed()) << "run scripts/setup.sh";
  setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
  S3rverProcess s3rver({"traces"});
  s3rver.Start();
  SigV4ProxyProcess proxy(s3rver.endpoint(), "reject");
  proxy.Start();
  // Planted as a node would write it: signed requests through the verifying proxy.
  const std::string folder = absl::StrCat("shared/", kDay, "/evil/", kPlantedId, "/");
  ASSERT_EQ(SignedPut(proxy.endpoint(), "traces", folder + "manifest.json", PlantedManifest()), 200)
      << proxy.log();
  ASSERT_EQ(SignedPut(proxy.endpoint(), "traces", folder + kEvilName, kPayload), 200)
      << proxy.log();
  ASSERT_EQ(SignedPut(proxy.endpoint(), "traces", std::string("shared/") + kIndex, PlantedIndex()),
            200)
      << proxy.log();

  TempDir spool;
  ProfdProcess profd({"--store=s3://traces/shared", "--s3_endpoint=" + proxy.endpoint(),
                      "--s3_path_style", "--spool_dir=" + spool.path()});
  profd.Start();
  ExpectRefusedAndNothingOutside(profd);
}

TEST_F(HostileStoreTest, AFileNamedOutsideTheFolderInALocalStoreIsRefused) {
  TempDir store;
  const std::string folder = absl::StrCat(store.path(), "/", kDay, "/evil/", kPlantedId);
  fs::create_directories(folder);
  fs::create_directories(store.File("_index/2026-01-02"));
  std::ofstream(folder + "/manifest.json") << PlantedManifest();
  // Where the name leads from the capture's folder.
  std::ofstream(absl::StrCat(store.path(), "/", kDay, "/evil/planted.json")) << kPayload;
  std::ofstream(store.File(kIndex)) << PlantedIndex();
  // profd keeps a local store 2750 root:group; the folder must be its own.
  ProfdProcess profd({"--store=file://" + store.path()});
  profd.Start();
  ExpectRefusedAndNothingOutside(profd);
}

// A link planted in the output folder where profctl writes is replaced, never followed: the file
// it points to keeps its bytes.
TEST_F(HostileStoreTest, ALinkPlantedInTheOutputFolderIsNotFollowed) {
  ProfdProcess profd;
  profd.Start();
  RunResult imported =
      profd.Profctl({"--json", "import", MakeTraceFile(scratch_.File("t.json"), 3, 0, false)});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  rapidjson::Document doc;
  doc.Parse(imported.out.c_str());
  const std::string id = doc["trace"]["capture_id"].GetString();
  ASSERT_TRUE(WaitFor([&] { return Stored(profd, id); }, absl::Seconds(20))) << profd.log();
  rapidjson::Document shown = profd.ProfctlJson({"show", id});
  std::string trace_name;
  for (const auto& f : shown["trace"]["files"].GetArray()) {
    const std::string name = f["name"].GetString();
    if (name != "manifest.json" && name != "summary.json") trace_name = name;
  }
  ASSERT_FALSE(trace_name.empty());

  const std::string victim = scratch_.File("victim");
  std::ofstream(victim) << "precious";
  fs::create_directories(out_);
  // Where profctl writes first (the temporary) and last (the file itself).
  fs::create_symlink(victim, out_ + "/." + trace_name + ".part");
  fs::create_symlink(victim, out_ + "/manifest.json");
  RunResult get = profd.Profctl({"get", id, "-o", out_});
  EXPECT_EQ(get.exit_code, 0) << get.out << get.err;
  EXPECT_EQ(ReadFile(victim), "precious");
  EXPECT_FALSE(fs::is_symlink(out_ + "/" + trace_name));
  EXPECT_FALSE(fs::is_symlink(out_ + "/manifest.json"));
  EXPECT_TRUE(fs::is_regular_file(out_ + "/" + trace_name));
}

TEST(StoreNameTest, OnlyPlainFileNamesPass) {
  for (const char* good : {"manifest.json", "trace-1234.json.gz", "a", ".hidden", "..json"}) {
    EXPECT_TRUE(ValidatePlainFileName(good).ok()) << good;
  }
  for (const std::string& bad :
       {std::string(""), std::string("."), std::string(".."), std::string("a/b"),
        std::string("./../x"), std::string("/etc/passwd"), std::string("a\nb"),
        std::string("a\x1b[2Jb"), std::string("a\0b", 3), std::string(256, 'x'),
        std::string("x\x7f")}) {
    absl::Status s = ValidatePlainFileName(bad);
    EXPECT_FALSE(s.ok()) << EscapedName(bad);
    // The message never carries the control characters it refuses.
    for (char c : std::string(s.message())) EXPECT_GE(static_cast<unsigned char>(c), 0x20);
  }
  EXPECT_TRUE(ValidatePlainFileName(std::string(255, 'x')).ok());
}

TEST(StoreNameTest, AStoredRowNamingAPathIsRefusedWithItsCaptureAndName) {
  v1::StoredTrace row;
  row.set_capture_id(kPlantedId);
  row.set_hostname("evil");
  row.add_files()->set_name("manifest.json");
  EXPECT_TRUE(store::ValidateStoredTrace(row, "the index").ok());
  row.add_files()->set_name(kEvilName);
  absl::Status s = store::ValidateStoredTrace(row, "the index");
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(kPlantedId));
  EXPECT_THAT(s.message(), HasSubstr("./../planted.json"));
  row.mutable_files()->RemoveLast();
  row.set_hostname("..");
  EXPECT_FALSE(store::ValidateStoredTrace(row, "the index").ok());
}

}  // namespace
}  // namespace profd::testing
