// Which container and pod a process is in, from /proc/<pid>/cgroup as the kubelet and the
// runtimes lay it out (tests/fixtures/cgroup/: cgroup v1 and v2, cgroupfs and systemd drivers,
// containerd and CRI-O, every QoS class, a cgroup namespace, a static pod), and what a process
// cannot fake: a pod named inside its own cgroup, a host service named like a pod.
#include "daemon/agents/process_identity.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using profd::testing::ReadFileOrEmpty;
using profd::testing::SourcePath;

constexpr char kUid[] = "8e3f4c2a-5b1d-4f6e-9a7c-0b2d4e6f8a1c";
constexpr char kContainer[] = "3f1c6a0e5b2d4e8f9a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f";

ProcessIdentity Parse(const std::string& sample) {
  const std::string text = ReadFileOrEmpty(SourcePath("tests/fixtures/cgroup/" + sample));
  EXPECT_FALSE(text.empty()) << sample;
  ProcessIdentity identity;
  ParseCgroup(text, &identity);
  return identity;
}

class PodCgroupTest : public ::testing::TestWithParam<const char*> {};

TEST_P(PodCgroupTest, GivesThePodUidAndTheContainer) {
  ProcessIdentity identity = Parse(GetParam());
  EXPECT_EQ(identity.pod_uid, kUid);
  EXPECT_EQ(identity.container_id, kContainer);
}

INSTANTIATE_TEST_SUITE_P(
    EveryLayout, PodCgroupTest,
    ::testing::Values("v1-cgroupfs-burstable.txt", "v1-systemd-besteffort.txt",
                      "v2-systemd-containerd-burstable.txt", "v2-systemd-crio-guaranteed.txt",
                      "v2-cgroupfs-guaranteed.txt", "v2-cgroupfs-besteffort.txt",
                      "v2-seen-through-cgroup-namespace.txt", "v2-nested-fake-pod.txt"));

TEST(ProcessIdentityTest, AStaticPodIsFoundByItsManifestHash) {
  ProcessIdentity identity = Parse("v2-static-pod.txt");
  EXPECT_EQ(identity.pod_uid, "6d7d0b7f6d1b4c4e0a8c1a2b3c4d5e6f");
  EXPECT_EQ(identity.container_id, kContainer);
}

TEST(ProcessIdentityTest, ProcessesOutsideKubernetesHaveNoPod) {
  EXPECT_EQ(Parse("v2-host-session.txt").pod_uid, "");
  EXPECT_EQ(Parse("v2-host-service-named-like-a-pod.txt").pod_uid, "");
  ProcessIdentity docker = Parse("v2-docker-not-kubernetes.txt");
  EXPECT_EQ(docker.pod_uid, "");
  EXPECT_EQ(docker.container_id, kContainer);
}

TEST(ProcessIdentityTest, MalformedUidsAreNotPods) {
  for (const char* text :
       {"0::/kubepods/burstable/pod8e3f4c2a-5b1d-4f6e-9a7c-0b2d4e6f8a1/x\n",      // 35 chars
        "0::/kubepods/burstable/pod8e3f4c2a-5b1d-4f6e-9a7c-0b2d4e6f8a1cz/x\n",    // 37
        "0::/kubepods/burstable/pod8e3f4c2a05b1d04f6e09a7c00b2d4e6f8a1c/x\n",     // no dashes
        "0::/kubepods/burstable/podzz3f4c2a-5b1d-4f6e-9a7c-0b2d4e6f8a1c/x\n",     // not hex
        "0::/kubepods.slice/kubepods-pod8e3f4c2a_5b1d_4f6e_9a7c_0b2d4e6f8a1c\n",  // no .slice
        "0::/\n", "", "garbage without colons\n"}) {
    ProcessIdentity identity;
    ParseCgroup(text, &identity);
    EXPECT_EQ(identity.pod_uid, "") << text;
  }
}

// The real file of a real process, read through ReadProcessIdentity, from a /proc laid out in a
// folder of the test's own.
TEST(ProcessIdentityTest, ReadsTheCgroupFileOfTheProcess) {
  profd::testing::TempDir proc;
  std::filesystem::create_directories(proc.File("4242"));
  std::filesystem::copy_file(SourcePath("tests/fixtures/cgroup/v1-systemd-besteffort.txt"),
                             proc.File("4242/cgroup"));
  std::ofstream(proc.File("4242/comm")) << "python3\n";
  absl::StatusOr<ProcessIdentity> identity = ReadProcessIdentity(4242, {}, proc.path());
  ASSERT_TRUE(identity.ok()) << identity.status();
  EXPECT_EQ(identity->pod_uid, kUid);
  EXPECT_EQ(identity->comm, "python3");
}

}  // namespace
}  // namespace profd
