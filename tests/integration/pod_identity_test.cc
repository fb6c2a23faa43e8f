// Which pod a process is in, verified end to end: a real profd that checks pods against a
// stand-in API server (HTTPS, the service account's token, a recorded PodList), real agents in
// child processes. One runs in a cgroup laid out as the kubelet lays out a pod's (made by the test
// under the host's cgroup tree, removed after) and claims, in its environment, to be another pod:
// profd names it by its cgroup, keeps and logs the claim, and `profctl capture --pod` finds it only
// under the verified name. One outside any pod claims a pod's name: it is in no pod.
// Skipped where the test cannot make cgroups (it needs a writable cgroup tree, as root).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/kubernetes_stand_in.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kLlmUid[] = "8e3f4c2a-5b1d-4f6e-9a7c-0b2d4e6f8a1c";
constexpr char kContainer[] = "3f1c6a0e5b2d4e8f9a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f";

// A pod's cgroup, /kubepods/burstable/pod<uid>/<container>, under a folder of the test's own in
// the host's cgroup tree (v1: the memory hierarchy; v2: the unified one).
class PodCgroup {
 public:
  bool Make(std::string* why) {
    const std::string base = fs::exists("/sys/fs/cgroup/memory/cgroup.procs")
                                 ? "/sys/fs/cgroup/memory"
                                 : "/sys/fs/cgroup";
    root_ = absl::StrCat(base, "/profd-pod-identity-test-", getpid());
    leaf_ = absl::StrCat(root_, "/kubepods/burstable/pod", kLlmUid, "/", kContainer);
    std::error_code error;
    fs::create_directories(leaf_, error);
    if (error || !fs::exists(leaf_ + "/cgroup.procs")) {
      *why = absl::StrCat("cannot make a cgroup under ", base, ": ", error.message());
      return false;
    }
    return true;
  }
  ~PodCgroup() {
    // Deepest first; a cgroup is removed with rmdir once its processes are gone.
    for (std::string dir = leaf_; !dir.empty() && dir.size() >= root_.size();
         dir = fs::path(dir).parent_path().string()) {
      rmdir(dir.c_str());
    }
  }
  const std::string& leaf() const { return leaf_; }

 private:
  std::string root_, leaf_;
};

const rapidjson::Value* FindAgent(const rapidjson::Document& doc, pid_t pid) {
  if (!doc.IsObject() || !doc.HasMember("agents")) return nullptr;
  for (const auto& a : doc["agents"].GetArray()) {
    if (a["pid"].GetUint() == static_cast<unsigned>(pid)) return &a;
  }
  return nullptr;
}

std::string Field(const rapidjson::Value& agent, const char* name) {
  return agent.HasMember(name) && agent[name].IsString() ? agent[name].GetString() : "";
}

TEST(PodIdentityTest, TheCgroupNamesThePodNotTheProcesssEnvironment) {
  PodCgroup cgroup;
  std::string why;
  if (!cgroup.Make(&why)) GTEST_SKIP() << why;
  std::string error;
  auto api = KubernetesApiStandIn::Start({}, &error);
  if (api == nullptr && error.empty())
    GTEST_SKIP() << "needs /usr/bin/openssl and /usr/bin/python3";
  ASSERT_NE(api, nullptr) << error;

  ProfdProcess profd({"--kubernetes_pods=" + api->PodsUrl("gpu-node-7"),
                      "--kubernetes_token_file=" + api->token_file(),
                      "--kubernetes_ca_file=" + api->ca_file(), "--node_name=gpu-node-7"});
  profd.Start();

  // In the pod's cgroup (it moves itself there before the agent starts), claiming a static pod
  // of kube-system.
  const std::string replay = BuildPath("tests/integration/replay_agent");
  const std::string batches = SourcePath("tests/fixtures/burst_1000_kernels.batches.pb");
  Subprocess impostor({"/bin/sh", "-c", "echo $$ > \"$0\" && exec \"$1\" \"$2\"",
                       cgroup.leaf() + "/cgroup.procs", replay, batches},
                      {{"PROFD_AGENT_SOCKET", profd.agent_socket()},
                       {"POD_NAME", "etcd-gpu-node-7"},
                       {"POD_NAMESPACE", "kube-system"}});
  // Outside any pod, claiming one of the serving pods.
  Subprocess outsider({replay, batches}, {{"PROFD_AGENT_SOCKET", profd.agent_socket()},
                                          {"POD_NAME", "llm-7f9c-k2x4q"},
                                          {"POD_NAMESPACE", "serving"}});

  auto both_listed = [&] {
    rapidjson::Document doc = profd.ProfctlJson({"agents"});
    return FindAgent(doc, impostor.pid()) != nullptr && FindAgent(doc, outsider.pid()) != nullptr;
  };
  ASSERT_TRUE(WaitFor(both_listed, absl::Seconds(20))) << profd.log();
  rapidjson::Document doc = profd.ProfctlJson({"agents"});
  const rapidjson::Value& in_pod = *FindAgent(doc, impostor.pid());
  EXPECT_EQ(Field(in_pod, "pod_uid"), kLlmUid);
  EXPECT_EQ(Field(in_pod, "container_id"), kContainer);
  EXPECT_EQ(Field(in_pod, "pod_namespace"), "serving");
  EXPECT_EQ(Field(in_pod, "pod_name"), "llm-7f9c-5d8b9");
  EXPECT_EQ(Field(in_pod, "pod_identity"), "POD_IDENTITY_VERIFIED");
  EXPECT_EQ(Field(in_pod, "claimed_pod_namespace"), "kube-system");
  EXPECT_EQ(Field(in_pod, "claimed_pod_name"), "etcd-gpu-node-7");

  const rapidjson::Value& outside = *FindAgent(doc, outsider.pid());
  EXPECT_EQ(Field(outside, "pod_name"), "");
  EXPECT_EQ(Field(outside, "pod_identity"), "POD_IDENTITY_NOT_IN_A_POD");
  EXPECT_EQ(Field(outside, "claimed_pod_name"), "llm-7f9c-k2x4q");

  // The disagreement is in profd's log, with both names.
  EXPECT_NE(profd.log().find("pod serving/llm-7f9c-5d8b9 (uid " + std::string(kLlmUid) +
                             "), verified; it claims kube-system/etcd-gpu-node-7"),
            std::string::npos)
      << profd.log();
  EXPECT_NE(profd.log().find("pod none (its cgroup names no pod), verified; it claims "
                             "serving/llm-7f9c-k2x4q"),
            std::string::npos)
      << profd.log();
  EXPECT_NE(api->Requests().find("token-ok"), std::string::npos) << api->Requests();

  // profctl agents: the verified pod in the table, the claim in a note below it.
  RunResult table = profd.Profctl({"agents"});
  EXPECT_NE(table.out.find(absl::StrCat("pid ", impostor.pid(),
                                        ": its environment claims pod kube-system/etcd-gpu-node-7; "
                                        "its cgroup puts it in serving/llm-7f9c-5d8b9 (verified")),
            std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find(absl::StrCat("pid ", outsider.pid(),
                                        ": its environment claims pod serving/llm-7f9c-k2x4q; "
                                        "its cgroup is in no pod (verified)")),
            std::string::npos)
      << table.out;

  RunResult status = profd.Profctl({"status"});
  EXPECT_NE(status.out.find("pods:              verified: cgroup pod UID -> https://127.0.0.1:"),
            std::string::npos)
      << status.out;

  // Captures by pod go by the verified name: the claimed one finds no process.
  RunResult claimed = profd.Profctl(
      {"capture", "--pod", "etcd-gpu-node-7", "-n", "kube-system", "--duration", "100ms"});
  EXPECT_NE(claimed.exit_code, 0) << claimed.out;
  RunResult claimed_by_outsider =
      profd.Profctl({"capture", "--pod", "llm-7f9c-k2x4q", "-n", "serving", "--duration", "100ms"});
  EXPECT_NE(claimed_by_outsider.exit_code, 0) << claimed_by_outsider.out;
  RunResult verified = profd.Profctl(
      {"--json", "capture", "--pod", "llm-7f9c-5d8b9", "-n", "serving", "--duration", "200ms"});
  EXPECT_EQ(verified.exit_code, 0) << verified.out << verified.err;
  EXPECT_NE(verified.out.find(std::to_string(impostor.pid())), std::string::npos) << verified.out;

  impostor.Kill();
  outsider.Kill();
}

}  // namespace
}  // namespace profd::testing
