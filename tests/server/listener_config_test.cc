// DecideListenerConfig for every combination of the TCP listener's flags, and the credentials
// built from the files they name. What a client then sees is tests/integration/tls_test's.
#include "daemon/server/listener_config.h"

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using ::profd::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

ListenerFlags Tcp(const std::string& address) {
  ListenerFlags flags;
  flags.address = address;
  return flags;
}

ListenerFlags MutualTls(const std::string& address) {
  ListenerFlags flags = Tcp(address);
  flags.tls_cert_file = "server.pem";
  flags.tls_key_file = "server.key";
  flags.tls_client_ca_file = "ca.pem";
  return flags;
}

TEST(ListenerConfigTest, NoAddressServesNoTcpAndSaysACertificateHasNoEffect) {
  for (const std::string address : {"none", ""}) {
    absl::StatusOr<ListenerConfig> config = DecideListenerConfig(Tcp(address));
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_FALSE(config->serve_tcp());
    EXPECT_EQ(config->security, ListenerSecurity::kNone);
    EXPECT_THAT(config->mode, IsEmpty());
    EXPECT_THAT(config->warnings, IsEmpty());
  }
  ListenerFlags cert_only = Tcp("none");
  cert_only.tls_cert_file = "server.pem";
  absl::StatusOr<ListenerConfig> config = DecideListenerConfig(cert_only);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->serve_tcp());
  EXPECT_THAT(config->warnings,
              ::testing::ElementsAre("--grpc_tls_cert has no effect: --grpc_address is none"));
}

TEST(ListenerConfigTest, MutualTlsStartsWithoutWarning) {
  absl::StatusOr<ListenerConfig> config = DecideListenerConfig(MutualTls("0.0.0.0:7000"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->serve_tcp());
  EXPECT_EQ(config->security, ListenerSecurity::kMutualTls);
  EXPECT_EQ(config->mode, "mutual TLS");
  EXPECT_THAT(config->warnings, IsEmpty());
}

TEST(ListenerConfigTest, PlaintextIsRefusedUnlessTheRiskIsAccepted) {
  for (const std::string address : {"127.0.0.1:7000", "0.0.0.0:7000"}) {
    absl::StatusOr<ListenerConfig> refused = DecideListenerConfig(Tcp(address));
    ASSERT_FALSE(refused.ok()) << address;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(refused.status().message(),
                HasSubstr("--grpc_address=" + address + " without TLS"));
    EXPECT_THAT(refused.status().message(),
                HasSubstr("--grpc_tls_cert, --grpc_tls_key and --grpc_tls_client_ca"));
    EXPECT_THAT(refused.status().message(), HasSubstr("--grpc_insecure_tcp"));
  }
  // Loopback is no exception: every local user can reach the port.
  EXPECT_THAT(DecideListenerConfig(Tcp("127.0.0.1:7000")).status().message(),
              HasSubstr("every local user"));
  EXPECT_THAT(DecideListenerConfig(Tcp("10.0.0.1:7000")).status().message(),
              HasSubstr("anyone who can reach it"));

  ListenerFlags accepted = Tcp("127.0.0.1:7000");
  accepted.insecure_tcp = true;
  absl::StatusOr<ListenerConfig> config = DecideListenerConfig(accepted);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->security, ListenerSecurity::kPlaintext);
  EXPECT_EQ(config->mode, "plaintext, loopback, INSECURE");
  ASSERT_THAT(config->warnings, SizeIs(1));
  EXPECT_THAT(config->warnings[0], HasSubstr("INSECURE: gRPC on 127.0.0.1:7000 WITHOUT TLS"));

  accepted.address = "[::]:7000";
  config = DecideListenerConfig(accepted);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->mode, "plaintext, INSECURE");
  EXPECT_THAT(config->warnings[0], HasSubstr("anyone who can reach it"));
}

TEST(ListenerConfigTest, TlsWithoutClientCertificatesIsRefusedUnlessTheRiskIsAccepted) {
  ListenerFlags flags = MutualTls("0.0.0.0:7000");
  flags.tls_client_ca_file.clear();
  absl::StatusOr<ListenerConfig> refused = DecideListenerConfig(flags);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("with TLS but no --grpc_tls_client_ca"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--grpc_insecure_tcp"));

  flags.insecure_tcp = true;
  absl::StatusOr<ListenerConfig> config = DecideListenerConfig(flags);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->security, ListenerSecurity::kTlsWithoutClientCertificates);
  EXPECT_EQ(config->mode, "TLS, no client certificates, INSECURE");
  ASSERT_THAT(config->warnings, SizeIs(1));
  EXPECT_THAT(config->warnings[0], HasSubstr("WITHOUT client certificates"));
}

TEST(ListenerConfigTest, TheDeprecatedFlagAcceptsTheRiskAndSaysItIsDeprecated) {
  ListenerFlags flags = Tcp("0.0.0.0:7000");
  flags.insecure_remote = true;
  absl::StatusOr<ListenerConfig> config = DecideListenerConfig(flags);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->security, ListenerSecurity::kPlaintext);
  ASSERT_THAT(config->warnings, SizeIs(2));
  EXPECT_THAT(config->warnings[0], HasSubstr("--grpc_insecure_remote is deprecated"));
  EXPECT_THAT(config->warnings[1], HasSubstr("INSECURE"));
}

TEST(ListenerConfigTest, FlagsThatDoNotGoTogetherSayWhichAndWhy) {
  ListenerFlags unix_socket = Tcp("unix:/run/other.sock");
  unix_socket.insecure_tcp = true;
  absl::StatusOr<ListenerConfig> config = DecideListenerConfig(unix_socket);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("is a unix socket: give it as --grpc_socket"));

  ListenerFlags cert_without_key = MutualTls("0.0.0.0:7000");
  cert_without_key.tls_key_file.clear();
  config = DecideListenerConfig(cert_without_key);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(),
              HasSubstr("--grpc_tls_cert and --grpc_tls_key go together"));

  ListenerFlags ca_only = Tcp("0.0.0.0:7000");
  ca_only.tls_client_ca_file = "ca.pem";
  config = DecideListenerConfig(ca_only);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("--grpc_tls_client_ca needs --grpc_tls_cert"));

  ListenerFlags no_handshake_time = MutualTls("0.0.0.0:7000");
  no_handshake_time.handshake_timeout = absl::ZeroDuration();
  config = DecideListenerConfig(no_handshake_time);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(),
              HasSubstr("--grpc_handshake_timeout=0: give a duration above 0"));
  // Without TCP the handshake timeout is not used, so not checked.
  no_handshake_time.address = "none";
  EXPECT_TRUE(DecideListenerConfig(no_handshake_time).ok());
}

TEST(ListenerConfigTest, LoopbackAddresses) {
  for (const char* address : {"127.0.0.1:7000", "127.9.9.9:1", "localhost:7000", "LocalHost:1",
                              "[::1]:7000", "[::ffff:127.0.0.1]:7000", "ipv4:127.0.0.1:7000",
                              "ipv6:[::1]:7000", "dns:///localhost:7000", "unix:/run/x.sock"}) {
    EXPECT_TRUE(IsLoopbackAddress(address)) << address;
  }
  for (const char* address : {"0.0.0.0:7000", "[::]:7000", ":7000", "10.0.0.1:7000",
                              "example.com:7000", "127.example.com:7000", "[::ffff:10.0.0.1]:1"}) {
    EXPECT_FALSE(IsLoopbackAddress(address)) << address;
  }
}

TEST(ListenerConfigTest, CredentialsReadThePemFilesAndSayWhichOneIsWrong) {
  TempDir dir;
  const std::string pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  std::ofstream(dir.File("server.pem")) << pem;
  std::ofstream(dir.File("server.key")) << "not a key";
  ListenerFlags flags = MutualTls("0.0.0.0:7000");
  flags.tls_cert_file = dir.File("server.pem");
  flags.tls_key_file = dir.File("server.key");
  flags.tls_client_ca_file = dir.File("missing.pem");
  absl::StatusOr<ListenerConfig> config = DecideListenerConfig(flags);
  ASSERT_TRUE(config.ok()) << config.status();

  auto credentials = ListenerCredentials(flags, *config);
  ASSERT_FALSE(credentials.ok());
  EXPECT_THAT(credentials.status().message(),
              HasSubstr("--grpc_tls_key=" + dir.File("server.key") + ": not a PEM file"));

  std::ofstream(dir.File("server.key"), std::ios::trunc) << pem;
  credentials = ListenerCredentials(flags, *config);
  ASSERT_FALSE(credentials.ok());
  EXPECT_THAT(credentials.status().message(),
              HasSubstr("--grpc_tls_client_ca=" + dir.File("missing.pem") + ": cannot read it"));

  // Plaintext reads nothing.
  ListenerFlags plain = Tcp("0.0.0.0:7000");
  plain.insecure_tcp = true;
  config = DecideListenerConfig(plain);
  ASSERT_TRUE(config.ok()) << config.status();
  credentials = ListenerCredentials(plain, *config);
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  EXPECT_NE(*credentials, nullptr);
}

}  // namespace
}  // namespace profd
