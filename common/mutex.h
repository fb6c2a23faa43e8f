// profd's lock and condition-variable waits: absl::Mutex and absl::CondVar, told to
// ThreadSanitizer. Debian's Abseil is not built with TSan, so in a TSan build (scripts/tsan.sh)
// nothing that absl::Mutex orders is seen as ordered, and every access it guards would be
// reported. Each lock here adds the happens-before edges TSan would have taken from an
// instrumented Mutex (acquire after locking, release before unlocking, and both around a wait,
// which unlocks); in other builds they compile to nothing.
//
// Rule: lock with profd::MutexLock and wait with the functions below, never with absl::Mutex's
// Await/LockWhen (Abseil evaluates their conditions on whichever thread unlocks, which no
// annotation here can order).
#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#if defined(__SANITIZE_THREAD__)
#define PROFD_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PROFD_TSAN 1
#endif
#endif

#ifdef PROFD_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace profd {

namespace mutex_internal {
#ifdef PROFD_TSAN
inline void Acquired(absl::Mutex* mu) { __tsan_acquire(mu); }
inline void Releasing(absl::Mutex* mu) { __tsan_release(mu); }
#else
inline void Acquired(absl::Mutex*) {}
inline void Releasing(absl::Mutex*) {}
#endif
}  // namespace mutex_internal

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(absl::Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
    mutex_internal::Acquired(mu_);
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() {
    mutex_internal::Releasing(mu_);
    mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  absl::Mutex* const mu_;
};

// cv.Wait(mu): mu held before and after.
inline void Wait(absl::CondVar* cv, absl::Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  mutex_internal::Releasing(mu);
  cv->Wait(mu);
  mutex_internal::Acquired(mu);
}

// cv.WaitWithDeadline(mu, deadline): true when the deadline passed.
inline bool WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu, absl::Time deadline)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  mutex_internal::Releasing(mu);
  const bool timed_out = cv->WaitWithDeadline(mu, deadline);
  mutex_internal::Acquired(mu);
  return timed_out;
}

// Waits on cv until done() (evaluated on this thread, mu held) or the deadline; returns done().
template <typename Done>
bool WaitUntil(absl::CondVar* cv, absl::Mutex* mu, absl::Time deadline, Done done)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  while (!done()) {
    if (WaitWithDeadline(cv, mu, deadline)) return done();
  }
  return true;
}

}  // namespace profd
