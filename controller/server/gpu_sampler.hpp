// The server's GPU sampler: the samples of the dashboard's chart of GPUs in use over time per
// cluster (ApiStore::RecordGpuSample), taken by the server itself, off the request path, for every
// user's clusters whether or not a page shows them.
//
// A pass asks each user that has clusters for their clusters' GPUs (the server runs `herd infra
// -o json` as the user) and records one sample per cluster whose head answered. A pass runs at
// once when the sampler starts, then every limits::kDashboardGpuSampleInterval, and soon after a
// Kick (the server kicks after a command that may have changed what GPUs are held: a launch, an
// exec, a cancel, ...). Passes never overlap; one ends within limits::kGpuSamplePassTimeout (the
// users not reached by then wait for the next pass; the one being read is interrupted). Stop
// interrupts a pass in progress and returns once the sampler's thread ended.
//
// Several servers on one database each sample; the store writes at most one sample per cluster
// per interval (its transaction reads the cluster's newest sample first), so the chart gets one.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "shared/common/limits.hpp"
#include "shared/common/status.hpp"

namespace herd::server {

// One cluster's GPUs as its head reported them.
struct ClusterGpus {
  std::string cluster;
  std::int64_t gpus = 0;    // the GPUs its nodes have
  std::int64_t in_use = 0;  // held by its unfinished jobs
};

// The clusters of one `herd infra -o json` output (an array of infras, each with "clusters")
// whose head answered ("gpus_known": true). Error: not that JSON.
Result<std::vector<ClusterGpus>> ParseInfraGpus(std::string_view json);

struct GpuSamplerParts {
  using SteadyTime = std::chrono::steady_clock::time_point;
  // The users to sample: those with clusters, in the order a pass asks them.
  std::function<Result<std::vector<std::string>>()> users;
  // One user's clusters' GPUs now. Must return by `deadline`, and soon once `stop` is requested.
  std::function<Result<std::vector<ClusterGpus>>(const std::string& user, SteadyTime deadline,
                                                 std::stop_token stop)>
      read;
  // Records a sample taken at now_ms: true if written, false if the cluster has one of this
  // interval already (ApiStore::RecordGpuSample).
  std::function<Result<bool>(const ClusterGpus& sample, std::int64_t now_ms)> record;
  // The clocks: steady for the pass's deadline, Unix ms for the samples. Empty: the system's.
  std::function<SteadyTime()> steady_now;
  std::function<std::int64_t()> now_ms;
};

// What one pass did.
struct GpuSamplePass {
  bool ran = false;               // false: another pass was running, or the sampler is stopping
  std::size_t users = 0;          // users asked
  std::size_t users_skipped = 0;  // not reached within the pass's time
  std::size_t errors = 0;         // users whose read failed, samples the store refused
  std::size_t recorded = 0;       // samples written
  std::size_t already = 0;        // samples the store had one of this interval for already
};

class GpuSampler {
 public:
  explicit GpuSampler(GpuSamplerParts parts,
                      limits::Duration pass_timeout = limits::kGpuSamplePassTimeout);
  ~GpuSampler();  // Stop()
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  // One pass now, on the calling thread (the sampler's own thread calls it; tests too). Returns
  // at once with ran == false while another pass runs.
  GpuSamplePass RunPass(std::stop_token stop = {});

  // A thread of its own: a pass at once, then one every `interval` or after a Kick.
  void Start(limits::Duration interval = limits::kDashboardGpuSampleInterval);
  // A pass soon (several kicks before it starts make one pass). Any thread.
  void Kick();
  // Ends the thread (interrupting a pass in progress) and waits for it; idempotent.
  void Stop();

 private:
  void Loop(std::stop_token stop, limits::Duration interval);

  GpuSamplerParts parts_;
  limits::Duration pass_timeout_;
  std::mutex pass_mu_;  // held by the pass that runs
  std::mutex mu_;
  std::condition_variable_any cv_;
  bool kicked_ = false;
  std::jthread thread_;
};

}  // namespace herd::server
