// profctl: the command line for profd. Each subcommand is one call (or one stream) to the daemon;
// human output by default, the response message as JSON with --json.
#include <cstdlib>
#include <string>

#include "client/commands.h"

int main(int argc, char** argv) {
  using namespace profctl;
  // gRPC core logs its own copy of connection and handshake errors on stderr; profctl explains
  // each failed call itself. GRPC_VERBOSITY set by the user still wins.
  setenv("GRPC_VERBOSITY", "NONE", /*overwrite=*/0);
  CLI::App app{"profctl: on-demand GPU profiling of running processes, through profd"};
  app.require_subcommand(1);
  GlobalOptions g;
  app.add_option("--target", g.target,
                 "profd address: unix:/path or host:port (default $PROFD_TARGET or " +
                     std::string(kDefaultTarget) + ")");
  app.add_flag("--json", g.json, "Print the result as JSON");
  app.add_option("--timeout", g.timeout, "Deadline for a call to profd (e.g. 10s)");
  app.add_option("--tls-ca", g.tls.ca_file,
                 "Talk TLS to profd and verify its certificate with this CA (PEM)")
      ->envname("PROFD_TLS_CA");
  app.add_option("--tls-cert", g.tls.cert_file,
                 "Client certificate (PEM) for a profd started with --grpc_tls_client_ca")
      ->envname("PROFD_TLS_CERT");
  app.add_option("--tls-key", g.tls.key_file, "Private key (PEM) of --tls-cert")
      ->envname("PROFD_TLS_KEY");
  app.add_option("--tls-server-name", g.tls.server_name,
                 "Name to expect in profd's certificate instead of the --target host")
      ->envname("PROFD_TLS_SERVER_NAME");
  // Once, before any subcommand runs: a missing or unreadable PEM file is a usage error.
  app.parse_complete_callback([&g] {
    if (absl::Status loaded = g.tls.Load(); !loaded.ok()) {
      throw CLI::ValidationError("profctl: " + std::string(loaded.message()));
    }
  });

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
