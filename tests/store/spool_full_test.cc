// The spool on another file system that is full, with the real profd, profctl and a capture of the
// real agent (replay_agent): the capture is kept, said to be not stored (exit 1, ENOSPC named),
// logged, counted in /metrics, listed by `profctl spool`, `captures` and `list`, left alone by
// retention, and stored once room returns, and after a restart.
//
// The full disk is a real one: a tmpfs of 64 KiB, filled, mounted over the spool folder in
// profd's own mount namespace (`unshare -m`, root only: the host's mounts are untouched and the
// mount vanishes with profd); room returns by emptying it from inside that namespace (nsenter).
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "daemon/store/spool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/metrics/http_get.h"
#include "tests/store/store_test_util.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// The value of an unlabelled-but-host sample of `metric` in a Prometheus text page, -1 if absent.
// (Plain string search: libstdc++'s <regex> trips GCC 12's -Wmaybe-uninitialized in the
// sanitizer build, where warnings are errors.)
double Sample(const std::string& page, const std::string& metric) {
  for (size_t at = page.find("\n" + metric); at != std::string::npos;
       at = page.find("\n" + metric, at + 1)) {
    const size_t name_end = at + 1 + metric.size();
    if (name_end >= page.size() || (page[name_end] != '{' && page[name_end] != ' ')) continue;
    const size_t eol = page.find('\n', name_end);
    const std::string line = page.substr(name_end, eol == std::string::npos ? eol : eol - name_end);
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    return std::stod(line.substr(space + 1));
  }
  return -1;
}

class SpoolFullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "mounting a full tmpfs over the spool needs root (CI runs as root); the "
                      "write-error path is also covered without a mount by "
                      "SpoolWriteErrorTest.AFailedWriteKeepsTheCaptureAndRetriesIt";
    }
    spool_ = dir_.File("spool");
    fs::create_directories(spool_);
    RunResult probe = testing::Run({"/usr/bin/unshare", "-m", "/bin/sh", "-c",
                                    "mount -t tmpfs -o size=64k profd-probe \"$0\"", spool_});
    if (probe.exit_code != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs in a mount namespace here: " << probe.err;
    }
  }

  // profd in a mount namespace of its own, its spool a full 64 KiB tmpfs (the folders the spool
  // makes at start exist; everything else fails with ENOSPC).
  void StartOnAFullSpool() {
    profd_ = std::make_unique<ProfdProcess>(Flags());
    profd_->set_launcher(
        {"/usr/bin/unshare", "-m", "/bin/sh", "-c",
         "mount -t tmpfs -o size=64k,mode=0700 profd-full \"$0\" && mkdir -p \"$0/incoming\" "
         "\"$0/pending\" \"$0/failed\" && { head -c 1M /dev/zero > \"$0/.fill\" 2>/dev/null; "
         "exec \"$@\"; }",
         spool_});
    profd_->Start();
  }

  std::vector<std::string> Flags() const {
    return {"--spool_dir=" + spool_, "--capture_min_free=0", "--upload_retry_initial=200ms",
            "--upload_retry_max=1s",
            // Retention as eager as it gets: anything it may delete goes at once.
            "--capture_retention_bytes=1", "--retention_interval=100ms"};
  }

  // Inside profd's mount namespace.
  RunResult InProfdsMounts(const std::string& script) {
    return testing::Run({"/usr/bin/nsenter", "-t", std::to_string(profd_->pid()), "-m", "/bin/sh",
                         "-c", script, spool_});
  }

  std::string Capture(pid_t pid, RunResult* said) {
    *said = profd_->Profctl({"capture", "--pid", std::to_string(pid), "--duration", "300ms"});
    const size_t at = said->out.find("Capture ");
    if (at == std::string::npos) return "";
    const size_t start = at + 8, end = said->out.find(':', start);
    if (end == std::string::npos) return "";
    const std::string id = said->out.substr(start, end - start);
    return id.find(' ') == std::string::npos ? id : "";
  }

  std::string Metrics() {
    rapidjson::Document status = profd_->ProfctlJson({"status"});
    absl::StatusOr<std::string> page =
        HttpGet(absl::StrCat("http://", status["metrics_address"].GetString(), "/metrics"));
    return page.ok() ? *page : "";
  }

  std::string Folder(const std::string& id) const {
    return profd_->runtime_dir() + "/captures/" + id;
  }

  TempDir dir_;
  std::string spool_;
  std::unique_ptr<ProfdProcess> profd_;
};

TEST_F(SpoolFullTest, ACaptureTheFullSpoolCannotTakeIsKeptSaidAndStoredWhenRoomReturns) {
  StartOnAFullSpool();
  auto agent = StartReplayAgent(profd_->agent_socket());
  ASSERT_TRUE(WaitFor([&] { return Registered(*profd_, agent->pid()); }, absl::Seconds(5)));

  RunResult said;
  const std::string id = Capture(agent->pid(), &said);
  ASSERT_FALSE(id.empty()) << said.out << said.err;
  // Not "done" and exit 0: the trace is not stored, and the error is named.
  EXPECT_EQ(said.exit_code, 1) << said.out << said.err;
  EXPECT_THAT(said.err, HasSubstr("NOT STORED"));
  EXPECT_THAT(said.err, HasSubstr("No space left on device (ENOSPC)"));
  EXPECT_THAT(said.out, HasSubstr("Trace: "));  // the trace itself is there
  EXPECT_THAT(profd_->log(), HasSubstr("capture " + id + " is not in the spool"));
  EXPECT_THAT(profd_->log(), HasSubstr("No space left on device (ENOSPC)"));

  // Shown where a user looks, and counted.
  RunResult spool = profd_->Profctl({"spool"});
  EXPECT_THAT(spool.out, HasSubstr("not spooled 1"));
  EXPECT_THAT(spool.out, HasSubstr(id));
  EXPECT_THAT(spool.out, HasSubstr("ENOSPC"));
  EXPECT_EQ(profd_->ProfctlJson({"spool"})["waiting_for_room"].GetInt(), 1);
  EXPECT_THAT(profd_->Profctl({"captures"}).out, HasSubstr("NOT STORED"));
  EXPECT_EQ(StateOf(*profd_, id), "TRACE_STATE_WAITING_FOR_ROOM");
  const std::string metrics = Metrics();
  EXPECT_GE(Sample(metrics, "profd_spool_write_failures_total"), 1) << metrics;
  EXPECT_EQ(Sample(metrics, "profd_spool_captures_waiting_for_room"), 1) << metrics;

  // Kept, marked, and retention (a 1-byte cap, sweeping every 100 ms) leaves it alone.
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_TRUE(fs::exists(Folder(id) + "/manifest.json"));
  EXPECT_TRUE(fs::exists(Folder(id) + "/" + store::kUnspooledMarker));

  // Room returns: spooled, then stored, without anyone asking.
  ASSERT_EQ(InProfdsMounts("rm -f \"$0/.fill\"").exit_code, 0);
  EXPECT_TRUE(WaitFor([&] { return Stored(*profd_, id); }, absl::Seconds(20)))
      << StateOf(*profd_, id) << profd_->log();
  EXPECT_EQ(profd_->ProfctlJson({"spool"})["waiting_for_room"].GetInt(), 0);
  EXPECT_EQ(Sample(Metrics(), "profd_spool_captures_waiting_for_room"), 0);
  EXPECT_FALSE(fs::exists(Folder(id) + "/" + store::kUnspooledMarker));
  RunResult got = profd_->Profctl({"get", id, "-o", dir_.File("got")});
  EXPECT_EQ(got.exit_code, 0) << got.err;

  // Full again; profd restarted with room (its tmpfs goes with its namespace): taken at start.
  ASSERT_EQ(InProfdsMounts("head -c 1M /dev/zero > \"$0/.fill\"; true").exit_code, 0);
  const std::string second = Capture(agent->pid(), &said);
  ASSERT_FALSE(second.empty()) << said.out << said.err;
  EXPECT_EQ(said.exit_code, 1) << said.out << said.err;
  profd_->Stop();
  EXPECT_TRUE(fs::exists(Folder(second) + "/" + store::kUnspooledMarker));
  profd_->set_launcher({});
  profd_->Start();
  EXPECT_TRUE(WaitFor([&] { return Stored(*profd_, second); }, absl::Seconds(20)))
      << StateOf(*profd_, second) << profd_->log();
  EXPECT_THAT(profd_->log(), HasSubstr("were not spooled before profd stopped"));
  EXPECT_FALSE(fs::exists(Folder(second) + "/" + store::kUnspooledMarker));
}

}  // namespace
}  // namespace profd::testing
