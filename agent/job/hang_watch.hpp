// Whether a rank makes progress: the agent tracks each run process that has a hang timeout
// (StartProcess.hang_timeout_ms) and, every limits::kHangSampleInterval, samples the CPU time of
// the process and its descendants (proc_tree.hpp). Output, or a sample in which the rank used at
// least limits::kHangBusyCpuPercent of a CPU, or a change in its set of processes, is progress. A
// rank without progress for its timeout is reported hung, once. Pure: the times come from the
// caller, so the unit tests run on simulated time.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace herd::agent {

class HangWatch {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  explicit HangWatch(long ticks_per_second = 100) : ticks_per_second_(ticks_per_second) {}

  void Track(const std::string& key, std::chrono::milliseconds timeout, TimePoint now);
  void Forget(const std::string& key);
  bool Tracks(const std::string& key) const { return entries_.count(key) > 0; }
  std::vector<std::string> Keys() const;
  // The process wrote output.
  void Output(const std::string& key, TimePoint now);
  // A sample of the rank: its processes' CPU time (clock ticks, children's included) and how
  // many processes it has. Returns how long it has been without progress when that reached its
  // timeout just now (once per key); nullopt otherwise.
  std::optional<std::chrono::milliseconds> Observe(const std::string& key, uint64_t cpu_ticks,
                                                   std::size_t processes, TimePoint now);

 private:
  struct Entry {
    std::chrono::milliseconds timeout{0};
    TimePoint last_progress;
    TimePoint last_sample;
    uint64_t last_ticks = 0;
    std::size_t last_processes = 0;
    bool sampled = false;
    bool reported = false;
  };
  long ticks_per_second_;
  std::map<std::string, Entry> entries_;
};

}  // namespace herd::agent
