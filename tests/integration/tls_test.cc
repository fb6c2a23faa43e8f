// TLS and client certificates on profd's TCP listener, end to end: a real profd, the real profctl,
// and certificates made for the test by the openssl command line (a throwaway CA, a server
// certificate for 127.0.0.1/localhost, client certificates from that CA and from a stranger's).
// The TCP listener is off by default and needs mutual TLS unless --grpc_insecure_tcp says
// otherwise, on loopback too: a plaintext port is open to every local user.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/support/profd_process.h"
#include "tests/support/test_pki.h"

namespace profd::testing {
namespace {

// A TCP port nobody listens on right now (the kernel's pick, released at once).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// The certificates, made once for the whole suite (key generation is the slow part): a CA, a
// server certificate for 127.0.0.1/localhost, a client certificate, and a stranger's from
// another CA.
bool MakeCertificates(TestPki* pki) {
  return pki->Ca("ca") && pki->Ca("other-ca") &&
         pki->Leaf("server", "ca", "profd test server",
                   "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n") &&
         pki->Leaf("client", "ca", "profctl test client", "extendedKeyUsage=clientAuth\n") &&
         pki->Leaf("stranger", "other-ca", "someone else", "extendedKeyUsage=clientAuth\n");
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string openssl = FindProgram("openssl");
    if (openssl.empty()) return;  // SetUp skips; scripts/setup.sh installs it
    pki_ = new TestPki(openssl);
    if (!MakeCertificates(pki_))
      FAIL() << "openssl could not make the test certificates:\n" << pki_->error();
  }
  static void TearDownTestSuite() {
    delete pki_;
    pki_ = nullptr;
  }
  void SetUp() override {
    if (pki_ == nullptr) GTEST_SKIP() << "no openssl on PATH (scripts/setup.sh installs it)";
    port_ = FreePort();
    address_ = absl::StrCat("127.0.0.1:", port_);
  }

  static std::string Pem(const std::string& name) { return pki_->File(name); }

  // The client's side of mutual TLS (CA, certificate, key), then args.
  static std::vector<std::string> WithClientCert(std::vector<std::string> args) {
    std::vector<std::string> out = {"--tls-ca",        Pem("ca.pem"), "--tls-cert",
                                    Pem("client.pem"), "--tls-key",   Pem("client.key")};
    out.insert(out.end(), args.begin(), args.end());
    return out;
  }
  // profd with mutual TLS on address_; Start() waits on its unix socket, which stays plaintext.
  std::unique_ptr<ProfdProcess> StartTlsProfd(std::vector<std::string> more_flags = {}) {
    std::vector<std::string> flags = {
        "--grpc_address=" + address_, "--grpc_tls_cert=" + Pem("server.pem"),
        "--grpc_tls_key=" + Pem("server.key"), "--grpc_tls_client_ca=" + Pem("ca.pem")};
    flags.insert(flags.end(), more_flags.begin(), more_flags.end());
    auto profd = std::make_unique<ProfdProcess>(flags);
    profd->Start();
    return profd;
  }

  // profctl --target <target> args..., with a short deadline: a refused handshake must not wait.
  static RunResult Profctl(const std::string& target, std::vector<std::string> args,
                           std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {BuildPath("client/profctl"), "--target", target, "--timeout",
                                     "5s"};
    argv.insert(argv.end(), args.begin(), args.end());
    return profd::testing::Run(argv, env);
  }

  static TestPki* pki_;
  int port_ = 0;
  std::string address_;
};

TestPki* TlsTest::pki_ = nullptr;

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_F(TlsTest, ProfctlVerifiesProfdWithTheCa) {
  auto profd = StartTlsProfd();
  EXPECT_TRUE(Has(profd->log(), "(mutual TLS)")) << profd->log();

  RunResult ok = Profctl(address_, WithClientCert({"status"}));
  EXPECT_EQ(ok.exit_code, 0) << ok.err << profd->log();
  EXPECT_TRUE(Has(ok.out, address_)) << ok.out;  // status lists the daemon's addresses

  // The store service rides on the same TLS channel (profctl spool -> profd.v1.TraceStore).
  RunResult spool = Profctl(address_, WithClientCert({"--json", "spool"}));
  EXPECT_EQ(spool.exit_code, 0) << spool.err;
  EXPECT_TRUE(Has(spool.out, "spool_dir")) << spool.out;

  // The environment does what the flags do.
  RunResult env = Profctl(address_, {"agents"},
                          {{"PROFD_TLS_CA", Pem("ca.pem")},
                           {"PROFD_TLS_CERT", Pem("client.pem")},
                           {"PROFD_TLS_KEY", Pem("client.key")}});
  EXPECT_EQ(env.exit_code, 0) << env.err;

  // The certificate names localhost and 127.0.0.1: both targets verify.
  RunResult by_name = Profctl(absl::StrCat("localhost:", port_), WithClientCert({"status"}));
  EXPECT_EQ(by_name.exit_code, 0) << by_name.err;
  RunResult override_ok =
      Profctl(address_, WithClientCert({"--tls-server-name", "localhost", "status"}));
  EXPECT_EQ(override_ok.exit_code, 0) << override_ok.err;
}

TEST_F(TlsTest, ProfctlWithoutTheRightCaIsToldWhy) {
  auto profd = StartTlsProfd();

  // Plaintext to a TLS port: profd hangs up, and profctl says it most likely wants TLS.
  RunResult plain = Profctl(address_, {"status"});
  EXPECT_EQ(plain.exit_code, 3) << plain.err;
  EXPECT_TRUE(Has(plain.err, "profd at " + address_ + " closed the connection")) << plain.err;
  EXPECT_TRUE(Has(plain.err, "serves TLS")) << plain.err;
  EXPECT_TRUE(Has(plain.err, "--tls-ca")) << plain.err;

  // A CA that did not sign profd's certificate: the handshake fails, and profctl says so.
  RunResult wrong_ca =
      Profctl(address_, {"--tls-ca", Pem("other-ca.pem"), "--tls-cert", Pem("client.pem"),
                         "--tls-key", Pem("client.key"), "status"});
  EXPECT_EQ(wrong_ca.exit_code, 3) << wrong_ca.err;
  EXPECT_TRUE(Has(wrong_ca.err, "TLS handshake with profd at " + address_ + " failed"))
      << wrong_ca.err;
  EXPECT_TRUE(Has(wrong_ca.err, "check --tls-ca")) << wrong_ca.err;

  // A name the certificate does not carry.
  RunResult wrong_name =
      Profctl(address_, WithClientCert({"--tls-server-name", "elsewhere.example", "status"}));
  EXPECT_EQ(wrong_name.exit_code, 3) << wrong_name.err;
  EXPECT_TRUE(Has(wrong_name.err, "TLS handshake")) << wrong_name.err;

  // The unix socket stays plaintext, and TLS settings meant for TCP do not get in its way.
  EXPECT_EQ(profd->Profctl({"status"}).exit_code, 0);
  RunResult unix_with_ca = profd->Profctl({"--tls-ca", Pem("ca.pem"), "status"});
  EXPECT_EQ(unix_with_ca.exit_code, 0) << unix_with_ca.err;
}

TEST_F(TlsTest, ClientCertificateRequiredWithClientCa) {
  auto profd = StartTlsProfd();
  EXPECT_TRUE(Has(profd->log(), "(mutual TLS)")) << profd->log();

  RunResult no_cert = Profctl(address_, {"--tls-ca", Pem("ca.pem"), "status"});
  EXPECT_EQ(no_cert.exit_code, 3) << no_cert.err;
  EXPECT_TRUE(Has(no_cert.err, "TLS handshake with profd at " + address_ + " failed"))
      << no_cert.err;
  EXPECT_TRUE(Has(no_cert.err, "requires a client certificate")) << no_cert.err;
  EXPECT_TRUE(Has(no_cert.err, "--tls-cert")) << no_cert.err;

  RunResult stranger =
      Profctl(address_, {"--tls-ca", Pem("ca.pem"), "--tls-cert", Pem("stranger.pem"), "--tls-key",
                         Pem("stranger.key"), "status"});
  EXPECT_EQ(stranger.exit_code, 3) << stranger.err;
  EXPECT_TRUE(Has(stranger.err, "TLS handshake with profd at " + address_ + " failed"))
      << stranger.err;

  RunResult with_cert =
      Profctl(address_, {"--tls-ca", Pem("ca.pem"), "--tls-cert", Pem("client.pem"), "--tls-key",
                         Pem("client.key"), "status"});
  EXPECT_EQ(with_cert.exit_code, 0) << with_cert.err << profd->log();
  RunResult from_env = Profctl(address_, {"--json", "spool"},
                               {{"PROFD_TLS_CA", Pem("ca.pem")},
                                {"PROFD_TLS_CERT", Pem("client.pem")},
                                {"PROFD_TLS_KEY", Pem("client.key")}});
  EXPECT_EQ(from_env.exit_code, 0) << from_env.err;
}

TEST_F(TlsTest, NoProfdThereIsNotCalledATlsFailure) {
  RunResult nobody = Profctl(address_, {"--tls-ca", Pem("ca.pem"), "status"});
  EXPECT_EQ(nobody.exit_code, 3) << nobody.err;
  EXPECT_TRUE(Has(nobody.err, "profd not reachable at " + address_)) << nobody.err;
  EXPECT_FALSE(Has(nobody.err, "TLS handshake")) << nobody.err;
}

TEST_F(TlsTest, ProfctlNamesABadPemFile) {
  RunResult missing = Profctl(address_, {"--tls-ca", pki_->File("nope.pem"), "status"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(Has(missing.err, "--tls-ca: cannot read " + pki_->File("nope.pem"))) << missing.err;

  RunResult not_pem = Profctl(address_, {"--tls-ca", pki_->File("server.ext"), "status"});
  EXPECT_EQ(not_pem.exit_code, 2);
  EXPECT_TRUE(Has(not_pem.err, "is not a PEM file")) << not_pem.err;

  RunResult half = Profctl(address_, {"--tls-cert", Pem("client.pem"), "status"});
  EXPECT_EQ(half.exit_code, 2);
  EXPECT_TRUE(Has(half.err, "--tls-cert and --tls-key go together")) << half.err;
}

// profd refuses flags that would expose it, and says which flags to use.
RunResult RunProfd(const TempDir& dir, std::vector<std::string> flags) {
  std::vector<std::string> argv = {
      BuildPath("daemon/profd"),      "--runtime_dir=" + dir.path(),
      "--metrics_address=none",       "--capture_dir=" + dir.File("c"),
      "--spool_dir=" + dir.File("s"), "--store=file://" + dir.File("t")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return Run(argv, {}, absl::Seconds(20));
}

TEST_F(TlsTest, RemoteAddressWithoutTlsRefusesToStart) {
  TempDir dir;
  const std::string everywhere = absl::StrCat("0.0.0.0:", port_);
  RunResult refused = RunProfd(dir, {"--grpc_address=" + everywhere});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(Has(refused.err, "--grpc_address=" + everywhere + " without TLS")) << refused.err;
  EXPECT_TRUE(Has(refused.err, "anyone who can reach it")) << refused.err;
  EXPECT_TRUE(Has(refused.err, "--grpc_tls_cert, --grpc_tls_key and --grpc_tls_client_ca"))
      << refused.err;
  EXPECT_TRUE(Has(refused.err, "--grpc_insecure_tcp")) << refused.err;

  RunResult v6 = RunProfd(dir, {absl::StrCat("--grpc_address=[::]:", port_)});
  EXPECT_EQ(v6.exit_code, 1) << v6.err;

  RunResult missing_key = RunProfd(
      dir, {"--grpc_address=" + everywhere, "--grpc_tls_cert=" + Pem("server.pem"),
            "--grpc_tls_key=" + pki_->File("nope.key"), "--grpc_tls_client_ca=" + Pem("ca.pem")});
  EXPECT_EQ(missing_key.exit_code, 1);
  EXPECT_TRUE(Has(missing_key.err, "--grpc_tls_key=" + pki_->File("nope.key") + ": cannot read"))
      << missing_key.err;

  RunResult half =
      RunProfd(dir, {"--grpc_address=" + everywhere, "--grpc_tls_client_ca=" + Pem("ca.pem")});
  EXPECT_EQ(half.exit_code, 1);
  EXPECT_TRUE(Has(half.err, "--grpc_tls_client_ca needs --grpc_tls_cert")) << half.err;

  // Said explicitly, it starts, warns, and serves plaintext on every interface.
  ProfdProcess insecure({"--grpc_address=" + everywhere, "--grpc_insecure_tcp"});
  insecure.Start();
  EXPECT_TRUE(Has(insecure.log(), "INSECURE")) << insecure.log();
  EXPECT_TRUE(Has(insecure.log(), "(plaintext, INSECURE)")) << insecure.log();
  RunResult plain = Profctl(address_, {"status"});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  insecure.Stop();

  // The old name of the flag still works, and says it is deprecated.
  ProfdProcess old_flag({"--grpc_address=" + everywhere, "--grpc_insecure_remote"});
  old_flag.Start();
  EXPECT_TRUE(Has(old_flag.log(), "--grpc_insecure_remote is deprecated")) << old_flag.log();
  EXPECT_TRUE(Has(old_flag.log(), "INSECURE")) << old_flag.log();
}

// Loopback is no exception: without the socket's file mode, a plaintext port lets every local
// user in (issue 12: a non-root user listed agents, captured a root process and downloaded it).
TEST_F(TlsTest, LoopbackWithoutMutualTlsRefusesToStart) {
  TempDir dir;
  RunResult plain = RunProfd(dir, {"--grpc_address=" + address_});
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_TRUE(Has(plain.err, "--grpc_address=" + address_ + " without TLS: every local user"))
      << plain.err;
  EXPECT_TRUE(Has(plain.err, "--grpc_insecure_tcp")) << plain.err;
  RunResult localhost = RunProfd(dir, {absl::StrCat("--grpc_address=localhost:", port_)});
  EXPECT_EQ(localhost.exit_code, 1) << localhost.err;

  // TLS that checks no client certificate is no better: anyone may still connect.
  RunResult server_only =
      RunProfd(dir, {"--grpc_address=" + address_, "--grpc_tls_cert=" + Pem("server.pem"),
                     "--grpc_tls_key=" + Pem("server.key")});
  EXPECT_EQ(server_only.exit_code, 1);
  EXPECT_TRUE(Has(server_only.err, "with TLS but no --grpc_tls_client_ca")) << server_only.err;
  EXPECT_TRUE(Has(server_only.err, "--grpc_insecure_tcp")) << server_only.err;

  // A unix socket belongs in --grpc_socket, where its mode is set.
  RunResult unix_address =
      RunProfd(dir, {"--grpc_address=unix:" + dir.File("other.sock"), "--grpc_insecure_tcp"});
  EXPECT_EQ(unix_address.exit_code, 1);
  EXPECT_TRUE(Has(unix_address.err, "give it as --grpc_socket")) << unix_address.err;

  // With the flag: it starts, and says how open it is.
  ProfdProcess insecure({"--grpc_address=" + address_, "--grpc_insecure_tcp"});
  insecure.Start();
  EXPECT_TRUE(Has(insecure.log(), "(plaintext, loopback, INSECURE)")) << insecure.log();
  EXPECT_TRUE(Has(insecure.log(), "every local user")) << insecure.log();
  EXPECT_EQ(Profctl(address_, {"status"}).exit_code, 0);
  insecure.Stop();

  ProfdProcess tls_only({"--grpc_address=" + address_, "--grpc_tls_cert=" + Pem("server.pem"),
                         "--grpc_tls_key=" + Pem("server.key"), "--grpc_insecure_tcp"});
  tls_only.Start();
  EXPECT_TRUE(Has(tls_only.log(), "(TLS, no client certificates, INSECURE)")) << tls_only.log();
  RunResult verified = Profctl(address_, {"--tls-ca", Pem("ca.pem"), "status"});
  EXPECT_EQ(verified.exit_code, 0) << verified.err;
}

TEST_F(TlsTest, RemoteAddressWithMutualTlsStarts) {
  ProfdProcess profd({absl::StrCat("--grpc_address=0.0.0.0:", port_),
                      "--grpc_tls_cert=" + Pem("server.pem"), "--grpc_tls_key=" + Pem("server.key"),
                      "--grpc_tls_client_ca=" + Pem("ca.pem")});
  profd.Start();
  RunResult ok = Profctl(address_, WithClientCert({"status"}));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// Descriptors profd holds open.
size_t OpenFiles(pid_t pid) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

// A TCP connection to 127.0.0.1:port that sends nothing, ever; -1 when it cannot connect.
int IdleConnection(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the other side has closed fd (end of stream, or a reset).
bool ClosedByPeer(int fd) {
  char byte;
  const ssize_t n = recv(fd, &byte, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

// Anyone who reaches the TLS port, certificate or not, can open connections and send nothing.
// profd holds at most --grpc_max_pending_connections (64) of them, closes them at
// --grpc_handshake_timeout (5 s), and a client with a certificate gets in meanwhile. gRPC alone
// accepted every one and kept it for its own 120 s handshake timeout.
TEST_F(TlsTest, IdleConnectionsThatNeverStartTlsAreCappedClosedAndDoNotKeepProfctlOut) {
  auto profd = StartTlsProfd();
  const size_t before = OpenFiles(profd->pid());
  constexpr int kIdle = 300;
  std::vector<int> idle;
  for (int i = 0; i < kIdle; ++i) {
    const int fd = IdleConnection(port_);
    ASSERT_GE(fd, 0) << "connection " << i << ": " << strerror(errno);
    idle.push_back(fd);
  }
  const absl::Time opened = absl::Now();
  absl::SleepFor(absl::Milliseconds(500));  // profd has accepted them all by now
  const size_t during = OpenFiles(profd->pid());
  EXPECT_LE(during, before + 64 + 8) << "profd holds a descriptor per idle connection";

  RunResult ok = Profctl(address_, WithClientCert({"status"}));
  EXPECT_EQ(ok.exit_code, 0) << ok.err << profd->log();

  // Every idle connection is closed by profd: at once when over the cap, else at the deadline.
  bool all_closed = WaitFor(
      [&] {
        return std::all_of(idle.begin(), idle.end(), [](int fd) { return ClosedByPeer(fd); });
      },
      absl::Seconds(10));
  const absl::Duration took = absl::Now() - opened;
  EXPECT_TRUE(all_closed) << std::count_if(idle.begin(), idle.end(),
                                           [](int fd) { return !ClosedByPeer(fd); })
                          << " of " << kIdle << " idle connections still open after " << took;
  EXPECT_LE(OpenFiles(profd->pid()), before + 4);
  for (int fd : idle) close(fd);
  EXPECT_TRUE(Has(profd->log(), "TCP connections wait for TLS")) << profd->log();
  EXPECT_TRUE(Has(profd->log(), "sent no TLS record within 5s")) << profd->log();

  // And after them, as before.
  RunResult after = Profctl(address_, WithClientCert({"status"}));
  EXPECT_EQ(after.exit_code, 0) << after.err;
}

}  // namespace
}  // namespace profd::testing
