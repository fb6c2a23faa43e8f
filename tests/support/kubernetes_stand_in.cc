#include "tests/support/kubernetes_stand_in.h"

#include <unistd.h>

#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace profd::testing {
namespace {

bool MakeCertificate(const std::string& openssl, const std::string& pem, const std::string& key,
                     std::string* error) {
  RunResult r = Run({openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                     "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", pem, "-days",
                     "2", "-subj", "/CN=kubernetes API stand-in for profd tests", "-addext",
                     "subjectAltName=IP:127.0.0.1,DNS:localhost"});
  if (r.exit_code != 0) *error = absl::StrCat("openssl req failed: ", r.err);
  return r.exit_code == 0;
}

}  // namespace

std::unique_ptr<KubernetesApiStandIn> KubernetesApiStandIn::Start(const Options& options,
                                                                  std::string* error) {
  error->clear();
  const std::string openssl = "/usr/bin/openssl";
  const std::string python = "/usr/bin/python3";
  if (access(openssl.c_str(), X_OK) != 0 || access(python.c_str(), X_OK) != 0) return nullptr;
  std::unique_ptr<KubernetesApiStandIn> s(new KubernetesApiStandIn);
  s->ca_file_ = s->dir_.File("server.pem");
  s->other_ca_file_ = s->dir_.File("other.pem");
  s->token_file_ = s->dir_.File("token");
  if (!MakeCertificate(openssl, s->ca_file_, s->dir_.File("server.key"), error) ||
      !MakeCertificate(openssl, s->other_ca_file_, s->dir_.File("other.key"), error)) {
    return nullptr;
  }
  const std::string token = "eyJhbGciOiJSUzI1NiJ9.stand-in-service-account-token.sig";
  std::ofstream(s->token_file_) << token << "\n";  // a newline, as kubelet-written files may end
  std::vector<std::string> argv = {
      python,    SourcePath("tests/support/kubernetes_api_stand_in.py"),
      "--cert",  s->ca_file_,
      "--key",   s->dir_.File("server.key"),
      "--token", token,
      "--pods",  SourcePath("tests/fixtures/kubernetes/" + options.pods_fixture),
      "--users", SourcePath("tests/fixtures/kubernetes/users.json"),
      "--log",   s->dir_.File("requests.log")};
  if (options.forbidden) argv.push_back("--forbidden");
  s->server_ = std::make_unique<Subprocess>(argv, std::map<std::string, std::string>{},
                                            s->dir_.File("server.out"));
  const std::string out = s->dir_.File("server.out");
  WaitFor(
      [&] {
        const std::string file = ReadFileOrEmpty(out);
        absl::string_view text = file;
        int port = 0;
        if (absl::ConsumePrefix(&text, "port ") &&
            absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port)) {
          s->port_ = port;
        }
        return s->port_ != 0 || !s->server_->Running();
      },
      absl::Seconds(20));
  if (s->port_ == 0) {
    *error = absl::StrCat("the API stand-in did not start: ", ReadFileOrEmpty(out + ".err"));
    return nullptr;
  }
  return s;
}

KubernetesApiStandIn::~KubernetesApiStandIn() {
  if (server_) server_->Kill();
}

std::string KubernetesApiStandIn::Url() const { return absl::StrCat("https://127.0.0.1:", port_); }

std::string KubernetesApiStandIn::PodsUrl(const std::string& node) const {
  return absl::StrCat("https://127.0.0.1:", port_, "/api/v1/pods?fieldSelector=spec.nodeName%3D",
                      node);
}

std::string KubernetesApiStandIn::Requests() const {
  return ReadFileOrEmpty(dir_.File("requests.log"));
}

}  // namespace profd::testing
