// A CUPTI client loaded with dlopen after the agent started, bound lazily and without RELRO: its
// PLT slots still point at its own lazy-binding stubs until the first call.
#include <cupti.h>

namespace {
CUpti_SubscriberHandle g_subscriber = nullptr;
void CUPTIAPI Callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}
}  // namespace

extern "C" __attribute__((visibility("default"))) int fakelazy_subscribe(void) {
  return cuptiSubscribe(&g_subscriber, &Callback, nullptr);
}

extern "C" __attribute__((visibility("default"))) int fakelazy_unsubscribe(void) {
  CUptiResult r = cuptiUnsubscribe(g_subscriber);
  g_subscriber = nullptr;
  return r;
}
