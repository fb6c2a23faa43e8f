// profctl: the command line for profd. Each subcommand is one call (or one stream) to the daemon;
// human output by default, the response message as JSON with --json.
#include <cstdlib>
#include <iostream>
#include <string>

#include "client/commands.h"

namespace profctl {
namespace {

// Every command takes the global options after its name too (`profctl agents --json` as well as
// `profctl --json agents`), and lists --json in its own --help.
void AcceptGlobalOptionsAfter(CLI::App* command, GlobalOptions& g) {
  for (CLI::App* sub : command->get_subcommands({})) {
    sub->fallthrough();
    if (sub->get_option_no_throw("--json") == nullptr) {
      sub->add_flag("--json", g.json, "Print the result as JSON");
    }
    AcceptGlobalOptionsAfter(sub, g);
  }
}

}  // namespace
}  // namespace profctl

int main(int argc, char** argv) {
  using namespace profctl;
  // gRPC core logs its own copy of connection and handshake errors on stderr; profctl explains
  // each failed call itself. GRPC_VERBOSITY set by the user still wins.
  setenv("GRPC_VERBOSITY", "NONE", /*overwrite=*/0);
  CLI::App app{"profctl " PROFD_VERSION
               ": on-demand GPU profiling of running processes, through profd"};
  app.name("profctl");
  app.require_subcommand(0, 1);
  app.fallthrough();
  app.footer(
      "Every command takes the options above after its name too (profctl agents --json).\n"
      "Run profctl COMMAND --help for a command's own options.");
  GlobalOptions g;
  app.add_flag_callback(
      "--version",
      [] {
        std::cout << "profctl " << PROFD_VERSION << "\n";
        throw CLI::Success();
      },
      "Print profctl's version and exit");
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
    absl::Duration timeout;
    if (std::string bad = ParseDurationFlag("--timeout", g.timeout, absl::Milliseconds(1),
                                            absl::Hours(24), &timeout);
        !bad.empty()) {
      throw CLI::ValidationError("profctl: " + bad);
    }
    if (absl::Status loaded = g.tls.Load(); !loaded.ok()) {
      throw CLI::ValidationError("profctl: " + std::string(loaded.message()));
    }
  });

  int rc = kExitOk;
  AddAgentCommands(app, g, &rc);
  AddCaptureCommands(app, g, &rc);
  AddReportCommands(app, g, &rc);
  AddStoreCommands(app, g, &rc);
  CLI::App* help = app.add_subcommand("help", "Print this list of commands");
  AcceptGlobalOptionsAfter(&app, g);
  const std::string commands = app.help();  // before parsing selects a command

  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError& e) {
    if (!app.get_subcommands().empty() || app.remaining().empty()) return app.exit(e), kExitUsage;
    std::cerr << "profctl: unknown command '" << app.remaining().front() << "'\n\n" << commands;
    return kExitUsage;
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  if (app.get_subcommands().empty() || help->parsed()) {
    // A bare `profctl` (or `profctl help`): the commands, as --help prints them.
    std::cout << commands;
    return help->parsed() ? kExitOk : kExitUsage;
  }
  return rc;
}
