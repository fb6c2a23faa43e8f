#include "client/gateway.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/gateway_page.h"
#include "common/capture_id.h"
#include "common/https_client.h"
#include "daemon/log.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

extern char** environ;

namespace profctl {
namespace {

namespace fs = std::filesystem;
using profd::HttpRequest;
using profd::HttpResponse;
using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

constexpr char kAudit[] = "audit";
constexpr char kGateway[] = "gateway";
// A capture's request body: a namespace, a pod, a duration and a reason.
constexpr size_t kMaxReasonBytes = 512;

void Field(Writer& w, const char* key, const std::string& value) {
  w.Key(key);
  w.String(value.c_str(), static_cast<rapidjson::SizeType>(value.size()));
}

HttpResponse Json(int code, const std::string& reason, const std::string& body) {
  HttpResponse r = HttpResponse::Text(code, reason, body);
  r.content_type = "application/json";
  r.extra_headers = "Cache-Control: no-store\r\n";
  return r;
}

// {"code":..., "message":...}: what went wrong, for the page and for scripts.
HttpResponse JsonError(int code, const std::string& reason, const std::string& message) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("code");
  w.Int(code);
  Field(w, "message", message);
  w.EndObject();
  return Json(code, reason, buffer.GetString());
}

std::string PercentDecode(absl::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    int hi = 0, lo = 0;
    if (text[i] == '+') {
      out += ' ';
    } else if (text[i] == '%' && i + 2 < text.size() && absl::ascii_isxdigit(text[i + 1]) &&
               absl::ascii_isxdigit(text[i + 2])) {
      hi = absl::ascii_isdigit(text[i + 1]) ? text[i + 1] - '0'
                                            : absl::ascii_tolower(text[i + 1]) - 'a' + 10;
      lo = absl::ascii_isdigit(text[i + 2]) ? text[i + 2] - '0'
                                            : absl::ascii_tolower(text[i + 2]) - 'a' + 10;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

// The first value of `key` in a query string, decoded; "" when absent.
std::string QueryValue(const std::string& query, absl::string_view key) {
  for (absl::string_view pair : absl::StrSplit(query, '&')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(pair, absl::MaxSplits('=', 1));
    if (PercentDecode(kv.first) == key) return PercentDecode(kv.second);
  }
  return "";
}

// A DNS-1123 label (a namespace, 63) or subdomain (a pod, 253), as the API server checks them.
bool IsDnsName(const std::string& name, size_t max, bool dots) {
  if (name.empty() || name.size() > max) return false;
  for (char c : name) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '-' && !(dots && c == '.')) {
      return false;
    }
  }
  return absl::ascii_isalnum(name.front()) && absl::ascii_isalnum(name.back());
}

// "" when the capture's parameters will do, else what is wrong with them.
std::string CheckTarget(const std::string& name_space, const std::string& pod,
                        const std::string& duration, absl::Duration max, absl::Duration* out) {
  if (!IsDnsName(name_space, 63, false)) {
    return absl::StrCat("namespace \"", name_space,
                        "\" is not a Kubernetes namespace name (lower-case letters, digits, '-')");
  }
  if (!IsDnsName(pod, 253, true)) {
    return absl::StrCat("pod \"", pod,
                        "\" is not a Kubernetes pod name (lower-case letters, digits, '-', '.')");
  }
  return ParseDurationFlag("duration", duration.empty() ? "5s" : duration, absl::Milliseconds(100),
                           max, out);
}

bool Terminal(const std::string& state) { return state == "done" || state == "failed"; }

// Runs this binary again (argv[0] is its path) with stdout and stderr into `log`; its exit code,
// or -1 when it could not start.
int RunChild(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int err = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteCapture(Writer& w, const GatewayCapture& c) {
  w.StartObject();
  Field(w, "id", c.id);
  Field(w, "user", c.user);
  Field(w, "namespace", c.name_space);
  Field(w, "pod", c.pod);
  Field(w, "duration", absl::FormatDuration(c.duration));
  Field(w, "reason", c.reason);
  Field(w, "state", c.state);
  Field(w, "error", c.error);
  w.Key("nodes");
  w.StartArray();
  for (const GatewayCapture::Node& n : c.nodes) {
    w.StartObject();
    Field(w, "node", n.node);
    Field(w, "address", n.address);
    Field(w, "phase", n.phase);
    Field(w, "capture_id", n.capture_id);
    w.Key("events");
    w.Uint64(n.events);
    Field(w, "error", n.error);
    w.EndObject();
  }
  w.EndArray();
  w.Key("report");
  if (c.report) {
    const std::string url = absl::StrCat("captures/", c.id, "/report.html");
    w.String(url.c_str());
  } else {
    w.Null();
  }
  w.Key("traces");
  w.StartArray();
  for (const GatewayCapture::Trace& t : c.traces) {
    w.StartObject();
    Field(w, "capture_id", t.capture_id);
    Field(w, "file", t.file);
    w.Key("bytes");
    w.Uint64(t.bytes);
    Field(w, "url", absl::StrCat("captures/", c.id, "/traces/", t.capture_id, "/", t.file));
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
}

}  // namespace

// Who asks, as the API server or the trusted proxy says.
struct CaptureGateway::Caller {
  profd::KubernetesCaller who;
  std::string token;  // the user's bearer token, forwarded to the nodes; "" from a proxy
};

CaptureGateway::CaptureGateway(const GlobalOptions& g, GatewayOptions options, KubeAccess access)
    : g_(g),
      options_(std::move(options)),
      access_(std::move(access)),
      authorizer_(options_.authorization) {
  (void)ParseFleetTimes(g_, options_.fleet, &times_);  // checked by the command
}

CaptureGateway::~CaptureGateway() {
  std::map<std::string, Running> running;
  {
    absl::MutexLock lock(&mutex_);
    running.swap(running_);
  }
  for (auto& [id, r] : running) r.thread.join();
}

HttpResponse CaptureGateway::Handle(const HttpRequest& request) {
  const std::string& path = request.path;
  const bool get = request.method == "GET" || request.method == "HEAD";
  if (get && path == "/capture") {
    const std::string ns = QueryValue(request.query, "namespace");
    const std::string pod = QueryValue(request.query, "pod");
    std::string duration = QueryValue(request.query, "duration");
    if (duration.empty()) duration = "5s";
    absl::Duration d;
    const std::string bad = CheckTarget(ns, pod, duration, options_.max_duration, &d);
    HttpResponse page = HttpResponse::Text(
        bad.empty() ? 200 : 400, bad.empty() ? "OK" : "Bad Request",
        CapturePage(ns, pod, duration, QueryValue(request.query, "start") == "1", bad));
    page.content_type = "text/html; charset=utf-8";
    page.extra_headers = "Cache-Control: no-store\r\nX-Frame-Options: DENY\r\n";
    return page;
  }
  if (path == "/api/v1/captures") {
    if (request.method != "POST") return JsonError(405, "Method Not Allowed", "POST a capture");
    return Start(request);
  }
  if (get && absl::StartsWith(path, "/api/v1/captures/")) {
    return Status(path.substr(strlen("/api/v1/captures/")));
  }
  if (get && absl::StartsWith(path, "/captures/")) {
    const std::string rest = path.substr(strlen("/captures/"));
    const size_t slash = rest.find('/');
    if (slash != std::string::npos) return File(rest.substr(0, slash), rest.substr(slash + 1));
  }
  if (get && path == "/healthz") return HttpResponse::Text(200, "OK", "ok\n");
  return JsonError(404, "Not Found",
                   "the gateway serves /capture?namespace=NS&pod=NAME, /api/v1/captures and "
                   "/captures/ID/...");
}

absl::StatusOr<CaptureGateway::Caller> CaptureGateway::Identify(const HttpRequest& request) {
  absl::string_view auth = request.authorization;
  if (absl::ConsumePrefix(&auth, "Bearer ") || absl::ConsumePrefix(&auth, "bearer ")) {
    Caller caller;
    caller.token = std::string(absl::StripAsciiWhitespace(auth));
    absl::StatusOr<profd::KubernetesCaller> who = authorizer_.Authenticate(caller.token);
    if (!who.ok()) return who.status();
    caller.who = *std::move(who);
    return caller;
  }
  const std::string user = request.Header("x-forwarded-user");
  const std::string peer_ip(request.peer.substr(0, request.peer.rfind(':')));
  if (!user.empty() && options_.trusted_proxies.count(std::string(
                           absl::StripPrefix(absl::StripSuffix(peer_ip, "]"), "["))) > 0) {
    Caller caller;
    caller.who.user = user;
    for (absl::string_view g :
         absl::StrSplit(request.Header("x-forwarded-groups"), ',', absl::SkipWhitespace())) {
      caller.who.groups.emplace_back(absl::StripAsciiWhitespace(g));
    }
    return caller;
  }
  return absl::UnauthenticatedError(
      !user.empty()
          ? absl::StrCat("X-Forwarded-User is believed only from the gateway's --trusted_proxy, "
                         "not from ",
                         request.peer, ": send your bearer token instead")
          : "no credentials: send your Kubernetes bearer token (Authorization: Bearer ..., e.g. "
            "from `kubectl create token`), or reach the gateway through its authenticating proxy");
}

void CaptureGateway::Audit(const Caller& caller, const HttpRequest& request,
                           const GatewayCapture& c, const std::string& result) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  Field(w, "event", "capture");
  Field(w, "via", "gateway");
  Field(w, "user", caller.who.user);
  w.Key("groups");
  w.StartArray();
  for (const std::string& g : caller.who.groups) w.String(g.c_str());
  w.EndArray();
  Field(w, "authenticated_by",
        caller.who.user.empty() ? "nobody"
        : caller.token.empty()  ? "proxy"
                                : "token");
  Field(w, "peer", request.peer);
  w.Key("pods");
  w.StartArray();
  if (!c.pod.empty()) w.String(absl::StrCat(c.name_space, "/", c.pod).c_str());
  w.EndArray();
  Field(w, "duration", absl::FormatDuration(c.duration));
  Field(w, "reason", c.reason);
  Field(w, "fleet_id", c.id);
  Field(w, "result", result);
  w.EndObject();
  profd::LogInfo(kAudit, "%s", buffer.GetString());
}

int CaptureGateway::Forget() {
  int running = 0;
  std::vector<std::pair<absl::Time, std::string>> finished;
  for (auto& [id, c] : captures_) {
    if (!Terminal(c.state)) {
      ++running;
    } else {
      finished.emplace_back(c.created, id);
    }
  }
  std::sort(finished.begin(), finished.end());
  for (size_t i = 0; i + options_.max_kept < finished.size(); ++i) {
    const std::string& id = finished[i].second;
    if (auto r = running_.find(id); r != running_.end()) {
      r->second.thread.join();  // it has set its last state: a moment
      running_.erase(r);
    }
    captures_.erase(id);
    std::error_code ignored;
    fs::remove_all(Folder(id), ignored);
  }
  return running;
}

HttpResponse CaptureGateway::Start(const HttpRequest& request) {
  // A JSON body: a cross-site form cannot send one without the browser asking first (CORS).
  if (!absl::StartsWith(absl::AsciiStrToLower(request.content_type), "application/json")) {
    return JsonError(415, "Unsupported Media Type", "POST the capture as application/json");
  }
  rapidjson::Document body;
  body.Parse(request.body.c_str(), request.body.size());
  auto member = [&body](const char* name) -> std::string {
    auto m = body.IsObject() ? body.FindMember(name) : body.MemberEnd();
    return body.IsObject() && m != body.MemberEnd() && m->value.IsString() ? m->value.GetString()
                                                                           : "";
  };
  GatewayCapture c;
  c.name_space = member("namespace");
  c.pod = member("pod");
  c.reason = member("reason").substr(0, kMaxReasonBytes);
  if (body.HasParseError() || !body.IsObject()) {
    return JsonError(400, "Bad Request",
                     "the body must be a JSON object: {\"namespace\", \"pod\", \"duration\", "
                     "\"reason\"}");
  }
  if (std::string bad =
          CheckTarget(c.name_space, c.pod, member("duration"), options_.max_duration, &c.duration);
      !bad.empty()) {
    return JsonError(400, "Bad Request", bad);
  }

  // Who, and may they: before anything about the pod is looked up or said.
  absl::StatusOr<Caller> caller = Identify(request);
  if (!caller.ok()) {
    const bool down = absl::IsUnavailable(caller.status());
    Audit(Caller{}, request, c, std::string(caller.status().message()));
    return JsonError(down ? 503 : 401, down ? "Service Unavailable" : "Unauthorized",
                     std::string(caller.status().message()));
  }
  c.user = caller->who.user;
  if (absl::Status allowed = authorizer_.Authorize(caller->who, c.name_space); !allowed.ok()) {
    const bool down = absl::IsUnavailable(allowed);
    Audit(*caller, request, c, std::string(allowed.message()));
    return JsonError(down ? 503 : 403, down ? "Service Unavailable" : "Forbidden",
                     std::string(allowed.message()));
  }
  return Admit(*std::move(caller), request, std::move(c));
}

HttpResponse CaptureGateway::Admit(Caller caller, const HttpRequest& request, GatewayCapture c) {
  {
    absl::MutexLock lock(&mutex_);
    if (Forget() >= options_.max_running) {
      const std::string why = absl::StrCat(options_.max_running,
                                           " captures are running through this gateway: retry "
                                           "when one is done");
      Audit(caller, request, c, why);
      return JsonError(429, "Too Many Requests", why);
    }
  }
  KubernetesApi api(access_, times_.call_timeout);
  absl::StatusOr<WorkloadPod> pod = api.GetPod(c.name_space, c.pod);
  if (!pod.ok()) {
    Audit(caller, request, c, std::string(pod.status().message()));
    return absl::IsNotFound(pod.status())
               ? JsonError(404, "Not Found", std::string(pod.status().message()))
               : JsonError(502, "Bad Gateway", std::string(pod.status().message()));
  }
  std::vector<SkippedPod> skipped;
  std::vector<FleetNode> nodes = NodesOfPods(g_, options_.fleet.node_address, {*pod}, &skipped);
  if (nodes.empty()) {
    const std::string why =
        absl::StrCat("pod ", c.name_space, "/", c.pod,
                     " cannot be captured: ", skipped.empty() ? "no node" : skipped.front().why);
    Audit(caller, request, c, why);
    return JsonError(409, "Conflict", why);
  }

  c.id = profd::NewFleetId(absl::Now());
  c.created = absl::Now();
  for (const FleetNode& n : nodes) c.nodes.push_back({n.node, n.address, "connecting", "", "", 0});
  profd::v1::CaptureRequest capture;
  capture.set_duration_ms(absl::ToInt64Milliseconds(c.duration));
  capture.set_label(absl::StrCat("profctl gateway for ", c.user));
  // A user's own token goes to the node, whose profd checks it again; without one (a proxy named
  // the user) the gateway's service account asks, and the node's audit line says for whom.
  capture.set_reason(caller.token.empty()
                         ? absl::StrCat(c.reason, " [for ", c.user, " via profctl gateway]")
                         : c.reason);
  const std::string node_token = caller.token.empty() ? access_.token : caller.token;
  auto fleet = std::make_unique<FleetCapture>(g_, times_, std::move(nodes));
  fleet->UseFleetId(c.id);
  std::error_code ignored;
  fs::create_directories(Folder(c.id), ignored);
  Audit(caller, request, c, "started");

  absl::MutexLock lock(&mutex_);
  const std::string id = c.id;
  captures_[id] = std::move(c);
  Running& r = running_[id];
  r.fleet = std::move(fleet);
  r.thread = std::thread(
      [this, id, f = r.fleet.get(), capture, node_token] { Capture(id, f, capture, node_token); });
  return Json(202, "Accepted",
              absl::StrCat("{\"id\":\"", id, "\",\"status\":\"api/v1/captures/", id, "\"}"));
}

HttpResponse CaptureGateway::Status(const std::string& id) {
  absl::MutexLock lock(&mutex_);
  auto it = captures_.find(id);
  if (it == captures_.end()) {
    return JsonError(404, "Not Found",
                     absl::StrCat("no capture ", id, " on this gateway (it keeps the last ",
                                  options_.max_kept, "; older ones: profctl report ID)"));
  }
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  WriteCapture(w, it->second);
  return Json(200, "OK", buffer.GetString());
}

HttpResponse CaptureGateway::File(const std::string& id, const std::string& rest) {
  std::string path, type;
  {
    absl::MutexLock lock(&mutex_);
    auto it = captures_.find(id);
    if (it != captures_.end() && rest == "report.html" && it->second.report) {
      path = Folder(id) + "/report.html";
      type = "text/html; charset=utf-8";
    }
    // Only a file the record names: nothing else under the folder is reachable.
    for (const GatewayCapture::Trace& t :
         it != captures_.end() ? it->second.traces : std::vector<GatewayCapture::Trace>{}) {
      if (rest == absl::StrCat("traces/", t.capture_id, "/", t.file)) {
        path = absl::StrCat(Folder(id), "/traces/", t.capture_id, "/", t.file);
        type = "application/octet-stream";
      }
    }
  }
  if (path.empty())
    return JsonError(404, "Not Found", absl::StrCat("no ", rest, " in capture ", id));
  HttpResponse r = HttpResponse::Text(200, "OK", ReadAll(path));
  r.content_type = type;
  if (!absl::StartsWith(type, "text/html")) {
    r.extra_headers = absl::StrCat("Content-Disposition: attachment; filename=\"",
                                   fs::path(path).filename().string(), "\"\r\n");
  }
  return r;
}

std::string CaptureGateway::Folder(const std::string& id) const {
  return absl::StrCat(options_.work_dir, "/", id);
}

void CaptureGateway::SetState(const std::string& id, const std::string& state,
                              const std::string& error) {
  absl::MutexLock lock(&mutex_);
  GatewayCapture& c = captures_[id];
  c.state = state;
  if (!error.empty()) c.error = error;
  profd::LogInfo(kGateway, "capture %s: %s%s", id, state, error.empty() ? "" : ": " + error);
}

void CaptureGateway::Capture(const std::string& id, FleetCapture* fleet,
                             profd::v1::CaptureRequest request, const std::string& node_token) {
  fleet->Prepare(&request);
  SetState(id, "capturing");
  fleet->Run(request, node_token, [this, &id](const FleetNode& n) {
    absl::MutexLock lock(&mutex_);
    for (GatewayCapture::Node& shown : captures_[id].nodes) {
      if (shown.node != n.node) continue;
      shown.phase = n.error.empty() ? PhaseName(n.last.phase()) : "failed";
      shown.capture_id = n.last.capture_id();
      shown.events = n.events;
      shown.error = n.error;
    }
  });
  if (fleet->ExitCode() == kExitCaptureFailed) {
    SetState(id, "failed", "no node captured the pod");
    return;
  }
  StoreAndReport(id, *fleet);
}

void CaptureGateway::StoreAndReport(const std::string& id, const FleetCapture& fleet) {
  // Through the first node that captured: every node's profd sees the shared store.
  const FleetNode* via = nullptr;
  size_t captured = 0;
  for (const FleetNode& n : fleet.nodes()) {
    if (!n.error.empty()) continue;
    ++captured;
    if (via == nullptr) via = &n;
  }
  SetState(id, "storing");
  profd::v1::ListTracesResponse list;
  const absl::Time until = absl::Now() + options_.store_wait;
  for (;;) {
    profd::v1::ListTracesRequest ask;
    ask.set_fleet_id(id);
    // Every node's capture started after the fleet id was made (as `profctl report` looks).
    if (absl::Time at; profd::IsFleetId(id, &at)) {
      ask.set_since_unix_ns(absl::ToUnixNanos(at - absl::Minutes(1)));
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + times_.call_timeout));
    grpc::Status status = StoreStub(*via->client)->ListTraces(&ctx, ask, &list);
    if (status.ok() && static_cast<size_t>(list.traces_size()) >= captured) break;
    if (absl::Now() > until) {
      SetState(id, "failed",
               absl::StrCat("the store lists ", list.traces_size(), " of the ", captured,
                            " node captures after ", absl::FormatDuration(options_.store_wait),
                            status.ok() ? "" : absl::StrCat(" (", status.error_message(), ")"),
                            ": `profctl spool` on the node says what waits"));
      return;
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
  SetState(id, "reporting");
  // The same code as `profctl report FLEET_ID --html` and `profctl get`, in a child process: a
  // big analysis neither blocks the gateway nor holds its memory.
  std::vector<std::string> base = {options_.profctl_path, "--target", via->address, "--timeout",
                                   g_.timeout};
  for (auto [flag, value] : {std::pair{"--tls-ca", g_.tls.ca_file},
                             {"--tls-cert", g_.tls.cert_file},
                             {"--tls-key", g_.tls.key_file},
                             {"--tls-server-name", via->server_name}}) {
    if (!value.empty()) base.insert(base.end(), {flag, value});
  }
  const std::string folder = Folder(id), log = folder + "/profctl.log";
  std::vector<std::string> report = base;
  report.insert(report.end(), {"report", id, "--html", folder + "/report.html"});
  const bool reported = RunChild(report, log) == 0;
  std::vector<GatewayCapture::Trace> traces;
  std::string error = reported ? "" : "the report failed (see the gateway's log)";
  for (const profd::v1::StoredTrace& t : list.traces()) {
    std::vector<std::string> get = base;
    const std::string dir = absl::StrCat(folder, "/traces/", t.capture_id());
    get.insert(get.end(), {"get", t.capture_id(), "-o", dir});
    if (RunChild(get, log) != 0) {
      error = absl::StrCat("fetching capture ", t.capture_id(), " failed (see the gateway's log)");
      continue;
    }
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (absl::StartsWith(name, "trace-") && entry.is_regular_file()) {
        traces.push_back({t.capture_id(), name, static_cast<uint64_t>(entry.file_size())});
      }
    }
  }
  if (!error.empty()) profd::LogWarning(kGateway, "capture %s: %s:\n%s", id, error, ReadAll(log));
  {
    absl::MutexLock lock(&mutex_);
    GatewayCapture& c = captures_[id];
    c.report = reported;
    c.traces = std::move(traces);
  }
  SetState(id, "done", error);
}

}  // namespace profctl
