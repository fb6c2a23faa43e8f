#include "tests/support/test_pki.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace profd::testing {

std::string FindProgram(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

bool TestPki::OpenSsl(std::vector<std::string> args) {
  args.insert(args.begin(), openssl_);
  RunResult r = Run(args);
  if (r.exit_code != 0) error_ += absl::StrCat(absl::StrJoin(args, " "), ":\n", r.err, "\n");
  return r.exit_code == 0;
}

bool TestPki::Ca(const std::string& name) {
  return OpenSsl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                  "-nodes", "-keyout", File(name + ".key"), "-out", File(name + ".pem"), "-days",
                  "2", "-subj", "/CN=" + name + " for profd tests"});
}

bool TestPki::Leaf(const std::string& name, const std::string& ca, const std::string& cn,
                   const std::string& extensions) {
  std::ofstream(File(name + ".ext")) << extensions;
  return OpenSsl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                  "-keyout", File(name + ".key"), "-out", File(name + ".csr"), "-subj",
                  "/CN=" + cn}) &&
         OpenSsl({"x509", "-req", "-in", File(name + ".csr"), "-CA", File(ca + ".pem"), "-CAkey",
                  File(ca + ".key"), "-CAcreateserial", "-out", File(name + ".pem"), "-days", "2",
                  "-extfile", File(name + ".ext")});
}

}  // namespace profd::testing
