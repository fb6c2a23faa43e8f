#include "client/profd_client.h"

#include <cstdlib>

namespace profctl {

std::string ResolveTarget(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("PROFD_TARGET"); env && env[0]) return env;
  return kDefaultTarget;
}

ProfdClient::ProfdClient(const std::string& target) : target_(target) {
  channel_ = grpc::CreateChannel(target_, grpc::InsecureChannelCredentials());
  stub_ = profd::v1::Profd::NewStub(channel_);
}

std::string ProfdClient::Explain(const grpc::Status& status) const {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "profd not reachable at " + target_ +
             ": is it running? (start it with `profd`, or pick another daemon with --target or "
             "PROFD_TARGET)";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "profd at " + target_ + " refused: " + status.error_message() +
             " (the unix socket is root-only by default: run as root or a member of its group)";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "profd at " + target_ + " does not support this command (older version?)";
    default:
      return status.error_message();
  }
}

int ProfdClient::ExitCodeFor(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::OK:
      return kExitOk;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return kExitUnreachable;
    case grpc::StatusCode::NOT_FOUND:
      return kExitNotFound;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      return kExitUsage;
    default:
      return kExitError;
  }
}

}  // namespace profctl
