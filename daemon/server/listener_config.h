// How profd's gRPC TCP listener is secured, decided from its flags before anything starts: a
// daemon that would be open to the network does not start. Only mutual TLS authenticates the
// client, so only mutual TLS starts without --grpc_insecure_tcp: a plaintext loopback port is
// open to every local user (the file mode that guards the unix socket does not exist for it), and
// TLS without client certificates to everyone who can reach the port (docs/SECURITY.md).
//
// DecideListenerConfig is pure (flags in, decision out) so that every combination is unit-tested;
// ListenerCredentials then reads the PEM files the decision names. Called once, by profd's main.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/security/server_credentials.h"

namespace profd {

// The flags that shape the TCP listener, as given.
struct ListenerFlags {
  std::string address;             // --grpc_address; "none" or empty: no TCP listener
  std::string tls_cert_file;       // --grpc_tls_cert
  std::string tls_key_file;        // --grpc_tls_key
  std::string tls_client_ca_file;  // --grpc_tls_client_ca
  bool insecure_tcp = false;       // --grpc_insecure_tcp
  bool insecure_remote = false;    // --grpc_insecure_remote, the deprecated name of the above
  absl::Duration handshake_timeout = absl::Seconds(5);  // --grpc_handshake_timeout
};

enum class ListenerSecurity {
  kNone,                          // no TCP listener
  kMutualTls,                     // the only secure TCP mode
  kTlsWithoutClientCertificates,  // --grpc_insecure_tcp with a server certificate only
  kPlaintext,                     // --grpc_insecure_tcp without certificates
};

struct ListenerConfig {
  ListenerSecurity security = ListenerSecurity::kNone;
  bool serve_tcp() const { return security != ListenerSecurity::kNone; }
  // For profd's start-up line, e.g. "mutual TLS" or "plaintext, loopback, INSECURE"; empty
  // without TCP.
  std::string mode;
  // To be logged as warnings at start: the risks accepted, flags with no effect.
  std::vector<std::string> warnings;
};

// The listener the flags ask for, or why profd must not start with them (each message names the
// flags and how to fix them).
absl::StatusOr<ListenerConfig> DecideListenerConfig(const ListenerFlags& flags);

// The gRPC credentials of a TCP listener config decided from flags: reads the PEM files.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ListenerCredentials(
    const ListenerFlags& flags, const ListenerConfig& config);

// True when a gRPC listening address only accepts connections from this host: a unix socket,
// 127.0.0.0/8, ::1 (also as ::ffff:127.x.y.z) or localhost. Host names other than localhost
// count as remote: what they resolve to is not ours to trust.
bool IsLoopbackAddress(const std::string& address);

// The text of a PEM file named by --<flag>, or why it cannot be used.
absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path);

}  // namespace profd
