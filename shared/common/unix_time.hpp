// The wall clock as the records keep it: milliseconds since the Unix epoch.
#pragma once

#include <chrono>
#include <cstdint>

namespace herd {

// Now, in ms since 1970-01-01 UTC: the unit of every *_unix_ms field (job and cluster records,
// heartbeats, incarnations). Wall time, so it may step; durations are measured on steady_clock.
inline int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace herd
