// The Kubernetes authorizer against the API server's stand-in (tests/support/
// kubernetes_api_stand_in.py, users and RBAC bindings from tests/fixtures/kubernetes/users.json):
// who a token is, what RBAC allows that user per namespace, the reasons a refusal gives, the
// identity kept for its minute, and an API server that cannot be asked allowing nothing.
#include "common/kubernetes_authorizer.h"

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/support/kubernetes_stand_in.h"

namespace profd {
namespace {

using profd::testing::KubernetesApiStandIn;

constexpr char kAlice[] = "fleet-test-token-3f9a";  // group sre: captures in serving
constexpr char kBob[] = "bob-token-8c21";           // captures in training only

int Count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

class KubernetesAuthorizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    api_ = KubernetesApiStandIn::Start({}, &error);
    if (api_ == nullptr && error.empty()) {
      GTEST_SKIP() << "needs /usr/bin/openssl and /usr/bin/python3 (scripts/setup.sh)";
    }
    ASSERT_NE(api_, nullptr) << error;
  }

  KubernetesAuthorizer::Options Options() const {
    KubernetesAuthorizer::Options options;
    options.server = api_->Url();
    options.token_file = api_->token_file();
    options.ca_file = api_->ca_file();
    return options;
  }

  std::unique_ptr<KubernetesApiStandIn> api_;
};

TEST_F(KubernetesAuthorizerTest, TheApiServerNamesTheUserAndRbacDecidesPerNamespace) {
  KubernetesAuthorizer authorizer(Options());
  absl::StatusOr<KubernetesCaller> alice = authorizer.Authenticate(kAlice);
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(alice->user, "alice@example.com");
  EXPECT_EQ(alice->uid, "2f7c1b9e-0d6a-4c3e-9a51-7b8e4f0c2d13");
  EXPECT_EQ(alice->groups, (std::vector<std::string>{"sre", "system:authenticated"}));
  EXPECT_EQ(alice->extra.at("authentication.kubernetes.io/credential-id").size(), 1u);
  EXPECT_TRUE(authorizer.Authorize(*alice, "serving").ok());

  absl::Status training = authorizer.Authorize(*alice, "training");
  EXPECT_EQ(training.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(training.message(),
            "alice@example.com may not create captures.profd.dev in namespace training: a "
            "RoleBinding to the profd-capturer ClusterRole there grants it");
  // A process in no pod needs the right cluster-wide.
  absl::Status host = authorizer.Authorize(*alice, "");
  EXPECT_EQ(host.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(host.message(), "cluster-wide")) << host;

  absl::StatusOr<KubernetesCaller> bob = authorizer.Authenticate(kBob);
  ASSERT_TRUE(bob.ok()) << bob.status();
  EXPECT_TRUE(authorizer.Authorize(*bob, "training").ok());
  EXPECT_EQ(authorizer.Authorize(*bob, "serving").code(), absl::StatusCode::kPermissionDenied);
  // Each review went to the API server with profd's own token.
  const std::string requests = api_->Requests();
  EXPECT_EQ(Count(requests, "POST /apis/authentication.k8s.io/v1/tokenreviews token-ok"), 2)
      << requests;
  EXPECT_EQ(Count(requests, "POST /apis/authorization.k8s.io/v1/subjectaccessreviews token-ok"), 5)
      << requests;
}

TEST_F(KubernetesAuthorizerTest, ATokenIsReviewedOnceAMinuteAndAnUnknownOneIsRefused) {
  KubernetesAuthorizer authorizer(Options());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(authorizer.Authenticate(kAlice).ok());
  EXPECT_EQ(Count(api_->Requests(), "tokenreviews"), 1) << api_->Requests();

  absl::StatusOr<KubernetesCaller> stolen = authorizer.Authenticate("not-a-token");
  EXPECT_EQ(stolen.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(absl::StrContains(stolen.status().message(),
                                "does not accept this token ([invalid bearer token"))
      << stolen.status();
  // A refusal is not remembered as an identity: the next try asks again.
  EXPECT_FALSE(authorizer.Authenticate("not-a-token").ok());
  EXPECT_EQ(Count(api_->Requests(), "tokenreviews"), 3) << api_->Requests();
}

TEST_F(KubernetesAuthorizerTest, AnApiServerThatCannotBeAskedAllowsNothing) {
  // profd's own token refused (its service account deleted): no review, no capture.
  KubernetesAuthorizer::Options wrong_token = Options();
  wrong_token.token_file = api_->ca_file();  // not a token the API server knows
  absl::StatusOr<KubernetesCaller> a = KubernetesAuthorizer(wrong_token).Authenticate(kAlice);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(a.status().message(), "with 401")) << a.status();

  // A server whose certificate the CA did not sign.
  KubernetesAuthorizer::Options wrong_ca = Options();
  wrong_ca.ca_file = api_->other_ca_file();
  absl::StatusOr<KubernetesCaller> b = KubernetesAuthorizer(wrong_ca).Authenticate(kAlice);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();

  // Nobody there.
  KubernetesAuthorizer::Options nobody = Options();
  nobody.server = "https://127.0.0.1:1";
  nobody.timeout = absl::Seconds(2);
  absl::StatusOr<KubernetesCaller> c = KubernetesAuthorizer(nobody).Authenticate(kAlice);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(c.status().message(), "cannot be asked")) << c.status();
}

}  // namespace
}  // namespace profd
