// The S3 store against a real s3rver on loopback (the store tests' server), two measurements:
//   upload: S3Bucket::PutFile of a file of --mb MiB (random bytes) in 8 MiB parts (profd's
//           default) and in one PUT (a part size above the file's), against `curl -T` of the same
//           file to the same s3rver (one PUT), in turn, --rounds times; prints each one's median
//           MB/s with min-max, and profd's time against curl's of the same round.
//   list:   TraceStore::List (profctl list's path, default limit 50) over a day of --hosts host
//           indexes, host h having stored its capture h minutes ago (the index objects'
//           LastModified, s3rver's file times, set to match), --rounds times; prints the median and
//           min-max seconds and how many index GETs one list made.
// Run (after scripts/setup.sh):
//   cmake --build build --target s3_store_bench && build/tests/bench/s3_store_bench
//   build/tests/bench/s3_store_bench --mb=105 --rounds=7 --hosts=1006
#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "daemon/store/s3_bucket.h"
#include "daemon/store/trace_store.h"
#include "tests/store/store_test_util.h"

namespace profd::testing {
namespace {

struct Spread {
  double median, min, max;
};

Spread Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

double Seconds(const std::function<void()>& f) {
  auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Flag(int argc, char** argv, const std::string& name, int fallback) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    int v;
    if (absl::StartsWith(a, "--" + name + "=") && absl::SimpleAtoi(a.substr(name.size() + 3), &v)) {
      return v;
    }
  }
  return fallback;
}

store::S3Options Options(const S3rverProcess& s3rver) {
  store::S3Options o;
  o.bucket = "traces";
  o.endpoint = s3rver.endpoint();
  o.path_style = true;
  o.region = "us-east-1";
  return o;
}

void Upload(const S3rverProcess& s3rver, const TempDir& dir, int mb, int rounds) {
  const std::string file = dir.File("upload.bin");
  {
    std::mt19937_64 random(42);
    std::string bytes(static_cast<size_t>(mb) << 20, '\0');
    for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
      uint64_t v = random();
      std::memcpy(&bytes[i], &v, 8);
    }
    std::ofstream(file, std::ios::binary) << bytes;
  }
  store::S3Bucket multipart(Options(s3rver));
  store::S3Options whole = Options(s3rver);
  whole.part_size = (static_cast<uint64_t>(mb) << 20) + 1;
  store::S3Bucket single(whole);
  const double bytes = static_cast<double>(mb) * (1 << 20);
  std::vector<double> parts_mbs, single_mbs, curl_mbs, parts_ratio, single_ratio;
  auto put = [&](store::S3Bucket& bucket, const std::string& key) {
    absl::Status status;
    double t = Seconds([&] { status = bucket.PutFile(key, file, false); });
    if (!status.ok()) {
      std::fprintf(stderr, "upload failed: %s\n", status.ToString().c_str());
      std::exit(1);
    }
    return t;
  };
  for (int r = 0; r < rounds; ++r) {
    double p = put(multipart, "bench/parts.bin");
    double s1 = put(single, "bench/single.bin");
    RunResult curl;
    double c = Seconds([&] {
      curl = Run({"/usr/bin/curl", "-sS", "-f", "-o", "/dev/null", "-T", file,
                  s3rver.endpoint() + "/traces/bench/curl.bin"});
    });
    if (curl.exit_code != 0) {
      std::fprintf(stderr, "curl failed: %s\n", curl.err.c_str());
      std::exit(1);
    }
    parts_mbs.push_back(bytes / p / 1e6);
    single_mbs.push_back(bytes / s1 / 1e6);
    curl_mbs.push_back(bytes / c / 1e6);
    parts_ratio.push_back(c / p);
    single_ratio.push_back(c / s1);
    std::printf(
        "  round %d: profd 8 MiB parts %.1f MB/s, profd one PUT %.1f MB/s, curl %.1f MB/s\n", r + 1,
        parts_mbs.back(), single_mbs.back(), curl_mbs.back());
  }
  Spread p = Summarize(parts_mbs), s1 = Summarize(single_mbs), c = Summarize(curl_mbs);
  Spread pr = Summarize(parts_ratio), sr = Summarize(single_ratio);
  std::printf(
      "upload %d MiB x %d (median, min-max): profd 8 MiB parts %.1f MB/s (%.1f-%.1f) = %.2fx curl "
      "(%.2f-%.2f); profd one PUT %.1f MB/s (%.1f-%.1f) = %.2fx curl (%.2f-%.2f); curl -T %.1f "
      "MB/s "
      "(%.1f-%.1f)\n",
      mb, rounds, p.median, p.min, p.max, pr.median, pr.min, pr.max, s1.median, s1.min, s1.max,
      sr.median, sr.min, sr.max, c.median, c.min, c.max);
}

void List(const S3rverProcess& s3rver, int hosts, int rounds) {
  store::S3Bucket bucket(Options(s3rver));
  const absl::Time now = absl::Now();
  const std::string day = absl::FormatTime("%Y-%m-%d", now, absl::UTCTimeZone());
  for (int h = 0; h < hosts; ++h) {
    const std::string host = absl::StrCat("node-", h);
    const std::string row = absl::StrCat(
        R"({"traces":[{"captureId":")",
        absl::FormatTime("%Y%m%dT%H%M%SZ", now, absl::UTCTimeZone()), "-", host,
        R"(-0000abcd","hostname":")", host, R"(","startedUnixNs":")",
        absl::ToUnixNanos(now - absl::Minutes(h)), R"(","state":"TRACE_STATE_STORED"}]})");
    const std::string key = absl::StrCat("list/_index/", day, "/", host, ".json");
    absl::Status s = bucket.PutBytes(key, row);
    if (!s.ok()) {
      std::fprintf(stderr, "index write failed: %s\n", s.ToString().c_str());
      std::exit(1);
    }
    const std::string object = s3rver.data_dir() + "/traces/" + key + "._S3rver_object";
    const timeval stored = absl::ToTimeval(now - absl::Minutes(h) + absl::Seconds(1));
    const timeval times[2] = {stored, stored};
    utimes(object.c_str(), times);
  }
  auto store = store::TraceStore::Open("s3://traces/list", Options(s3rver));
  std::vector<double> seconds;
  const size_t log_before = s3rver.log().size();
  for (int r = 0; r < rounds; ++r) {
    size_t rows = 0;
    seconds.push_back(Seconds([&] {
      auto list = (*store)->List({});
      if (!list.ok()) {
        std::fprintf(stderr, "list failed: %s\n", list.status().ToString().c_str());
        std::exit(1);
      }
      rows = list->size();
    }));
    std::printf("  round %d: %zu rows in %.3f s\n", r + 1, rows, seconds.back());
  }
  Spread s = Summarize(seconds);
  // s3rver's log lines lose their method; during the lists only GETs reach the index objects.
  const std::string log = s3rver.log().substr(log_before);
  size_t gets = 0;
  for (size_t at = 0; (at = log.find("list/_index/" + day + "/node-", at)) != std::string::npos;
       ++at) {
    ++gets;
  }
  std::printf(
      "list over %d host indexes x %d: median %.3f s (%.3f-%.3f), %zu index GETs per list\n", hosts,
      rounds, s.median, s.min, s.max, gets / static_cast<size_t>(rounds));
}

}  // namespace
}  // namespace profd::testing

int main(int argc, char** argv) {
  using namespace profd::testing;
  if (!S3rverProcess::Installed()) {
    std::fprintf(stderr, "s3rver is not installed: run scripts/setup.sh\n");
    return 1;
  }
  setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
  const int rounds = Flag(argc, argv, "rounds", 7);
  TempDir dir;
  S3rverProcess s3rver({"traces"});
  s3rver.Start();
  Upload(s3rver, dir, Flag(argc, argv, "mb", 105), rounds);
  List(s3rver, Flag(argc, argv, "hosts", 1006), rounds);
  return 0;
}
