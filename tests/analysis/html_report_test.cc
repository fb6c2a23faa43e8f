// The HTML report renders in a real headless Chromium from a file, with no network: the page
// produces a non-trivial screenshot and the rendered DOM holds every plot.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace profd::analysis {
namespace {

using profd::testing::RunResult;
using ::testing::HasSubstr;
using ::testing::Not;

std::string FindChromium() {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin", ':')) {
    for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
      std::string candidate = std::string(dir) + "/" + name;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return "";
}

std::vector<std::string> ChromiumArgs(const std::string& chromium, const std::string& profile) {
  return {chromium,
          "--headless",
          "--no-sandbox",
          "--disable-gpu",
          "--disable-quic",
          "--no-first-run",
          "--disable-background-networking",
          "--disable-component-update",
          "--disable-sync",
          "--user-data-dir=" + profile,
          "--window-size=1280,2000"};
}

TEST(HtmlReportTest, RendersInHeadlessChromiumWithEveryPlot) {
  std::string chromium = FindChromium();
  if (chromium.empty()) {
    GTEST_SKIP() << "chromium not installed: scripts/setup.sh installs it (Debian `chromium`)";
  }
  profd::testing::TempDir dir;
  std::string html = dir.File("report.html");
  RunResult report = profd::testing::Run(
      {profd::testing::BuildPath("client/profctl"), "report",
       profd::testing::SourcePath("tests/analysis/fixtures/gpt2_synthetic.json.gz"), "--html",
       html});
  ASSERT_EQ(report.exit_code, 0) << report.err;

  std::string png = dir.File("report.png");
  std::vector<std::string> shot = ChromiumArgs(chromium, dir.File("profile1"));
  shot.push_back("--screenshot=" + png);
  shot.push_back("file://" + html);
  RunResult s = profd::testing::Run(shot, {}, absl::Seconds(120));
  ASSERT_EQ(s.exit_code, 0) << s.err;
  std::string image = profd::testing::ReadFileOrEmpty(png);
  ASSERT_GT(image.size(), 8u);
  EXPECT_EQ(image.substr(1, 3), "PNG");
  // A blank 1280x2000 page compresses to a few KB; tables, text and plots do not.
  EXPECT_GT(image.size(), 60u * 1024) << "screenshot suspiciously small: blank page?";

  std::vector<std::string> dump = ChromiumArgs(chromium, dir.File("profile2"));
  dump.push_back("--dump-dom");
  dump.push_back("file://" + html);
  RunResult d = profd::testing::Run(dump, {}, absl::Seconds(120));
  ASSERT_EQ(d.exit_code, 0) << d.err;
  const std::string& dom = d.out;
  for (const char* id :
       {"plot-gpu-busy", "plot-idle", "plot-top-kernels", "plot-launch-delay", "plot-copies"}) {
    EXPECT_THAT(dom, HasSubstr(std::string("<svg id=\"") + id + "\"")) << id;
  }
  EXPECT_THAT(dom, HasSubstr("<polyline class=\"busy-line\""));
  EXPECT_THAT(dom, HasSubstr("<rect class=\"bar\""));
  EXPECT_THAT(dom, HasSubstr("data-id=\"launch_bound\""));
  EXPECT_THAT(dom, HasSubstr("sm90_xmma_gemm"));
}

// The report travels alone (mailed, attached to a ticket): its words link to their definitions
// in the page itself, and every such link lands on one.
TEST(HtmlReportTest, ItsTermsLinkToDefinitionsInThePage) {
  profd::testing::TempDir dir;
  const std::string html = dir.File("report.html");
  RunResult report = profd::testing::Run(
      {profd::testing::BuildPath("client/profctl"), "report",
       profd::testing::SourcePath("tests/analysis/fixtures/gpt2_synthetic.json.gz"), "--html",
       html});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const std::string page = profd::testing::ReadFileOrEmpty(html);
  std::set<std::string> links, anchors;
  for (size_t at = page.find("href=\"#"); at != std::string::npos;
       at = page.find("href=\"#", at + 1)) {
    links.insert(page.substr(at + 7, page.find('"', at + 7) - (at + 7)));
  }
  for (size_t at = page.find(" id=\""); at != std::string::npos; at = page.find(" id=\"", at + 1)) {
    anchors.insert(page.substr(at + 5, page.find('"', at + 5) - (at + 5)));
  }
  for (const char* term : {"def-busy", "def-host-wait", "def-kernel-wait", "def-launch-delay",
                           "def-occupancy", "def-findings", "def-window"}) {
    EXPECT_TRUE(links.count(term)) << term << " is not linked";
  }
  for (const std::string& link : links)
    EXPECT_TRUE(anchors.count(link)) << link << " leads nowhere";
  EXPECT_THAT(page, HasSubstr("<h2 id=\"definitions\">Definitions</h2>"));
  EXPECT_THAT(page, Not(HasSubstr("docs/ANALYSIS.md. Generated")));
}

}  // namespace
}  // namespace profd::analysis
