// The GOT patcher against real shared objects: libfake_kineto.so (full RELRO, bound at load) and
// libfake_lazy_client.so (lazy binding, loaded later with dlopen), both calling a fake
// libcupti.so.13 through their PLT.
#include "agent/interpose/got_patcher.h"

#include <dlfcn.h>

#include <atomic>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/cupti_fakes/fake_cupti.h"

namespace profagent {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;

std::atomic<int> g_first_calls{0};
std::atomic<int> g_second_calls{0};

CUptiResult CUPTIAPI FirstSubscribe(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) {
  g_first_calls.fetch_add(1);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI SecondSubscribe(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) {
  g_second_calls.fetch_add(1);
  return CUPTI_SUCCESS;
}

void* RealSubscribe() {
  void* lib = dlopen("libcupti.so.13", RTLD_LAZY | RTLD_NOLOAD);
  EXPECT_NE(lib, nullptr);
  return dlsym(lib, "cuptiSubscribe");
}

GotPatcher MakePatcher(void* replacement) {
  // This test binary plays the agent: never patched.
  return GotPatcher({{"cuptiSubscribe", replacement, RealSubscribe()}},
                    {reinterpret_cast<const void*>(&FirstSubscribe)});
}

const GotPatcher::ObjectReport* Find(const std::vector<GotPatcher::ObjectReport>& report,
                                     const std::string& suffix) {
  for (const auto& o : report) {
    if (o.path.size() >= suffix.size() &&
        o.path.compare(o.path.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return &o;
    }
  }
  return nullptr;
}

class GotPatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fakecupti_reset();
    fakekineto_reset();
    g_first_calls = g_second_calls = 0;
  }
};

TEST_F(GotPatcherTest, RedirectsCallsAndTakenAddressesOfAFullRelroLibrary) {
  void* real = RealSubscribe();
  ASSERT_EQ(fakekineto_subscribe_address(), real);
  GotPatcher patcher = MakePatcher(reinterpret_cast<void*>(&FirstSubscribe));
  patcher.Scan();

  // GLOB_DAT (the address Kineto takes) and JUMP_SLOT (its calls), in RELRO pages.
  EXPECT_EQ(fakekineto_subscribe_address(), reinterpret_cast<void*>(&FirstSubscribe));
  fakekineto_init();
  EXPECT_EQ(g_first_calls.load(), 1);
  EXPECT_EQ(fakecupti_subscribers(), 0);  // the real one never saw it

  std::vector<GotPatcher::ObjectReport> report = patcher.Report();
  const GotPatcher::ObjectReport* kineto = Find(report, "libfake_kineto.so");
  ASSERT_NE(kineto, nullptr);
  EXPECT_GE(kineto->slots, 1u);
  EXPECT_EQ(kineto->problem, "");
  // libcupti itself and this binary (the agent) import or define it, and are left alone.
  EXPECT_EQ(Find(report, "libcupti.so.13"), nullptr);
  EXPECT_EQ(Find(report, "got_patcher_unittest"), nullptr);

  patcher.RestoreAll();
  EXPECT_EQ(fakekineto_subscribe_address(), real);
  EXPECT_EQ(fakekineto_init(), CUPTI_SUCCESS);
  EXPECT_EQ(g_first_calls.load(), 1);
  EXPECT_EQ(fakecupti_subscribers(), 1);
}

TEST_F(GotPatcherTest, NeverPatchesTheObjectsItIsToldToLeaveAlone) {
  GotPatcher patcher(
      {{"cuptiSubscribe", reinterpret_cast<void*>(&FirstSubscribe), RealSubscribe()}},
      {reinterpret_cast<const void*>(&FirstSubscribe),
       reinterpret_cast<const void*>(&fakekineto_init)});
  patcher.Scan();
  EXPECT_EQ(fakekineto_subscribe_address(), RealSubscribe());
  std::vector<GotPatcher::ObjectReport> report = patcher.Report();
  EXPECT_EQ(Find(report, "libfake_kineto.so"), nullptr);
}

TEST_F(GotPatcherTest, PatchesALazyLibraryLoadedLaterAtTheNextScan) {
  GotPatcher patcher = MakePatcher(reinterpret_cast<void*>(&FirstSubscribe));
  patcher.Scan();
  void* lib = dlopen(FAKE_LAZY_CLIENT_PATH, RTLD_LAZY | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto subscribe = reinterpret_cast<fakelazy_subscribe_fn>(dlsym(lib, "fakelazy_subscribe"));
  auto unsubscribe = reinterpret_cast<fakelazy_unsubscribe_fn>(dlsym(lib, "fakelazy_unsubscribe"));
  ASSERT_NE(subscribe, nullptr);

  // Not called yet: its PLT slot still leads to its own lazy-binding stub, which is patched too.
  patcher.Scan();
  EXPECT_EQ(subscribe(), CUPTI_SUCCESS);
  EXPECT_EQ(g_first_calls.load(), 1);
  EXPECT_EQ(fakecupti_subscribers(), 0);
  std::vector<GotPatcher::ObjectReport> report = patcher.Report();
  const GotPatcher::ObjectReport* late = Find(report, "libfake_lazy_client.so");
  ASSERT_NE(late, nullptr);
  EXPECT_EQ(late->slots, 1u);

  patcher.RestoreAll();
  EXPECT_EQ(subscribe(), CUPTI_SUCCESS);  // the real (fake) CUPTI again, through the resolver
  EXPECT_EQ(fakecupti_subscribers(), 1);
  EXPECT_EQ(unsubscribe(), CUPTI_SUCCESS);
  dlclose(lib);
}

TEST_F(GotPatcherTest, LeavesASlotAnotherInterposerOwnsAndSaysSo) {
  GotPatcher other = MakePatcher(reinterpret_cast<void*>(&SecondSubscribe));
  other.Scan();
  ASSERT_EQ(fakekineto_subscribe_address(), reinterpret_cast<void*>(&SecondSubscribe));

  GotPatcher ours = MakePatcher(reinterpret_cast<void*>(&FirstSubscribe));
  ours.Scan();
  EXPECT_EQ(fakekineto_subscribe_address(), reinterpret_cast<void*>(&SecondSubscribe));
  fakekineto_init();
  EXPECT_EQ(g_second_calls.load(), 1);
  EXPECT_EQ(g_first_calls.load(), 0);
  std::vector<GotPatcher::ObjectReport> report = ours.Report();
  const GotPatcher::ObjectReport* kineto = Find(report, "libfake_kineto.so");
  ASSERT_NE(kineto, nullptr);
  EXPECT_EQ(kineto->slots, 0u);
  EXPECT_THAT(kineto->problem, HasSubstr("cuptiSubscribe already leads to"));
  EXPECT_THAT(kineto->problem, HasSubstr("got_patcher_unittest"));
  other.RestoreAll();
}

TEST_F(GotPatcherTest, PutsBackASlotALazyResolverWroteOver) {
  GotPatcher patcher = MakePatcher(reinterpret_cast<void*>(&FirstSubscribe));
  patcher.Scan();
  // What a lazy-binding resolver racing the first patch would do: write the real address back.
  GotPatcher resolver(
      {{"cuptiSubscribe", RealSubscribe(), reinterpret_cast<void*>(&FirstSubscribe)}},
      {reinterpret_cast<const void*>(&FirstSubscribe)});
  resolver.Scan();
  ASSERT_EQ(fakekineto_subscribe_address(), RealSubscribe());
  for (int i = 0; i < 8; ++i) patcher.Scan();  // the periodic check
  EXPECT_EQ(fakekineto_subscribe_address(), reinterpret_cast<void*>(&FirstSubscribe));
  patcher.RestoreAll();
}

}  // namespace
}  // namespace profagent
