// A node's health, as its agent judges it (issue: node health; Slurm's HealthCheckProgram and
// DCGM-style GPU checks):
// - GPU faults through NVML: an XID that means broken hardware (XidDrains), uncorrectable ECC
//   errors, a GPU fallen off the bus. A GPU fault is sticky: the node stays unhealthy until the
//   agent restarts (a reset or a replaced GPU comes with a restart), and the head keeps it drained
//   until a user undrains it.
// - The agent config's health-check command (`health_check: {command, interval}`): it is
//   unhealthy while its last run failed (non-zero exit, or killed at limits::kHealthCheckTimeout).
// HealthWatch decides on simulated time in tests (a Clock, a fault source and a check runner are
// injected); HealthThread runs it on a thread of its own in the agent.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "shared/common/clock.hpp"

namespace herd::agent {

struct HealthVerdict {
  bool healthy = true;
  std::string reason;  // unhealthy: why, in words (at most limits::kMaxDrainReasonBytes)
  bool operator==(const HealthVerdict&) const = default;
};

// XIDs that mean the GPU (or its memory, link or firmware) is broken, not that a program
// misbehaved: double-bit/uncontained ECC errors, row remapping and page retirement failures,
// NVLink errors, a GPU fallen off the bus, GSP firmware errors.
bool XidDrains(uint64_t xid);
// "XID 79 (GPU has fallen off the bus)".
std::string DescribeXid(uint64_t xid);

// New GPU faults since the last Poll, each in words ("GPU 3: XID 79 (...)"), draining ones only.
class GpuFaultSource {
 public:
  virtual ~GpuFaultSource() = default;
  virtual std::vector<std::string> Poll() = 0;
};

// NVML's view (XID events, uncorrectable volatile ECC counts, GPUs lost); nullptr when NVML cannot
// be loaded or initialised, or reports no GPU (a node without NVIDIA GPUs has nothing to watch).
std::unique_ptr<GpuFaultSource> OpenNvmlFaults(const std::string& library = "libnvidia-ml.so.1");

// Runs the health-check command; nullopt when it passed, else why it did not.
using HealthCheckRunner = std::function<std::optional<std::string>(const std::string& command)>;
// The real one: `/bin/sh -c COMMAND`, stdout and stderr captured, killed at
// limits::kHealthCheckTimeout.
std::optional<std::string> RunHealthCheckCommand(const std::string& command);

class HealthWatch {
 public:
  struct Options {
    std::string check_command;  // empty: no health check
    std::chrono::milliseconds check_interval;
    std::chrono::milliseconds gpu_interval;
  };
  HealthWatch(Clock& clock, Options options, std::unique_ptr<GpuFaultSource> gpus,
              HealthCheckRunner runner);

  // Runs what is due now (a GPU poll, the check); true when the verdict changed.
  bool Tick();
  const HealthVerdict& verdict() const { return verdict_; }
  // When the next Tick has something to do.
  std::chrono::steady_clock::time_point NextDue() const;
  // Whether there is anything to watch at all (no GPUs to poll and no check: nothing).
  bool watching() const { return gpus_ != nullptr || !options_.check_command.empty(); }

 private:
  Clock& clock_;
  Options options_;
  std::unique_ptr<GpuFaultSource> gpus_;
  HealthCheckRunner runner_;
  std::chrono::steady_clock::time_point next_gpu_, next_check_;
  std::string gpu_fault_;      // the first GPU fault seen (sticky)
  std::string check_failure_;  // the last check's failure; empty when it passed
  HealthVerdict verdict_;
};

// The agent's watcher thread: Tick()s the watch when due and hands every changed verdict (and the
// first one) to `report`, from that thread. Stops (and joins) on destruction.
class HealthThread {
 public:
  HealthThread(std::unique_ptr<HealthWatch> watch,
               std::function<void(const HealthVerdict&)> report);
  ~HealthThread();

 private:
  void Run();
  std::unique_ptr<HealthWatch> watch_;
  std::function<void(const HealthVerdict&)> report_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace herd::agent
