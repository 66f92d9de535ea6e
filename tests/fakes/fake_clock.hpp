// Clock fake: time moves only when the test (or a sleeping caller) moves it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "shared/common/clock.hpp"

namespace herd::testing {

class FakeClock final : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() override {
    return std::chrono::steady_clock::time_point(std::chrono::milliseconds(now_ms_.load()));
  }
  int64_t UnixMs() override { return kEpochMs + now_ms_.load(); }
  // A sleep is an advance: a wait loop under test runs through its deadline without real time.
  void SleepFor(std::chrono::milliseconds d) override {
    now_ms_ += d.count();
    ++sleeps;
  }
  void Advance(std::chrono::milliseconds d) { now_ms_ += d.count(); }

  std::atomic<int> sleeps{0};
  static constexpr int64_t kEpochMs = 1'800'000'000'000;  // 2027-01-15

 private:
  std::atomic<int64_t> now_ms_{1'000'000};
};

}  // namespace herd::testing
