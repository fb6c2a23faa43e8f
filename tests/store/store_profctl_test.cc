// The store end to end: a real profd with an S3 store (s3rver on loopback behind the
// SigV4-verifying proxy, with AWS's rule for absent signed headers) or a local one, traces entering
// through `profctl import` (the same Spool path a capture takes), and profctl list / show / get.
// Fault cases: the store down when a trace is finished, profd killed with uploads pending,
// credentials refused, a missing bucket, a full spool.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/store/store_test_util.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

namespace fs = std::filesystem;

class StoreProfctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!S3rverProcess::Installed())
      GTEST_SKIP() << "s3rver is not installed: run scripts/setup.sh";
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    s3rver_ = std::make_unique<S3rverProcess>(std::vector<std::string>{"traces"});
    ASSERT_TRUE(SigV4ProxyProcess::Installed()) << "run scripts/setup.sh";
    // profd talks to s3rver through the verifying proxy, with AWS's rule for signed headers.
    proxy_ = std::make_unique<SigV4ProxyProcess>(s3rver_->endpoint(), "reject");
  }

  // The S3 service comes up: s3rver and the proxy in front of it (nothing listens before).
  void StartS3() {
    s3rver_->Start();
    proxy_->Start();
  }

  std::unique_ptr<ProfdProcess> StartProfd(const std::string& store,
                                           std::vector<std::string> extra = {}) {
    std::vector<std::string> flags = {"--store=" + store,
                                      "--s3_endpoint=" + proxy_->endpoint(),
                                      "--s3_path_style",
                                      "--s3_part_size=5MiB",
                                      "--spool_dir=" + spool_.path(),
                                      "--upload_retry_initial=100ms",
                                      "--upload_retry_max=500ms"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    auto profd = std::make_unique<ProfdProcess>(flags);
    profd->Start();
    return profd;
  }

  // Imports through profctl --json; returns the capture id ("" on failure, with the output).
  std::string Import(const ProfdProcess& profd, const std::string& file) {
    rapidjson::Document doc = profd.ProfctlJson({"import", file, "--label", "from-test"});
    if (!doc.IsObject() || !doc.HasMember("trace")) return "";
    return doc["trace"]["capture_id"].GetString();
  }

  // profctl get into a fresh folder; returns the folder.
  std::string Get(const ProfdProcess& profd, const std::string& id) {
    std::string dir = scratch_.File("get-" + id);
    RunResult r = profd.Profctl({"get", id, "-o", dir});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("checksums verified against the manifest"), std::string::npos) << r.out;
    return dir;
  }

  std::unique_ptr<S3rverProcess> s3rver_;
  std::unique_ptr<SigV4ProxyProcess> proxy_;
  TempDir spool_, scratch_;
};

TEST_F(StoreProfctlTest, ImportListShowGetSingleAndMultipart) {
  StartS3();
  auto profd = StartProfd("s3://traces/fleet");
  std::string small = MakeTraceFile(scratch_.File("kineto.json"), 9, 0, /*gzip=*/false);
  std::string large = MakeTraceFile(scratch_.File("big.json.gz"), 30, 14 << 20, /*gzip=*/true);
  ASSERT_GT(fs::file_size(large), 10u << 20);

  RunResult human = profd->Profctl({"import", small});
  ASSERT_EQ(human.exit_code, 0) << human.out << human.err << profd->log();
  EXPECT_NE(human.out.find("(10 events, 9 kernels)"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("s3://traces/fleet/"), std::string::npos) << human.out;
  std::string big_id = Import(*profd, large);
  ASSERT_FALSE(big_id.empty()) << profd->log();

  ASSERT_TRUE(WaitFor([&] { return Stored(*profd, big_id); }, absl::Seconds(60)))
      << profd->log() << s3rver_->log();
  EXPECT_NE(s3rver_->log().find("?uploads"), std::string::npos) << "multipart upload expected";
  EXPECT_NE(s3rver_->log().find("partNumber=3"), std::string::npos);
  EXPECT_EQ(proxy_->Refused(), 0) << proxy_->log();

  RunResult list = profd->Profctl({"list"});
  EXPECT_EQ(list.exit_code, 0);
  EXPECT_NE(list.out.find(big_id), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("stored"), std::string::npos) << list.out;
  rapidjson::Document all = profd->ProfctlJson({"list", "--since", "1h"});
  EXPECT_EQ(all["traces"].GetArray().Size(), 2u);
  rapidjson::Document none = profd->ProfctlJson({"list", "--hostname", "another-node"});
  EXPECT_EQ(none["traces"].GetArray().Size(), 0u);

  RunResult show = profd->Profctl({"show", big_id});
  EXPECT_EQ(show.exit_code, 0) << show.err;
  EXPECT_NE(show.out.find("TOP KERNELS BY TOTAL TIME"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("kernel_0"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("big.json.gz"), std::string::npos) << show.out;  // manifest
  rapidjson::Document shown = profd->ProfctlJson({"show", big_id});
  EXPECT_STREQ(shown["manifest"]["source"].GetString(), "import");
  EXPECT_EQ(shown["summary"]["top_kernels"].GetArray().Size(), 3u);

  // The trace comes back byte-identical to the file imported (a .gz is stored as it is).
  std::string dir = Get(*profd, big_id);
  EXPECT_EQ(Sha256File(dir + "/trace-777.json.gz"), Sha256File(large));
  EXPECT_TRUE(fs::exists(dir + "/manifest.json"));
  EXPECT_TRUE(fs::exists(dir + "/summary.json"));

  const std::string nowhere = scratch_.File("nowhere");
  RunResult unknown = profd->Profctl({"get", "20200101T000000Z-nowhere-00000000", "-o", nowhere});
  EXPECT_EQ(unknown.exit_code, 4) << unknown.out << unknown.err;
  EXPECT_NE(unknown.err.find("no capture"), std::string::npos) << unknown.err;
  EXPECT_FALSE(fs::exists(nowhere)) << "a failed get leaves no folder behind";
  RunResult not_json = profd->Profctl({"import", "/etc/hostname"});
  EXPECT_NE(not_json.exit_code, 0);
  EXPECT_NE(not_json.err.find("not a Chrome trace JSON"), std::string::npos) << not_json.err;
  // Said about the file given, with the cause; profd's spool is no business of the user's.
  EXPECT_NE(not_json.err.find("cannot import /etc/hostname: hostname is not a Chrome trace JSON"),
            std::string::npos)
      << not_json.err;
  EXPECT_NE(not_json.err.find("not a valid JSON trace"), std::string::npos) << not_json.err;
  EXPECT_EQ(not_json.err.find(spool_.path()), std::string::npos) << not_json.err;
  EXPECT_EQ(not_json.err.find(".upload"), std::string::npos) << not_json.err;
  // A missing file is "not found" as in `profctl report`; a folder or a device is no trace.
  RunResult missing = profd->Profctl({"import", scratch_.File("missing.json.gz")});
  EXPECT_EQ(missing.exit_code, 4) << missing.err;
  EXPECT_EQ(profd->Profctl({"report", scratch_.File("missing.json.gz")}).exit_code, 4);
  for (const std::string& odd : {scratch_.path(), std::string("/dev/zero")}) {
    RunResult r = profd->Profctl({"import", odd});
    EXPECT_EQ(r.exit_code, 2) << odd << ": " << r.err;
    EXPECT_NE(r.err.find("is not a trace file"), std::string::npos) << r.err;
  }
}

// A stored trace damaged in the bucket: `get` fails naming the file, and the file that failed its
// check is not left in the output folder.
TEST_F(StoreProfctlTest, GetRemovesAFileThatFailsItsChecksum) {
  StartS3();
  auto profd = StartProfd("s3://traces/damaged");
  std::string file = MakeTraceFile(scratch_.File("d.json.gz"), 12, 64 << 10, true);
  std::string id = Import(*profd, file);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitFor([&] { return Stored(*profd, id); }, absl::Seconds(30))) << profd->log();
  // Flip one byte of the trace object where s3rver keeps it (same size, other bytes).
  std::string object;
  for (const auto& e : fs::recursive_directory_iterator(s3rver_->data_dir())) {
    const std::string p = e.path().string();
    if (p.find(id) != std::string::npos && absl::EndsWith(p, ".json.gz._S3rver_object")) {
      object = p;
    }
  }
  ASSERT_FALSE(object.empty()) << "no stored trace object for " << id;
  std::string bytes = ReadFile(object);
  bytes[bytes.size() / 2] ^= 0x5a;
  std::ofstream(object, std::ios::binary | std::ios::trunc) << bytes;

  std::string dir = scratch_.File("get-damaged");
  RunResult r = profd->Profctl({"get", id, "-o", dir});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("checksum mismatch for "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("It was removed from " + dir), std::string::npos) << r.err;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  for (const std::string& name : left) {
    EXPECT_EQ(name.find(".json.gz"), std::string::npos) << name << " was left in " << dir;
  }
  EXPECT_NE(std::find(left.begin(), left.end(), "manifest.json"), left.end())
      << "intact files stay";
}

TEST_F(StoreProfctlTest, StoreDownWhenTraceFinishesItWaitsAndArrivesIntact) {
  auto profd = StartProfd("s3://traces/down");  // nothing listens on the endpoint yet
  std::string file = MakeTraceFile(scratch_.File("t.json.gz"), 12, 200 << 10, true);
  RunResult imported = profd->Profctl({"import", file});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_NE(imported.out.find("uploading in the background"), std::string::npos);
  rapidjson::Document listed = profd->ProfctlJson({"list"});
  ASSERT_EQ(listed["traces"].GetArray().Size(), 1u);
  std::string id = listed["traces"][0]["capture_id"].GetString();
  EXPECT_STREQ(listed["traces"][0]["state"].GetString(), "TRACE_STATE_SPOOLED");
  EXPECT_NE(std::string(listed["store_error"].GetString()).find("unreachable"), std::string::npos);

  ASSERT_TRUE(WaitFor(
      [&] { return profd->Profctl({"spool"}).out.find("unreachable") != std::string::npos; },
      absl::Seconds(10)));
  RunResult human_list = profd->Profctl({"list"});
  EXPECT_NE(human_list.out.find("spooled"), std::string::npos) << human_list.out;
  EXPECT_NE(human_list.err.find("could not be read"), std::string::npos) << human_list.err;
  // Still readable from the spool.
  EXPECT_EQ(profd->Profctl({"show", id}).exit_code, 0);
  // `profctl status` says the uploads are failing, and why.
  RunResult status = profd->Profctl({"status"});
  EXPECT_NE(status.out.find("0 stored, 1 waiting; FAILING"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("unreachable"), std::string::npos) << status.out;

  StartS3();
  ASSERT_TRUE(WaitFor([&] { return Stored(*profd, id); }, absl::Seconds(30))) << profd->log();
  std::string dir = Get(*profd, id);
  EXPECT_EQ(Sha256File(dir + "/trace-777.json.gz"), Sha256File(file));
  EXPECT_NE(profd->Profctl({"spool"}).out.find("pending  0"), std::string::npos);
  EXPECT_NE(profd->Profctl({"status"}).out.find("uploads:           1 stored, 0 waiting\n"),
            std::string::npos);
}

// A store that takes connections and never answers: profctl gives up at its deadline and says
// profd is there but busy, not that it is not running.
TEST_F(StoreProfctlTest, AStoreThatNeverAnswersIsADeadlineNotAMissingProfd) {
  const int silent = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(silent, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(listen(silent, 16), 0);  // connections queue, nothing reads them
  ASSERT_EQ(getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  auto profd = StartProfd("s3://traces/silent", {"--s3_endpoint=http://127.0.0.1:" +
                                                 std::to_string(ntohs(addr.sin_port))});
  RunResult list = profd->Profctl({"list", "--timeout", "1s"});
  EXPECT_EQ(list.exit_code, 3) << list.out << list.err;
  EXPECT_NE(list.err.find("did not answer before the deadline"), std::string::npos) << list.err;
  EXPECT_NE(list.err.find("--timeout"), std::string::npos) << list.err;
  EXPECT_EQ(list.err.find("is it running?"), std::string::npos) << list.err;
  close(silent);
}

// profd's threads (/proc/PID/status), or -1 when it is gone.
int ThreadsOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// True once the process has exited (a zombie waiting for its parent counts).
bool Exited(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("State:", 0) == 0) return line.find('Z') != std::string::npos;
  }
  return true;
}

// The same silent store, for what it used to cost: each `profctl list` left a profd thread (and
// its index readers) waiting on a connection for ten minutes, an upload to it never failed, and
// SIGTERM waited for all of them. Now a list waits no longer than its call's deadline, an upload
// fails once nothing moved for --s3_timeout and stays spooled, and profd stops within 10 s with
// an upload in flight, which resumes at the next start.
TEST_F(StoreProfctlTest, AStoreThatNeverAnswersHoldsNoThreadAndStopsInTime) {
  const int silent = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(silent, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(listen(silent, 1024), 0);  // connections queue, nothing reads them
  ASSERT_EQ(getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string endpoint =
      "--s3_endpoint=http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));

  // Default flags: only the calls' own deadlines bound the lists.
  auto profd = StartProfd("s3://traces/silent", {endpoint});
  const int before = ThreadsOf(profd->pid());
  ASSERT_GT(before, 0);
  constexpr int kCalls = 24;
  std::vector<std::thread> calls;
  std::atomic<int> ended{0}, deadline_said{0};
  std::mutex mu;
  std::string other;  // what a call that did neither said
  for (int i = 0; i < kCalls; ++i) {
    calls.emplace_back([&] {
      RunResult list = profd->Profctl({"list", "--timeout", "1s"});
      // profd gives up on the store at the call's deadline too, and its answer (the store could
      // not be read) sometimes arrives before profctl's own deadline fires: either way the call
      // ended with its deadline.
      const bool gave_up = list.exit_code == 3;
      const bool store_error =
          list.exit_code == 0 && list.err.find("could not be read") != std::string::npos;
      ended += gave_up || store_error;
      deadline_said += list.err.find("did not answer before the deadline") != std::string::npos;
      if (!gave_up && !store_error) {
        std::lock_guard<std::mutex> lock(mu);
        other += "exit " + std::to_string(list.exit_code) + ": " + list.err + list.out + "\n";
      }
    });
  }
  for (std::thread& t : calls) t.join();
  // Every call ended at its deadline (on a loaded machine one may not have connected by then).
  EXPECT_EQ(ended.load(), kCalls) << other;
  EXPECT_GT(deadline_said.load(), 0);
  // Each handler gives up with its call: the count comes back down (gRPC keeps a few idle threads).
  EXPECT_TRUE(WaitFor([&] { return ThreadsOf(profd->pid()) <= before + 8; }, absl::Seconds(10)))
      << "threads: " << before << " before " << kCalls << " lists, " << ThreadsOf(profd->pid())
      << " after";

  // An upload in flight to the silent store, and lists waiting on it, when SIGTERM comes.
  std::string id = Import(*profd, MakeTraceFile(scratch_.File("s.json"), 3, 0, false));
  ASSERT_FALSE(id.empty());
  std::vector<std::thread> waiting;
  for (int i = 0; i < 4; ++i) {
    waiting.emplace_back([&] { profd->Profctl({"list", "--timeout", "60s"}); });
  }
  absl::SleepFor(absl::Seconds(1));
  const pid_t pid = profd->pid();
  const absl::Time term = absl::Now();
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  const bool stopped = WaitFor([&] { return Exited(pid); }, absl::Seconds(10));
  const absl::Duration took = absl::Now() - term;
  EXPECT_TRUE(stopped) << "profd still running 10 s after SIGTERM:\n" << profd->log();
  profd->Stop();
  for (std::thread& t : waiting) t.join();
  EXPECT_LT(took, absl::Seconds(10));
  // Left for the next start, not lost.
  EXPECT_TRUE(fs::exists(spool_.File("pending/" + id + "/manifest.json")));

  // Restarted with a short --s3_timeout: the upload resumes, fails saying why, stays spooled.
  profd = StartProfd("s3://traces/silent", {endpoint, "--s3_timeout=2s"});
  ASSERT_TRUE(WaitFor(
      [&] {
        return profd->Profctl({"spool"}).out.find("did not answer in time") != std::string::npos;
      },
      absl::Seconds(20)))
      << profd->Profctl({"spool"}).out << profd->log();
  RunResult spool = profd->Profctl({"spool"});
  EXPECT_THAT(spool.out, ::testing::HasSubstr("--s3_timeout"));
  EXPECT_EQ(StateOf(*profd, id), "TRACE_STATE_SPOOLED");
  EXPECT_TRUE(fs::exists(spool_.File("pending/" + id + "/manifest.json")));
  close(silent);
}

TEST_F(StoreProfctlTest, ProfdKilledWithUploadsPendingResumesAfterRestart) {
  auto profd = StartProfd("s3://traces/restart");
  std::string a = MakeTraceFile(scratch_.File("a.json"), 4, 1000, false);
  std::string b = MakeTraceFile(scratch_.File("b.json.gz"), 5, 300 << 10, true);
  std::string id_a = Import(*profd, a);
  std::string id_b = Import(*profd, b);
  ASSERT_FALSE(id_a.empty());
  ASSERT_FALSE(id_b.empty());
  ASSERT_TRUE(WaitFor(
      [&] { return profd->Profctl({"spool"}).out.find("unreachable") != std::string::npos; },
      absl::Seconds(10)));
  profd->Kill();  // SIGKILL: no chance to flush anything
  EXPECT_TRUE(fs::exists(spool_.File("pending/" + id_a + "/manifest.json")));

  StartS3();
  profd->Start();
  EXPECT_TRUE(
      WaitFor([&] { return Stored(*profd, id_a) && Stored(*profd, id_b); }, absl::Seconds(30)))
      << profd->log();
  EXPECT_NE(profd->log().find("resuming 2 pending uploads"), std::string::npos) << profd->log();
  EXPECT_EQ(Sha256File(Get(*profd, id_b) + "/trace-777.json.gz"), Sha256File(b));
  Get(*profd, id_a);
}

TEST_F(StoreProfctlTest, RefusedCredentialsAreExplainedAndTheTraceKept) {
  StartS3();
  setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGKEY", 1);  // s3rver knows only S3RVER
  auto profd = StartProfd("s3://traces/creds");
  std::string id = Import(*profd, MakeTraceFile(scratch_.File("c.json"), 3, 0, false));
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitFor(
      [&] { return profd->Profctl({"spool"}).out.find("access denied") != std::string::npos; },
      absl::Seconds(10)));
  RunResult spool = profd->Profctl({"spool"});
  EXPECT_NE(spool.out.find("InvalidAccessKeyId"), std::string::npos) << spool.out;
  EXPECT_NE(spool.out.find("AWS_SECRET_ACCESS_KEY"), std::string::npos) << spool.out;
  EXPECT_NE(profd->log().find("access denied"), std::string::npos);
  EXPECT_EQ(StateOf(*profd, id), "TRACE_STATE_SPOOLED");

  // Fixed credentials, profd restarted: the kept trace goes up.
  setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
  profd->Stop();
  profd->Start();
  EXPECT_TRUE(WaitFor([&] { return Stored(*profd, id); }, absl::Seconds(30))) << profd->log();
}

TEST_F(StoreProfctlTest, MissingBucketIsExplainedAndTheTraceKept) {
  StartS3();
  auto profd = StartProfd("s3://no-such-bucket/p");
  std::string id = Import(*profd, MakeTraceFile(scratch_.File("m.json"), 3, 0, false));
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitFor(
      [&] { return profd->Profctl({"spool"}).out.find("no such bucket") != std::string::npos; },
      absl::Seconds(10)))
      << profd->Profctl({"spool"}).out;
  EXPECT_EQ(StateOf(*profd, id), "TRACE_STATE_SPOOLED");
  RunResult show = profd->Profctl({"show", id});
  EXPECT_EQ(show.exit_code, 0);
  EXPECT_NE(show.out.find("no such bucket"), std::string::npos) << show.out;
  EXPECT_TRUE(fs::exists(spool_.File("pending/" + id + "/manifest.json")));
}

TEST_F(StoreProfctlTest, FullSpoolRefusesNewTracesAndKeepsTheOthers) {
  auto profd = StartProfd("s3://traces/full", {"--spool_max_bytes=64KiB"});  // store down
  std::string file = MakeTraceFile(scratch_.File("f.json.gz"), 3, 12 << 10, true);
  std::vector<std::string> kept;
  RunResult refused;
  for (int i = 0; i < 10; ++i) {
    RunResult r = profd->Profctl({"--json", "import", file});
    if (r.exit_code != 0) {
      refused = r;
      break;
    }
    rapidjson::Document doc;
    doc.Parse(r.out.c_str());
    kept.push_back(doc["trace"]["capture_id"].GetString());
  }
  ASSERT_NE(refused.exit_code, 0) << "the spool never filled";
  EXPECT_NE(refused.err.find("spool full"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--spool_max_bytes"), std::string::npos) << refused.err;
  ASSERT_GE(kept.size(), 1u);
  for (const std::string& id : kept) EXPECT_EQ(StateOf(*profd, id), "TRACE_STATE_SPOOLED") << id;
  EXPECT_NE(profd->Profctl({"spool"}).out.find("captures refused (spool full) 1"),
            std::string::npos);
}

TEST_F(StoreProfctlTest, LocalStoreIsTheDefaultShape) {
  TempDir traces;
  auto profd = StartProfd("file://" + traces.path());
  std::string file = MakeTraceFile(scratch_.File("l.json.gz"), 7, 1000, true);
  std::string id = Import(*profd, file);
  ASSERT_FALSE(id.empty()) << profd->log();
  ASSERT_TRUE(WaitFor([&] { return Stored(*profd, id); }, absl::Seconds(10)));
  std::string day = id.substr(0, 4) + "/" + id.substr(4, 2) + "/" + id.substr(6, 2);
  EXPECT_TRUE(fs::exists(
      traces.File(day + "/" + id.substr(17, id.size() - 26) + "/" + id + "/trace-777.json.gz")))
      << id;
  EXPECT_EQ(Sha256File(Get(*profd, id) + "/trace-777.json.gz"), Sha256File(file));
  RunResult status = profd->Profctl({"status"});
  EXPECT_NE(status.out.find("file://" + traces.path()), std::string::npos) << status.out;
}

}  // namespace
}  // namespace profd::testing

namespace profd::testing {
namespace {

// A real capture (the lead's replay agent feeds a recorded CUPTI capture through the real agent
// library) goes from profctl capture through the spool into the S3 store.
TEST_F(StoreProfctlTest, RealCaptureReachesTheStore) {
  StartS3();
  TempDir captures;
  auto profd = StartProfd("s3://traces/captures", {"--capture_dir=" + captures.path()});
  auto agent = std::make_unique<Subprocess>(
      std::vector<std::string>{BuildPath("tests/integration/replay_agent"),
                               SourcePath("tests/fixtures/burst_1000_kernels.batches.pb")},
      std::map<std::string, std::string>{{"PROFD_AGENT_SOCKET", profd->agent_socket()}});
  ASSERT_TRUE(WaitFor(
      [&] {
        rapidjson::Document d = profd->ProfctlJson({"agents"});
        return d["agents"].GetArray().Size() == 1;
      },
      absl::Seconds(5)));
  rapidjson::Document c =
      profd->ProfctlJson({"capture", "--pid", std::to_string(agent->pid()), "--duration", "300ms"});
  ASSERT_STREQ(c["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd->log();
  std::string id = c["capture_id"].GetString();
  ASSERT_TRUE(WaitFor([&] { return Stored(*profd, id); }, absl::Seconds(30))) << profd->log();
  std::string dir = Get(*profd, id);
  std::string trace = c["files"][0]["name"].GetString();
  EXPECT_EQ(Sha256File(dir + "/" + trace), c["files"][0]["sha256"].GetString());
  RunResult show = profd->Profctl({"show", id});
  EXPECT_NE(show.out.find("profd_test_kernel"), std::string::npos) << show.out;
}

}  // namespace
}  // namespace profd::testing
