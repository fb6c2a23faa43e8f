// Fields of JSON objects that come from outside (the Kubernetes API, a kubeconfig): a field that
// is missing or of another type reads as absent or empty, never as an error or a crash.
#pragma once

#include <string>

#include "rapidjson/document.h"

namespace profd {

// The value of field `name`, or null when `v` is no object or has no such field.
inline const rapidjson::Value* JsonMember(const rapidjson::Value& v, const char* name) {
  if (!v.IsObject()) return nullptr;
  auto it = v.FindMember(name);
  return it == v.MemberEnd() ? nullptr : &it->value;
}

// The string in field `name`; "" when there is none.
inline std::string JsonString(const rapidjson::Value& v, const char* name) {
  const rapidjson::Value* m = JsonMember(v, name);
  return m != nullptr && m->IsString() ? std::string(m->GetString(), m->GetStringLength()) : "";
}

}  // namespace profd
