// A stand-in for a CUDA application in tests that run without a GPU: loads libprofagent.so with
// dlopen and calls InitializeInjection, exactly as the CUDA driver does for CUDA_INJECTION64_PATH,
// then idles until SIGTERM/SIGKILL.
//   agent_host <libprofagent.so> [--fork] [--preload LIB]... [--call FN]... [--on-usr1 FN]
//              [--on-usr2 FN] [--recorder ON_MS/PERIOD_MS]
//   --fork       also fork a child that idles (fork safety)
//   --preload    dlopen LIB before the agent starts, as `import torch` loads PyTorch's libraries
//                (with Kineto and CUPTI) before CUDA starts
//   --call       after InitializeInjection, call `int FN(void)` of a preloaded library
//   --on-usr1/2  call it at each SIGUSR1/SIGUSR2 (start and stop a torch.profiler session)
//   --recorder   after InitializeInjection, turn the agent's flight recorder on, duty-cycled
//                (profagent_set_recorder; 0/0: all the time), as a process may itself
// Each call prints "FN -> result" on stdout.
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::vector<void*> g_preloaded;

int Call(const std::string& name) {
  for (void* lib : g_preloaded) {
    if (auto fn = reinterpret_cast<int (*)()>(dlsym(lib, name.c_str()))) {
      int result = fn();
      std::printf("%s -> %d\n", name.c_str(), result);
      std::fflush(stdout);
      return result;
    }
  }
  std::fprintf(stderr, "agent_host: no function %s in the preloaded libraries\n", name.c_str());
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: agent_host <libprofagent.so> [--fork] [--preload LIB]... "
                 "[--call FN]... [--on-usr1 FN] [--on-usr2 FN] [--recorder ON_MS/PERIOD_MS]\n");
    return 2;
  }
  bool fork_child = false;
  std::vector<std::string> calls;
  std::string on_usr1, on_usr2;
  unsigned duty_on_ms = 0, duty_period_ms = 0;
  bool recorder = false;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value = i + 1 < argc ? argv[i + 1] : "";
    if (arg == "--fork") {
      fork_child = true;
    } else if (arg == "--preload" && !value.empty()) {
      void* lib = dlopen(value.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib == nullptr) {
        std::fprintf(stderr, "agent_host: %s\n", dlerror());
        return 1;
      }
      g_preloaded.push_back(lib);
      ++i;
    } else if (arg == "--call" && !value.empty()) {
      calls.push_back(value);
      ++i;
    } else if (arg == "--on-usr1" && !value.empty()) {
      on_usr1 = value;
      ++i;
    } else if (arg == "--on-usr2" && !value.empty()) {
      on_usr2 = value;
      ++i;
    } else if (arg == "--recorder" &&
               std::sscanf(value.c_str(), "%u/%u", &duty_on_ms, &duty_period_ms) == 2) {
      recorder = true;
      ++i;
    } else {
      std::fprintf(stderr, "agent_host: unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  // Signals are taken synchronously below; blocked before any thread starts so all inherit it.
  sigset_t usr;
  sigemptyset(&usr);
  sigaddset(&usr, SIGUSR1);
  sigaddset(&usr, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &usr, nullptr);

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
  for (const std::string& call : calls) Call(call);
  if (recorder) {
    auto set =
        reinterpret_cast<int (*)(int, unsigned, unsigned)>(dlsym(lib, "profagent_set_recorder"));
    std::printf("profagent_set_recorder -> %d\n", set ? set(1, duty_on_ms, duty_period_ms) : -2);
  }
  std::printf("ready\n");
  std::fflush(stdout);
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
  while (true) {
    int sig = 0;
    if (sigwait(&usr, &sig) != 0) continue;
    if (sig == SIGUSR1 && !on_usr1.empty()) Call(on_usr1);
    if (sig == SIGUSR2 && !on_usr2.empty()) Call(on_usr2);
  }
}
