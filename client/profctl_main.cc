// profctl: the command line for profd. Each subcommand is one call (or one stream) to the daemon;
// human output by default, the response message as JSON with --json.
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/commands.h"

namespace profctl {
namespace {

// "" when target is one profctl can dial, else what is wrong and what a target looks like.
std::string CheckTarget(const std::string& target) {
  for (const char* scheme : {"unix:", "unix-abstract:", "dns:", "ipv4:", "ipv6:", "vsock:"}) {
    if (target.starts_with(scheme)) return "";
  }
  // HOST:PORT, [IPV6]:PORT
  const size_t colon = target.rfind(':');
  int port = 0;
  if (colon != std::string::npos && colon > 0 &&
      absl::SimpleAtoi(target.substr(colon + 1), &port) && port > 0 && port < 65536) {
    return "";
  }
  std::string hint;
  if (target.starts_with("/")) hint = absl::StrCat(" (a socket path: unix:", target, ")");
  return absl::StrCat("--target ", target,
                      " is not a profd address. A target is unix:/path/to/profd.sock (a profd on "
                      "this machine; the default is ",
                      kDefaultTarget,
                      ") or HOST:PORT of a profd started with --grpc_address (e.g. "
                      "node17:7465)",
                      hint);
}

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
  // Installed as kubectl-profd too, kubectl's plugin: `kubectl profd capture ...`.
  const std::string called = argc > 0 ? std::filesystem::path(argv[0]).filename().string() : "";
  app.name(called == "kubectl-profd" ? "kubectl profd" : "profctl");
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
    if (!g.target.empty()) {
      if (std::string bad = CheckTarget(g.target); !bad.empty()) {
        throw CLI::ValidationError(bad);
      }
    }
    absl::Duration timeout;
    if (std::string bad = ParseDurationFlag("--timeout", g.timeout, absl::Milliseconds(1),
                                            absl::Hours(24), &timeout);
        !bad.empty()) {
      throw CLI::ValidationError(bad);
    }
    if (absl::Status loaded = g.tls.Load(); !loaded.ok()) {
      throw CLI::ValidationError(std::string(loaded.message()));
    }
  });

  int rc = kExitOk;
  AddAgentCommands(app, g, &rc);
  AddCaptureCommands(app, g, &rc);
  AddReportCommands(app, g, &rc);
  AddStoreCommands(app, g, &rc);
  AddGatewayCommand(app, g, &rc);
  CLI::App* help = app.add_subcommand("help", "Print this list of commands");
  AcceptGlobalOptionsAfter(&app, g);
  const std::string commands = app.help();  // before parsing selects a command

  // Every argument error, CLI11's and the commands' own, says it is profctl's and where to look.
  auto hint = [&app] {
    std::string command;
    for (const CLI::App* sub : app.get_subcommands()) command += " " + sub->get_name();
    std::cerr << "Run `profctl" << command << " --help` for "
              << (command.empty() ? "the commands and options" : "its options") << ".\n";
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError& e) {
    if (app.get_subcommands().empty() && !app.remaining().empty()) {
      std::cerr << "profctl: unknown command '" << app.remaining().front() << "'\n\n" << commands;
      return kExitUsage;
    }
    std::cerr << "profctl: " << e.what() << "\n";
    hint();
    return kExitUsage;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e), kExitOk;  // --help, --version
    std::cerr << "profctl: " << e.what() << "\n";
    hint();
    return kExitUsage;
  }
  if (app.get_subcommands().empty() || help->parsed()) {
    // A bare `profctl` (or `profctl help`): the commands, as --help prints them.
    std::cout << commands;
    return help->parsed() ? kExitOk : kExitUsage;
  }
  if (rc == kExitUsage) hint();
  return rc;
}
