// What a managed job (`herd jobs launch`) does after one attempt ended: a pure function of the
// attempt's outcome, the counters so far and the task's job_recovery policy, so it is tested
// without clusters (tests/unit/controller/jobs/recovery_test.cpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "herd/v1/client.pb.h"
#include "herd/v1/common.pb.h"

#include "controller/task/task.hpp"

namespace herd::jobs {

// A managed job's states, SkyPilot's ManagedJobStatus names.
enum class ManagedState {
  kPending,           // recorded; its controller has not started work yet
  kStarting,          // the controller provisions the first cluster and submits the task
  kRunning,           // the task runs on the current attempt's cluster
  kRecovering,        // the attempt's cluster was lost (or the task failed and is retried):
                      // the old cluster is torn down and a new one provisioned
  kCancelling,        // a cancel was asked for; the controller cancels and tears down
  kSucceeded,         // every rank of an attempt exited 0
  kCancelled,         // cancelled; nothing is left running
  kFailed,            // the task failed (a rank exited non-zero) more often than allowed
  kFailedSetup,       // the task's setup failed (not retried, as SkyPilot)
  kFailedNoResource,  // no cluster could be provisioned after limits::kManagedLaunchAttempts tries
  kFailedController,  // the controller process died (or hit an internal error) before the end
};

std::string_view StateName(ManagedState s);
// Parses a name StateName gives; false for anything else.
bool ParseState(std::string_view name, ManagedState& out);
bool IsTerminal(ManagedState s);

// How one attempt ended, as the controller classifies it (managed_controller.cpp).
enum class AttemptOutcome {
  kSucceeded,     // the cluster job SUCCEEDED
  kUserFailed,    // the cluster job FAILED and every node of its gang is still alive
  kSetupFailed,   // the cluster job FAILED_SETUP on alive nodes
  kNodeLost,      // FAILED/FAILED_SETUP/FAILED_DRIVER with a node of the gang lost, or the
                  // cluster stopped answering (preempted, head gone)
  kLaunchFailed,  // provisioning, bootstrap or submit failed
  kCancelled,     // the cluster job was CANCELLED (by `herd jobs cancel` or someone else)
};

std::string_view OutcomeName(AttemptOutcome o);

struct RecoveryCounters {
  int recoveries = 0;                   // relaunches so far after node loss / preemption
  int restarts_on_errors = 0;           // relaunches so far after a user error
  int consecutive_launch_failures = 0;  // launch failures in a row, this one included
};

enum class NextAction {
  kFinish,       // the job ends in Decision::final_state
  kRelaunch,     // tear the attempt's cluster down, provision again, attempt + 1
  kRetryLaunch,  // provisioning failed: try again (same attempt number) after a wait
};

struct Decision {
  NextAction action = NextAction::kFinish;
  ManagedState final_state = ManagedState::kFailed;  // with kFinish
  // Counters after this decision (the relaunch counted).
  RecoveryCounters counters;
  std::string reason;  // one line for the attempt table and `herd jobs queue -o json`
};

// cancel_requested wins over everything. The policy (task.resources.job_recovery, absent =
// FAILOVER with 0 restarts on errors): node loss is recovered unless the strategy is NONE; a
// user error whose exit code (exit_codes: the failed ranks' codes, ClassifyExitCodes) is one of
// recover_on_exit_codes is always relaunched, counted as a recovery; any other user error is
// relaunched while restarts_on_errors < max_restarts_on_errors; a failed setup is final; a failed
// launch is retried until max_launch_failures launches in a row failed.
Decision Decide(AttemptOutcome outcome, const RecoveryCounters& counters,
                const task::JobRecovery& policy, bool cancel_requested, int max_launch_failures,
                const std::vector<int>& exit_codes = {});

// The exit codes that tell why a failed job failed: the first failed rank's when it is known
// (the other ranks were then killed by herd, 137), else every non-zero one.
std::vector<int> FailureExitCodes(const herd::v1::JobInfo& job);

// Where the launch of a relaunched attempt looks first, given the infra the attempt before it
// ran on ("aws/us-east-1/us-east-1a"): SkyPilot's strategies. EAGER_NEXT_REGION avoids that
// region (every other candidate first; it is still tried when none of them comes up); FAILOVER
// prefers it (the same region first, then the others). Infra prefixes as the optimizer's
// failover takes them ("aws/us-east-1"); empty off AWS, for NONE, or without an attempt before.
struct RegionPreference {
  std::vector<std::string> prefer, avoid;
};
RegionPreference RecoveryPreference(const task::JobRecovery& policy, const std::string& last_infra);

// The nodes a recovery from a lost node replaces alone, keeping the rest of the attempt's cluster
// (its head, the survivors' agents and their NODE_RANKs): the lost workers' node ids, in cluster
// order, when the head answered after the attempt (`nodes`, its NodesReply), its own node is
// alive and at least one worker is not. Empty when the whole cluster is relaunched instead: the
// head's node lost, no node lost (a hung rank, a drained node), or a strategy other than FAILOVER
// (EAGER_NEXT_REGION moves the job elsewhere; NONE recovers nothing).
std::vector<std::string> ReplaceableLostNodes(const herd::v1::NodesReply& nodes,
                                              const task::JobRecovery& policy);

// The policy of a task: PrimaryResources' job_recovery, else the top level's, else the default.
task::JobRecovery PolicyOf(const task::Task& task);

}  // namespace herd::jobs
