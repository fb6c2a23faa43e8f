#include "client/profd_client.h"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "profd/v1/control_limits.h"

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

// The file of a unix:PATH or unix://PATH target ("" for an abstract socket or a TCP target).
std::string SocketPath(const std::string& target) {
  absl::string_view path = target;
  if (!absl::ConsumePrefix(&path, "unix:")) return "";
  absl::ConsumePrefix(&path, "//");
  return std::string(path);
}

std::string UserName(uid_t uid) {
  if (passwd* p = getpwuid(uid); p != nullptr) return absl::StrCat(p->pw_name, " (uid ", uid, ")");
  return absl::StrCat("uid ", uid);
}

std::string GroupName(gid_t gid) {
  if (group* g = getgrgid(gid); g != nullptr) return g->gr_name;
  return std::to_string(gid);
}

// When this user may not open profd's control socket (or get to it): what the socket allows and
// what to do. "" when the socket is usable or not there at all (then profd is not running).
std::string ExplainDenied(const std::string& path) {
  if (path.empty() || access(path.c_str(), R_OK | W_OK) == 0 || errno != EACCES) return "";
  const std::string user = UserName(geteuid());
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::StrCat("permission denied: ", user, " cannot get to profd's control socket ", path,
                        " (a folder above it is closed to you). Run profctl as root (sudo "
                        "profctl ...), or ask for access to that folder");
  }
  const std::string group = GroupName(st.st_gid);
  if ((st.st_mode & 0060) == 0) {
    return absl::StrFormat(
        "permission denied: profd's control socket %s is open to root only (owner %s, mode "
        "%04o), and you are %s. Run profctl as root (sudo profctl ...), or have profd started "
        "with --access_group=GROUP and become a member of that group",
        path, UserName(st.st_uid), st.st_mode & 07777, user);
  }
  return absl::StrFormat(
      "permission denied: profd's control socket %s is open to root and group %s (mode %04o), "
      "and you (%s) are not in that group. Run profctl as root (sudo profctl ...), or ask to be "
      "added to group %s (then log in again: group membership is read at login)",
      path, group, st.st_mode & 07777, user, group);
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
  grpc::ChannelArguments args;
  // Above the largest answer profd builds (profd/v1/control_limits.h); gRPC's default of 4 MiB
  // is not.
  args.SetMaxReceiveMessageSize(static_cast<int>(profd::v1::kMaxControlMessageBytes));
  if (!tls_) {
    channel_ = grpc::CreateCustomChannel(target_, grpc::InsecureChannelCredentials(), args);
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = tls.ca_pem;  // empty: the system's roots
    ssl.pem_cert_chain = tls.cert_pem;
    ssl.pem_private_key = tls.key_pem;
    if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
    channel_ = grpc::CreateCustomChannel(target_, grpc::SslCredentials(ssl), args);
  }
  stub_ = profd::v1::Profd::NewStub(channel_);
}

std::string ProfdClient::Explain(const grpc::Status& status) const {
  switch (status.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      // Connected (so past any TLS handshake) and no answer in time: profd is there, but slow.
      if (channel_->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY) {
        return "profd at " + target_ +
               " did not answer before the deadline (--timeout, 10s by default): it is running "
               "but busy; try again or give a longer --timeout";
      }
      return ExplainUnreachable(status.error_message());
    case grpc::StatusCode::UNAVAILABLE:
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
  if (std::string denied = ExplainDenied(SocketPath(target_)); !denied.empty()) return denied;
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

int ProfdClient::ExitCode(const grpc::Status& status) const {
  if ((status.error_code() == grpc::StatusCode::UNAVAILABLE ||
       status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) &&
      !ExplainDenied(SocketPath(target_)).empty()) {
    return kExitPermissionDenied;
  }
  return ExitCodeFor(status);
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
