// The one owner of CUPTI in the process, shared between the agent (its counters and captures) and
// the other CUPTI clients of the process: torch.profiler's Kineto above all.
//
// CUPTI 13.0 allows one callback subscriber per process and one pair of activity buffer callbacks,
// both process-wide. Kineto (PyTorch 2.11) subscribes at its first use and keeps the subscriber
// for the life of the process, and gives up CUDA tracing for good when it cannot; the agent's
// counters need a subscriber too. So the agent interposes the CUPTI entry points the other
// libraries import (GotPatcher: their GOT slots for cuptiSubscribe, cuptiEnableCallback,
// cuptiActivityEnable, ... point here) and:
//
//  - Subscribers. The broker holds the one real subscriber; each other client gets a subscriber
//    of its own (a "virtual" handle) whose callbacks the broker dispatches: only the domains and
//    callback ids that client enabled, with its userdata. CUPTI's switches are the union of what
//    every client enabled. With CUPTI 13.2+ (CUpti_SubscriberParams.allowMultipleSubscribers,
//    detected at run time from cuptiGetVersion) other clients get real subscribers instead and
//    CUPTI dispatches; virtual ones remain the fall-back.
//  - Activity tracing. The activity kinds and buffer callbacks are process-wide, so one client
//    traces at a time: the broker registers buffer trampolines once and routes each completed
//    buffer back to whoever handed it out. A capture is refused while another client has any kind
//    enabled; if another client enables a kind during a capture, the capture yields at once: its
//    kinds are disabled, its buffers force-flushed to it, then the other client's call goes on,
//    and the capture ends early, marked as cut short. The profiled process's own profiler wins.
//  - Timestamps. Kineto registers its own timestamp source at each session start (raw TSC ticks
//    on x86-64, cntvct on aarch64) and CUPTI keeps it for the life of the process; CUPTI converts
//    GPU timestamps with whatever source is registered when a buffer completes. The broker keeps
//    each client's source to its own sessions: CLOCK_REALTIME (CUPTI's default) while a capture
//    traces, the other client's source while it does, switched only when every buffer of the
//    previous one was flushed.
//
// Fall-back: a client that took CUPTI before the agent could interpose it (loaded after CUDA
// initialized and subscribed before the next rescan, or Nsight's own injection) keeps it; the
// agent then works as without sharing (counters off, captures refused) and says so in Report().
//
// Threads. The callback dispatch runs on application threads: lock-free (atomics only). The
// buffer trampolines run on whatever thread CUPTI uses: lock-free. Configuration calls from other
// clients and from the agent take one of two mutexes (subscriber side, activity side), never
// both at once; a call made from inside a dispatched callback (Kineto's teardown unsubscribes
// there) never blocks: it records its change and whoever holds the mutex applies it.
#pragma once

#include <cupti.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "agent/wire/agent_messages.h"

namespace profagent {

class GotPatcher;
class CuptiBroker {
 public:
  static CuptiBroker& Get();
  // Tests: replaces the broker with a fresh one (the old one is leaked: CUPTI may still call it).
  static void ResetForTesting();

  // Interposes the CUPTI entry points in every object loaded now that imports them, and in those
  // loaded since the last call. Does nothing until a libcupti is in the process (it never loads
  // one) or when PROFD_AGENT_SHARE_CUPTI=off. Any thread, cold: InitializeInjection, then the
  // agent thread at each heartbeat (Tick).
  void Interpose();
  // Agent thread, each heartbeat: rescans for new objects, applies deferred changes.
  void Tick();

  // --- The agent's callback subscriber (the counters). Agent thread.
  // CUPTI's result; *holder names the tool holding CUPTI when another one does.
  CUptiResult SubscribeAgent(CUpti_CallbackFunc callback, void* userdata, std::string* holder);
  void EnableAgentCallbacks(CUpti_CallbackDomain domain, const CUpti_CallbackId* cbids, size_t n,
                            bool on);
  // The agent's callbacks step aside while another client traces CUDA activity: CUPTI is told to
  // stop calling them before the other client's first activity kind is enabled, and to resume
  // after its last one is disabled. Its session then runs as it would without the agent.
  bool AgentCallbacksPaused() const { return agent_paused_.load(); }
  // Called (on the other client's thread, no lock of the broker's held) when another client
  // starts or stops tracing: what Report() says changed, and profd decides on it.
  void SetTracingListener(void (*fn)()) { tracing_listener_.store(fn); }

  // Who traces CUDA activity in the process besides the agent ("" when nobody does). Any thread
  // but CUPTI's callbacks.
  std::string OtherTracer();

  // --- The agent's activity tracing (a capture). Capture thread.
  // Takes CUPTI for a capture: holds a real subscriber for its duration (which also finds a tool
  // that took CUPTI directly) and checks no other client is tracing. *message is for profctl.
  bool ClaimForCapture(wire::CaptureError* error, std::string* message);
  // At the capture's start time: registers the buffer callbacks and enables the kinds.
  bool StartAgentTracing(const std::vector<CUpti_ActivityKind>& kinds,
                         CUpti_BuffersCallbackRequestFunc requested,
                         CUpti_BuffersCallbackCompleteFunc completed,
                         std::vector<CUpti_ActivityKind>* enabled, std::string* warnings,
                         wire::CaptureError* error, std::string* message);
  struct StopResult {
    bool cut_short = false;  // another client took over: it already disabled and flushed ours
    std::string by;          // who
    uint64_t disabled_realtime_ns = 0;
  };
  // Disables the capture's kinds and force-flushes its buffers (unless it was cut short).
  StopResult StopAgentTracing();
  void ReleaseCapture();
  // Called once per cut-short capture, on the other client's thread, after the capture's buffers
  // were flushed to it and before the other client's tracing starts.
  using CutShortFn = void (*)(void* context, const std::string& by);
  void SetCutShortListener(CutShortFn fn, void* context);

  // Agent thread: for the heartbeat and profctl agents.
  wire::CuptiSharing Report();

  // The CUPTI entry points other libraries are sent to (public for the GOT hooks and tests).
  static CUptiResult CUPTIAPI Subscribe(CUpti_SubscriberHandle* subscriber,
                                        CUpti_CallbackFunc callback, void* userdata);
  static CUptiResult CUPTIAPI SubscribeV2(CUpti_SubscriberHandle* subscriber,
                                          CUpti_CallbackFunc callback, void* userdata,
                                          CUpti_SubscriberParams* params);
  static CUptiResult CUPTIAPI Unsubscribe(CUpti_SubscriberHandle subscriber);
  static CUptiResult CUPTIAPI EnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                             CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
  static CUptiResult CUPTIAPI EnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                           CUpti_CallbackDomain domain);
  static CUptiResult CUPTIAPI EnableAllDomains(uint32_t enable, CUpti_SubscriberHandle subscriber);
  static CUptiResult CUPTIAPI GetCallbackState(uint32_t* enable, CUpti_SubscriberHandle subscriber,
                                               CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
  static CUptiResult CUPTIAPI Finalize();
  static CUptiResult CUPTIAPI ActivityRegisterCallbacks(
      CUpti_BuffersCallbackRequestFunc requested, CUpti_BuffersCallbackCompleteFunc completed);
  static CUptiResult CUPTIAPI ActivityEnable(CUpti_ActivityKind kind);
  static CUptiResult CUPTIAPI ActivityDisable(CUpti_ActivityKind kind);
  static CUptiResult CUPTIAPI ActivityEnableContext(CUcontext context, CUpti_ActivityKind kind);
  static CUptiResult CUPTIAPI ActivityDisableContext(CUcontext context, CUpti_ActivityKind kind);
  static CUptiResult CUPTIAPI ActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc fn);

 private:
  static constexpr int kDomains = 16;
  static constexpr int kCbidWords = 32;    // callback ids 0..2047 per domain
  static constexpr int kParticipants = 9;  // 0: the agent; 1..8: other clients' subscribers
  static constexpr int kKindWords = 4;     // activity kinds 0..255

  struct Registration {
    CUpti_CallbackFunc callback;
    void* userdata;
    Registration* next_retired = nullptr;
  };
  enum SlotState : int { kFree = 0, kLive = 1, kRetiring = 2 };
  struct Participant {
    std::atomic<int> state{kFree};  // only a subscriber_mutex_ holder moves it from kFree
    std::atomic<const Registration*> registration{nullptr};
    std::atomic<uint64_t> bits[kDomains][kCbidWords] = {};
    std::atomic<bool> whole_domain[kDomains] = {};  // cuptiEnableDomain: ids past our table too
    char name[96] = {};                             // subscriber_mutex_
    bool Wants(uint32_t domain, uint32_t cbid) const;
    void Clear();
  };
  struct BufferFns {
    CUpti_BuffersCallbackRequestFunc requested;
    CUpti_BuffersCallbackCompleteFunc completed;
  };
  struct NativeClient {
    CUpti_SubscriberHandle handle;
    std::string name;
  };
  enum Requester : int { kNobody = 0, kAgent = 1, kOther = 2 };

  CuptiBroker();
  static CuptiBroker* Current();
  static void AtForkChild();
  static void CUPTIAPI Dispatch(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                const void* data);
  static void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records);
  static void CUPTIAPI BufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                                       size_t size, size_t valid_size);

  CUptiResult SubscribeOther(CUpti_SubscriberHandle* out, CUpti_CallbackFunc callback,
                             void* userdata, CUpti_SubscriberParams* params,
                             const std::string& caller);
  Participant* VirtualParticipant(CUpti_SubscriberHandle handle);
  CUptiResult AcquireRealLocked(std::string* holder);
  void ReleaseRealLocked();
  void ReconcileLocked();
  CUptiResult ReconcileOneLocked(uint32_t domain, uint32_t cbid);
  // Runs fn under subscriber_mutex_, then applies changes others left; without blocking when
  // called from inside a dispatched callback (then returns false, the change is applied later).
  template <typename Fn>
  bool WithSubscriberLock(Fn&& fn);
  void DrainDeferredLocked();
  std::string CallerName(const void* return_address);
  bool OtherTracingLocked() const;
  std::string OtherTracerLocked() const;
  void CutShortLocked(const std::string& by);
  void UseOtherTimestampsLocked();
  static uint64_t CUPTIAPI RealtimeTimestamp();
  bool BufferTaken(uint8_t* buffer);
  bool BufferGiven(uint8_t* buffer);

  // Interposition.
  std::mutex interpose_mutex_;
  GotPatcher* patcher_ = nullptr;  // interpose_mutex_; leaked (slots point into us forever)
  bool sharing_off_ = false;
  uint64_t reported_generation_ = 0;
  std::vector<std::string> logged_;  // interpose_mutex_: report lines already logged
  // Basenames of the interposed libraries, for naming callers. Its own mutex: the wrappers read it
  // and must never wait for interpose_mutex_, whose holder may wait for the loader lock.
  std::mutex names_mutex_;
  std::vector<std::string> interposed_names_;

  // Subscribers.
  std::mutex subscriber_mutex_;
  Participant participants_[kParticipants];
  std::atomic<uint32_t> active_mask_{0};   // bit i: participants_[i] has a registration
  CUpti_SubscriberHandle real_ = nullptr;  // subscriber_mutex_
  int real_users_ = 0;                     // subscriber_mutex_: agent + claims + virtual handles
  bool agent_subscribed_ = false;          // subscriber_mutex_
  int capture_claims_ = 0;                 // subscriber_mutex_
  uint64_t real_bits_[kDomains][kCbidWords] = {};  // subscriber_mutex_: what CUPTI was told
  bool real_domain_[kDomains] = {};                // subscriber_mutex_
  std::string holder_;                             // subscriber_mutex_: who held CUPTI before us
  std::atomic<bool> native_multi_{false};          // CUPTI 13.2+
  std::vector<NativeClient> native_clients_;       // subscriber_mutex_
  std::atomic<bool> dirty_{false};                 // a change waits for subscriber_mutex_
  std::atomic<int> deferred_releases_{0};          // unsubscribes made inside a callback
  // Registrations of unsubscribed clients: a dispatch in flight on another thread may still read
  // one, so they are kept (a few dozen bytes per unsubscribe), pushed lock-free from wherever
  // the client unsubscribes, a callback included.
  std::atomic<Registration*> retired_registrations_{nullptr};
  std::atomic<bool> finalize_noted_{false};
  std::atomic<bool> agent_paused_{false};  // AgentCallbacksPaused
  std::atomic<void (*)()> tracing_listener_{nullptr};
  // Any thread, no lock of ours held: pauses or resumes the agent's callbacks and applies it.
  void PauseAgentCallbacks(bool pause);
  uint32_t ReconcileMask() const;

  // Activity tracing.
  std::mutex activity_mutex_;
  std::atomic<int> requester_{kNobody};  // whose buffer callbacks get CUPTI's next request
  std::atomic<const BufferFns*> other_fns_{nullptr};
  std::atomic<CUpti_BuffersCallbackRequestFunc> agent_requested_{nullptr};
  std::atomic<CUpti_BuffersCallbackCompleteFunc> agent_completed_{nullptr};
  std::atomic<bool> trampolines_registered_{false};
  std::atomic<uint64_t> other_kinds_[kKindWords] = {};  // kinds other clients enabled
  std::atomic<int> other_context_kinds_{0};             // cuptiActivityEnableContext pairs on
  std::vector<std::pair<CUcontext, CUpti_ActivityKind>> other_contexts_;  // activity_mutex_
  std::atomic<int64_t> other_buffers_out_{0};     // handed out by other clients, not completed
  std::atomic<uint8_t*> agent_buffers_[64] = {};  // the capture's buffers CUPTI holds now
  std::string other_activity_client_;             // activity_mutex_
  std::vector<CUpti_ActivityKind> agent_kinds_;   // activity_mutex_
  bool driver_added_ = false;   // activity_mutex_: the driver kind on for launch records only
  bool agent_tracing_ = false;  // activity_mutex_
  bool cut_short_ = false;      // activity_mutex_
  std::string cut_short_by_;    // activity_mutex_
  uint64_t cut_short_at_ = 0;   // activity_mutex_
  std::atomic<uint32_t> captures_cut_short_{0};
  std::atomic<bool> unrouted_noted_{false};
  // activity_mutex_: the timestamp source another client registered, and the one CUPTI has now
  // (nullptr: CUPTI's default, CLOCK_REALTIME).
  CUpti_TimestampCallbackFunc other_timestamp_ = nullptr;
  // Atomic: a finalize passed on (from inside a callback) resets it without that mutex.
  std::atomic<CUpti_TimestampCallbackFunc> current_timestamp_{nullptr};
  CutShortFn cut_short_fn_ = nullptr;  // activity_mutex_
  void* cut_short_context_ = nullptr;  // activity_mutex_
};

}  // namespace profagent
