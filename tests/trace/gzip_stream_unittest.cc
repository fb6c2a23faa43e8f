// GzipStream (ISA-L) against zlib's inflate, the reader every gzip tool uses: what it writes
// decompresses to what it was given, whole streams and each flush on its own, and an error from
// the sink stops it.
#include "common/gzip_stream.h"

#include <zlib.h>

#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace profd {
namespace {

// Inflates as much of a gzip stream as `gz` holds (a stream cut anywhere gives what precedes the
// cut). ended: the stream's trailer was read and checked.
std::string Inflate(const std::string& gz, bool* ended = nullptr) {
  z_stream zs{};
  inflateInit2(&zs, 15 + 16);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  zs.avail_in = static_cast<uInt>(gz.size());
  std::string out;
  char buf[1 << 16];
  int rc;
  do {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_SYNC_FLUSH);
    out.append(buf, sizeof(buf) - zs.avail_out);
  } while (rc == Z_OK && (zs.avail_in > 0 || zs.avail_out == 0));
  if (ended != nullptr) *ended = rc == Z_STREAM_END;
  inflateEnd(&zs);
  return out;
}

// Trace-like text: repetitive keys, varying numbers.
std::string Json(size_t events, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s;
  for (size_t i = 0; i < events; ++i) {
    absl::StrAppend(&s, "{\"ph\":\"X\",\"cat\":\"kernel\",\"ts\":", rng() % 100000, ".",
                    rng() % 1000, ",\"dur\":", rng() % 5000, ",\"args\":{\"correlation\":", i,
                    "}},\n");
  }
  return s;
}

TEST(GzipStreamTest, EveryCallsInputCanBeReadWhenItReturnsAndTheWholeStreamEndsRight) {
  for (int level = 0; level <= 3; ++level) {
    GzipStream gzip(level);
    std::string gz, given;
    auto sink = [&](std::string_view bytes) {
      gz.append(bytes);
      return absl::OkStatus();
    };
    for (uint32_t part = 0; part < 6; ++part) {
      // 0 bytes, a few, and pieces larger than the output buffer.
      const std::string text = Json(part == 0 ? 0 : size_t{1} << (part * 3), part);
      ASSERT_TRUE(gzip.Compress(text, false, sink).ok());
      given += text;
      bool ended = true;
      EXPECT_EQ(Inflate(gz, &ended), given) << "level " << level << ", part " << part;
      EXPECT_FALSE(ended);
    }
    ASSERT_TRUE(gzip.Compress("tail", true, sink).ok());
    bool ended = false;
    EXPECT_EQ(Inflate(gz, &ended), given + "tail");
    EXPECT_TRUE(ended) << "level " << level;
    EXPECT_FALSE(gzip.Compress("more", false, sink).ok());
  }
}

TEST(GzipStreamTest, OneShotGzipIsSmallerThanItsTraceJsonAndReadsBack) {
  const std::string text = Json(20000, 7);
  const std::string gz = GzipStream::Gzip(text);
  EXPECT_LT(gz.size(), text.size() / 3);
  EXPECT_EQ(Inflate(gz), text);
  EXPECT_EQ(Inflate(GzipStream::Gzip("")), "");
}

TEST(GzipStreamTest, ASinkErrorStopsTheCompressionAndIsReturned) {
  GzipStream gzip;
  int calls = 0;
  absl::Status status = gzip.Compress(Json(50000, 3), true, [&](std::string_view) {
    ++calls;
    return absl::ResourceExhaustedError("disk full");
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(status, absl::ResourceExhaustedError("disk full"));
}

}  // namespace
}  // namespace profd
