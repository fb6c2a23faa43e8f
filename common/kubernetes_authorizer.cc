#include "common/kubernetes_authorizer.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/https_client.h"
#include "common/json_member.h"
#include "common/sha256.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace profd {
namespace {

constexpr char kTokenReviews[] = "/apis/authentication.k8s.io/v1/tokenreviews";
constexpr char kAccessReviews[] = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
// A review's answer is a few KiB.
constexpr size_t kMaxAnswerBytes = 1 << 20;

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void Key(Writer& w, const char* key, const std::string& value) {
  w.Key(key);
  w.String(value.c_str(), static_cast<rapidjson::SizeType>(value.size()));
}

bool TrueIn(const rapidjson::Value& v, const char* name) {
  const rapidjson::Value* m = JsonMember(v, name);
  return m && m->IsBool() && m->GetBool();
}

std::vector<std::string> Strings(const rapidjson::Value* list) {
  std::vector<std::string> out;
  if (list == nullptr || !list->IsArray()) return out;
  for (const rapidjson::Value& s : list->GetArray()) {
    if (s.IsString()) out.emplace_back(s.GetString(), s.GetStringLength());
  }
  return out;
}

void StringList(Writer& w, const std::vector<std::string>& values) {
  w.StartArray();
  for (const std::string& v : values)
    w.String(v.c_str(), static_cast<rapidjson::SizeType>(v.size()));
  w.EndArray();
}

}  // namespace

KubernetesAuthorizer::KubernetesAuthorizer(Options options) : options_(std::move(options)) {}

absl::StatusOr<std::optional<KubernetesAuthorizer::Options>> KubernetesAuthorizer::FromFlags(
    const std::string& flag, const std::string& source, const std::string& token_file,
    const std::string& ca_file) {
  if (source == "none" || source.empty()) return std::nullopt;
  Options options;
  if (source == "apiserver") {
    absl::StatusOr<std::string> server = InClusterApiServer(absl::StrCat(flag, "=apiserver"));
    if (!server.ok()) return server.status();
    options.server = *server;
  } else if (absl::StartsWith(source, "https://")) {
    options.server = std::string(absl::StripSuffix(source, "/"));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "=", source, ": expected none, apiserver or an https:// URL"));
  }
  options.token_file = token_file;
  options.ca_file = ca_file;
  return options;
}

absl::StatusOr<std::string> KubernetesAuthorizer::Review(const std::string& path,
                                                         const std::string& body) {
  HttpsRequest request;
  request.method = "POST";
  request.url = options_.server + path;
  request.body = body;
  request.ca_file = options_.ca_file;
  request.timeout = options_.timeout;
  request.max_answer_bytes = kMaxAnswerBytes;
  if (!options_.token_file.empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(options_.token_file);
    if (!token.ok()) return absl::UnavailableError(token.status().message());
    request.bearer_token = *std::move(token);
  }
  absl::StatusOr<HttpsAnswer> answer = SendHttps(request);
  if (!answer.ok()) {
    return absl::UnavailableError(
        absl::StrCat("the Kubernetes API server cannot be asked: ", answer.status().message()));
  }
  if (answer->status != 201 && answer->status != 200) {
    std::string why = KubernetesErrorMessage(answer->body);
    return absl::UnavailableError(absl::StrCat(
        "the Kubernetes API server answered ", path, " with ", answer->status, ": ", why,
        answer->status == 403 ? " (profd's service account needs the system:auth-delegator role)"
                              : ""));
  }
  return std::move(answer->body);
}

absl::StatusOr<KubernetesCaller> KubernetesAuthorizer::Authenticate(const std::string& token) {
  const std::string key = Sha256Hex(token);
  const absl::Time now = absl::Now();
  {
    MutexLock lock(&mutex_);
    auto it = identities_.find(key);
    if (it != identities_.end() && it->second.until > now) return it->second.caller;
    // Forget the expired ones (one entry per caller that came in the last minute).
    for (auto e = identities_.begin(); e != identities_.end();) {
      e = e->second.until <= now ? identities_.erase(e) : std::next(e);
    }
  }
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  Key(w, "apiVersion", "authentication.k8s.io/v1");
  Key(w, "kind", "TokenReview");
  w.Key("spec");
  w.StartObject();
  Key(w, "token", token);
  w.EndObject();
  w.EndObject();
  absl::StatusOr<std::string> answer = Review(kTokenReviews, buffer.GetString());
  if (!answer.ok()) return answer.status();
  rapidjson::Document doc;
  doc.Parse(answer->c_str(), answer->size());
  const rapidjson::Value* status = doc.HasParseError() ? nullptr : JsonMember(doc, "status");
  if (status == nullptr) {
    return absl::UnavailableError("the Kubernetes API server's TokenReview has no status");
  }
  if (!TrueIn(*status, "authenticated")) {
    std::string why = JsonString(*status, "error");
    return absl::UnauthenticatedError(
        absl::StrCat("the Kubernetes API server does not accept this token",
                     why.empty() ? "" : absl::StrCat(" (", why, ")"),
                     ": profctl sends the bearer token of your kubeconfig's user"));
  }
  const rapidjson::Value* user = JsonMember(*status, "user");
  KubernetesCaller caller;
  caller.user = user ? JsonString(*user, "username") : "";
  caller.uid = user ? JsonString(*user, "uid") : "";
  caller.groups = Strings(user ? JsonMember(*user, "groups") : nullptr);
  if (const rapidjson::Value* extra = user ? JsonMember(*user, "extra") : nullptr;
      extra != nullptr && extra->IsObject()) {
    for (auto m = extra->MemberBegin(); m != extra->MemberEnd(); ++m) {
      caller.extra[m->name.GetString()] = Strings(&m->value);
    }
  }
  if (caller.user.empty()) {
    return absl::UnavailableError("the Kubernetes API server's TokenReview names no user");
  }
  MutexLock lock(&mutex_);
  identities_[key] = Known{caller, now + options_.identity_ttl};
  return caller;
}

absl::Status KubernetesAuthorizer::Authorize(const KubernetesCaller& caller,
                                             const std::string& name_space) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  Key(w, "apiVersion", "authorization.k8s.io/v1");
  Key(w, "kind", "SubjectAccessReview");
  w.Key("spec");
  w.StartObject();
  Key(w, "user", caller.user);
  if (!caller.uid.empty()) Key(w, "uid", caller.uid);
  w.Key("groups");
  StringList(w, caller.groups);
  if (!caller.extra.empty()) {
    w.Key("extra");
    w.StartObject();
    for (const auto& [name, values] : caller.extra) {
      w.Key(name.c_str(), static_cast<rapidjson::SizeType>(name.size()));
      StringList(w, values);
    }
    w.EndObject();
  }
  w.Key("resourceAttributes");
  w.StartObject();
  if (!name_space.empty()) Key(w, "namespace", name_space);
  Key(w, "verb", kVerb);
  Key(w, "group", kGroup);
  Key(w, "resource", kResource);
  w.EndObject();
  w.EndObject();
  w.EndObject();
  absl::StatusOr<std::string> answer = Review(kAccessReviews, buffer.GetString());
  if (!answer.ok()) return answer.status();
  rapidjson::Document doc;
  doc.Parse(answer->c_str(), answer->size());
  const rapidjson::Value* status = doc.HasParseError() ? nullptr : JsonMember(doc, "status");
  if (status == nullptr) {
    return absl::UnavailableError("the Kubernetes API server's SubjectAccessReview has no status");
  }
  if (TrueIn(*status, "allowed")) return absl::OkStatus();
  std::string why = JsonString(*status, "reason");
  if (why.empty()) why = JsonString(*status, "evaluationError");
  return absl::PermissionDeniedError(
      absl::StrCat(caller.user, " may not create ", kResource, ".", kGroup,
                   name_space.empty() ? " cluster-wide (a process in no pod)"
                                      : absl::StrCat(" in namespace ", name_space),
                   why.empty() ? "" : absl::StrCat(" (", why, ")"),
                   ": a RoleBinding to the profd-capturer ClusterRole there grants it"));
}

}  // namespace profd
