// Time as the coordinator sees it: one clock, owned by whoever opens the store
// and shared by the store (timestamps it writes) and the scheduler (lease
// expiry), injected so that expiry is tested by advancing a fake clock instead
// of sleeping.
#ifndef XMOD_COMMON_CLOCK_H_
#define XMOD_COMMON_CLOCK_H_

#include <atomic>
#include <chrono>

namespace xmod {

// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual double Now() = 0;  // seconds since the Unix epoch
};

class SystemClock : public Clock {
 public:
  double Now() override {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

class FakeClock : public Clock {
 public:
  explicit FakeClock(double start = 1.7e9) : now_(start) {}
  double Now() override { return now_.load(); }
  void Advance(double seconds) { now_.store(now_.load() + seconds); }

 private:
  std::atomic<double> now_;
};

// Seconds on the steady clock: for timeouts and intervals within one process,
// which must not jump with the wall clock.
inline double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace xmod

#endif  // XMOD_COMMON_CLOCK_H_
