#include "daemon/server/process_limits.h"

#include <cerrno>
#include <cstring>
#include <fstream>

namespace profd {

OpenFileLimit RaiseOpenFileLimit() {
  OpenFileLimit result;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    result.error = std::strerror(errno);
    return result;
  }
  result.before = limit.rlim_cur;
  result.hard = limit.rlim_max;
  rlim_t target = limit.rlim_max;
  if (target == RLIM_INFINITY) {
    // The kernel refuses an infinite descriptor limit; fs.nr_open is the most it allows.
    target = 1 << 20;
    std::ifstream("/proc/sys/fs/nr_open") >> target;
  }
  if (limit.rlim_cur < target) {
    limit.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) result.error = std::strerror(errno);
  }
  getrlimit(RLIMIT_NOFILE, &limit);
  result.soft = limit.rlim_cur;
  return result;
}

}  // namespace profd
