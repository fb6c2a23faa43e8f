// Test support: the event batches recorded from real GPU captures (tests/fixtures/), and reading
// back the gzip JSON traces profd writes.
#pragma once

#include <string>
#include <vector>

#include "profd/v1/events.pb.h"
#include "rapidjson/document.h"

namespace profd::testing {

// Reads a varint-delimited stream of EventBatch (profd --record_batches).
std::vector<v1::EventBatch> ReadRecordedBatches(const std::string& path);

// One batch with every kind of event, at the edges of what an agent may send (names to escape,
// unknown ids and enums, times before t0 and past 2^62, zero and negative durations): for the
// trace writers' tests of both formats.
v1::EventBatch EveryKindOfEvent(uint64_t t0);

// Decompresses a .json.gz and parses it; fails the calling test on error.
// A gzip (or plain) file's whole text; throws when it cannot be opened.
std::string ReadGzip(const std::string& path);
rapidjson::Document ReadGzipJson(const std::string& path);

}  // namespace profd::testing
