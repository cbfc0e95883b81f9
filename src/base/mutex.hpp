// pier: a mutex that clang's -Wthread-safety understands. Set-up paths
// (config registry, registries of drivers, connection tables) lock; data paths
// use the queues. Annotate what a lock guards, and clang checks every access:
//
//   base::Mutex mutex_;
//   std::vector<Peer> peers_ PIER_GUARDED_BY(mutex_);
//   void add(Peer p) PIER_EXCLUDES(mutex_) { base::LockGuard lock(mutex_); ... }
//
// Under GCC the annotations compile to nothing.
#pragma once

#include <mutex>

#if defined(__clang__)
#define PIER_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define PIER_THREAD_ANNOTATION(x)
#endif

#define PIER_CAPABILITY(name) PIER_THREAD_ANNOTATION(capability(name))
#define PIER_SCOPED_CAPABILITY PIER_THREAD_ANNOTATION(scoped_lockable)
#define PIER_GUARDED_BY(m) PIER_THREAD_ANNOTATION(guarded_by(m))
#define PIER_PT_GUARDED_BY(m) PIER_THREAD_ANNOTATION(pt_guarded_by(m))
#define PIER_REQUIRES(...) PIER_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define PIER_EXCLUDES(...) PIER_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define PIER_ACQUIRE(...) PIER_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define PIER_RELEASE(...) PIER_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define PIER_TRY_ACQUIRE(...) PIER_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))

namespace pier::base {

/// std::mutex with capability annotations; constant-initialisable, so it can
/// guard state used from static initialisers.
class PIER_CAPABILITY("mutex") Mutex {
 public:
  constexpr Mutex() noexcept = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() PIER_ACQUIRE() { mutex_.lock(); }
  void unlock() PIER_RELEASE() { mutex_.unlock(); }
  bool try_lock() PIER_TRY_ACQUIRE(true) { return mutex_.try_lock(); }

 private:
  std::mutex mutex_;
};

/// Holds a Mutex for its scope.
class PIER_SCOPED_CAPABILITY LockGuard {
 public:
  explicit LockGuard(Mutex& mutex) PIER_ACQUIRE(mutex) : mutex_(mutex) { mutex_.lock(); }
  ~LockGuard() PIER_RELEASE() { mutex_.unlock(); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  Mutex& mutex_;
};

}  // namespace pier::base
