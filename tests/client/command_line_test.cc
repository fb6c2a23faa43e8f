// What a user sees who types a command wrong: every argument error of profctl says it is
// profctl's (the `profctl:` prefix) and where to look next (the command's --help), with exit
// code 2; a --target that is no address says what one looks like; `profd --help` reads as a
// product's help, not as a build's.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace profd::testing {
namespace {

RunResult Profctl(std::vector<std::string> args) {
  args.insert(args.begin(), BuildPath("client/profctl"));
  // Never a real profd: a socket that is not there.
  return profd::testing::Run(args, {{"PROFD_TARGET", "unix:/nonexistent/profd.sock"}});
}

TEST(CommandLineTest, EveryArgumentErrorSaysItIsProfctlsAndWhereToLook) {
  TempDir dir;
  const std::vector<std::vector<std::string>> bad = {
      {"capture", "--pid", "abc"},                   // not a number (CLI11)
      {"capture", "--bogus"},                        // unknown flag (CLI11)
      {"capture", "--format", "xml", "--pid", "1"},  // not one of the choices (CLI11)
      {"report"},                                    // a required argument (CLI11)
      {"capture", "--pid", "1", "--duration", "5"},  // no unit (the command's own check)
      {"capture", "--duration", "1s"},               // nothing to capture
      {"capture", "--pid", "1", "--output", dir.File("no/such/folder/t.json.gz")},
      {"--timeout", "soon", "agents"},  // a global option's own check
      {"list", "--since", "yesterday"},
  };
  for (const std::vector<std::string>& args : bad) {
    SCOPED_TRACE(absl::StrJoin(args, " "));
    RunResult r = Profctl(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(absl::StartsWith(r.err, "profctl: ")) << r.err;
    EXPECT_FALSE(absl::StrContains(r.err, "profctl: profctl:")) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, " --help` for ")) << r.err;
    EXPECT_FALSE(absl::StrContains(r.err, "Run with --help")) << "CLI11's own words: " << r.err;
  }
  RunResult capture = Profctl({"capture", "--pid", "abc"});
  EXPECT_TRUE(absl::StrContains(capture.err, "Run `profctl capture --help`")) << capture.err;
}

TEST(CommandLineTest, ATargetThatIsNoAddressSaysWhatOneLooksLike) {
  for (const std::string target : {"foo", "/run/profd/profd.sock", "node17:port"}) {
    SCOPED_TRACE(target);
    RunResult r = Profctl({"--target", target, "status"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(absl::StartsWith(r.err, "profctl: --target " + target + " is not a profd address"))
        << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "unix:/path/to/profd.sock")) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "HOST:PORT")) << r.err;
  }
  RunResult path = Profctl({"--target", "/run/profd/profd.sock", "status"});
  EXPECT_TRUE(absl::StrContains(path.err, "unix:/run/profd/profd.sock")) << path.err;
  // What is an address goes to the network as before: not reachable, exit 3.
  for (const std::string target : {"unix:/nonexistent/profd.sock", "127.0.0.1:1"}) {
    RunResult r = Profctl({"--target", target, "--timeout", "2s", "status"});
    EXPECT_EQ(r.exit_code, 3) << target << ": " << r.err;
  }
}

TEST(CommandLineTest, ProfdHelpReadsAsTheProductsHelp) {
  RunResult r = profd::testing::Run({BuildPath("daemon/profd"), "--help"});
  const std::string help = r.out + r.err;
  EXPECT_TRUE(absl::StrContains(help, "--capture_dir")) << help;
  EXPECT_FALSE(absl::StrContains(help, "profd: profd")) << help.substr(0, 200);
  // Where it was built from is no business of its user's.
  EXPECT_FALSE(absl::StrContains(help, "profd_main.cc")) << help.substr(0, 400);
  EXPECT_FALSE(absl::StrContains(help, "../")) << help.substr(0, 400);
  EXPECT_FALSE(absl::StrContains(help, SourcePath(""))) << help.substr(0, 400);
}

}  // namespace
}  // namespace profd::testing
