// profctl's connection to profd: resolves --target, makes the channel (plaintext, or TLS with an
// optional client certificate), and turns gRPC failures into messages that say what to do and
// into exit codes scripts can rely on.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "profd/v1/profd.grpc.pb.h"

namespace profctl {

// Exit codes (README.md lists them).
enum ExitCode {
  kExitOk = 0,
  kExitError = 1,        // anything else that went wrong
  kExitUsage = 2,        // bad flags or arguments
  kExitUnreachable = 3,  // profd not reachable (also: TLS handshake failed; the message says so)
  kExitNotFound = 4,     // unknown pid, capture or trace
  kExitCaptureFailed = 5,
  kExitPermissionDenied = 6,  // this user may not use profd's control socket (root or its group)
  kExitPartial = 7,  // a capture across nodes: some nodes failed, the others' traces are kept
};

inline constexpr char kDefaultTarget[] = "unix:/run/profd/profd.sock";

// --target, else $PROFD_TARGET, else the default unix socket.
std::string ResolveTarget(const std::string& flag);

// How profctl authenticates profd (and itself) on a TCP target. The *_file fields come from the
// flags or environment; Load() reads them into the *_pem fields once, before any call is made.
struct TlsOptions {
  std::string ca_file;    // --tls-ca: verify profd's certificate against this CA; enables TLS
  std::string cert_file;  // --tls-cert / --tls-key: client certificate for profd's mTLS
  std::string key_file;
  std::string server_name;  // --tls-server-name: expected name in profd's certificate

  std::string ca_pem, cert_pem, key_pem;

  // Any TLS flag turns TLS on; without --tls-ca the system's root CAs verify profd.
  bool enabled() const {
    return !ca_file.empty() || !cert_file.empty() || !key_file.empty() || !server_name.empty();
  }
  // Reads the PEM files; the error names the flag and the path.
  absl::Status Load();
};

class ProfdClient {
 public:
  // tls must have been Load()ed when enabled(); it applies to TCP targets only.
  explicit ProfdClient(const std::string& target, const TlsOptions& tls = {});
  profd::v1::Profd::Stub& stub() { return *stub_; }
  const std::string& target() const { return target_; }
  // The one channel to profd, for the other services it serves (profd.v1.TraceStore): they get
  // the same credentials and the same connection.
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

  // A message for the user and the exit code for a failed call. ExitCode also tells a socket this
  // user may not open (kExitPermissionDenied) from a profd that is not there.
  std::string Explain(const grpc::Status& status) const;
  int ExitCode(const grpc::Status& status) const;
  static int ExitCodeFor(const grpc::Status& status);

 private:
  std::string ExplainUnreachable(const std::string& detail) const;

  std::string target_;
  bool tls_ = false;
  bool client_cert_ = false;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<profd::v1::Profd::Stub> stub_;
};

}  // namespace profctl
