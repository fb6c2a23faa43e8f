#include "daemon/server/listener_config.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace profd {

bool IsLoopbackAddress(const std::string& address) {
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
    return true;
  }
  std::string host = address;
  for (const char* scheme : {"ipv4:", "ipv6:", "dns:///", "dns:"}) {
    if (absl::StartsWith(host, scheme)) {
      host = host.substr(std::strlen(scheme));
      break;
    }
  }
  if (!host.empty() && host[0] == '[') {
    host = host.substr(1, host.find(']') - 1);
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    host = host.substr(0, host.find(':'));
  }
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  }
  return false;
}

absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": cannot read it: ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (!absl::StrContains(text.str(), "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, "=", path, ": not a PEM file (expected a '-----BEGIN ...' block)"));
  }
  return text.str();
}

namespace {

// The security of a TCP listener on flags.address; the flags that need no listener are checked
// by the caller.
absl::StatusOr<ListenerConfig> DecideTcpSecurity(const ListenerFlags& flags) {
  const std::string& address = flags.address;
  ListenerConfig config;
  bool insecure = flags.insecure_tcp;
  if (flags.insecure_remote) {
    config.warnings.push_back(
        "--grpc_insecure_remote is deprecated: it is now --grpc_insecure_tcp, which also covers "
        "loopback addresses");
    insecure = true;
  }
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--grpc_address=", address,
        " is a unix socket: give it as --grpc_socket instead, where profd sets its owner and "
        "mode (--access_group)"));
  }
  if (flags.tls_cert_file.empty() != flags.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--grpc_tls_cert and --grpc_tls_key go together (the server certificate and its private "
        "key); give both, or neither");
  }
  if (!flags.tls_client_ca_file.empty() && flags.tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        "--grpc_tls_client_ca needs --grpc_tls_cert and --grpc_tls_key: client certificates are "
        "only checked on a TLS listener");
  }
  const bool loopback = IsLoopbackAddress(address);
  const std::string who = loopback ? "every local user (any uid on this host, any container in "
                                     "its network namespace)"
                                   : "anyone who can reach it";
  if (!flags.tls_cert_file.empty()) {
    if (!flags.tls_client_ca_file.empty()) {
      config.security = ListenerSecurity::kMutualTls;
      config.mode = "mutual TLS";
      return config;
    }
    if (!insecure) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--grpc_address=", address,
          " with TLS but no --grpc_tls_client_ca: TLS proves profd's identity but not its "
          "clients', so ",
          who,
          " could list processes, start captures and download traces. Add "
          "--grpc_tls_client_ca (clients then need a certificate signed by that CA), or pass "
          "--grpc_insecure_tcp to accept the risk"));
    }
    config.warnings.push_back(absl::StrFormat(
        "INSECURE: gRPC on %s with TLS but WITHOUT client certificates (--grpc_insecure_tcp): %s "
        "can list processes, start captures and download traces; add --grpc_tls_client_ca",
        address, who));
    config.security = ListenerSecurity::kTlsWithoutClientCertificates;
    config.mode = "TLS, no client certificates, INSECURE";
    return config;
  }
  if (!insecure) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--grpc_address=", address, " without TLS: ", who,
        " could list processes, start captures and download traces (the unix socket "
        "--grpc_socket is guarded by its file mode; a TCP port is not). Give --grpc_tls_cert, "
        "--grpc_tls_key and --grpc_tls_client_ca (mutual TLS), or use the unix socket "
        "(--grpc_address=none), or pass --grpc_insecure_tcp to accept the risk"));
  }
  config.warnings.push_back(absl::StrFormat(
      "INSECURE: gRPC on %s WITHOUT TLS (--grpc_insecure_tcp): %s can list processes, start "
      "captures and download traces; use --grpc_tls_cert/--grpc_tls_key/--grpc_tls_client_ca "
      "instead",
      address, who));
  config.security = ListenerSecurity::kPlaintext;
  config.mode = loopback ? "plaintext, loopback, INSECURE" : "plaintext, INSECURE";
  return config;
}

}  // namespace

absl::StatusOr<ListenerConfig> DecideListenerConfig(const ListenerFlags& flags) {
  if (flags.address == "none" || flags.address.empty()) {
    ListenerConfig config;
    if (!flags.tls_cert_file.empty()) {
      config.warnings.push_back("--grpc_tls_cert has no effect: --grpc_address is none");
    }
    return config;
  }
  absl::StatusOr<ListenerConfig> config = DecideTcpSecurity(flags);
  if (config.ok() && flags.handshake_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grpc_handshake_timeout=", absl::FormatDuration(flags.handshake_timeout),
                     ": give a duration above 0, such as 5s"));
  }
  return config;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ListenerCredentials(
    const ListenerFlags& flags, const ListenerConfig& config) {
  switch (config.security) {
    case ListenerSecurity::kNone:
      return absl::FailedPreconditionError("no TCP listener: --grpc_address is none");
    case ListenerSecurity::kPlaintext:
      return grpc::InsecureServerCredentials();
    case ListenerSecurity::kMutualTls:
    case ListenerSecurity::kTlsWithoutClientCertificates:
      break;
  }
  absl::StatusOr<std::string> cert = ReadPemFile("grpc_tls_cert", flags.tls_cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPemFile("grpc_tls_key", flags.tls_key_file);
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({*key, *cert});
  if (config.security == ListenerSecurity::kMutualTls) {
    absl::StatusOr<std::string> client_ca =
        ReadPemFile("grpc_tls_client_ca", flags.tls_client_ca_file);
    if (!client_ca.ok()) return client_ca.status();
    options.pem_root_certs = *client_ca;
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

}  // namespace profd
