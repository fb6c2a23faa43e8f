// fake_launcher's dependency: what dlsym(RTLD_NEXT, "probe_target") called from fake_launcher
// finds.
extern "C" int probe_target() { return 2; }
