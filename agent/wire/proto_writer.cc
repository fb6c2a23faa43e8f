#include "agent/wire/proto_writer.h"

namespace profagent::wire {

bool ProtoReader::ReadVarint(uint64_t* value) {
  uint64_t result = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos_ >= data_.size()) return false;
    uint8_t byte = static_cast<uint8_t>(data_[pos_++]);
    result |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      *value = result;
      return true;
    }
  }
  return false;
}

bool ProtoReader::Next() {
  if (!ok_ || pos_ >= data_.size()) return false;
  uint64_t tag;
  if (!ReadVarint(&tag) || (tag >> 3) == 0 || (tag >> 3) > UINT32_MAX) {
    ok_ = false;
    return false;
  }
  field_ = static_cast<uint32_t>(tag >> 3);
  wire_type_ = static_cast<uint32_t>(tag & 7);
  varint_ = 0;
  bytes_ = {};
  switch (wire_type_) {
    case 0:
      if (!ReadVarint(&varint_)) ok_ = false;
      break;
    case 1:
      if (data_.size() - pos_ < 8) ok_ = false;
      pos_ += 8;
      break;
    case 2: {
      uint64_t length;
      if (!ReadVarint(&length) || length > data_.size() - pos_) {
        ok_ = false;
        break;
      }
      bytes_ = data_.substr(pos_, length);
      pos_ += length;
      break;
    }
    case 5:
      if (data_.size() - pos_ < 4) ok_ = false;
      pos_ += 4;
      break;
    default:
      ok_ = false;
  }
  return ok_;
}

}  // namespace profagent::wire
