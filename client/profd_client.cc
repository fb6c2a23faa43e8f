#include "client/profd_client.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace profctl {
namespace {

// Reads one PEM file named by a flag; the error says which flag, which path and why.
absl::Status ReadPem(const std::string& flag, const std::string& path, const std::string& expected,
                     std::string* out) {
  if (path.empty()) return absl::OkStatus();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot read ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  *out = text.str();
  if (!absl::StrContains(*out, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": ", path, " is not a PEM file (expected ", expected, " in '-----BEGIN ...' form)"));
  }
  return absl::OkStatus();
}

bool IsUnixTarget(const std::string& target) {
  return absl::StartsWith(target, "unix:") || absl::StartsWith(target, "unix-abstract:");
}

// gRPC reports a failed handshake as UNAVAILABLE; its text is the only way to tell it from a
// daemon that is not there.
bool LooksLikeTlsFailure(const std::string& message) {
  const std::string m = absl::AsciiStrToLower(message);
  for (const char* word : {"handshake", "ssl", "tls", "certificate", "alert"}) {
    if (absl::StrContains(m, word)) return true;
  }
  return false;
}

// The peer accepted the TCP connection and then dropped it: on a TLS listener that is how a
// refused handshake looks from the other side (no client certificate, or plaintext to TLS).
bool PeerClosed(const std::string& message) {
  const std::string m = absl::AsciiStrToLower(message);
  return absl::StrContains(m, "socket closed") || absl::StrContains(m, "connection reset") ||
         absl::StrContains(m, "end of file");
}

}  // namespace

std::string ResolveTarget(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("PROFD_TARGET"); env && env[0]) return env;
  return kDefaultTarget;
}

absl::Status TlsOptions::Load() {
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key go together (the client certificate and its private key); got "
        "only " +
        std::string(cert_file.empty() ? "--tls-key" : "--tls-cert"));
  }
  if (absl::Status s = ReadPem("--tls-ca", ca_file, "a CA certificate", &ca_pem); !s.ok()) return s;
  if (absl::Status s = ReadPem("--tls-cert", cert_file, "a certificate", &cert_pem); !s.ok()) {
    return s;
  }
  return ReadPem("--tls-key", key_file, "a private key", &key_pem);
}

ProfdClient::ProfdClient(const std::string& target, const TlsOptions& tls)
    // profd's unix socket is always plaintext (file permissions guard it), so TLS settings, say
    // PROFD_TLS_CA exported for remote nodes, do not break the local default target.
    : target_(target),
      tls_(tls.enabled() && !IsUnixTarget(target)),
      client_cert_(!tls.cert_pem.empty()) {
  if (!tls_) {
    channel_ = grpc::CreateChannel(target_, grpc::InsecureChannelCredentials());
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = tls.ca_pem;  // empty: the system's roots
    ssl.pem_cert_chain = tls.cert_pem;
    ssl.pem_private_key = tls.key_pem;
    grpc::ChannelArguments args;
    if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
    channel_ = grpc::CreateCustomChannel(target_, grpc::SslCredentials(ssl), args);
  }
  stub_ = profd::v1::Profd::NewStub(channel_);
}

std::string ProfdClient::Explain(const grpc::Status& status) const {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return ExplainUnreachable(status.error_message());
    case grpc::StatusCode::PERMISSION_DENIED:
      return "profd at " + target_ + " refused: " + status.error_message() +
             " (the unix socket is root-only by default: run as root or a member of its group)";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "profd at " + target_ + " does not support this command (older version?)";
    default:
      return status.error_message();
  }
}

std::string ProfdClient::ExplainUnreachable(const std::string& detail) const {
  if (tls_ && (LooksLikeTlsFailure(detail) || PeerClosed(detail))) {
    std::string why = detail;
    if (!LooksLikeTlsFailure(detail) && !client_cert_) {
      why +=
          " (profd closed the connection: it most likely requires a client certificate, "
          "--grpc_tls_client_ca, and none was given)";
    }
    return "TLS handshake with profd at " + target_ + " failed: " + why +
           "; check --tls-ca (the CA that signed profd's --grpc_tls_cert), --tls-cert/--tls-key "
           "(a profd started with --grpc_tls_client_ca wants a client certificate signed by that "
           "CA) and --tls-server-name";
  }
  if (!tls_ && !IsUnixTarget(target_) && PeerClosed(detail)) {
    return "profd at " + target_ + " closed the connection (" + detail +
           "): it most likely serves TLS on this address (--grpc_tls_cert); pass --tls-ca FILE "
           "(or PROFD_TLS_CA), and --tls-cert/--tls-key if it wants a client certificate";
  }
  if (IsUnixTarget(target_)) {
    return "profd not reachable at " + target_ +
           ": is it running? (start it with `profd`, or pick another daemon with --target or "
           "PROFD_TARGET)";
  }
  return "profd not reachable at " + target_ + ": " + detail +
         " (is it running, with --grpc_address on this address? pick another daemon with "
         "--target or PROFD_TARGET)";
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
