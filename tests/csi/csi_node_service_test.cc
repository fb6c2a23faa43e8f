// profd's CSI node plugin, called as the kubelet calls it (gRPC on a unix socket): a pod's
// csi.profd.dev volume is profd's folder, bind-mounted read-only; an agent in the pod reaches
// profd's socket through it; Kineto's folder comes writable; targets outside the kubelet's pod
// folder and unknown folders are refused with a reason; unpublishing unmounts and removes.
//
// Mounting needs CAP_SYS_ADMIN: the test moves itself into a mount namespace of its own first
// (every mount it makes disappears with it) and is skipped where that is not allowed.
#include "daemon/csi/csi_node_service.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "csi/v1/csi_node.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

namespace fs = std::filesystem;

bool IsMountRoot(const std::string& path) {
  struct statx st {};
  return statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &st) == 0 &&
         (st.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
}

// A listening unix socket at `path`; -1 on failure.
int Listen(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 4) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool Connects(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

class CsiNodeServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_reason_ = testing::EnterPrivateMountNamespace();  // before gRPC starts a thread
  }

  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    char tmpl[] = "/tmp/pcsi-XXXXXX";  // short: socket paths through it stay under 108 bytes
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    runtime_ = root_ + "/run";
    kineto_ = runtime_ + "/kineto";
    pods_ = root_ + "/pods";
    fs::create_directories(runtime_ + "/agent");
    fs::create_directories(kineto_);
    fs::create_directories(pods_ + "/" + kPodUid + "/v/profd");
    fs::create_directories(pods_ + "/" + kPodUid + "/v/profd-kineto");
    std::ofstream(runtime_ + "/agent/libprofagent.so") << "agent";
    chmod(kineto_.c_str(), 01777);

    CsiNodeOptions options;
    options.node_id = "gpu-node-7";
    options.runtime_dir = runtime_;
    options.kineto_dir = kineto_;
    options.target_root = pods_;
    publisher_ = std::make_unique<CsiVolumePublisher>(options);
    identity_ = std::make_unique<CsiIdentityService>(&publisher_->options());
    node_ = std::make_unique<CsiNodeService>(publisher_.get());
    grpc::ServerBuilder builder;
    const std::string address = "unix:" + root_ + "/csi.sock";
    builder.AddListeningPort(address, grpc::InsecureServerCredentials());
    builder.RegisterService(identity_.get());
    builder.RegisterService(node_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    identity_stub_ = csi::v1::Identity::NewStub(channel);
    node_stub_ = csi::v1::Node::NewStub(channel);
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    if (root_.empty()) return;
    for (const char* volume : {"profd", "profd-kineto"}) {
      std::string target = Target(volume);
      if (IsMountRoot(target)) umount2(target.c_str(), MNT_DETACH);
    }
    fs::remove_all(root_);
  }

  std::string Target(const std::string& volume) const {
    // The kubelet's is <pods>/<uid>/volumes/kubernetes.io~csi/<volume>/mount.
    return pods_ + "/" + kPodUid + "/v/" + volume + "/mount";
  }

  grpc::Status Publish(const std::string& target, const std::string& folder, bool readonly) {
    csi::v1::NodePublishVolumeRequest request;
    request.set_volume_id("csi-4b1f0e");
    request.set_target_path(target);
    request.set_readonly(readonly);
    auto& context = *request.mutable_volume_context();
    context["csi.storage.k8s.io/ephemeral"] = "true";
    context["csi.storage.k8s.io/pod.name"] = "llm-7f9c";
    context["csi.storage.k8s.io/pod.namespace"] = "serving";
    context["csi.storage.k8s.io/pod.uid"] = kPodUid;
    if (!folder.empty()) context["folder"] = folder;
    csi::v1::NodePublishVolumeResponse response;
    grpc::ClientContext ctx;
    return node_stub_->NodePublishVolume(&ctx, request, &response);
  }

  grpc::Status Unpublish(const std::string& target) {
    csi::v1::NodeUnpublishVolumeRequest request;
    request.set_volume_id("csi-4b1f0e");
    request.set_target_path(target);
    csi::v1::NodeUnpublishVolumeResponse response;
    grpc::ClientContext ctx;
    return node_stub_->NodeUnpublishVolume(&ctx, request, &response);
  }

  static constexpr char kPodUid[] = "5f0c8e1a-3b2d-4c6e-9f10-2a7b8c9d0e1f";
  static std::string skip_reason_;
  std::string root_, runtime_, kineto_, pods_;
  std::unique_ptr<CsiVolumePublisher> publisher_;
  std::unique_ptr<CsiIdentityService> identity_;
  std::unique_ptr<CsiNodeService> node_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<csi::v1::Identity::Stub> identity_stub_;
  std::unique_ptr<csi::v1::Node::Stub> node_stub_;
};

std::string CsiNodeServiceTest::skip_reason_;

TEST_F(CsiNodeServiceTest, RegistersAsTheDriverTheCsiDriverObjectNames) {
  csi::v1::GetPluginInfoResponse info;
  grpc::ClientContext c1;
  ASSERT_TRUE(identity_stub_->GetPluginInfo(&c1, {}, &info).ok());
  EXPECT_EQ(info.name(), "csi.profd.dev");
  EXPECT_FALSE(info.vendor_version().empty());
  csi::v1::ProbeResponse probe;
  grpc::ClientContext c2;
  ASSERT_TRUE(identity_stub_->Probe(&c2, {}, &probe).ok());
  EXPECT_TRUE(probe.ready().value());
  csi::v1::NodeGetInfoResponse node;
  grpc::ClientContext c3;
  ASSERT_TRUE(node_stub_->NodeGetInfo(&c3, {}, &node).ok());
  EXPECT_EQ(node.node_id(), "gpu-node-7");
}

TEST_F(CsiNodeServiceTest, ThePodGetsTheAgentReadOnlyAndReachesProfdsSocketThroughIt) {
  // Asked read-write: the agent folder is read-only all the same (every pod loads that library).
  const std::string target = Target("profd");
  grpc::Status published = Publish(target, "", /*readonly=*/false);
  ASSERT_TRUE(published.ok()) << published.error_message();
  EXPECT_TRUE(IsMountRoot(target));
  std::ifstream library(target + "/agent/libprofagent.so");
  std::string text;
  library >> text;
  EXPECT_EQ(text, "agent");
  int fd = open((target + "/agent/libprofagent.so").c_str(), O_WRONLY | O_CLOEXEC);
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(errno, EROFS);
  if (fd >= 0) close(fd);
  EXPECT_NE(mkdir((target + "/planted").c_str(), 0755), 0);

  // profd (re)binds its agent socket after the pod mounted the folder: the pod still reaches it.
  int listener = Listen(runtime_ + "/agent.sock");
  ASSERT_GE(listener, 0);
  EXPECT_TRUE(Connects(target + "/agent.sock"));
  close(listener);

  // The kubelet retries a publish: one mount, not two.
  ASSERT_TRUE(Publish(target, "", true).ok());
  ASSERT_TRUE(Unpublish(target).ok());
  EXPECT_FALSE(IsMountRoot(target));
  EXPECT_FALSE(fs::exists(target));
  EXPECT_TRUE(fs::exists(runtime_ + "/agent/libprofagent.so"));  // the source is untouched
  EXPECT_TRUE(Unpublish(target).ok());                           // and again: nothing to do
}

TEST_F(CsiNodeServiceTest, KinetoGetsItsFolderWritable) {
  const std::string target = Target("profd-kineto");
  grpc::Status published = Publish(target, "kineto", /*readonly=*/false);
  ASSERT_TRUE(published.ok()) << published.error_message();
  int pod_socket = Listen(target + "/dynolog-1234");  // Kineto binds its own socket there
  ASSERT_GE(pod_socket, 0) << std::strerror(errno);
  close(pod_socket);
  EXPECT_TRUE(fs::exists(kineto_ + "/dynolog-1234"));  // profd sees it in its own folder
  ASSERT_TRUE(Unpublish(target).ok());
}

TEST_F(CsiNodeServiceTest, TargetsOutsideTheKubeletsPodFolderAreRefused) {
  for (const std::string& target :
       {root_ + "/elsewhere", pods_ + "/../../etc", pods_ + "/" + kPodUid + "/./x", pods_,
        std::string("relative/path"), std::string()}) {
    grpc::Status status = Publish(target, "", true);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << target;
    if (!target.empty()) {
      EXPECT_NE(status.error_message().find("--csi_target_root"), std::string::npos)
          << status.error_message();
    }
    EXPECT_FALSE(IsMountRoot(target)) << target;
  }
  EXPECT_EQ(Unpublish(root_ + "/run").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(CsiNodeServiceTest, AnUnknownFolderIsRefusedWithTheOnesServed) {
  grpc::Status status = Publish(Target("profd"), "../../etc", true);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("\"kineto\""), std::string::npos) << status.error_message();
  EXPECT_FALSE(IsMountRoot(Target("profd")));
}

}  // namespace
}  // namespace profd
