#include "daemon/kineto/kineto_wire.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace profd::kineto {
namespace {

uint64_t LoadU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
int32_t LoadI32(const char* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
int64_t LoadI64(const char* p) {
  int64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <typename T>
void Append(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

}  // namespace

absl::StatusOr<KinetoDatagram> DecodeKinetoDatagram(std::string_view bytes) {
  if (bytes.size() < kMetadataBytes) {
    return absl::InvalidArgumentError(absl::StrCat("datagram of ", bytes.size(),
                                                   " bytes is shorter than Kineto's ",
                                                   kMetadataBytes, "-byte header"));
  }
  const uint64_t size = LoadU64(bytes.data());
  if (size != bytes.size() - kMetadataBytes) {
    return absl::InvalidArgumentError(absl::StrCat("header says ", size, " payload bytes, ",
                                                   bytes.size() - kMetadataBytes, " came"));
  }
  const char* type = bytes.data() + sizeof(uint64_t);
  const size_t type_len = strnlen(type, kTypeBytes);
  if (type_len == kTypeBytes) return absl::InvalidArgumentError("message type is not terminated");
  KinetoDatagram out;
  out.type.assign(type, type_len);
  const std::string_view payload = bytes.substr(kMetadataBytes);
  if (out.type == "ctxt") return out;
  if (out.type != "req") {
    return absl::InvalidArgumentError(absl::StrCat("unknown message type '", out.type, "'"));
  }
  if (payload.size() < kRequestHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("request of ", payload.size(), " bytes is shorter than its header"));
  }
  const int32_t n = LoadI32(payload.data() + 4);
  if (n < 1 || n > kMaxRequestPids ||
      payload.size() != kRequestHeaderBytes + sizeof(int32_t) * static_cast<size_t>(n)) {
    return absl::InvalidArgumentError(absl::StrCat("request lists ", n, " pids in ", payload.size(),
                                                   " bytes (1 to ", kMaxRequestPids, " expected)"));
  }
  out.is_request = true;
  out.request.type = LoadI32(payload.data());
  if (out.request.type < 0 || out.request.type > (kRequestEvents | kRequestActivities)) {
    return absl::InvalidArgumentError(absl::StrCat("request type ", out.request.type));
  }
  out.request.job_id = LoadI64(payload.data() + 8);
  out.request.pids.resize(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    out.request.pids[i] = LoadI32(payload.data() + kRequestHeaderBytes + 4 * i);
  }
  if (out.request.pids[0] <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("request names pid ", out.request.pids[0]));
  }
  return out;
}

std::string EncodeKinetoMessage(std::string_view type, std::string_view payload) {
  std::string out;
  out.reserve(kMetadataBytes + payload.size());
  Append<uint64_t>(&out, payload.size());
  char name[kTypeBytes] = {};
  std::memcpy(name, type.data(), std::min(type.size(), kTypeBytes - 1));
  out.append(name, kTypeBytes);
  out.append(payload);
  return out;
}

std::string EncodeKinetoRequest(const KinetoRequest& request) {
  std::string payload;
  Append<int32_t>(&payload, request.type);
  Append<int32_t>(&payload, static_cast<int32_t>(request.pids.size()));
  Append<int64_t>(&payload, request.job_id);
  for (int32_t pid : request.pids) Append<int32_t>(&payload, pid);
  return EncodeKinetoMessage("req", payload);
}

}  // namespace profd::kineto
