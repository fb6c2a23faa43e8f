// profctl's connection to profd: resolves --target, makes the channel, and turns gRPC failures
// into messages that say what to do and into exit codes scripts can rely on.
#pragma once

#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"
#include "profd/v1/profd.grpc.pb.h"

namespace profctl {

// Exit codes (README.md lists them).
enum ExitCode {
  kExitOk = 0,
  kExitError = 1,        // anything else that went wrong
  kExitUsage = 2,        // bad flags or arguments
  kExitUnreachable = 3,  // profd not reachable
  kExitNotFound = 4,     // unknown pid, capture or trace
  kExitCaptureFailed = 5,
};

inline constexpr char kDefaultTarget[] = "unix:/run/profd/profd.sock";

// --target, else $PROFD_TARGET, else the default unix socket.
std::string ResolveTarget(const std::string& flag);

class ProfdClient {
 public:
  explicit ProfdClient(const std::string& target);
  profd::v1::Profd::Stub& stub() { return *stub_; }
  const std::string& target() const { return target_; }

  // A message for the user and the exit code for a failed call.
  std::string Explain(const grpc::Status& status) const;
  static int ExitCodeFor(const grpc::Status& status);

 private:
  std::string target_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<profd::v1::Profd::Stub> stub_;
};

}  // namespace profctl
