// profctl: the command line for profd. Each subcommand is one call (or one stream) to the daemon;
// human output by default, the response message as JSON with --json.
#include <string>

#include "client/commands.h"

int main(int argc, char** argv) {
  using namespace profctl;
  CLI::App app{"profctl: on-demand GPU profiling of running processes, through profd"};
  app.require_subcommand(1);
  GlobalOptions g;
  app.add_option("--target", g.target,
                 "profd address: unix:/path or host:port (default $PROFD_TARGET or " +
                     std::string(kDefaultTarget) + ")");
  app.add_flag("--json", g.json, "Print the result as JSON");
  app.add_option("--timeout", g.timeout, "Deadline for a call to profd (e.g. 10s)");

  int rc = kExitOk;
  AddAgentCommands(app, g, &rc);
  AddCaptureCommands(app, g, &rc);
  AddReportCommands(app, g, &rc);
  AddStoreCommands(app, g, &rc);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  return rc;
}
