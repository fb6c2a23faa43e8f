// Test controls of the fake libcupti.so.13 (fake_cupti.cc) and of the fake CUPTI clients
// (fake_kineto.cc: calls CUPTI through its PLT with full RELRO; fake_lazy_client.cc: lazy binding,
// loaded with dlopen by the tests).
#pragma once

#include <cupti.h>

#include <cstdint>

extern "C" {

// fake_cupti.cc
void fakecupti_reset(void);
void fakecupti_set_version(uint32_t version);  // 130200+: honours allowMultipleSubscribers
int fakecupti_fire(int domain, int cbid);      // calls every subscriber that enabled it; how many
int fakecupti_record(int kind, uint64_t tag);  // one activity record, if the kind is enabled
uint64_t fakecupti_record_tag(const CUpti_Activity* record);
uint64_t fakecupti_record_timestamp(const CUpti_Activity* record);  // 42: CUPTI's default source
int fakecupti_subscribers(void);
// The callback and userdata CUPTI would call for the index-th live subscriber; 0 when none.
int fakecupti_subscriber_callback(int index, CUpti_CallbackFunc* callback, void** userdata);
int fakecupti_kind_enabled(int kind);
// cuptiActivityEnableRuntimeApi/DriverApi: how many calls of a domain are not recorded, and
// whether one is (a driver call without CUPTI_ACTIVITY_KIND_DRIVER: only if picked one by one).
int fakecupti_quiet_apis(int domain);
int fakecupti_api_recorded(int domain, int cbid);
int fakecupti_all_sync_records(void);  // cuptiActivityEnableAllSyncRecords, 1 by default
int fakecupti_callback_enabled(int domain, int cbid);
int fakecupti_dropped(void);
// A record CUPTI dropped for want of a buffer (outside any capture); agent_host calls these.
int fakecupti_drop_one(void);
int fakecupti_record_api_call(void);  // one runtime-API record, if the kind is on
int fakecupti_finalizes(void);
int fakecupti_last_allow_multiple(void);
const char* fakecupti_log(void);  // "subscribe:profd,enable:10,flush:forced,..."
void fakecupti_clear_log(void);

// fake_kineto.cc: what Kineto (PyTorch 2.11) does with CUPTI.
void fakekineto_reset(void);
int fakekineto_init(void);  // cuptiSubscribe + RESOURCE CONTEXT_CREATED, as setupCuptiInitCallback
int fakekineto_subscribe_v2(const char* name, char* old_name, size_t old_size);
int fakekineto_enable_domain(int domain);
int fakekineto_start(int kind);      // cuptiActivityRegisterCallbacks + cuptiActivityEnable
int fakekineto_stop(int kind);       // cuptiActivityDisable + cuptiActivityFlushAll(FORCED)
int fakekineto_start_session(void);  // the same for CONCURRENT_KERNEL
int fakekineto_register_tsc(void);   // its timestamp source (7777, "TSC ticks"), as at each start
uint64_t fakekineto_last_timestamp(void);
int fakekineto_stop_session(void);
int fakekineto_disable(int kind);
int fakekineto_unsubscribe(void);
int fakekineto_finalize(void);
void fakekineto_teardown_in_next_callback(void);  // TEARDOWN_CUPTI: unsubscribe + finalize there
int fakekineto_teardown_result(void);             // -1 until it ran, then cuptiFinalize's result
int fakekineto_callbacks(int domain, int cbid);
int fakekineto_bad_userdata(void);  // callbacks that came with another userdata than its own
int fakekineto_records(void);       // activity records it got back in its buffers
uint64_t fakekineto_last_tag(void);
int fakekineto_buffers_out(void);
void* fakekineto_subscribe_address(void);  // &cuptiSubscribe as Kineto sees it (its GOT)
int fakekineto_get_state(int domain, int cbid);

// fake_lazy_client.cc (dlopen'ed): lazy binding, no RELRO.
typedef int (*fakelazy_subscribe_fn)(void);
typedef int (*fakelazy_unsubscribe_fn)(void);
}
