#include "client/kubernetes_api.h"

#include <curl/curl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/https_client.h"
#include "common/json_member.h"
#ifdef PROFCTL_HAVE_YAML
#include <yaml.h>
#endif

namespace profctl {
namespace {

using profd::JsonMember;
using profd::JsonString;

// The service account the kubelet mounts into every pod (kubectl's in-cluster config).
constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";
// A page of a pod list (500 pods) is a few MiB; anything far larger is not an API server.
constexpr size_t kMaxAnswerBytes = 64 << 20;
constexpr int kPodsPerPage = 500;
constexpr int kMaxDepth = 64;

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", what, " ", path, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The entry of a kubeconfig list (clusters, users, contexts) named `name`: its inner object.
const rapidjson::Value* Named(const rapidjson::Value& config, const char* list,
                              const std::string& name, const char* inner) {
  const rapidjson::Value* items = JsonMember(config, list);
  if (items == nullptr || !items->IsArray()) return nullptr;
  for (const auto& item : items->GetArray()) {
    if (JsonString(item, "name") == name) return JsonMember(item, inner);
  }
  return nullptr;
}

// A kubeconfig field given inline (base64 "<field>-data") or as a file relative to the
// kubeconfig's folder; "" when neither is set.
absl::StatusOr<std::string> Material(const rapidjson::Value& entry, const std::string& field,
                                     const std::string& base_dir, const std::string& where) {
  if (std::string data = JsonString(entry, (field + "-data").c_str()); !data.empty()) {
    std::string decoded;
    if (!absl::Base64Unescape(data, &decoded)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", field, "-data is not base64"));
    }
    return decoded;
  }
  std::string path = JsonString(entry, field.c_str());
  if (path.empty()) return std::string();
  if (path[0] != '/') path = absl::StrCat(base_dir, "/", path);
  return ReadWholeFile(path, absl::StrCat(where, "'s ", field));
}

#ifdef PROFCTL_HAVE_YAML
// One YAML node as JSON: mappings become objects, sequences arrays, scalars strings.
bool YamlToJson(yaml_document_t* doc, yaml_node_t* node, rapidjson::Value* out,
                rapidjson::Document::AllocatorType& alloc, int depth) {
  if (node == nullptr || depth > kMaxDepth) return false;
  switch (node->type) {
    case YAML_SCALAR_NODE:
      out->SetString(reinterpret_cast<const char*>(node->data.scalar.value),
                     static_cast<rapidjson::SizeType>(node->data.scalar.length), alloc);
      return true;
    case YAML_SEQUENCE_NODE:
      out->SetArray();
      for (yaml_node_item_t* i = node->data.sequence.items.start; i < node->data.sequence.items.top;
           ++i) {
        rapidjson::Value v;
        if (!YamlToJson(doc, yaml_document_get_node(doc, *i), &v, alloc, depth + 1)) return false;
        out->PushBack(v, alloc);
      }
      return true;
    case YAML_MAPPING_NODE:
      out->SetObject();
      for (yaml_node_pair_t* p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top;
           ++p) {
        yaml_node_t* key = yaml_document_get_node(doc, p->key);
        if (key == nullptr || key->type != YAML_SCALAR_NODE) return false;
        rapidjson::Value k, v;
        k.SetString(reinterpret_cast<const char*>(key->data.scalar.value),
                    static_cast<rapidjson::SizeType>(key->data.scalar.length), alloc);
        if (!YamlToJson(doc, yaml_document_get_node(doc, p->value), &v, alloc, depth + 1)) {
          return false;
        }
        out->AddMember(k, v, alloc);
      }
      return true;
    default:
      return false;
  }
}
#endif

std::string Escape(const std::string& text) {
  std::unique_ptr<char, decltype(&curl_free)> escaped(
      curl_easy_escape(nullptr, text.data(), static_cast<int>(text.size())), &curl_free);
  return escaped ? std::string(escaped.get()) : std::string();
}

// A Pod object's name, node and phase; the namespace it is listed in when it names none.
WorkloadPod PodOf(const rapidjson::Value& item, const std::string& name_space) {
  WorkloadPod pod;
  const rapidjson::Value* meta = JsonMember(item, "metadata");
  const rapidjson::Value* spec = JsonMember(item, "spec");
  const rapidjson::Value* status = JsonMember(item, "status");
  if (meta == nullptr) return pod;
  pod.name_space = JsonString(*meta, "namespace");
  if (pod.name_space.empty()) pod.name_space = name_space;
  pod.name = JsonString(*meta, "name");
  if (spec != nullptr) pod.node_name = JsonString(*spec, "nodeName");
  if (status != nullptr) {
    pod.host_ip = JsonString(*status, "hostIP");
    pod.phase = JsonString(*status, "phase");
  }
  return pod;
}

}  // namespace

absl::StatusOr<rapidjson::Document> ParseKubeconfig(const std::string& text,
                                                    const std::string& where) {
  rapidjson::Document doc;
  const std::string trimmed(absl::StripLeadingAsciiWhitespace(text));
  if (!trimmed.empty() && trimmed[0] == '{') {
    doc.Parse(trimmed.c_str());
    if (doc.HasParseError() || !doc.IsObject()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " is not a JSON object"));
    }
    return doc;
  }
#ifdef PROFCTL_HAVE_YAML
  yaml_parser_t parser;
  yaml_document_t document;
  if (!yaml_parser_initialize(&parser)) return absl::InternalError("cannot start a YAML parser");
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()),
                               text.size());
  const bool loaded = yaml_parser_load(&parser, &document) != 0;
  std::string problem = parser.problem != nullptr ? parser.problem : "";
  const size_t line = parser.problem_mark.line + 1;
  yaml_parser_delete(&parser);
  if (!loaded) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is not YAML: ", problem, " at line ", line));
  }
  yaml_node_t* root = yaml_document_get_root_node(&document);
  const bool ok = root != nullptr && YamlToJson(&document, root, &doc, doc.GetAllocator(), 0);
  yaml_document_delete(&document);
  if (!ok || !doc.IsObject()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " is not a kubeconfig: expected a mapping with clusters, users and contexts"));
  }
  return doc;
#else
  return absl::FailedPreconditionError(
      absl::StrCat(where,
                   " is YAML, and this profctl was built without libyaml: give a JSON kubeconfig "
                   "(kubectl config view --raw -o json > FILE; --kubeconfig FILE)"));
#endif
}

namespace {

// kubectl's order: --kubeconfig, else the first readable file of $KUBECONFIG, else
// ~/.kube/config; "" when there is none.
std::string KubeconfigPath(const std::string& kubeconfig) {
  std::string path = kubeconfig;
  if (path.empty()) {
    if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0') {
      // kubectl merges the list; profctl takes the first file that exists.
      for (absl::string_view p : absl::StrSplit(env, ':', absl::SkipEmpty())) {
        if (access(std::string(p).c_str(), R_OK) == 0) {
          path = std::string(p);
          break;
        }
      }
    }
  }
  if (path.empty()) {
    const char* home = std::getenv("HOME");
    std::string home_config = absl::StrCat(home != nullptr ? home : "", "/.kube/config");
    if (access(home_config.c_str(), R_OK) == 0) path = home_config;
  }
  return path;
}

// In a pod: the service account, as kubectl's in-cluster config.
absl::StatusOr<KubeAccess> InClusterAccess() {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || port == nullptr) {
    return absl::FailedPreconditionError(
        "no Kubernetes credentials: no --kubeconfig, no $KUBECONFIG, no ~/.kube/config, and "
        "not in a pod (KUBERNETES_SERVICE_HOST is not set). Give profctl the kubeconfig "
        "kubectl uses (--kubeconfig FILE)");
  }
  KubeAccess access_out;
  const std::string h = host;
  access_out.server =
      absl::StrCat("https://", h.find(':') != std::string::npos ? "[" + h + "]" : h, ":", port);
  absl::StatusOr<std::string> token =
      ReadWholeFile(absl::StrCat(kServiceAccountDir, "/token"), "the service account token");
  if (!token.ok()) return token.status();
  access_out.token = std::string(absl::StripAsciiWhitespace(*token));
  absl::StatusOr<std::string> ca =
      ReadWholeFile(absl::StrCat(kServiceAccountDir, "/ca.crt"), "the cluster's CA");
  if (!ca.ok()) return ca.status();
  access_out.ca_pem = *ca;
  absl::StatusOr<std::string> ns =
      ReadWholeFile(absl::StrCat(kServiceAccountDir, "/namespace"), "the pod's namespace");
  access_out.default_namespace = ns.ok() ? std::string(absl::StripAsciiWhitespace(*ns)) : "default";
  access_out.source = "the pod's service account";
  return access_out;
}

// The context's cluster: its server and how to trust it.
absl::Status SetCluster(const rapidjson::Value& config, const std::string& cluster_name,
                        const std::string& base_dir, const std::string& where, KubeAccess* out) {
  const rapidjson::Value* cluster = Named(config, "clusters", cluster_name, "cluster");
  if (cluster == nullptr) {
    return absl::NotFoundError(absl::StrCat(where, ": no cluster '", cluster_name, "'"));
  }
  out->server = JsonString(*cluster, "server");
  if (out->server.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": cluster '", cluster_name, "' has no server"));
  }
  const std::string insecure = JsonString(*cluster, "insecure-skip-tls-verify");
  const rapidjson::Value* insecure_bool = JsonMember(*cluster, "insecure-skip-tls-verify");
  out->insecure_skip_tls_verify =
      insecure == "true" ||
      (insecure_bool != nullptr && insecure_bool->IsBool() && insecure_bool->GetBool());
  absl::StatusOr<std::string> ca = Material(*cluster, "certificate-authority", base_dir, where);
  if (!ca.ok()) return ca.status();
  out->ca_pem = *ca;
  return absl::OkStatus();
}

// The context's user: a client certificate, a token or a tokenFile (none for a user the
// kubeconfig does not list).
absl::Status SetUserCredentials(const rapidjson::Value& config, const std::string& user_name,
                                const std::string& base_dir, const std::string& where,
                                KubeAccess* out) {
  const rapidjson::Value* user = Named(config, "users", user_name, "user");
  if (user == nullptr) return absl::OkStatus();
  if (JsonMember(*user, "exec") != nullptr || JsonMember(*user, "auth-provider") != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": user '", user_name,
        "' gets its credentials from a plugin (exec or auth-provider), which profctl does not "
        "run. Give a kubeconfig with a token or a client certificate (e.g. a service "
        "account's: kubectl create token NAME)"));
  }
  absl::StatusOr<std::string> cert = Material(*user, "client-certificate", base_dir, where);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = Material(*user, "client-key", base_dir, where);
  if (!key.ok()) return key.status();
  out->client_cert_pem = *cert;
  out->client_key_pem = *key;
  out->token = JsonString(*user, "token");
  if (out->token.empty()) {
    if (std::string file = JsonString(*user, "tokenFile"); !file.empty()) {
      absl::StatusOr<std::string> token = ReadWholeFile(file, where + "'s tokenFile");
      if (!token.ok()) return token.status();
      out->token = std::string(absl::StripAsciiWhitespace(*token));
    }
  }
  return absl::OkStatus();
}

// The kubeconfig at `path`, its `context` (its current-context when "").
absl::StatusOr<KubeAccess> KubeconfigAccess(const std::string& path, const std::string& context) {
  absl::StatusOr<std::string> text = ReadWholeFile(path, "the kubeconfig");
  if (!text.ok()) return text.status();
  absl::StatusOr<rapidjson::Document> config = ParseKubeconfig(*text, "kubeconfig " + path);
  if (!config.ok()) return config.status();
  const std::string base_dir = path.find('/') == std::string::npos
                                   ? "."
                                   : path.substr(0, path.rfind('/') == 0 ? 1 : path.rfind('/'));
  const std::string context_name =
      context.empty() ? JsonString(*config, "current-context") : context;
  if (context_name.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("kubeconfig ", path, " has no current-context: name one with --context"));
  }
  const rapidjson::Value* ctx = Named(*config, "contexts", context_name, "context");
  if (ctx == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("kubeconfig ", path, " has no context '", context_name, "'"));
  }
  const std::string where = absl::StrCat("kubeconfig ", path, " (context ", context_name, ")");
  KubeAccess access_out;
  if (absl::Status s =
          SetCluster(*config, JsonString(*ctx, "cluster"), base_dir, where, &access_out);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          SetUserCredentials(*config, JsonString(*ctx, "user"), base_dir, where, &access_out);
      !s.ok()) {
    return s;
  }
  access_out.default_namespace = JsonString(*ctx, "namespace");
  if (access_out.default_namespace.empty()) access_out.default_namespace = "default";
  access_out.source = where;
  return access_out;
}

}  // namespace

absl::StatusOr<KubeAccess> LoadKubeAccess(const std::string& kubeconfig,
                                          const std::string& context) {
  const std::string path = KubeconfigPath(kubeconfig);
  if (path.empty()) return InClusterAccess();
  return KubeconfigAccess(path, context);
}

KubernetesApi::KubernetesApi(KubeAccess access, absl::Duration timeout)
    : access_(std::move(access)), timeout_(timeout) {}

absl::StatusOr<rapidjson::Document> KubernetesApi::Get(const std::string& path) const {
  profd::HttpsRequest request;
  request.url = absl::StrCat(absl::StripSuffix(access_.server, "/"), path);
  request.bearer_token = access_.token;
  request.ca_pem = access_.ca_pem;
  request.insecure_skip_tls_verify = access_.insecure_skip_tls_verify;
  request.client_cert_pem = access_.client_cert_pem;
  request.client_key_pem = access_.client_key_pem;
  request.allow_plain_http = true;  // the kubeconfig's server, as kubectl takes it
  request.timeout = timeout_;
  request.max_answer_bytes = kMaxAnswerBytes;
  absl::StatusOr<profd::HttpsAnswer> answer = profd::SendHttps(request);
  if (!answer.ok()) {
    return absl::Status(
        answer.status().code(),
        absl::StrCat("the Kubernetes API server at ", access_.server, " (from ", access_.source,
                     ") did not answer: ", answer.status().message()));
  }
  const long code = answer->status;
  const std::string& body = answer->body;
  rapidjson::Document doc;
  doc.Parse(body.c_str(), body.size());
  const bool json = !doc.HasParseError() && doc.IsObject();
  if (code / 100 != 2) {
    // Kubernetes answers errors as a Status object with a message.
    const std::string message = profd::KubernetesErrorMessage(body);
    const std::string said =
        absl::StrCat("the Kubernetes API answered GET ", path, " with ", code, ": ", message);
    switch (code) {
      case 401:
        return absl::UnauthenticatedError(
            absl::StrCat(said, " (the credentials of ", access_.source, " were not accepted)"));
      case 403:
        return absl::PermissionDeniedError(
            absl::StrCat(said, " (", access_.source,
                         " may not read this; its user needs get/list on pods, "
                         "deployments and jobs in that namespace)"));
      case 404:
        return absl::NotFoundError(said);
      default:
        return absl::UnavailableError(said);
    }
  }
  if (!json) {
    return absl::DataLossError(absl::StrCat("the Kubernetes API answered GET ", path,
                                            " with something that is not a JSON object"));
  }
  return doc;
}

absl::StatusOr<std::string> LabelSelectorText(const rapidjson::Value& selector) {
  std::vector<std::string> parts;
  if (const rapidjson::Value* labels = JsonMember(selector, "matchLabels");
      labels != nullptr && labels->IsObject()) {
    for (const auto& m : labels->GetObject()) {
      if (!m.value.IsString()) continue;
      parts.push_back(absl::StrCat(m.name.GetString(), "=", m.value.GetString()));
    }
  }
  if (const rapidjson::Value* exprs = JsonMember(selector, "matchExpressions");
      exprs != nullptr && exprs->IsArray()) {
    for (const auto& e : exprs->GetArray()) {
      const std::string key = JsonString(e, "key"), op = JsonString(e, "operator");
      std::vector<std::string> values;
      if (const rapidjson::Value* v = JsonMember(e, "values"); v != nullptr && v->IsArray()) {
        for (const auto& x : v->GetArray()) {
          if (x.IsString()) values.push_back(x.GetString());
        }
      }
      if (op == "In") {
        parts.push_back(absl::StrCat(key, " in (", absl::StrJoin(values, ","), ")"));
      } else if (op == "NotIn") {
        parts.push_back(absl::StrCat(key, " notin (", absl::StrJoin(values, ","), ")"));
      } else if (op == "Exists") {
        parts.push_back(key);
      } else if (op == "DoesNotExist") {
        parts.push_back("!" + key);
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("selector operator '", op, "' of key '", key, "' is not Kubernetes'"));
      }
    }
  }
  if (parts.empty()) {
    return absl::InvalidArgumentError(
        "the workload's selector is empty: it would pick every pod of the namespace");
  }
  return absl::StrJoin(parts, ",");
}

absl::StatusOr<std::string> KubernetesApi::SelectorOf(const std::string& kind,
                                                      const std::string& name_space,
                                                      const std::string& name) const {
  const std::string path =
      kind == "job"
          ? absl::StrCat("/apis/batch/v1/namespaces/", Escape(name_space), "/jobs/", Escape(name))
          : absl::StrCat("/apis/apps/v1/namespaces/", Escape(name_space), "/deployments/",
                         Escape(name));
  absl::StatusOr<rapidjson::Document> object = Get(path);
  if (!object.ok()) {
    if (absl::IsNotFound(object.status())) {
      return absl::NotFoundError(absl::StrCat("no ", kind, " ", name, " in namespace ", name_space,
                                              " (", object.status().message(), ")"));
    }
    return object.status();
  }
  const rapidjson::Value* spec = JsonMember(*object, "spec");
  const rapidjson::Value* selector = spec != nullptr ? JsonMember(*spec, "selector") : nullptr;
  if (selector == nullptr) {
    return absl::DataLossError(
        absl::StrCat(kind, " ", name_space, "/", name, " has no spec.selector"));
  }
  absl::StatusOr<std::string> text = LabelSelectorText(*selector);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kind, " ", name_space, "/", name, ": ", text.status().message()));
  }
  return text;
}

absl::StatusOr<WorkloadPod> KubernetesApi::GetPod(const std::string& name_space,
                                                  const std::string& name) const {
  const std::string path =
      absl::StrCat("/api/v1/namespaces/", Escape(name_space), "/pods/", Escape(name));
  absl::StatusOr<rapidjson::Document> object = Get(path);
  if (!object.ok()) {
    if (absl::IsNotFound(object.status())) {
      return absl::NotFoundError(absl::StrCat("no pod ", name, " in namespace ", name_space, " (",
                                              object.status().message(), ")"));
    }
    return object.status();
  }
  if (JsonString(*object, "kind") != "Pod") {
    return absl::DataLossError(absl::StrCat("GET ", path, " did not answer a Pod"));
  }
  WorkloadPod pod = PodOf(*object, name_space);
  if (pod.name != name) {
    return absl::DataLossError(absl::StrCat("GET ", path, " answered another pod: ", pod.name));
  }
  return pod;
}

absl::StatusOr<std::vector<WorkloadPod>> KubernetesApi::ListPods(
    const std::string& name_space, const std::string& selector) const {
  std::vector<WorkloadPod> pods;
  std::string next;
  do {
    std::string path =
        absl::StrCat("/api/v1/namespaces/", Escape(name_space),
                     "/pods?labelSelector=", Escape(selector), "&limit=", kPodsPerPage);
    if (!next.empty()) absl::StrAppend(&path, "&continue=", Escape(next));
    absl::StatusOr<rapidjson::Document> list = Get(path);
    if (!list.ok()) return list.status();
    if (JsonString(*list, "kind") != "PodList") {
      return absl::DataLossError(absl::StrCat("GET ", path, " did not answer a PodList"));
    }
    if (const rapidjson::Value* items = JsonMember(*list, "items");
        items != nullptr && items->IsArray()) {
      for (const auto& item : items->GetArray()) {
        WorkloadPod pod = PodOf(item, name_space);
        if (!pod.name.empty()) pods.push_back(std::move(pod));
      }
    }
    const rapidjson::Value* meta = JsonMember(*list, "metadata");
    next = meta != nullptr ? JsonString(*meta, "continue") : "";
  } while (!next.empty());
  return pods;
}

}  // namespace profctl
