// The pod list that names a cgroup's pod UID: parsing the API server's recorded answers, fetching
// them over HTTPS with the service account's token from a stand-in API server (each failure a
// user can meet, with its reason), and the verified pod winning over the process's claim.
#include "daemon/agents/pod_directory.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/kubernetes_stand_in.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using profd::testing::KubernetesApiStandIn;
using profd::testing::ReadFileOrEmpty;
using profd::testing::SourcePath;

constexpr char kLlmUid[] = "8e3f4c2a-5b1d-4f6e-9a7c-0b2d4e6f8a1c";

std::string Fixture(const std::string& name) {
  return ReadFileOrEmpty(SourcePath("tests/fixtures/kubernetes/" + name));
}

TEST(ParsePodListTest, NamesEveryPodByUidAndStaticPodsByTheirHash) {
  absl::StatusOr<std::map<std::string, PodName>> pods =
      ParsePodList(Fixture("podlist-gpu-node-7.json"));
  ASSERT_TRUE(pods.ok()) << pods.status();
  EXPECT_EQ(pods->size(), 5u);  // four pods, the static one under both keys
  EXPECT_EQ(pods->at(kLlmUid), (PodName{"serving", "llm-7f9c-5d8b9"}));
  EXPECT_EQ(pods->at("2b7d9f1e-3c5a-4e8b-a0d2-6f4b8d0e2a3c"),
            (PodName{"serving", "llm-7f9c-k2x4q"}));
  EXPECT_EQ(pods->at("6d7d0b7f6d1b4c4e0a8c1a2b3c4d5e6f"),
            (PodName{"kube-system", "etcd-gpu-node-7"}));
  ASSERT_TRUE(ParsePodList(Fixture("podlist-empty-node.json")).ok());
  EXPECT_TRUE(ParsePodList(Fixture("podlist-empty-node.json"))->empty());
}

TEST(ParsePodListTest, SaysWhatCameInstead) {
  absl::StatusOr<std::map<std::string, PodName>> status =
      ParsePodList(Fixture("status-forbidden.json"));
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.status().message().find("expected a PodList, got Status: pods is forbidden"),
            std::string::npos)
      << status.status();
  absl::StatusOr<std::map<std::string, PodName>> garbage = ParsePodList("<html>");
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.status().message().find("not JSON"), std::string::npos) << garbage.status();
}

class PodDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override { Serve({}); }

  void Serve(const KubernetesApiStandIn::Options& options) {
    std::string error;
    api_ = KubernetesApiStandIn::Start(options, &error);
    if (api_ == nullptr && error.empty()) {
      GTEST_SKIP() << "needs /usr/bin/openssl and /usr/bin/python3 (scripts/setup.sh)";
    }
    ASSERT_NE(api_, nullptr) << error;
  }

  PodDirectory::Options Options() const {
    PodDirectory::Options options;
    options.url = api_->PodsUrl("gpu-node-7");
    options.token_file = api_->token_file();
    options.ca_file = api_->ca_file();
    options.timeout = absl::Seconds(10);
    return options;
  }

  std::unique_ptr<KubernetesApiStandIn> api_;
};

TEST_F(PodDirectoryTest, FetchesTheNodesPodsWithTheToken) {
  PodDirectory directory(Options());
  ASSERT_TRUE(directory.RefreshNow().ok()) << directory.last_error();
  EXPECT_EQ(directory.Lookup(kLlmUid), (PodName{"serving", "llm-7f9c-5d8b9"}));
  EXPECT_EQ(directory.Lookup("00000000-0000-4000-8000-000000000000"), std::nullopt);
  EXPECT_NE(api_->Requests().find("GET /api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-node-7 "
                                  "token-ok"),
            std::string::npos)
      << api_->Requests();
}

TEST_F(PodDirectoryTest, AnotherNodesListHasNoneOfThesePods) {
  PodDirectory::Options options = Options();
  options.url = api_->PodsUrl("gpu-node-8");
  PodDirectory directory(options);
  ASSERT_TRUE(directory.RefreshNow().ok()) << directory.last_error();
  EXPECT_EQ(directory.Lookup(kLlmUid), std::nullopt);
}

TEST_F(PodDirectoryTest, EachFailureSaysWhy) {
  {
    PodDirectory::Options options = Options();
    options.token_file = api_->token_file() + ".missing";
    absl::Status s = PodDirectory(options).RefreshNow();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("--kubernetes_token_file"), std::string::npos) << s;
  }
  {
    PodDirectory::Options options = Options();
    options.token_file = "";  // no token: 401
    absl::Status s = PodDirectory(options).RefreshNow();
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_NE(s.message().find("HTTP 401"), std::string::npos) << s;
  }
  {
    PodDirectory::Options options = Options();
    options.ca_file = api_->other_ca_file();  // a server profd cannot verify gets no token
    absl::Status s = PodDirectory(options).RefreshNow();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_NE(s.message().find("certificate"), std::string::npos) << s;
    EXPECT_EQ(api_->Requests().find("token-ok"), std::string::npos) << api_->Requests();
  }
  {
    PodDirectory::Options options = Options();
    options.url = "http://127.0.0.1:" + std::to_string(api_->port()) + "/api/v1/pods";
    absl::Status s = PodDirectory(options).RefreshNow();
    EXPECT_FALSE(s.ok());  // plain HTTP is never used: the token would travel in clear
  }
  {
    PodDirectory::Options options = Options();
    options.max_answer_bytes = 512;
    absl::Status s = PodDirectory(options).RefreshNow();
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  }
}

TEST_F(PodDirectoryTest, WithoutRbacTheListIsForbiddenAndSaysWhatToGrant) {
  Serve({.forbidden = true});
  PodDirectory directory(Options());
  absl::Status s = directory.RefreshNow();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("rbac.yaml"), std::string::npos) << s;
  EXPECT_EQ(directory.last_error(), std::string(s.message()));
}

v1::AgentInfo Claiming(const std::string& pod_uid, const std::string& ns, const std::string& name) {
  v1::AgentInfo info;
  info.set_pod_uid(pod_uid);
  info.set_claimed_pod_namespace(ns);
  info.set_claimed_pod_name(name);
  return info;
}

TEST_F(PodDirectoryTest, TheVerifiedPodWinsOverTheClaim) {
  PodDirectory directory(Options());
  ASSERT_TRUE(directory.RefreshNow().ok()) << directory.last_error();

  v1::AgentInfo honest = Claiming(kLlmUid, "serving", "llm-7f9c-5d8b9");
  EXPECT_FALSE(ResolvePod(&directory, &honest));
  EXPECT_EQ(honest.pod_identity(), v1::POD_IDENTITY_VERIFIED);
  EXPECT_EQ(honest.pod_name(), "llm-7f9c-5d8b9");

  v1::AgentInfo impostor = Claiming(kLlmUid, "kube-system", "etcd-gpu-node-7");
  EXPECT_TRUE(ResolvePod(&directory, &impostor));
  EXPECT_EQ(impostor.pod_identity(), v1::POD_IDENTITY_VERIFIED);
  EXPECT_EQ(impostor.pod_namespace(), "serving");
  EXPECT_EQ(impostor.pod_name(), "llm-7f9c-5d8b9");
  EXPECT_EQ(impostor.claimed_pod_name(), "etcd-gpu-node-7");  // kept, to be shown

  v1::AgentInfo unlabelled = Claiming(kLlmUid, "", "");  // no POD_NAME: named all the same
  EXPECT_FALSE(ResolvePod(&directory, &unlabelled));
  EXPECT_EQ(unlabelled.pod_name(), "llm-7f9c-5d8b9");

  v1::AgentInfo host = Claiming("", "serving", "llm-7f9c-5d8b9");  // not in a pod at all
  EXPECT_TRUE(ResolvePod(&directory, &host));
  EXPECT_EQ(host.pod_identity(), v1::POD_IDENTITY_NOT_IN_A_POD);
  EXPECT_EQ(host.pod_name(), "");

  v1::AgentInfo fresh = Claiming("00000000-0000-4000-8000-000000000000", "serving", "new-pod");
  EXPECT_FALSE(ResolvePod(&directory, &fresh));  // not in the list yet: shown, unverified
  EXPECT_EQ(fresh.pod_identity(), v1::POD_IDENTITY_UNVERIFIED);
  EXPECT_EQ(fresh.pod_name(), "new-pod");

  v1::AgentInfo unchecked = Claiming(kLlmUid, "kube-system", "etcd-gpu-node-7");
  EXPECT_FALSE(ResolvePod(nullptr, &unchecked));  // --kubernetes_pods=none: the claim, as said
  EXPECT_EQ(unchecked.pod_identity(), v1::POD_IDENTITY_CLAIMED);
  EXPECT_EQ(unchecked.pod_name(), "etcd-gpu-node-7");
}

TEST_F(PodDirectoryTest, AnUnknownUidAsksForANewListOnTheDirectorysThread) {
  PodDirectory::Options options = Options();
  options.min_refresh_interval = absl::Milliseconds(50);
  PodDirectory directory(options);
  std::atomic<int> refreshes{0};
  directory.Start([&refreshes] { ++refreshes; });
  ASSERT_TRUE(profd::testing::WaitFor([&] { return refreshes >= 1; }, absl::Seconds(20)));
  EXPECT_EQ(directory.Lookup(kLlmUid), (PodName{"serving", "llm-7f9c-5d8b9"}));
  EXPECT_EQ(directory.Lookup("00000000-0000-4000-8000-000000000000"), std::nullopt);
  EXPECT_TRUE(profd::testing::WaitFor([&] { return refreshes >= 2; }, absl::Seconds(20)));
}

}  // namespace
}  // namespace profd
