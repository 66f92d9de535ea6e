#include "agent/job/hang_watch.hpp"

#include <algorithm>

#include "shared/common/limits.hpp"

namespace herd::agent {

using std::chrono::milliseconds;

void HangWatch::Track(const std::string& key, milliseconds timeout, TimePoint now) {
  Entry& e = entries_[key];
  e.timeout = timeout;
  e.last_progress = now;
  e.last_sample = now;
}

void HangWatch::Forget(const std::string& key) { entries_.erase(key); }

std::vector<std::string> HangWatch::Keys() const {
  std::vector<std::string> keys;
  for (const auto& [key, e] : entries_) keys.push_back(key);
  return keys;
}

void HangWatch::Output(const std::string& key, TimePoint now) {
  auto it = entries_.find(key);
  if (it != entries_.end()) it->second.last_progress = now;
}

std::optional<milliseconds> HangWatch::Observe(const std::string& key, uint64_t cpu_ticks,
                                               std::size_t processes, TimePoint now) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  Entry& e = it->second;
  if (e.sampled) {
    const auto elapsed = std::chrono::duration_cast<milliseconds>(now - e.last_sample).count();
    // Ticks that a rank busy for kHangBusyCpuPercent of one CPU over the interval would use.
    const int64_t busy = std::max<int64_t>(
        1, elapsed * ticks_per_second_ * limits::kHangBusyCpuPercent / (1000 * 100));
    const int64_t used = cpu_ticks >= e.last_ticks ? static_cast<int64_t>(cpu_ticks - e.last_ticks)
                                                   : static_cast<int64_t>(e.last_ticks - cpu_ticks);
    if (used >= busy || processes != e.last_processes) e.last_progress = now;
  }
  e.sampled = true;
  e.last_sample = now;
  e.last_ticks = cpu_ticks;
  e.last_processes = processes;
  const auto idle = std::chrono::duration_cast<milliseconds>(now - e.last_progress);
  if (e.reported || idle < e.timeout) return std::nullopt;
  e.reported = true;
  return idle;
}

}  // namespace herd::agent
