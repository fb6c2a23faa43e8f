// The store side of a fleet capture at size: N nodes (default 1,000) each store one capture of
// the same fleet id into one shared store (a real TraceStore on a local folder: the index object
// per host and day that an S3 store keeps too), then `profctl list --fleet ID` / `report FLEET_ID`
// list them (TraceStore::List with the fleet filter, the call profd makes for them). Prints the
// store's time per capture and the listing's median and spread.
//   fleet_store_bench [--nodes=1000] [--repeat=5]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/capture_id.h"
#include "daemon/store/trace_store.h"
#include "tests/store/store_test_util.h"

using namespace profd;

int main(int argc, char** argv) {
  int nodes = 1000, repeat = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--nodes=", 8) == 0) nodes = std::atoi(argv[i] + 8);
    if (std::strncmp(argv[i], "--repeat=", 9) == 0) repeat = std::atoi(argv[i] + 9);
  }
  testing::TempDir scratch, root;
  auto store = store::TraceStore::Open("file://" + root.path(), store::S3Options());
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", std::string(store.status().message()).c_str());
    return 1;
  }
  const absl::Time now = absl::Now();
  const std::string fleet_id = NewFleetId(now);
  // Another fleet's captures beside it, as a busy store has.
  const std::string other_fleet = NewFleetId(now - absl::Minutes(5));
  absl::Duration put_time;
  for (int pass = 0; pass < 2; ++pass) {
    for (int n = 0; n < nodes; ++n) {
      const std::string host = absl::StrCat("gpu-node-", n);
      const std::string id = NewCaptureId(host, now);
      const std::string folder =
          testing::MakeCaptureFolder(scratch.path(), id, host, absl::StrCat("llm-", n), 0, now);
      std::ifstream in(folder + "/manifest.json");
      std::stringstream text;
      text << in.rdbuf();
      std::ofstream(folder + "/manifest.json") << absl::StrReplaceAll(
          text.str(),
          {{"{\"capture_id\"", absl::StrCat("{\"fleet_id\":\"", pass == 0 ? other_fleet : fleet_id,
                                            "\",\"capture_id\"")}});
      auto described = store::DescribeCaptureFolder(folder, host);
      const absl::Time t0 = absl::Now();
      auto put = (*store)->Put(*described, folder, /*may_move=*/true);
      put_time += absl::Now() - t0;
      if (!put.ok()) {
        std::fprintf(stderr, "put: %s\n", std::string(put.status().message()).c_str());
        return 1;
      }
    }
  }
  std::printf("store: %d captures put in %.2f s, %.2f ms each (one writer)\n", 2 * nodes,
              absl::ToDoubleSeconds(put_time), absl::ToDoubleMilliseconds(put_time) / (2 * nodes));
  for (const bool by_fleet : {true, false}) {
    std::vector<double> ms;
    size_t rows = 0;
    for (int r = 0; r < repeat; ++r) {
      store::TraceFilter filter;
      filter.since = now - absl::Minutes(1);
      filter.limit = by_fleet ? 10000 : 50;
      if (by_fleet) filter.fleet_id = fleet_id;
      const absl::Time t0 = absl::Now();
      auto list = (*store)->List(filter);
      ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      if (!list.ok()) return 1;
      rows = list->size();
    }
    std::sort(ms.begin(), ms.end());
    std::printf("%s: %zu rows, median %.1f ms (min %.1f, max %.1f) over %d runs\n",
                by_fleet ? "list --fleet (report FLEET_ID)" : "list (newest 50)", rows,
                ms[ms.size() / 2], ms.front(), ms.back(), repeat);
  }
  return 0;
}
