// libFuzzer target: the event batches of one process's capture as profd's pipeline thread
// handles them (string table, streaming gzip JSON writer, summary), then the capture's finalize
// (the trace read back and analysed into summary.json). The input is what --record_batches
// keeps: varint-length-delimited EventBatch messages (tests/fixtures/*.batches.pb).
#include <cstdint>

#include "google/protobuf/io/coded_stream.h"
#include "profd/v1/events.pb.h"
#include "tests/fuzz/capture_pipeline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  google::protobuf::io::CodedInputStream in(data, static_cast<int>(size));
  profd::fuzz::CapturePipeline pipeline;
  uint32_t length;
  // A batch that does not parse ends the input, as a malformed frame ends a connection.
  while (in.ReadVarint32(&length)) {
    auto limit = in.PushLimit(static_cast<int>(length));
    profd::v1::EventBatch batch;
    if (!batch.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage()) break;
    in.PopLimit(limit);
    pipeline.Add(batch);
  }
  pipeline.Finish();
  return 0;
}
