// Managed jobs (`herd jobs ...`, SkyPilot's `sky jobs`): a task that is relaunched on a new
// cluster after node loss or preemption (and after user errors up to max_restarts_on_errors),
// keeping its SKYPILOT_TASK_ID. Each job has a controller process of its own (RunManagedController,
// started detached by LaunchManagedJob) that drives its clusters through ops::ClusterOps and
// records its progress in the managed job table (controller/jobs/managed_job_store.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "controller/jobs/managed_job_store.hpp"
#include "controller/ops/cluster_ops.hpp"
#include "controller/task/task.hpp"
#include "shared/common/clock.hpp"
#include "shared/common/status.hpp"

namespace herd::controller {

struct ManagedLaunchOptions {
  std::string infra;  // "" = the task's resources.infra, else local
  std::string user;
};

// Records the job (PENDING), starts its controller (`herd jobs _controller ID`, in a session of
// its own, so it outlives this process and its terminal) and returns the job id.
Result<int64_t> LaunchManagedJob(task::Task task, const ManagedLaunchOptions& options);

// The controller's life: provision, submit, follow, classify each attempt's end, decide
// (jobs::Decide), relaunch or finish, always tearing the attempt's cluster down. Returns the
// process exit code (0 when the job reached a final state, whatever it is). Its waits (between
// attempts, for a head, for a grace) and the job's recorded times are on the ops' clock
// (ops::ClusterOpsParts::clock).
int RunManagedController(ops::ClusterOps& ops, int64_t id);

// Every job, newest first; a job whose controller is gone before the end is recorded (and shown)
// as FAILED_CONTROLLER.
Result<std::vector<jobs::ManagedJob>> ListManagedJobs();

// Prints each attempt's log (a header line per attempt) to out, following the current attempt
// until the job ends when follow is set. Returns 0 SUCCEEDED, 100 any FAILED*, 103 CANCELLED,
// 101 not finished (no follow, or interrupted), 102 unknown id. clock: what the polls of the
// table wait on and a controller's start grace is measured with (null: the system clock).
int FollowManagedLogs(int64_t id, bool follow, std::ostream& out, std::ostream& err,
                      const std::function<bool()>& interrupted, Clock* clock = nullptr);

// Asks each job's controller to cancel and waits (up to limits::kManagedCancelWait, on the ops'
// clock) for CANCELLED; a job whose controller is gone is cancelled here (its cluster torn down).
// ids empty with all: every unfinished job. Returns the process exit code: 0, or 102 if an id is
// unknown.
int CancelManagedJobs(ops::ClusterOps& ops, const std::vector<int64_t>& ids, bool all,
                      std::ostream& out, std::ostream& err);

// The hidden `herd jobs _release ID`: a managed job that ended without its controller's own end
// (a team server's FAILED_CONTROLLER, job_keeper.hpp) lets go of its buckets as a local one judged
// FAILED_CONTROLLER does (storage::ReleaseManagedJobStorage); its cluster, if still up, keeps its
// mounts and its node key until its down. Returns 0; 1 when the job has not ended or the release
// failed (one line on err); 102 for an unknown id.
int ReleaseEndedManagedJob(int64_t id, std::ostream& out, std::ostream& err);

// The secrets a parent left on this process's stdin as a JSON object in an anonymous file, when
// the environment variable `marker_env` is "1" (it is then unset): read whole, from the file's
// start, and stdin is replaced with /dev/null so that nothing this process runs inherits them.
// Empty when the variable is not set. (The managed-job controller gets a task's secrets so, and a
// command the API server runs for a remote CLI.)
Result<std::string> TakeSecretsFromStdin(const char* marker_env);

// "3 mins ago"-style and duration helpers shared with the table printer.
std::string ManagedDuration(const jobs::ManagedJob& job, int64_t now_ms);

}  // namespace herd::controller
