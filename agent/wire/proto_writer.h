// A minimal protobuf wire-format writer and reader for the agent, in the spirit of Perfetto's
// ProtoZero: it appends straight into a caller-owned buffer (reused between messages, so no
// allocation in steady state) and pulls nothing of libprotobuf into the profiled process.
//
// Not thread-safe; each thread owns its writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace profagent::wire {

class ProtoWriter {
 public:
  // Appends to *out; the caller clears it between messages to keep its capacity.
  explicit ProtoWriter(std::string* out) : out_(out) {}

  // proto3 semantics: zero values are not written, as protoc's own serializer does.
  void Varint(uint32_t field, uint64_t value) {
    if (value == 0) return;
    Tag(field, 0);
    AppendVarint(value);
  }
  void Signed(uint32_t field, int64_t value) { Varint(field, static_cast<uint64_t>(value)); }
  void Bool(uint32_t field, bool value) { Varint(field, value ? 1 : 0); }
  void String(uint32_t field, std::string_view value) {
    if (value.empty()) return;
    Tag(field, 2);
    AppendVarint(value.size());
    out_->append(value.data(), value.size());
  }

  // Opens a length-delimited sub-message; its length is patched in by EndNested. The length is
  // a 4-byte padded varint (valid protobuf, as ProtoZero writes it), so nothing moves.
  size_t BeginNested(uint32_t field) {
    Tag(field, 2);
    size_t at = out_->size();
    out_->append(kNestedLengthBytes, '\0');
    return at;
  }
  void EndNested(size_t at) {
    size_t length = out_->size() - at - kNestedLengthBytes;
    char* p = out_->data() + at;
    for (size_t i = 0; i < kNestedLengthBytes; ++i) {
      uint8_t byte = static_cast<uint8_t>((length >> (7 * i)) & 0x7f);
      if (i + 1 < kNestedLengthBytes) byte |= 0x80;
      p[i] = static_cast<char>(byte);
    }
  }

  std::string* buffer() { return out_; }

  // The largest sub-message a 4-byte padded length can describe.
  static constexpr size_t kMaxNestedBytes = (1u << 28) - 1;

 private:
  static constexpr size_t kNestedLengthBytes = 4;

  void Tag(uint32_t field, uint32_t wire_type) { AppendVarint((field << 3) | wire_type); }
  void AppendVarint(uint64_t value) {
    char buf[10];
    size_t n = 0;
    while (value >= 0x80) {
      buf[n++] = static_cast<char>((value & 0x7f) | 0x80);
      value >>= 7;
    }
    buf[n++] = static_cast<char>(value);
    out_->append(buf, n);
  }

  std::string* out_;
};

// Walks the fields of one serialized message. Unknown fields are skipped by the caller simply
// not acting on them; malformed input stops the walk and sets ok() to false.
class ProtoReader {
 public:
  explicit ProtoReader(std::string_view data) : data_(data) {}

  // Advances to the next field; false at the end or on malformed input.
  bool Next();
  uint32_t field() const { return field_; }
  uint32_t wire_type() const { return wire_type_; }
  uint64_t varint() const { return varint_; }
  std::string_view bytes() const { return bytes_; }
  bool ok() const { return ok_; }

 private:
  bool ReadVarint(uint64_t* value);

  std::string_view data_;
  size_t pos_ = 0;
  uint32_t field_ = 0;
  uint32_t wire_type_ = 0;
  uint64_t varint_ = 0;
  std::string_view bytes_;
  bool ok_ = true;
};

}  // namespace profagent::wire
