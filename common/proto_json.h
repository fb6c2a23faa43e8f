// Protobuf messages as proto3 JSON, the one way profd and profctl write them: field names as
// in the .proto (capture_id, not captureId).
#pragma once

#include <string>

#include "google/protobuf/message.h"

namespace profd {

struct ProtoJsonOptions {
  // Indented, one field a line, and every field even when it holds its default: files people
  // read (manifest.json) and profctl --json.
  bool readable = true;
};

std::string ProtoToJson(const google::protobuf::Message& message,
                        const ProtoJsonOptions& options = {});

// Reads what ProtoToJson wrote (fields it does not know are ignored); false when json is not
// such a message.
bool ProtoFromJson(const std::string& json, google::protobuf::Message* message);

}  // namespace profd
