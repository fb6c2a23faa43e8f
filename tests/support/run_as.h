// Test support: run a real binary as another user, the way a local user without privileges
// would. The test must run as root (CI does); the child drops to the given uid, gid and
// supplementary groups before exec, so the kernel checks exactly what it would for that user.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace profd::testing {

struct Identity {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups; empty: none
};

// A uid and a gid that no user or group on this host has (searched from 61000 up), so the
// identity the test uses is its own: nothing else on the host belongs to it.
Identity UnusedIdentity();
// A gid above `after` that no group on this host has.
gid_t UnusedGroup(gid_t after);

// Runs argv to completion as `who`, with the test's environment plus `env`; stdout and stderr
// captured. exit_code 127 with a message in err when the program cannot be executed as that user.
RunResult RunAs(const Identity& who, std::vector<std::string> argv,
                std::map<std::string, std::string> env = {},
                absl::Duration timeout = absl::Seconds(60));

// A long-running child as `who` (an agent host, say), SIGKILLed by the destructor.
class AsUser {
 public:
  AsUser(const Identity& who, std::vector<std::string> argv,
         std::map<std::string, std::string> env = {});
  ~AsUser();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// errno of open(path, O_RDONLY) as `who` (0 when it opened).
int OpenErrnoAs(const Identity& who, const std::string& path);

}  // namespace profd::testing
