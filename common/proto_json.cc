#include "common/proto_json.h"

#include "google/protobuf/util/json_util.h"

namespace profd {

std::string ProtoToJson(const google::protobuf::Message& message, const ProtoJsonOptions& options) {
  google::protobuf::util::JsonPrintOptions json;
  json.preserve_proto_field_names = true;
  json.add_whitespace = options.readable;
  json.always_print_primitive_fields = options.readable;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, json);
  return out;
}

bool ProtoFromJson(const std::string& json, google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  return google::protobuf::util::JsonStringToMessage(json, message, options).ok();
}

}  // namespace profd
