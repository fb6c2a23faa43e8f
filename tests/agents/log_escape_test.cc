// profd's log lines carry text chosen by agents and local users (labels, process names): each
// call must stay one line, and what cannot be shown is written as an escape (Printable,
// common/printable.h: the same escape profctl and the reports use).
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "common/printable.h"
#include "daemon/log.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

TEST(LogEscapeTest, ControlCharactersAndBrokenUtf8AreEscaped) {
  EXPECT_EQ(Printable("plain text, 100%"), "plain text, 100%");
  EXPECT_EQ(Printable("0.1.0\nE 2026 profd] forged"), "0.1.0\\nE 2026 profd] forged");
  EXPECT_EQ(Printable("a\rb\tc"), "a\\rb\\tc");
  EXPECT_EQ(Printable("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
  EXPECT_EQ(Printable(std::string("nul\0byte", 8)), "nul\\x00byte");
  EXPECT_EQ(Printable("del\x7f"), "del\\x7f");
  // A backslash is doubled, so an escape in the log always means a byte that was escaped.
  EXPECT_EQ(Printable("C:\\n"), "C:\\\\n");
  // Valid UTF-8 stays; invalid bytes, overlong forms, surrogates and cut sequences do not.
  EXPECT_EQ(Printable("café 東京 🚀"), "café 東京 🚀");
  EXPECT_EQ(Printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(Printable("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(Printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(Printable("cut \xe6\x9d"), "cut \\xe6\\x9d");
  // Characters that break or disguise a line: NEL, line separator, bidirectional override.
  EXPECT_EQ(Printable("a\xc2\x85"
                      "b"),
            "a\\u{0085}b");
  EXPECT_EQ(Printable("a\xe2\x80\xa8"
                      "b"),
            "a\\u{2028}b");
  EXPECT_EQ(Printable("\xe2\x80\xae"
                      "txt.exe"),
            "\\u{202e}txt.exe");
}

TEST(LogEscapeTest, EveryDirectionAndLineControlIsEscaped) {
  // Each of them, alone between two letters: "a<control>b" -> "a\u{NNNN}b".
  const std::pair<const char*, const char*> kControls[] = {
      {"\xd8\x9c", "061c"},      // ARABIC LETTER MARK
      {"\xe2\x80\x8e", "200e"},  // LEFT-TO-RIGHT MARK
      {"\xe2\x80\x8f", "200f"},  // RIGHT-TO-LEFT MARK
      {"\xe2\x80\xa8", "2028"},  // LINE SEPARATOR
      {"\xe2\x80\xa9", "2029"},  // PARAGRAPH SEPARATOR
      {"\xe2\x80\xaa", "202a"},  // LEFT-TO-RIGHT EMBEDDING ...
      {"\xe2\x80\xae", "202e"},  // ... RIGHT-TO-LEFT OVERRIDE
      {"\xe2\x81\xa6", "2066"},  // LEFT-TO-RIGHT ISOLATE ...
      {"\xe2\x81\xa9", "2069"},  // ... POP DIRECTIONAL ISOLATE
      {"\xc2\x80", "0080"},      // C1 controls, first ...
      {"\xc2\x9b", "009b"},      // ... CSI ...
      {"\xc2\x9f", "009f"},      // ... and last
  };
  for (const auto& [bytes, hex] : kControls) {
    EXPECT_EQ(Printable(std::string("a") + bytes + "b"), std::string("a\\u{") + hex + "}b") << hex;
  }
  // Neighbours that are ordinary text stay.
  EXPECT_EQ(Printable("\xe2\x80\x90\xe2\x81\xa0\xc2\xa0"), "\xe2\x80\x90\xe2\x81\xa0\xc2\xa0");
}

TEST(LogEscapeTest, JsonLineSeparatorsAreEscapedAndNothingElseChanges) {
  EXPECT_EQ(EscapeJsonLineSeparators("{\"k\":\"a\xe2\x80\xa8"
                                     "b\xe2\x80\xa9"
                                     "c\xe2\x80\xae\"}"),
            "{\"k\":\"a\\u2028b\\u2029c\xe2\x80\xae\"}");
  EXPECT_EQ(EscapeJsonLineSeparators("{\"k\":\"caf\xc3\xa9\"}"), "{\"k\":\"caf\xc3\xa9\"}");
  EXPECT_EQ(EscapeJsonLineSeparators("\xe2\x80"), "\xe2\x80");  // cut short: left alone
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
