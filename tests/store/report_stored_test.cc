// `profctl report` and `profctl show` on what the store holds, with a real profd (local store in
// its own temp folder) and the real profctl: an import, a capture from before a profd restart,
// another node's capture, and a capture folder of several processes, reported per process and
// together. No S3 server needed.
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "analysis/format.h"
#include "daemon/store/trace_store.h"
#include "gtest/gtest.h"
#include "tests/store/store_test_util.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

namespace fs = std::filesystem;

uint64_t Uint(const rapidjson::Value& v) {
  return v.IsString() ? std::stoull(v.GetString()) : v.GetUint64();
}

// profctl run with its own TMPDIR, to see what it leaves there.
RunResult ProfctlWithTmp(const ProfdProcess& profd, const std::string& tmp,
                         std::vector<std::string> args) {
  std::vector<std::string> argv = {BuildPath("client/profctl"), "--target", profd.target()};
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv, {{"TMPDIR", tmp}});
}

TEST(ReportStoredTest, AnImportIsReportedFromTheStoreAsItsFileIs) {
  ProfdProcess profd;
  profd.Start();
  TempDir scratch, tmp;
  const std::string file = MakeTraceFile(scratch.File("kineto.json.gz"), 9, 0, /*gzip=*/true);
  rapidjson::Document imported = profd.ProfctlJson({"import", file});
  ASSERT_TRUE(imported.HasMember("trace")) << profd.log();
  const std::string id = imported["trace"]["capture_id"].GetString();
  ASSERT_TRUE(WaitFor([&] { return Stored(profd, id); }, absl::Seconds(20))) << profd.log();

  // It once answered "no capture": imports were never in profd's memory.
  RunResult text = ProfctlWithTmp(profd, tmp.path(), {"report", id});
  ASSERT_EQ(text.exit_code, 0) << text.out << text.err;
  EXPECT_NE(text.out.find("Trace: " + id + "/trace-777.json.gz"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("kernel_0"), std::string::npos) << text.out;
  // The downloaded copy is gone when the report is done.
  EXPECT_TRUE(fs::is_empty(tmp.path()));

  // The same numbers as the file itself: one analysis, whatever the way in.
  rapidjson::Document from_store = profd.ProfctlJson({"report", id});
  rapidjson::Document from_file = profd.ProfctlJson({"report", file});
  EXPECT_EQ(Uint(from_store["kernel_count"]), 9u);
  EXPECT_EQ(Uint(from_store["kernel_count"]), Uint(from_file["kernel_count"]));
  EXPECT_EQ(Uint(from_store["kernel_time_ns"]), Uint(from_file["kernel_time_ns"]));
  EXPECT_FALSE(from_store.HasMember("per_process"));  // one process: the report as it was

  // A file that is no trace: said about the file given, with the cause, and nothing of profd's
  // spool (its copy was <spool>/incoming/<id>/.upload).
  const std::string not_json = scratch.File("notes.txt");
  std::ofstream(not_json) << "not a trace\n";
  RunResult bad = profd.Profctl({"import", not_json});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("cannot import " + not_json +
                         ": notes.txt is not a Chrome trace JSON (plain or .gz): not a valid JSON"),
            std::string::npos)
      << bad.err;
  EXPECT_EQ(bad.err.find("spool"), std::string::npos) << bad.err;
  EXPECT_EQ(bad.err.find(".upload"), std::string::npos) << bad.err;

  // An id nothing knows: exit 4, and where profctl looked.
  RunResult unknown = profd.Profctl({"report", "20200101T000000Z-nowhere-00000000"});
  EXPECT_EQ(unknown.exit_code, 4) << unknown.err;
  EXPECT_NE(unknown.err.find("nor a capture profd has in memory or in its store"),
            std::string::npos)
      << unknown.err;
}

TEST(ReportStoredTest, AnotherNodesCaptureIsReported) {
  ProfdProcess profd;
  profd.Start();
  // Another node's profd put it into the shared store (the same TraceStore code, its own index).
  TempDir scratch;
  const std::string id = absl::StrCat(
      absl::FormatTime("%Y%m%dT%H%M%SZ", absl::Now(), absl::UTCTimeZone()), "-gpu-node-7-0000abcd");
  const std::string folder = MakeCaptureFolder(scratch.path(), id, "gpu-node-7", "llm-3");
  {
    auto store = store::TraceStore::Open("file://" + profd.runtime_dir() + "/store", {});
    ASSERT_TRUE(store.ok()) << store.status();
    auto described = store::DescribeCaptureFolder(folder, "gpu-node-7");
    ASSERT_TRUE(described.ok()) << described.status();
    ASSERT_TRUE((*store)->Put(*described, folder, /*may_move=*/false).ok());
  }
  ASSERT_EQ(StateOf(profd, id), "TRACE_STATE_STORED");
  rapidjson::Document report = profd.ProfctlJson({"report", id});
  ASSERT_TRUE(report.HasMember("kernel_count")) << profd.log();
  EXPECT_EQ(Uint(report["kernel_count"]), 5u);
}

// Two processes captured together: the capture from before a profd restart is fetched from the
// store; the same capture's folder is reported directly; both per process and together.
TEST(ReportStoredTest, ACaptureFromBeforeARestartAndItsFolderPerProcess) {
  ProfdProcess profd;
  profd.Start();
  auto a = StartReplayAgent(profd.agent_socket());
  auto b = StartReplayAgent(profd.agent_socket());
  ASSERT_TRUE(WaitFor([&] { return profd.ProfctlJson({"agents"})["agents"].Size() == 2; },
                      absl::Seconds(5)));
  rapidjson::Document c = profd.ProfctlJson({"capture", "--all", "--duration", "300ms"});
  ASSERT_STREQ(c["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd.log();
  const std::string id = c["capture_id"].GetString();
  // The capture folder profd wrote into --capture_dir.
  const std::string folder = fs::path(c["files"][0]["path"].GetString()).parent_path().string();
  ASSERT_EQ(c["files"].Size(), 2u);
  ASSERT_TRUE(WaitFor([&] { return Stored(profd, id); }, absl::Seconds(20))) << profd.log();
  a.reset();
  b.reset();
  profd.Stop();
  profd.Start();  // its memory of recent captures is gone; the store is not

  RunResult text = profd.Profctl({"report", id});
  ASSERT_EQ(text.exit_code, 0) << text.out << text.err;
  EXPECT_NE(text.out.find("PER PROCESS"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("ALL 2 PROCESSES TOGETHER"), std::string::npos) << text.out;
  // Each row is named by its trace's file name, whole; the capture they came from is said once.
  EXPECT_NE(text.out.find("traces in " + id), std::string::npos) << text.out;
  RunResult by_folder = profd.Profctl({"report", folder});
  ASSERT_EQ(by_folder.exit_code, 0) << by_folder.err;
  EXPECT_NE(by_folder.out.find("traces in " + folder), std::string::npos) << by_folder.out;
  for (const auto& f : c["files"].GetArray()) {
    const std::string row_start = std::string("\n  ") + f["name"].GetString() + " ";
    EXPECT_NE(text.out.find(row_start), std::string::npos) << text.out;
    EXPECT_NE(by_folder.out.find(row_start), std::string::npos) << by_folder.out;
  }

  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"report", id}, std::vector<std::string>{"report", folder}}) {
    rapidjson::Document r = profd.ProfctlJson(args);
    ASSERT_TRUE(r.HasMember("per_process")) << args[1];
    ASSERT_EQ(r["per_process"].Size(), 2u);
    uint64_t sum = 0;
    for (const auto& p : r["per_process"].GetArray()) {
      EXPECT_EQ(Uint(p["report"]["kernel_count"]), 1000u) << p["trace"].GetString();
      sum += Uint(p["report"]["kernel_count"]);
    }
    EXPECT_EQ(Uint(r["kernel_count"]), sum) << args[1];
  }

  // A folder without traces says so.
  TempDir empty;
  RunResult none = profd.Profctl({"report", empty.path()});
  EXPECT_EQ(none.exit_code, 4);
  EXPECT_NE(none.err.find("holds no trace"), std::string::npos) << none.err;
}

// `profctl show`: fields and tables in the report's units, no raw JSON; --json keeps the JSON.
TEST(ReportStoredTest, ShowIsReadableInOneUnitStyle) {
  ProfdProcess profd;
  profd.Start();
  auto agent = StartReplayAgent(profd.agent_socket());
  ASSERT_TRUE(WaitFor([&] { return profd.ProfctlJson({"agents"})["agents"].Size() == 1; },
                      absl::Seconds(5)));
  rapidjson::Document c = profd.ProfctlJson({"capture", "--all", "--duration", "300ms"});
  ASSERT_STREQ(c["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd.log();
  const std::string id = c["capture_id"].GetString();
  ASSERT_TRUE(WaitFor([&] { return Stored(profd, id); }, absl::Seconds(20))) << profd.log();

  RunResult show = profd.Profctl({"show", id});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_EQ(show.out.find('{'), std::string::npos) << "raw JSON in:\n" << show.out;
  EXPECT_EQ(show.out.find("CAPTURE_PHASE"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("phase      done"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("PROCESSES"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find(std::to_string(agent->pid())), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("profd_test_kernel"), std::string::npos) << show.out;

  // Every number in the units `profctl report` prints them in.
  rapidjson::Document shown = profd.ProfctlJson({"show", id});
  ASSERT_TRUE(shown["summary"].IsObject());
  const auto& top = shown["summary"]["top_kernels"][0];
  for (const char* field : {"total_ns", "min_ns", "max_ns"}) {
    EXPECT_NE(show.out.find(analysis::FormatDuration(static_cast<double>(Uint(top[field])))),
              std::string::npos)
        << field << "\n"
        << show.out;
  }
  EXPECT_NE(show.out.find("duration   " + analysis::FormatDuration(300e6)), std::string::npos)
      << show.out;
  const auto& gpu = shown["summary"]["gpus"][0];
  EXPECT_NE(show.out.find(analysis::FormatPercent(gpu["busy_ratio"].GetDouble())),
            std::string::npos)
      << show.out;
  const auto& file = shown["trace"]["files"][0];
  EXPECT_NE(show.out.find(analysis::FormatBytes(static_cast<double>(Uint(file["bytes"])))),
            std::string::npos)
      << show.out;
}

}  // namespace
}  // namespace profd::testing
