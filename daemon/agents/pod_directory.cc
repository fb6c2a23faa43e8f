#include "daemon/agents/pod_directory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/https_client.h"
#include "common/json_member.h"
#include "daemon/log.h"
#include "rapidjson/document.h"
#include "rapidjson/error/en.h"

namespace profd {
namespace {

constexpr char kComponent[] = "pods";
constexpr char kMirrorAnnotation[] = "kubernetes.io/config.mirror";

}  // namespace

absl::StatusOr<std::map<std::string, PodName>> ParsePodList(absl::string_view json) {
  rapidjson::Document doc;
  doc.Parse(json.data(), json.size());
  if (doc.HasParseError()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the pod list is not JSON: ", rapidjson::GetParseError_En(doc.GetParseError()),
                     " at byte ", doc.GetErrorOffset()));
  }
  if (!doc.IsObject() || JsonString(doc, "kind") != "PodList") {
    std::string kind = JsonString(doc, "kind");
    std::string message = JsonString(doc, "message");  // a Status from the API server
    return absl::InvalidArgumentError(
        absl::StrCat("expected a PodList, got ", kind.empty() ? "something else" : kind,
                     message.empty() ? "" : absl::StrCat(": ", message)));
  }
  std::map<std::string, PodName> pods;
  auto items = doc.FindMember("items");
  if (items == doc.MemberEnd() || items->value.IsNull()) return pods;  // no pod on the node
  if (!items->value.IsArray()) return absl::InvalidArgumentError("PodList.items is not a list");
  for (const rapidjson::Value& item : items->value.GetArray()) {
    if (!item.IsObject()) continue;
    auto metadata = item.FindMember("metadata");
    if (metadata == item.MemberEnd() || !metadata->value.IsObject()) continue;
    const rapidjson::Value& meta = metadata->value;
    PodName pod{JsonString(meta, "namespace"), JsonString(meta, "name")};
    std::string uid = JsonString(meta, "uid");
    if (pod.name.empty() || uid.empty()) continue;
    auto annotations = meta.FindMember("annotations");
    if (annotations != meta.MemberEnd()) {
      std::string mirror = JsonString(annotations->value, kMirrorAnnotation);
      if (!mirror.empty()) pods[mirror] = pod;
    }
    pods[uid] = std::move(pod);
  }
  return pods;
}

absl::StatusOr<std::string> PodDirectory::InClusterUrl(const std::string& node_name) {
  absl::StatusOr<std::string> server = InClusterApiServer("--kubernetes_pods=apiserver");
  if (!server.ok()) return server.status();
  if (node_name.empty()) {
    return absl::FailedPreconditionError(
        "--kubernetes_pods=apiserver needs the node's name: --node_name, or NODE_NAME from "
        "the downward API (spec.nodeName)");
  }
  // Only this node's pods: the answer stays small whatever the cluster's size.
  return absl::StrCat(*server, "/api/v1/pods?fieldSelector=spec.nodeName%3D", node_name);
}

PodDirectory::PodDirectory(Options options) : options_(std::move(options)) {}

PodDirectory::~PodDirectory() {
  abort_fetch_ = true;
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void PodDirectory::Start(std::function<void()> on_refresh) {
  thread_ = std::thread([this, on_refresh = std::move(on_refresh)] { Run(on_refresh); });
}

void PodDirectory::Run(std::function<void()> on_refresh) {
  absl::Time last_fetch = absl::InfinitePast();
  bool failing = false;
  while (true) {
    {
      absl::MutexLock lock(&mutex_);
      const absl::Time due_anyway = last_fetch + options_.refresh_interval;
      auto ready = [this, &last_fetch]() ABSL_SHARED_LOCKS_REQUIRED(mutex_) {
        return stopping_ ||
               (refresh_wanted_ && absl::Now() >= last_fetch + options_.min_refresh_interval);
      };
      // Wakes for a stop or a wanted refresh, polling the rate limit at its own interval.
      while (!ready() && absl::Now() < due_anyway) {
        mutex_.AwaitWithTimeout(absl::Condition(&ready),
                                std::min(options_.min_refresh_interval, due_anyway - absl::Now()));
      }
      if (stopping_) return;
      refresh_wanted_ = false;
    }
    last_fetch = absl::Now();
    absl::Status s = RefreshNow();
    if (!s.ok()) {
      // Once per run of failures, and once when it works again: an API server that is down is
      // not a line a second.
      if (!failing) LogWarning(kComponent, "cannot list pods: %s", s.ToString());
      failing = true;
      continue;
    }
    if (failing) LogInfo(kComponent, "pod list read again from %s", options_.url);
    failing = false;
    if (on_refresh) on_refresh();
  }
}

absl::StatusOr<std::string> PodDirectory::Fetch() const {
  std::string token;
  if (!options_.token_file.empty()) {
    absl::StatusOr<std::string> read = ReadTokenFile(options_.token_file);
    if (!read.ok()) return read.status();
    token = *std::move(read);
  }
  HttpsRequest request;
  request.url = options_.url;
  request.bearer_token = token;
  request.ca_file = options_.ca_file;
  request.timeout = options_.timeout;
  request.max_answer_bytes = options_.max_answer_bytes;
  request.abort = &abort_fetch_;
  absl::StatusOr<HttpsAnswer> answer = SendHttps(request);
  if (!answer.ok()) return answer.status();
  const long http = answer->status;
  if (http == 401 || http == 403) {
    return absl::PermissionDeniedError(absl::StrCat(
        "GET ", options_.url, ": HTTP ", http,
        http == 401 ? " (the token was refused: --kubernetes_token_file)"
                    : " (the service account may not list pods: deploy/kubernetes/rbac.yaml "
                      "grants profd get/list on pods)"));
  }
  if (http != 200) {
    return absl::UnavailableError(absl::StrCat("GET ", options_.url, ": HTTP ", http));
  }
  return std::move(answer->body);
}

absl::Status PodDirectory::RefreshNow() {
  absl::StatusOr<std::string> answer = Fetch();
  absl::StatusOr<std::map<std::string, PodName>> pods =
      answer.ok() ? ParsePodList(*answer) : answer.status();
  absl::MutexLock lock(&mutex_);
  if (!pods.ok()) {
    last_error_ = std::string(pods.status().message());
    return pods.status();
  }
  pods_ = *std::move(pods);
  last_error_.clear();
  return absl::OkStatus();
}

std::optional<PodName> PodDirectory::Lookup(const std::string& pod_uid) {
  absl::MutexLock lock(&mutex_);
  auto it = pods_.find(pod_uid);
  if (it != pods_.end()) return it->second;
  refresh_wanted_ = true;
  return std::nullopt;
}

std::string PodDirectory::last_error() const {
  absl::MutexLock lock(&mutex_);
  return last_error_;
}

bool ResolvePod(PodDirectory* directory, v1::AgentInfo* info) {
  const PodName claimed{info->claimed_pod_namespace(), info->claimed_pod_name()};
  PodName pod = claimed;
  v1::PodIdentity how = v1::POD_IDENTITY_CLAIMED;
  if (directory != nullptr) {
    if (info->pod_uid().empty()) {
      pod = PodName{};
      how = v1::POD_IDENTITY_NOT_IN_A_POD;
    } else if (std::optional<PodName> found = directory->Lookup(info->pod_uid())) {
      pod = *std::move(found);
      how = v1::POD_IDENTITY_VERIFIED;
    } else {
      how = v1::POD_IDENTITY_UNVERIFIED;
    }
  }
  info->set_pod_namespace(pod.pod_namespace);
  info->set_pod_name(pod.name);
  info->set_pod_identity(how);
  const bool checked = how == v1::POD_IDENTITY_VERIFIED || how == v1::POD_IDENTITY_NOT_IN_A_POD;
  // A claim of a name alone (no POD_NAMESPACE) disagrees only on the name.
  return checked && !claimed.name.empty() &&
         (claimed.name != pod.name ||
          (!claimed.pod_namespace.empty() && claimed.pod_namespace != pod.pod_namespace));
}

}  // namespace profd
