#include "tests/support/fixtures.h"

#include <zlib.h>

#include <stdexcept>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "tests/support/subprocess.h"

namespace profd::testing {

std::vector<v1::EventBatch> ReadRecordedBatches(const std::string& path) {
  std::string data = ReadFileOrEmpty(path);
  if (data.empty()) throw std::runtime_error("fixture missing or empty: " + path);
  google::protobuf::io::ArrayInputStream raw(data.data(), static_cast<int>(data.size()));
  google::protobuf::io::CodedInputStream in(&raw);
  in.SetTotalBytesLimit(1 << 30);
  std::vector<v1::EventBatch> batches;
  uint32_t size;
  while (in.ReadVarint32(&size)) {
    auto limit = in.PushLimit(static_cast<int>(size));
    v1::EventBatch batch;
    if (!batch.ParseFromCodedStream(&in)) throw std::runtime_error("bad batch in " + path);
    in.PopLimit(limit);
    batches.push_back(std::move(batch));
  }
  return batches;
}

std::string ReadGzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open " + path);
  std::string text;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return text;
}

rapidjson::Document ReadGzipJson(const std::string& path) {
  const std::string text = ReadGzip(path);
  rapidjson::Document doc;
  doc.Parse(text.c_str());
  if (doc.HasParseError()) throw std::runtime_error("not JSON: " + path);
  return doc;
}

}  // namespace profd::testing
