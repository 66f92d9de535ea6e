#include "agent/head/job_phase.hpp"

#include <algorithm>
#include <utility>

#include "shared/common/limits.hpp"

namespace herd::agent {

using namespace herd::v1;

JobPhase PhaseOfState(JobState state) {
  switch (state) {
    case JOB_STATE_PENDING:
      return JobPhase::kPending;
    case JOB_STATE_SETTING_UP:
      return JobPhase::kSetup;
    default:
      return JobPhase::kRun;
  }
}

JobState StateOfPhase(JobPhase phase) {
  switch (phase) {
    case JobPhase::kPending:
      return JOB_STATE_PENDING;
    case JobPhase::kSetup:
      return JOB_STATE_SETTING_UP;
    case JobPhase::kRun:
      break;
  }
  return JOB_STATE_RUNNING;
}

RankExitStep OnRankExit(int exit_code, JobStop stop) {
  RankExitStep step;
  step.exit_code = exit_code;
  if (exit_code == 0) return step;
  if (stop == JobStop::kNone) {
    step.fail_fast = true;
  } else {
    step.exit_code = limits::kKilledRankExitCode;  // killed by herd, as SkyPilot reports it
  }
  return step;
}

PhaseStep DecidePhaseEnd(const PhaseCheck& check) {
  PhaseStep step;
  for (const auto& p : check.processes) {
    if (!p.exited) return step;  // phase not over
  }
  std::vector<std::pair<int, int>> by_rank;
  for (const auto& p : check.processes) by_rank.emplace_back(p.rank, p.exit_code);
  std::sort(by_rank.begin(), by_rank.end());
  std::string list = "[";
  bool all_ok = true;
  for (std::size_t i = 0; i < by_rank.size(); ++i) {
    list += (i ? ", " : "") + std::to_string(by_rank[i].second);
    all_ok = all_ok && by_rank[i].second == 0;
  }
  list += "]";
  const std::string job = "ERROR: Job " + std::to_string(check.job_id);
  step.next = PhaseStep::Next::kFinalize;
  if (check.stop == JobStop::kCancelling) {
    step.state = JOB_STATE_CANCELLED;
  } else if (!check.driver_error.empty()) {
    step.state = JOB_STATE_FAILED_DRIVER;
    step.error_line = check.driver_error;
  } else if (!check.stop_error.empty()) {
    step.state = JOB_STATE_FAILED;
    step.error_line = check.stop_error;
  } else if (check.phase == JobPhase::kSetup) {
    if (all_ok) {
      step.next = PhaseStep::Next::kStartRun;
    } else {
      step.state = JOB_STATE_FAILED_SETUP;
      step.error_line = job + "'s setup failed with return code list: " + list;
    }
  } else if (!all_ok) {
    std::string first;
    if (check.first_failed_rank >= 0) {
      first = " (first failure: rank " + std::to_string(check.first_failed_rank) + " on " +
              check.first_failed_node + ")";
    }
    step.state = JOB_STATE_FAILED;
    step.error_line = job + " failed with return code list: " + list + first;
  } else {
    step.state = JOB_STATE_SUCCEEDED;
  }
  return step;
}

JobState LostNodeState(JobPhase phase) {
  return phase == JobPhase::kSetup ? JOB_STATE_FAILED_SETUP : JOB_STATE_FAILED;
}

}  // namespace herd::agent
