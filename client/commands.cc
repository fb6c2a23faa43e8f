#include "client/commands.h"

#include <chrono>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/printable.h"
#include "common/proto_json.h"

namespace profctl {

void PrintJson(const google::protobuf::Message& message) {
  // protobuf escapes U+2028/U+2029 itself today; this keeps it so whatever its version does.
  const std::string out = profd::EscapeJsonLineSeparators(profd::ProtoToJson(message));
  std::cout << out;
  if (out.empty() || out.back() != '\n') std::cout << '\n';
}

std::string Ago(int64_t unix_ns) {
  if (unix_ns == 0) return "-";
  absl::Duration d = absl::Now() - absl::FromUnixNanos(unix_ns);
  if (d < absl::Seconds(1)) return "just now";
  if (d < absl::Minutes(1)) return absl::StrCat(absl::ToInt64Seconds(d), "s ago");
  if (d < absl::Hours(1)) return absl::StrCat(absl::ToInt64Minutes(d), "m ago");
  if (d < absl::Hours(48)) return absl::StrCat(absl::ToInt64Hours(d), "h ago");
  return absl::StrCat(absl::ToInt64Hours(d) / 24, "d ago");
}

std::string ParseDurationFlag(const std::string& flag, const std::string& text, absl::Duration min,
                              absl::Duration max, absl::Duration* out) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d)) {
    return absl::StrCat(flag, " wants a duration with its unit, such as 500ms, 5s or 2m, not '",
                        text, "'");
  }
  if (d < min || d > max) {
    return absl::StrCat(flag, " ", text, " is out of range: from ", absl::FormatDuration(min),
                        " to ", absl::FormatDuration(max));
  }
  *out = d;
  return "";
}

std::unique_ptr<profd::v1::TraceStore::Stub> StoreStub(const ProfdClient& client) {
  return profd::v1::TraceStore::NewStub(client.channel());
}

grpc::ClientContext* WithDeadline(grpc::ClientContext* ctx, const GlobalOptions& g) {
  absl::Duration timeout = absl::Seconds(10);
  (void)ParseDurationFlag("--timeout", g.timeout, absl::ZeroDuration(), absl::Hours(24), &timeout);
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
  return ctx;
}

int Fail(const ProfdClient& client, const grpc::Status& status) {
  // profd's messages quote what peers chose (process and pod names, paths, a store's answer).
  std::cerr << "profctl: " << profd::Printable(client.Explain(status)) << "\n";
  return client.ExitCode(status);
}

std::string PhaseName(profd::v1::CapturePhase phase) {
  switch (phase) {
    case profd::v1::CAPTURE_PHASE_PENDING:
      return "pending";
    case profd::v1::CAPTURE_PHASE_RUNNING:
      return "running";
    case profd::v1::CAPTURE_PHASE_FINISHING:
      return "finishing";
    case profd::v1::CAPTURE_PHASE_DONE:
      return "done";
    case profd::v1::CAPTURE_PHASE_FAILED:
      return "failed";
    case profd::v1::CAPTURE_PHASE_CANCELLED:
      return "cancelled";
    default:
      return "unknown";
  }
}

}  // namespace profctl
