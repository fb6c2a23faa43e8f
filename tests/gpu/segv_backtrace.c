// A SIGSEGV backtracer for a GPU test's workload (LD_PRELOAD; no gdb on the GPU host): on a
// segmentation fault it writes the faulting address, the native frames (library + offset, for
// addr2line) and /proc/self/maps to stderr, then dies of the signal as before. Python's
// faulthandler, if on, replaces it: run the workload without -X faulthandler.
#define _GNU_SOURCE
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>
static void handler(int sig, siginfo_t* si, void* ctx) {
  char line[256];
  ucontext_t* uc = (ucontext_t*)ctx;
  int n = snprintf(line, sizeof line, "\n== SEGV tid %ld addr %p rip %p\n", (long)gettid(), si->si_addr,
                   (void*)uc->uc_mcontext.gregs[REG_RIP]);
  write(2, line, n);
  void* frames[64];
  int k = backtrace(frames, 64);
  backtrace_symbols_fd(frames, k, 2);
  int fd = open("/proc/self/maps", O_RDONLY);
  char buf[4096];
  ssize_t r;
  write(2, "== maps\n", 8);
  while ((r = read(fd, buf, sizeof buf)) > 0) write(2, buf, r);
  signal(sig, SIG_DFL);
  raise(sig);
}
__attribute__((constructor)) static void init(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, NULL);
}
