// An application pod's agent reaches a real profd through the CSI volume profd mounts for it: the
// test plays the kubelet (NodePublishVolume on profd's --csi_socket, as for a pod's inline
// csi.profd.dev volume), then starts a real agent whose only way to profd is the socket inside
// that volume. And profd refuses a CSI plugin that would show pods its control socket.
// Mounting needs CAP_SYS_ADMIN: the test and the profd it starts live in a mount namespace of the
// test's own; skipped where that is not allowed.

#include <filesystem>
#include <string>

#include "csi/v1/csi_node.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/support/profd_process.h"
#include "tests/support/subprocess.h"

namespace profd::testing {
namespace {

constexpr char kPodUid[] = "5f0c8e1a-3b2d-4c6e-9f10-2a7b8c9d0e1f";

class CsiVolumeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_reason_ = EnterPrivateMountNamespace();  // before any thread starts
  }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  }
  static std::string skip_reason_;
};

std::string CsiVolumeTest::skip_reason_;

TEST_F(CsiVolumeTest, AnAgentInThePodReachesProfdThroughItsVolume) {
  TempDir node;  // the node: profd's runtime folder, the kubelet's pod folder, the CSI socket
  const std::string runtime = node.File("run");
  const std::string pods = node.File("pods");
  const std::string target = pods + "/" + kPodUid + "/v/profd/mount";
  std::filesystem::create_directories(pods + "/" + kPodUid + "/v/profd");
  ProfdProcess profd;
  profd.AddFlags({"--runtime_dir=" + runtime,
                  "--grpc_socket=" + profd.runtime_dir() + "/profd.sock",
                  "--csi_socket=" + node.File("csi.sock"), "--csi_target_root=" + pods});
  profd.Start();

  auto channel =
      grpc::CreateChannel("unix:" + node.File("csi.sock"), grpc::InsecureChannelCredentials());
  auto identity = csi::v1::Identity::NewStub(channel);
  csi::v1::GetPluginInfoResponse info;
  grpc::ClientContext info_context;
  ASSERT_TRUE(identity->GetPluginInfo(&info_context, {}, &info).ok()) << profd.log();
  EXPECT_EQ(info.name(), "csi.profd.dev");

  auto node_stub = csi::v1::Node::NewStub(channel);
  csi::v1::NodePublishVolumeRequest publish;
  publish.set_volume_id("csi-7e2a");
  publish.set_target_path(target);
  (*publish.mutable_volume_context())["csi.storage.k8s.io/pod.name"] = "llm-7f9c-5d8b9";
  (*publish.mutable_volume_context())["csi.storage.k8s.io/pod.namespace"] = "serving";
  (*publish.mutable_volume_context())["csi.storage.k8s.io/pod.uid"] = kPodUid;
  csi::v1::NodePublishVolumeResponse published;
  grpc::ClientContext publish_context;
  grpc::Status status = node_stub->NodePublishVolume(&publish_context, publish, &published);
  ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << profd.log();
  // What the pod sees: the agent socket, and not profd's control socket or its captures.
  EXPECT_TRUE(std::filesystem::exists(target + "/agent.sock"));
  EXPECT_FALSE(std::filesystem::exists(target + "/profd.sock"));
  EXPECT_FALSE(std::filesystem::exists(target + "/captures"));

  auto agent = std::make_unique<Subprocess>(
      std::vector<std::string>{BuildPath("tests/integration/replay_agent"),
                               SourcePath("tests/fixtures/burst_1000_kernels.batches.pb")},
      std::map<std::string, std::string>{{"PROFD_AGENT_SOCKET", target + "/agent.sock"}});
  EXPECT_TRUE(WaitFor([&] { return Registered(profd, agent->pid()); }, absl::Seconds(20)))
      << profd.log();
  RunResult capture =
      profd.Profctl({"capture", "--pid", std::to_string(agent->pid()), "--duration", "200ms"});
  EXPECT_EQ(capture.exit_code, 0) << capture.out << capture.err;
  agent->Kill();

  csi::v1::NodeUnpublishVolumeRequest unpublish;
  unpublish.set_volume_id("csi-7e2a");
  unpublish.set_target_path(target);
  csi::v1::NodeUnpublishVolumeResponse unpublished;
  grpc::ClientContext unpublish_context;
  ASSERT_TRUE(node_stub->NodeUnpublishVolume(&unpublish_context, unpublish, &unpublished).ok());
  EXPECT_FALSE(std::filesystem::exists(target));
  profd.Stop();
}

TEST_F(CsiVolumeTest, ProfdRefusesToMountAFolderHoldingItsControlSocket) {
  TempDir node;
  RunResult r = profd::testing::Run(
      {BuildPath("daemon/profd"), "--runtime_dir=" + node.File("run"),
       "--grpc_socket=" + node.File("run/profd.sock"), "--metrics_address=none",
       "--capture_dir=" + node.File("captures"), "--spool_dir=" + node.File("spool"),
       "--store=file://" + node.File("store"), "--csi_socket=" + node.File("csi.sock"),
       "--csi_target_root=" + node.File("pods")},
      {}, absl::Seconds(20));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--grpc_socket=" + node.File("run/profd.sock") + " is inside --runtime_dir"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace profd::testing
