// Which Kubernetes pod a process is in, verified rather than claimed. A process's cgroup path
// names its pod's UID (process_identity.h; the kubelet made that cgroup, the process cannot
// choose it), and this directory maps the UID to the pod's namespace and name from a list of the
// node's pods that the API server (or the kubelet) serves. The POD_NAME / POD_NAMESPACE the
// process has in its environment are only its claim: where the two disagree, the verified one
// names its series and captures, and the claim is kept beside it to be shown.
//
// Threads: the directory fetches on a thread of its own (a fetch is network I/O, never done on
// the agent channel's I/O thread or a gRPC handler); Lookup and RequestRefresh are non-blocking
// and callable from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "profd/v1/profd.pb.h"

namespace profd {

struct PodName {
  std::string pod_namespace;
  std::string name;
  bool operator==(const PodName& other) const = default;
};

// items[].metadata of a v1 PodList (the API server's and the kubelet's /pods answer the same
// shape), by UID. A static pod is also found by the UID its cgroup carries, which is its config
// hash (annotation kubernetes.io/config.mirror on the API's mirror pod), not the mirror's UID.
absl::StatusOr<std::map<std::string, PodName>> ParsePodList(absl::string_view json);

class PodDirectory {
 public:
  struct Options {
    // https URL answering a v1 PodList with (at least) this node's pods.
    std::string url;
    std::string token_file;  // bearer token, read again for each fetch (tokens rotate); "": none
    std::string ca_file;     // PEM CA that signed the server's certificate; "": the system's
    absl::Duration timeout = absl::Seconds(10);
    // A UID not in the last list asks for a new one, at most this often.
    absl::Duration min_refresh_interval = absl::Seconds(2);
    // The list is fetched again this often even when no one asks (new pods' names, and the
    // deleted ones forgotten).
    absl::Duration refresh_interval = absl::Minutes(5);
    // A node's pod list is a few hundred KiB; more than this is refused.
    size_t max_answer_bytes = 64u << 20;
  };

  // The URL --kubernetes_pods=apiserver means inside a pod: the API server from
  // KUBERNETES_SERVICE_HOST/PORT, pods on `node_name` only.
  static absl::StatusOr<std::string> InClusterUrl(const std::string& node_name);

  explicit PodDirectory(Options options);
  ~PodDirectory();  // stops the thread
  PodDirectory(const PodDirectory&) = delete;
  PodDirectory& operator=(const PodDirectory&) = delete;

  // Starts the fetching thread; `on_refresh` is called on it after each list that succeeded
  // (and with no lock of the directory held), so callers re-resolve what was not yet known.
  void Start(std::function<void()> on_refresh);

  // Any thread, no I/O. nullopt: the UID is not in the last list (it asks for a new one).
  std::optional<PodName> Lookup(const std::string& pod_uid);

  // One fetch on the calling thread: for Start's thread and tests.
  absl::Status RefreshNow();

  // Why the last fetch failed ("" after a success), for status and logs.
  std::string last_error() const;
  const Options& options() const { return options_; }

 private:
  void Run(std::function<void()> on_refresh);
  absl::StatusOr<std::string> Fetch() const;

  const Options options_;
  mutable absl::Mutex mutex_;
  std::map<std::string, PodName> pods_ ABSL_GUARDED_BY(mutex_);
  bool refresh_wanted_ ABSL_GUARDED_BY(mutex_) = false;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::atomic<bool> abort_fetch_{false};  // set by the destructor: a fetch in flight ends now
  std::string last_error_ ABSL_GUARDED_BY(mutex_);
  std::thread thread_;
};

// Sets info's pod_name / pod_namespace / pod_identity from its pod_uid (from the cgroup) and its
// claimed_pod_name / claimed_pod_namespace (from the process's environment). `directory` null:
// no verification configured, the claim is used. Returns true when the verified pod differs
// from a non-empty claim (the caller logs it).
bool ResolvePod(PodDirectory* directory, v1::AgentInfo* info);

}  // namespace profd
