#include "controller/jobs/recovery.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace herd::jobs {
namespace {

constexpr std::array<std::pair<ManagedState, std::string_view>, 11> kNames = {{
    {ManagedState::kPending, "PENDING"},
    {ManagedState::kStarting, "STARTING"},
    {ManagedState::kRunning, "RUNNING"},
    {ManagedState::kRecovering, "RECOVERING"},
    {ManagedState::kCancelling, "CANCELLING"},
    {ManagedState::kSucceeded, "SUCCEEDED"},
    {ManagedState::kCancelled, "CANCELLED"},
    {ManagedState::kFailed, "FAILED"},
    {ManagedState::kFailedSetup, "FAILED_SETUP"},
    {ManagedState::kFailedNoResource, "FAILED_NO_RESOURCE"},
    {ManagedState::kFailedController, "FAILED_CONTROLLER"},
}};

}  // namespace

std::string_view StateName(ManagedState s) {
  for (const auto& [state, name] : kNames) {
    if (state == s) return name;
  }
  return "UNKNOWN";
}

bool ParseState(std::string_view name, ManagedState& out) {
  for (const auto& [state, n] : kNames) {
    if (n == name) {
      out = state;
      return true;
    }
  }
  return false;
}

bool IsTerminal(ManagedState s) {
  switch (s) {
    case ManagedState::kSucceeded:
    case ManagedState::kCancelled:
    case ManagedState::kFailed:
    case ManagedState::kFailedSetup:
    case ManagedState::kFailedNoResource:
    case ManagedState::kFailedController:
      return true;
    default:
      return false;
  }
}

std::string_view OutcomeName(AttemptOutcome o) {
  switch (o) {
    case AttemptOutcome::kSucceeded:
      return "SUCCEEDED";
    case AttemptOutcome::kUserFailed:
      return "USER_FAILED";
    case AttemptOutcome::kSetupFailed:
      return "SETUP_FAILED";
    case AttemptOutcome::kNodeLost:
      return "NODE_LOST";
    case AttemptOutcome::kLaunchFailed:
      return "LAUNCH_FAILED";
    case AttemptOutcome::kCancelled:
      return "CANCELLED";
  }
  return "UNKNOWN";
}

std::vector<int> FailureExitCodes(const herd::v1::JobInfo& job) {
  std::vector<int> codes;
  for (const auto& e : job.exits()) {
    if (job.first_failed_rank() >= 0 && e.rank() != job.first_failed_rank()) continue;
    if (e.exit_code() != 0) codes.push_back(e.exit_code());
  }
  return codes;
}

Decision Decide(AttemptOutcome outcome, const RecoveryCounters& counters,
                const task::JobRecovery& policy, bool cancel_requested, int max_launch_failures,
                const std::vector<int>& exit_codes) {
  Decision d;
  d.counters = counters;
  auto finish = [&](ManagedState s, std::string reason) {
    d.action = NextAction::kFinish;
    d.final_state = s;
    d.reason = std::move(reason);
    return d;
  };
  if (cancel_requested) return finish(ManagedState::kCancelled, "cancelled by the user");
  switch (outcome) {
    case AttemptOutcome::kSucceeded:
      return finish(ManagedState::kSucceeded, "succeeded");
    case AttemptOutcome::kCancelled:
      // Someone cancelled the cluster job directly (`herd cancel` on the job's cluster): the
      // user's intent is to stop, not to recover.
      return finish(ManagedState::kCancelled, "the job was cancelled on its cluster");
    case AttemptOutcome::kSetupFailed:
      return finish(ManagedState::kFailedSetup, "setup failed (not retried)");
    case AttemptOutcome::kUserFailed:
      for (int code : exit_codes) {
        const auto& recover = policy.recover_on_exit_codes;
        if (std::find(recover.begin(), recover.end(), code) == recover.end()) continue;
        d.action = NextAction::kRelaunch;
        d.counters.recoveries++;
        d.counters.consecutive_launch_failures = 0;
        d.reason = "the task exited with " + std::to_string(code) +
                   ", one of recover_on_exit_codes; recovery " +
                   std::to_string(d.counters.recoveries) + " (not counted against " +
                   "max_restarts_on_errors)";
        return d;
      }
      if (counters.restarts_on_errors < policy.max_restarts_on_errors) {
        d.action = NextAction::kRelaunch;
        d.counters.restarts_on_errors++;
        d.counters.consecutive_launch_failures = 0;
        d.reason = "the task failed; restart " + std::to_string(d.counters.restarts_on_errors) +
                   " of " + std::to_string(policy.max_restarts_on_errors) +
                   " (max_restarts_on_errors)";
        return d;
      }
      return finish(ManagedState::kFailed, policy.max_restarts_on_errors == 0
                                               ? "the task failed (max_restarts_on_errors is 0)"
                                               : "the task failed after " +
                                                     std::to_string(policy.max_restarts_on_errors) +
                                                     " restart(s) on errors");
    case AttemptOutcome::kNodeLost:
      if (policy.strategy == "NONE") {
        return finish(ManagedState::kFailed,
                      "a node of the cluster was lost; job_recovery is none (not recovered)");
      }
      d.action = NextAction::kRelaunch;
      d.counters.recoveries++;
      d.counters.consecutive_launch_failures = 0;
      d.reason = "a node of the cluster was lost; recovery " +
                 std::to_string(d.counters.recoveries) + " (" + policy.strategy + ")";
      return d;
    case AttemptOutcome::kLaunchFailed:
      d.counters.consecutive_launch_failures++;
      if (d.counters.consecutive_launch_failures >= max_launch_failures) {
        return finish(
            ManagedState::kFailedNoResource,
            "no cluster after " + std::to_string(max_launch_failures) + " launch attempt(s)");
      }
      d.action = NextAction::kRetryLaunch;
      d.reason = "launch failed; trying again (" +
                 std::to_string(d.counters.consecutive_launch_failures) + " of " +
                 std::to_string(max_launch_failures) + ")";
      return d;
  }
  return finish(ManagedState::kFailedController, "unknown attempt outcome");
}

RegionPreference RecoveryPreference(const task::JobRecovery& policy,
                                    const std::string& last_infra) {
  RegionPreference p;
  if (last_infra.rfind("aws/", 0) != 0 || last_infra.size() <= 4) return p;
  const std::string region = last_infra.substr(0, last_infra.find('/', 4));
  if (policy.strategy == "EAGER_NEXT_REGION") {
    p.avoid.push_back(region);
  } else if (policy.strategy == "FAILOVER") {
    p.prefer.push_back(region);
  }
  return p;
}

std::vector<std::string> ReplaceableLostNodes(const herd::v1::NodesReply& nodes,
                                              const task::JobRecovery& policy) {
  if (policy.strategy != "FAILOVER") return {};
  bool head_alive = false;
  std::vector<std::string> lost;
  for (int i = 0; i < nodes.nodes_size(); ++i) {
    const bool alive = i < nodes.alive_size() && nodes.alive(i);
    if (nodes.nodes(i).is_head()) {
      if (!alive) return {};
      head_alive = true;
    } else if (!alive) {
      lost.push_back(nodes.nodes(i).node_id());
    }
  }
  if (!head_alive) return {};
  return lost;
}

task::JobRecovery PolicyOf(const task::Task& task) {
  const task::Resources& primary = task::PrimaryResources(task);
  if (primary.job_recovery) return *primary.job_recovery;
  if (task.resources.job_recovery) return *task.resources.job_recovery;
  return {};
}

}  // namespace herd::jobs
