// A stand-in for a CUDA application in tests that run without a GPU: loads libprofagent.so with
// dlopen and calls InitializeInjection, exactly as the CUDA driver does for CUDA_INJECTION64_PATH,
// then idles until SIGTERM/SIGKILL.
//   agent_host <libprofagent.so> [--fork]    --fork: also fork a child that idles (fork safety)
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: agent_host <libprofagent.so> [--fork]\n");
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "agent_host: %s\n", dlerror());
    return 1;
  }
  auto init = reinterpret_cast<int (*)()>(dlsym(lib, "InitializeInjection"));
  if (init == nullptr || init() != 1) {
    std::fprintf(stderr, "agent_host: InitializeInjection missing or failed\n");
    return 1;
  }
  bool fork_child = argc > 2 && std::strcmp(argv[2], "--fork") == 0;
  if (fork_child) {
    pid_t child = fork();
    if (child == 0) {
      // The forked child must not be registered under the parent's connection, nor crash.
      sleep(3);
      _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    std::printf("child exited %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    std::fflush(stdout);
  }
  while (true) pause();
}
