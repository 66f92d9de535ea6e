// The clock seam: what code that waits or stamps times asks of the clock, so that unit tests can
// drive time themselves (tests/fakes/fake_clock.hpp) instead of sleeping.
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

#include "shared/common/unix_time.hpp"

namespace herd {

class Clock {
 public:
  virtual ~Clock() = default;
  // For deadlines and durations: never steps.
  virtual std::chrono::steady_clock::time_point Now() = 0;
  // Wall time in ms since the epoch (NowUnixMs): for records.
  virtual int64_t UnixMs() = 0;
  virtual void SleepFor(std::chrono::milliseconds d) = 0;
};

class SystemClock final : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() override { return std::chrono::steady_clock::now(); }
  int64_t UnixMs() override { return NowUnixMs(); }
  void SleepFor(std::chrono::milliseconds d) override { std::this_thread::sleep_for(d); }
};

}  // namespace herd
