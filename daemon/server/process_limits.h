// Process-wide limits profd sets for itself at start (profd_main, before any thread).
#pragma once

#include <sys/resource.h>

#include <string>

namespace profd {

struct OpenFileLimit {
  rlim_t before = 0;  // soft limit found at start
  rlim_t soft = 0;    // soft limit now
  rlim_t hard = 0;
  std::string error;  // why it could not be raised, if it could not
};

// Raises RLIMIT_NOFILE's soft limit to the hard limit. Every agent connection, gRPC client and
// /metrics scraper holds a descriptor; at the usual soft limit of 1024, a thousand idle agent
// connections made gRPC's accept fail with EMFILE and the control plane never recovered
// (issue 12). The hard limit is the administrator's (LimitNOFILE in the systemd unit, the
// container runtime's on Kubernetes); profd takes all of it and says how much in its log.
OpenFileLimit RaiseOpenFileLimit();

}  // namespace profd
