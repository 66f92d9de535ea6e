// From a SubmitJob to the records the head queues, and the head's view of other jobs for the
// dependency gate (agent/sched/job_gate.hpp). A plain submit is one record; an array
// (`herd exec --array 0-99%8`) is one record per index, stored in one transaction, so its jobs
// have consecutive ids and the first one's id is the array's id.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "agent/sched/job_gate.hpp"
#include "agent/store/job_store.hpp"
#include "herd/v1/client.pb.h"
#include "shared/common/status.hpp"

namespace herd::agent {

// The records of `submit`, PENDING, in queue order. Checks what the head must not take on trust
// (num_nodes, attempt, the array); array_id is left 0 (SetArrayIds sets it once ids are known).
Result<std::vector<JobRecord>> SubmitRecords(const herd::v1::SubmitJob& submit,
                                             int64_t now_unix_ms);

// Called on each stored record of an array in order (JobStore::AddJobs' `complete`): the first
// record's id becomes every record's array_id.
class ArrayIdSetter {
 public:
  void operator()(herd::v1::JobInfo& info) {
    if (info.array_size() == 0) return;
    if (first_ == 0) first_ = info.job_id();
    info.set_array_id(first_);
  }

 private:
  int64_t first_ = 0;
};

// Facts of jobs for the gate: an active job from the head (asked through `active`, which
// returns null for a job that is not active), an ended one from the store, cached (an ended job's
// facts never change).
class JobFactsCache {
 public:
  using ActiveFn = std::function<const herd::v1::JobInfo*(int64_t job_id)>;
  JobFactsCache(JobStore& store, ActiveFn active) : store_(store), active_(std::move(active)) {}

  std::optional<sched::JobFacts> Get(int64_t job_id);

 private:
  JobStore& store_;
  ActiveFn active_;
  std::unordered_map<int64_t, sched::JobFacts> ended_;
  std::unordered_map<int64_t, bool> missing_;  // ids the store did not have (never change either)
};

}  // namespace herd::agent
