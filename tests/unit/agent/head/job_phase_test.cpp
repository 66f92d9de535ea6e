// The job phase machine (agent/head/job_phase): which step follows when a phase's processes have
// exited (run after a good setup; the end state and the message the user sees otherwise), how a
// rank's exit is recorded under fail fast, and the phase, stop and state mappings the head uses.
#include "agent/head/job_phase.hpp"

#include <doctest/doctest.h>

#include <string>

#include "shared/common/limits.hpp"

namespace herd::agent {
namespace {

using herd::v1::JobState;
using Next = PhaseStep::Next;

PhaseCheck Check(JobPhase phase, std::vector<PhaseProcess> processes) {
  PhaseCheck c;
  c.job_id = 7;
  c.phase = phase;
  c.processes = std::move(processes);
  return c;
}

TEST_CASE("a phase is not over while one of its processes runs") {
  for (JobPhase phase : {JobPhase::kSetup, JobPhase::kRun}) {
    auto c = Check(phase, {{0, true, 0}, {1, false, 0}, {2, true, 1}});
    CHECK(DecidePhaseEnd(c).next == Next::kWait);
    c.stop = JobStop::kCancelling;  // a cancel too waits for every process to be gone
    CHECK(DecidePhaseEnd(c).next == Next::kWait);
  }
}

TEST_CASE("setup: all zero starts the run; any failure ends FAILED_SETUP with the codes by rank") {
  CHECK(DecidePhaseEnd(Check(JobPhase::kSetup, {{1, true, 0}, {0, true, 0}})).next ==
        Next::kStartRun);
  const PhaseStep failed =
      DecidePhaseEnd(Check(JobPhase::kSetup, {{2, true, 0}, {0, true, 3}, {1, true, 137}}));
  CHECK(failed.next == Next::kFinalize);
  CHECK(failed.state == herd::v1::JOB_STATE_FAILED_SETUP);
  CHECK(failed.error_line == "ERROR: Job 7's setup failed with return code list: [3, 137, 0]");
}

TEST_CASE("run: all zero succeeds; a failure ends FAILED naming the first failed rank") {
  const PhaseStep ok = DecidePhaseEnd(Check(JobPhase::kRun, {{0, true, 0}, {1, true, 0}}));
  CHECK(ok.next == Next::kFinalize);
  CHECK(ok.state == herd::v1::JOB_STATE_SUCCEEDED);
  CHECK(ok.error_line.empty());

  auto c = Check(JobPhase::kRun, {{1, true, 2}, {0, true, 137}});
  PhaseStep failed = DecidePhaseEnd(c);
  CHECK(failed.state == herd::v1::JOB_STATE_FAILED);
  CHECK(failed.error_line == "ERROR: Job 7 failed with return code list: [137, 2]");
  c.first_failed_rank = 1;
  c.first_failed_node = "node-b";
  failed = DecidePhaseEnd(c);
  CHECK(failed.error_line ==
        "ERROR: Job 7 failed with return code list: [137, 2] (first failure: rank 1 on node-b)");
}

TEST_CASE("a cancel ends CANCELLED whatever the codes; a driver error ends FAILED_DRIVER") {
  for (JobPhase phase : {JobPhase::kSetup, JobPhase::kRun}) {
    auto c = Check(phase, {{0, true, 137}, {1, true, 0}});
    c.stop = JobStop::kCancelling;
    c.driver_error = "ERROR: Job 7 failed: the head cannot write run.log";
    PhaseStep step = DecidePhaseEnd(c);
    CHECK(step.next == Next::kFinalize);
    CHECK(step.state == herd::v1::JOB_STATE_CANCELLED);
    CHECK(step.error_line.empty());

    c.stop = JobStop::kKilling;
    step = DecidePhaseEnd(c);
    CHECK(step.state == herd::v1::JOB_STATE_FAILED_DRIVER);
    CHECK(step.error_line == c.driver_error);
  }
  // Even a setup that succeeded everywhere does not go on to the run.
  auto c = Check(JobPhase::kSetup, {{0, true, 0}});
  c.driver_error = "ERROR: Job 7 failed: node n (setup, rank 0) could not store its output";
  CHECK(DecidePhaseEnd(c).state == herd::v1::JOB_STATE_FAILED_DRIVER);
}

TEST_CASE("a stop herd decided (time limit, hang) ends FAILED with its line, even if all saved") {
  auto c = Check(JobPhase::kRun, {{0, true, 0}, {1, true, 0}});
  c.stop = JobStop::kKilling;
  c.stop_error = "ERROR: Job 7 failed: it reached its time limit of 5m";
  PhaseStep step = DecidePhaseEnd(c);
  CHECK(step.next == Next::kFinalize);
  CHECK(step.state == herd::v1::JOB_STATE_FAILED);
  CHECK(step.error_line == c.stop_error);
  c.stop = JobStop::kCancelling;  // the user's cancel meanwhile wins
  CHECK(DecidePhaseEnd(c).state == herd::v1::JOB_STATE_CANCELLED);
}

TEST_CASE("fail fast: the first non-zero exit kills the rest, whose exits then count as killed") {
  RankExitStep step = OnRankExit(0, JobStop::kNone);
  CHECK(step.exit_code == 0);
  CHECK_FALSE(step.fail_fast);
  step = OnRankExit(3, JobStop::kNone);
  CHECK(step.exit_code == 3);
  CHECK(step.fail_fast);
  for (JobStop stop : {JobStop::kKilling, JobStop::kCancelling}) {
    step = OnRankExit(-15, stop);
    CHECK(step.exit_code == limits::kKilledRankExitCode);
    CHECK_FALSE(step.fail_fast);
    step = OnRankExit(0, stop);  // a rank that finished cleanly before the kill reached it
    CHECK(step.exit_code == 0);
  }
  CHECK(Killed(JobStop::kNone) == JobStop::kKilling);
  CHECK(Killed(JobStop::kKilling) == JobStop::kKilling);
  CHECK(Killed(JobStop::kCancelling) == JobStop::kCancelling);  // a cancel stays a cancel
}

TEST_CASE("phases and persisted states map both ways; a lost node fails the phase it is in") {
  for (JobPhase phase : {JobPhase::kPending, JobPhase::kSetup, JobPhase::kRun}) {
    CHECK(PhaseOfState(StateOfPhase(phase)) == phase);
  }
  CHECK(StateOfPhase(JobPhase::kSetup) == herd::v1::JOB_STATE_SETTING_UP);
  CHECK(StateOfPhase(JobPhase::kRun) == herd::v1::JOB_STATE_RUNNING);
  CHECK(LostNodeState(JobPhase::kSetup) == herd::v1::JOB_STATE_FAILED_SETUP);
  CHECK(LostNodeState(JobPhase::kRun) == herd::v1::JOB_STATE_FAILED);
}

TEST_CASE("a two-node job through its phases: setup, run, a failure and the kill after it") {
  // Setup on both nodes, both exit 0: the run starts.
  auto setup = Check(JobPhase::kSetup, {{0, false, 0}, {1, false, 0}});
  setup.processes[0] = {0, true, OnRankExit(0, setup.stop).exit_code};
  CHECK(DecidePhaseEnd(setup).next == Next::kWait);
  setup.processes[1] = {1, true, OnRankExit(0, setup.stop).exit_code};
  REQUIRE(DecidePhaseEnd(setup).next == Next::kStartRun);

  // Rank 1 fails: fail fast kills rank 0, whose SIGKILL exit is reported as killed.
  auto run = Check(JobPhase::kRun, {{0, false, 0}, {1, false, 0}});
  RankExitStep first = OnRankExit(1, run.stop);
  REQUIRE(first.fail_fast);
  run.stop = Killed(run.stop);
  run.first_failed_rank = 1;
  run.first_failed_node = "n1";
  run.processes[1] = {1, true, first.exit_code};
  CHECK(DecidePhaseEnd(run).next == Next::kWait);
  RankExitStep second = OnRankExit(-9, run.stop);
  CHECK_FALSE(second.fail_fast);
  run.processes[0] = {0, true, second.exit_code};
  const PhaseStep end = DecidePhaseEnd(run);
  CHECK(end.state == herd::v1::JOB_STATE_FAILED);
  CHECK(end.error_line ==
        "ERROR: Job 7 failed with return code list: [137, 1] (first failure: rank 1 on n1)");
}

}  // namespace
}  // namespace herd::agent
