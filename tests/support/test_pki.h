// Test support: throwaway certificates made by the openssl command line (scripts/setup.sh installs
// it): CAs, and leaves signed by them with the extensions a test needs (subjectAltName,
// extendedKeyUsage). EC P-256 keys, valid two days, all in one temporary folder.
#pragma once

#include <string>

#include "tests/support/subprocess.h"

namespace profd::testing {

// The first executable `name` on $PATH; "" when there is none.
std::string FindProgram(const std::string& name);

class TestPki {
 public:
  explicit TestPki(std::string openssl) : openssl_(std::move(openssl)) {}

  // <name>.pem and <name>.key: a self-signed CA.
  bool Ca(const std::string& name);
  // <name>.pem and <name>.key signed by CA `ca`, with subject CN=cn and `extensions` (openssl
  // extfile lines, e.g. "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n").
  bool Leaf(const std::string& name, const std::string& ca, const std::string& cn,
            const std::string& extensions);

  std::string File(const std::string& name) const { return dir_.File(name); }
  // What openssl said when a step failed.
  const std::string& error() const { return error_; }

 private:
  bool OpenSsl(std::vector<std::string> args);

  TempDir dir_;
  std::string openssl_;
  std::string error_;
};

}  // namespace profd::testing
