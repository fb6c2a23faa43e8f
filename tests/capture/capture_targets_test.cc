// CaptureTargets: the agents and the PyTorch processes polling the Kineto socket, merged by pid,
// and the path a request takes to each, with a real AgentRegistry and a real KinetoIpcServer
// that the test process polls byte for byte as Kineto does.
#include "daemon/capture/capture_targets.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "absl/time/clock.h"
#include "daemon/kineto/kineto_wire.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using ::profd::testing::TempDir;
using ::profd::testing::WaitFor;
using ::testing::HasSubstr;

constexpr ConnectionId kConnection = 16;

class CaptureTargetsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kineto_ = std::make_unique<kineto::KinetoIpcServer>(
        kineto::KinetoIpcOptions{.socket_dir = dir_.File("kineto")});
    ASSERT_TRUE(kineto_->Start().ok());
    v1::Hello hello;
    hello.set_agent_version("0.2.0");
    registry_.Register(kConnection, static_cast<uint32_t>(getpid()),
                       static_cast<uint32_t>(getuid()), hello, absl::Now());
  }
  void Poll() {
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    sockaddr_un me{}, to{};
    me.sun_family = to.sun_family = AF_UNIX;
    const std::string mine = dir_.File("kineto/dynoconfigclient-test");
    std::memcpy(me.sun_path, mine.c_str(), mine.size() + 1);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&me), sizeof(me)), 0);
    std::memcpy(to.sun_path, kineto_->socket_path().c_str(), kineto_->socket_path().size() + 1);
    const std::string poll = kineto::EncodeKinetoRequest({3, 0, {getpid()}});
    ASSERT_GT(sendto(fd, poll.data(), poll.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
              0);
    ASSERT_TRUE(WaitFor([&] { return kineto_->Find(getpid()).has_value(); }, absl::Seconds(5)));
    close(fd);
  }
  absl::StatusOr<std::vector<CaptureTarget>> Resolve(v1::CapturePath path) {
    v1::CaptureRequest request;
    request.add_pids(static_cast<uint32_t>(getpid()));
    request.set_path(path);
    return targets_.Resolve(request, [](uint32_t) { return std::string(); });
  }

  TempDir dir_;
  AgentRegistry registry_;
  std::unique_ptr<kineto::KinetoIpcServer> kineto_;
  CaptureTargets targets_{&registry_, nullptr, "node", "/run/profd/agent.sock"};
};

TEST_F(CaptureTargetsTest, AProcessWithBothPathsIsListedOnceAndGoesThroughKinetoByDefault) {
  CaptureTargets targets(&registry_, kineto_.get(), "node", "agent.sock");
  Poll();
  std::vector<v1::AgentInfo> listed = targets.ListInfo();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_TRUE(listed[0].has_agent());
  EXPECT_TRUE(listed[0].kineto().polling());
  v1::CaptureRequest request;
  request.add_pids(static_cast<uint32_t>(getpid()));
  auto none = [](uint32_t) { return std::string(); };
  absl::StatusOr<std::vector<CaptureTarget>> auto_path = targets.Resolve(request, none);
  ASSERT_TRUE(auto_path.ok()) << auto_path.status();
  EXPECT_EQ((*auto_path)[0].path, v1::CAPTURE_PATH_KINETO);
  EXPECT_EQ((*auto_path)[0].connection, kConnection);
  request.set_path(v1::CAPTURE_PATH_CUPTI);
  absl::StatusOr<std::vector<CaptureTarget>> cupti = targets.Resolve(request, none);
  ASSERT_TRUE(cupti.ok()) << cupti.status();
  EXPECT_EQ((*cupti)[0].path, v1::CAPTURE_PATH_CUPTI);
}

TEST_F(CaptureTargetsTest, KinetoIsNotAskedWhileTheAgentSeesTorchProfilerTracing) {
  CaptureTargets targets(&registry_, kineto_.get(), "node", "agent.sock");
  Poll();
  v1::Heartbeat heartbeat;
  heartbeat.mutable_cupti_sharing()->set_mode(v1::CUPTI_SHARING_SHARED);
  heartbeat.mutable_cupti_sharing()->set_other_tracing(true);
  heartbeat.mutable_cupti_sharing()->set_other_tracer("torch.profiler (Kineto in libtorch_cpu.so)");
  registry_.Heartbeat(kConnection, heartbeat, absl::Now());
  v1::CaptureRequest request;
  request.add_pids(static_cast<uint32_t>(getpid()));
  absl::StatusOr<std::vector<CaptureTarget>> r =
      targets.Resolve(request, [](uint32_t) { return std::string(); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(),
              HasSubstr("torch.profiler (Kineto in libtorch_cpu.so) is tracing in this process"));
}

TEST_F(CaptureTargetsTest, WithoutAKinetoSocketTheAgentPathIsTheOnlyOne) {
  absl::StatusOr<std::vector<CaptureTarget>> r = Resolve(v1::CAPTURE_PATH_AUTO);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].path, v1::CAPTURE_PATH_CUPTI);
  absl::StatusOr<std::vector<CaptureTarget>> k = Resolve(v1::CAPTURE_PATH_KINETO);
  EXPECT_THAT(k.status().message(), HasSubstr("does not poll profd's Kineto socket"));
}

TEST_F(CaptureTargetsTest, AWorkloadsPodsPickTheirAgentsAndNoneFoundIsSaid) {
  // A fleet capture asks a node for the workload's pods there: those with agents are taken.
  v1::Hello hello;
  hello.set_agent_version("0.2.0");
  hello.set_pod_name("llm-0");
  hello.set_pod_namespace("serving");
  registry_.Register(kConnection, static_cast<uint32_t>(getpid()), static_cast<uint32_t>(getuid()),
                     hello, absl::Now());
  v1::CaptureRequest request;
  request.add_pods("serving/llm-0");
  request.add_pods("serving/llm-without-agent");
  absl::StatusOr<std::vector<CaptureTarget>> r =
      targets_.Resolve(request, [](uint32_t) { return std::string(); });
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].info.pod_name(), "llm-0");
  // The same name in another namespace is another pod.
  v1::CaptureRequest other;
  other.add_pods("training/llm-0");
  absl::StatusOr<std::vector<CaptureTarget>> none =
      targets_.Resolve(other, [](uint32_t) { return std::string(); });
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("no agent in any of the pods training/llm-0"));
}

}  // namespace
}  // namespace profd
