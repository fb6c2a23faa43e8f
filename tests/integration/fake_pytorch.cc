// A stand-in for a PyTorch process started with KINETO_USE_DAEMON=1 (CI has no GPU and no
// PyTorch): it speaks Kineto's daemon protocol byte for byte (kineto_wire.h, checked against the
// datagrams recorded on the GPU host) from a socket in KINETO_IPC_SOCKET_DIR, and when a poll is
// answered with an on-demand config it "collects" for ACTIVITIES_DURATION_MSECS, reporting busy
// meanwhile, then writes a real Kineto trace recorded on the GPU host where Kineto would: the
// config's ACTIVITIES_LOG_FILE with "_<pid>" inserted, through a ".tmp" file and a rename.
//
// Like a process in a pod, it has a /tmp of its own (a private mount namespace and a tmpfs), so
// profd can only reach the trace through /proc/<pid>/root; the socket folder is bind-mounted at
// the same path, as the deploy snippets mount /run/profd/kineto.
//
//   fake_pytorch TRACE.json.gz [--poll-ms N] [--busy] [--never-write] [--link-to PATH]
//                [--nuls BYTES] [--tmp-mib N]
//   --busy: every poll says a trace is being collected (a torch.profiler session runs)
//   --never-write: takes the config and writes nothing (Kineto pre-empted)
//   --link-to: plants a symbolic link to PATH where the trace should be, instead of the trace
//   --nuls: writes BYTES of NULs instead of the trace (a sparse file: no memory, no tmpfs space)
//   --tmp-mib: the size of its private /tmp (256 MiB by default; benchmarks write larger traces)
// Prints "ready <pid>" once polling. Runs until killed.
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/kineto/kineto_wire.h"

namespace {

using profd::kineto::EncodeKinetoRequest;
using profd::kineto::KinetoRequest;
using profd::kineto::kMetadataBytes;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "fake_pytorch: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

// A private /tmp, with the socket folder (under the real /tmp in tests) still at its path.
void IsolateTmp(const std::string& socket_dir, int tmp_mib) {
  if (unshare(CLONE_NEWNS) != 0) Die("unshare(CLONE_NEWNS)");
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) Die("mount private");
  // Opened in the new namespace: a bind mount's source must be one of its own mounts.
  int keep = open(socket_dir.c_str(), O_PATH | O_DIRECTORY);
  if (keep < 0) Die("open " + socket_dir);
  const std::string options = absl::StrCat("size=", tmp_mib, "m,mode=1777");
  if (mount("tmpfs", "/tmp", "tmpfs", 0, options.c_str()) != 0) Die("mount tmpfs /tmp");
  std::string path;
  for (absl::string_view part : absl::StrSplit(socket_dir, '/', absl::SkipEmpty())) {
    absl::StrAppend(&path, "/", part);
    mkdir(path.c_str(), 0755);
  }
  if (mount(absl::StrCat("/proc/self/fd/", keep).c_str(), socket_dir.c_str(), nullptr, MS_BIND,
            nullptr) != 0) {
    Die("bind " + socket_dir);
  }
  close(keep);
}

// The trace, streamed (a benchmark's is hundreds of MB): source is opened before /tmp is hidden.
void CopyTrace(gzFile source, FILE* out) {
  if (gzrewind(source) != 0) Die("rewind the trace");
  char buf[1 << 16];
  int n;
  while ((n = gzread(source, buf, sizeof(buf))) > 0) {
    if (std::fwrite(buf, 1, static_cast<size_t>(n), out) != static_cast<size_t>(n)) Die("write");
  }
  if (n < 0) Die("read the trace");
}

std::string ConfigValue(const std::string& config, const std::string& key) {
  for (absl::string_view line : absl::StrSplit(config, '\n')) {
    if (absl::StartsWith(line, key + "=")) return std::string(line.substr(key.size() + 1));
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fake_pytorch TRACE.json.gz [--poll-ms N] [--busy] ...\n");
    return 2;
  }
  int poll_ms = 200;
  bool busy = false, never_write = false;
  std::string link_to;
  int64_t nuls = -1;
  int tmp_mib = 256;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--poll-ms" && i + 1 < argc) (void)absl::SimpleAtoi(argv[++i], &poll_ms);
    if (a == "--busy") busy = true;
    if (a == "--never-write") never_write = true;
    if (a == "--link-to" && i + 1 < argc) link_to = argv[++i];
    if (a == "--nuls" && i + 1 < argc) (void)absl::SimpleAtoi(argv[++i], &nuls);
    if (a == "--tmp-mib" && i + 1 < argc) (void)absl::SimpleAtoi(argv[++i], &tmp_mib);
  }
  const char* dir = std::getenv("KINETO_IPC_SOCKET_DIR");
  if (dir == nullptr || dir[0] == '\0') {
    std::fprintf(stderr, "fake_pytorch: KINETO_IPC_SOCKET_DIR is not set\n");
    return 2;
  }
  gzFile trace = gzopen(argv[1], "rb");
  if (trace == nullptr) Die(std::string("open ") + argv[1]);
  IsolateTmp(dir, tmp_mib);

  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un me{};
  me.sun_family = AF_UNIX;
  std::string my_path =
      absl::StrCat(dir, "/dynoconfigclient", getpid(), "-4e3a-4b2c-9d1e-0f2a3b4c5d6e");
  std::memcpy(me.sun_path, my_path.c_str(), my_path.size() + 1);
  if (bind(fd, reinterpret_cast<sockaddr*>(&me), sizeof(me)) != 0) Die("bind " + my_path);
  chmod(my_path.c_str(), 0666);
  sockaddr_un daemon{};
  daemon.sun_family = AF_UNIX;
  std::string daemon_path = absl::StrCat(dir, "/", profd::kineto::kDaemonEndpoint);
  std::memcpy(daemon.sun_path, daemon_path.c_str(), daemon_path.size() + 1);

  std::printf("ready %d\n", getpid());
  std::fflush(stdout);
  bool collecting = false;
  int64_t collect_until_ms = 0;
  std::string log_file;
  auto now_ms = [] {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
  };
  while (true) {
    if (collecting && now_ms() >= collect_until_ms) {
      collecting = false;
      if (!never_write) {
        // Kineto inserts _<pid> before the extension, writes a .tmp, then renames.
        const size_t dot = log_file.rfind(".json");
        const std::string final_path =
            absl::StrCat(log_file.substr(0, dot), "_", getpid(), log_file.substr(dot));
        if (!link_to.empty()) {
          symlink(link_to.c_str(), final_path.c_str());
        } else {
          const std::string tmp = final_path + ".tmp";
          FILE* out = std::fopen(tmp.c_str(), "wb");
          if (out == nullptr) Die("create " + tmp);
          if (nuls >= 0) {
            if (ftruncate(fileno(out), nuls) != 0) Die("ftruncate " + tmp);
          } else {
            CopyTrace(trace, out);
          }
          std::fclose(out);
          std::rename(tmp.c_str(), final_path.c_str());
        }
      }
    }
    KinetoRequest request;
    request.type = (busy || collecting) ? 0 : 3;
    request.pids = {getpid(), getppid(), 1};
    std::string poll = EncodeKinetoRequest(request);
    iovec iov[2] = {{poll.data(), kMetadataBytes},
                    {poll.data() + kMetadataBytes, poll.size() - kMetadataBytes}};
    msghdr msg{};
    msg.msg_name = &daemon;
    msg.msg_namelen = sizeof(daemon);
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    sendmsg(fd, &msg, MSG_DONTWAIT);
    // Kineto's poll_recv: 9 tries 10 ms apart, peeking at the header first.
    for (int i = 0; i < 9; ++i) {
      char header[kMetadataBytes];
      if (recv(fd, header, sizeof(header), MSG_DONTWAIT | MSG_PEEK) ==
          static_cast<ssize_t>(kMetadataBytes)) {
        uint64_t size;
        std::memcpy(&size, header, sizeof(size));
        std::string body(kMetadataBytes + size, '\0');
        recv(fd, body.data(), body.size(), MSG_DONTWAIT);
        const std::string config = body.substr(kMetadataBytes);
        log_file = ConfigValue(config, "ACTIVITIES_LOG_FILE");
        int64_t duration_ms = 0;
        (void)absl::SimpleAtoi(ConfigValue(config, "ACTIVITIES_DURATION_MSECS"), &duration_ms);
        if (!log_file.empty() && absl::StartsWith(log_file, "/tmp/")) {
          std::printf("config %s\n", config.c_str());
          std::fflush(stdout);
          collecting = true;
          collect_until_ms = now_ms() + duration_ms;
        }
        break;
      }
      usleep(10000);
    }
    usleep(static_cast<useconds_t>(poll_ms) * 1000);
  }
}
