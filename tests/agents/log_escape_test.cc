// profd's log lines carry text chosen by agents and local users (labels, process names): each
// call must stay one line, and what cannot be shown is written as an escape (daemon/log.h).
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "daemon/log.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

TEST(LogEscapeTest, ControlCharactersAndBrokenUtf8AreEscaped) {
  EXPECT_EQ(EscapeForLog("plain text, 100%"), "plain text, 100%");
  EXPECT_EQ(EscapeForLog("0.1.0\nE 2026 profd] forged"), "0.1.0\\nE 2026 profd] forged");
  EXPECT_EQ(EscapeForLog("a\rb\tc"), "a\\rb\\tc");
  EXPECT_EQ(EscapeForLog("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
  EXPECT_EQ(EscapeForLog(std::string("nul\0byte", 8)), "nul\\x00byte");
  EXPECT_EQ(EscapeForLog("del\x7f"), "del\\x7f");
  // A backslash is doubled, so an escape in the log always means a byte that was escaped.
  EXPECT_EQ(EscapeForLog("C:\\n"), "C:\\\\n");
  // Valid UTF-8 stays; invalid bytes, overlong forms, surrogates and cut sequences do not.
  EXPECT_EQ(EscapeForLog("café 東京 🚀"), "café 東京 🚀");
  EXPECT_EQ(EscapeForLog("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(EscapeForLog("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(EscapeForLog("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(EscapeForLog("cut \xe6\x9d"), "cut \\xe6\\x9d");
  // Characters that break or disguise a line: NEL, line separator, bidirectional override.
  EXPECT_EQ(EscapeForLog("a\xc2\x85"
                         "b"),
            "a\\u{0085}b");
  EXPECT_EQ(EscapeForLog("a\xe2\x80\xa8"
                         "b"),
            "a\\u{2028}b");
  EXPECT_EQ(EscapeForLog("\xe2\x80\xae"
                         "txt.exe"),
            "\\u{202e}txt.exe");
}

TEST(LogEscapeTest, OneCallIsOneLine) {
  testing::TempDir dir;
  int saved = dup(STDERR_FILENO);
  int file = open(dir.File("log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(file, STDERR_FILENO);
  LogWarning("agent-channel", "agent registered: pid %u (%s)", 42u,
             "evil\nW 2026-01-01T00:00:00.000 profd] forged line\r\x1b[1A");
  dup2(saved, STDERR_FILENO);
  close(file);
  close(saved);
  std::string log = testing::ReadFileOrEmpty(dir.File("log"));
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.find('\n'), log.size() - 1) << log;
  EXPECT_EQ(log.find('\r'), std::string::npos);
  EXPECT_EQ(log.find('\x1b'), std::string::npos);
  EXPECT_NE(log.find("(evil\\nW 2026-01-01T00:00:00.000 profd] forged line\\r\\x1b[1A)"),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace profd
