// What every profctl subcommand shares: the global flags, the JSON printer, the deadline, and
// the way a failed call becomes a message and an exit code. Each *_commands.cc file adds its
// subcommands to the CLI through one Add*Commands function.
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "absl/time/time.h"
#include "client/profd_client.h"
#include "google/protobuf/message.h"
#include "profd/v1/store.grpc.pb.h"

namespace profctl {

struct GlobalOptions {
  std::string target;
  bool json = false;
  std::string timeout = "10s";
  TlsOptions tls;  // --tls-ca, --tls-cert, --tls-key, --tls-server-name (TCP targets)
};

// The response message as JSON (proto field names, defaults included) on stdout.
void PrintJson(const google::protobuf::Message& message);
// "3m ago" for a Unix time in ns; "-" for 0.
std::string Ago(int64_t unix_ns);
// A duration flag's value ("500ms", "5s", "2m"): an error message when it is not one (a bare
// number has no unit), or lies outside [min, max]; "" when *out is set.
std::string ParseDurationFlag(const std::string& flag, const std::string& text, absl::Duration min,
                              absl::Duration max, absl::Duration* out);
// The store's stub on profctl's one channel to profd (same target, same TLS credentials).
std::unique_ptr<profd::v1::TraceStore::Stub> StoreStub(const ProfdClient& client);
// Sets the --timeout deadline on ctx and returns it.
grpc::ClientContext* WithDeadline(grpc::ClientContext* ctx, const GlobalOptions& g);
// Prints the explanation of a failed call on stderr and returns its exit code.
int Fail(const ProfdClient& client, const grpc::Status& status);

// Each sets *rc from the subcommand's callback.
void AddAgentCommands(CLI::App& app, const GlobalOptions& g, int* rc);  // agents, status
void AddCaptureCommands(CLI::App& app, const GlobalOptions& g,
                        int* rc);  // capture, captures, cancel, recorder
void AddReportCommands(CLI::App& app, const GlobalOptions& g, int* rc);  // report, diff

bool CaptureIsOver(const profd::v1::CaptureInfo& info);
// "pending", "running", "done", ... as profctl prints a capture's phase.
std::string PhaseName(profd::v1::CapturePhase phase);
// list, show, get, import, spool (client/store_commands.cc)
void AddStoreCommands(CLI::App& app, const GlobalOptions& g, int* rc);
// gateway (client/gateway_commands.cc)
void AddGatewayCommand(CLI::App& app, const GlobalOptions& g, int* rc);

}  // namespace profctl
