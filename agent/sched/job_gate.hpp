// Whether a PENDING job may be offered to the gang scheduler now: its dependencies (Slurm's
// afterany / afterok, `herd exec --after/--after-ok`) and its array's running limit (--array
// ...%M). A job the gate holds back does not block the jobs behind it in the queue (Slurm's
// Dependency and JobArrayTaskLimit reasons); one whose after-ok dependency did not succeed is never
// started and is cancelled with the reason.
//
// A dependency on an array's id (the id of its first job) stands for every job of the array.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "herd/v1/client.pb.h"
#include "herd/v1/common.pb.h"
#include "shared/common/status.hpp"

namespace herd::sched {

// What the gate needs to know of another job.
struct JobFacts {
  herd::v1::JobState state = herd::v1::JOB_STATE_UNKNOWN;
  int64_t array_id = 0;    // 0: not an array job
  int32_t array_size = 0;  // the array's size when this is an array job
};
// The facts of a job by id; nullopt when no such job exists.
using FactsOf = std::function<std::optional<JobFacts>(int64_t job_id)>;

// Where the jobs a dependency stands for are (the job, or every job of the array whose id it is).
struct DependencyState {
  int64_t dep = 0;
  // The first of them that has not ended, and its state; 0 when all have ended.
  int64_t unfinished = 0;
  herd::v1::JobState unfinished_state = herd::v1::JOB_STATE_UNKNOWN;
  // The first of them that ended without success, and its state; 0 when none did.
  int64_t unsuccessful = 0;
  herd::v1::JobState unsuccessful_state = herd::v1::JOB_STATE_UNKNOWN;
};
// A job that no longer exists (never expected: ids are checked at submit and jobs are not
// deleted) counts as ended without success.
DependencyState SummarizeDependency(int64_t dep, const FactsOf& facts_of);
// The summary of a dependency by id (the head memoizes SummarizeDependency within a pass: many
// jobs of an array wait for the same dependency).
using DependencyOf = std::function<const DependencyState&(int64_t dep)>;

enum class GateVerdict {
  kOpen,   // may be scheduled now
  kWait,   // held back (reason says why); does not block the queue
  kNever,  // an after-ok dependency ended without success: cancel it with the reason
};

struct Gate {
  GateVerdict verdict = GateVerdict::kOpen;
  std::string reason;  // "waiting for job 4 (RUNNING) to end", ...; empty when open
};

// Whether `job` may go to the scheduler now. `array_active`: how many jobs of its array are
// started or already let through this pass.
Gate CheckGate(const herd::v1::JobInfo& job, const DependencyOf& dependency_of, int array_active);

// Whether the gate has anything to say about `job` (dependencies or an array limit).
bool Gated(const herd::v1::JobInfo& job);

// Checks a submit's dependencies before anything is queued: every job named exists (so no cycle
// can ever form: a job can only wait for jobs submitted before it).
Status ValidateDependencies(const herd::v1::SubmitJob& submit, const FactsOf& facts_of);

}  // namespace herd::sched
