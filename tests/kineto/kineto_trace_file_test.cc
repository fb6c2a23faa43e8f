// Reading the trace Kineto wrote inside a process: only the file profd named, never through a
// link the process planted, only its own regular file, below the size cap. The test process is
// the "profiled process" here (its /proc/<pid>/root is /), and its files live in a TempDir.
#include "daemon/kineto/kineto_trace_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace profd::kineto {
namespace {

using ::profd::testing::TempDir;
using ::testing::HasSubstr;

std::string Message(const absl::StatusOr<KinetoTraceFile>& f) {
  return f.ok() ? "ok" : std::string(f.status().message());
}

class KinetoTraceFileTest : public ::testing::Test {
 protected:
  absl::StatusOr<KinetoTraceFile> Open(const std::string& path, uint64_t max = 1 << 20) {
    return KinetoTraceFile::Open(getpid(), getuid(), path, max);
  }
  std::string Write(const std::string& name, const std::string& content) {
    std::ofstream(dir_.File(name)) << content;
    return dir_.File(name);
  }
  TempDir dir_;
};

TEST_F(KinetoTraceFileTest, ReadsTheProcesssOwnFileAndRemovesIt) {
  const std::string path = Write("trace_42.json", "{\"traceEvents\":[]}");
  absl::StatusOr<KinetoTraceFile> f = Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->size(), 18u);
  char buf[64] = {};
  EXPECT_EQ(read(f->fd(), buf, sizeof(buf)), 18);
  EXPECT_EQ(std::string(buf), "{\"traceEvents\":[]}");
  ASSERT_TRUE(f->Remove().ok());
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

TEST_F(KinetoTraceFileTest, NotThereYetIsNotFound) {
  EXPECT_EQ(Open(dir_.File("later.json")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Open("relative.json").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(KinetoTraceFileTest, RefusesLinksPlantedByTheProcess) {
  Write("secret", "root only");
  ASSERT_EQ(symlink(dir_.File("secret").c_str(), dir_.File("trace.json").c_str()), 0);
  EXPECT_THAT(Message(Open(dir_.File("trace.json"))), HasSubstr("symbolic link"));
  // A link in a folder of the path.
  ASSERT_EQ(mkdir(dir_.File("real").c_str(), 0755), 0);
  Write("real/trace.json", "{}");
  ASSERT_EQ(symlink(dir_.File("real").c_str(), dir_.File("tmp").c_str()), 0);
  EXPECT_EQ(Open(dir_.File("tmp/trace.json")).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A hard link to a file of the same owner still names another file.
  ASSERT_EQ(link(dir_.File("secret").c_str(), dir_.File("hard.json").c_str()), 0);
  EXPECT_THAT(Message(Open(dir_.File("hard.json"))), HasSubstr("2 links"));
}

TEST_F(KinetoTraceFileTest, RefusesFilesOfAnotherUserFifosAndOversizedFiles) {
  const std::string other = Write("other.json", "{}");
  if (getuid() == 0) {
    ASSERT_EQ(chown(other.c_str(), 65534, 65534), 0);
    EXPECT_THAT(Message(Open(other)), HasSubstr("owned by uid 65534"));
  }
  ASSERT_EQ(mkfifo(dir_.File("fifo.json").c_str(), 0600), 0);
  EXPECT_THAT(Message(Open(dir_.File("fifo.json"))), HasSubstr("not a regular file"));
  const std::string big = Write("big.json", std::string(4096, ' '));
  EXPECT_THAT(Message(Open(big, 1000)), HasSubstr("over the 1000-byte limit"));
}

}  // namespace
}  // namespace profd::kineto
