// A job's phase machine on the head, held in explicit states:
//
//   kPending --placed--> kSetup (setup on every alive node of the cluster) --all exited 0--> kRun
//   kPending --placed, no setup--> kRun (run on each node of the gang, ranks in cluster order)
//   a phase whose processes have all exited ends the job (DecidePhaseEnd): SUCCEEDED, FAILED,
//   FAILED_SETUP, FAILED_DRIVER or CANCELLED.
//
// Its processes move kSent -> kStarted -> (kExitPending) -> kExited, and the job's stop moves
// kNone -> kKilling (fail fast: the first non-zero exit kills every other process) and/or
// kCancelling (the user's cancel). The decisions are pure functions of these states, so the
// transitions are unit-tested without a head (tests/unit/agent/head/job_phase_test.cpp); the head's
// job runner (agent/core/job_runner.cpp) carries them out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/v1/client.pb.h"

namespace herd::agent {

enum class JobPhase {
  kPending,  // queued, not placed
  kSetup,    // SETTING_UP
  kRun,      // RUNNING
};

// How a job's processes are being ended.
enum class JobStop {
  kNone,
  kKilling,     // fail fast, a driver error or the job's end sent KillJob: later non-zero exits
                // report limits::kKilledRankExitCode
  kCancelling,  // the user cancelled (KillJob sent too): the job ends CANCELLED
};

// One process of a job as the head knows it. kExitPending: its ProcessExited came, with output
// the head has not received yet (asked for again); it counts as exited once that is in.
enum class ProcState { kSent, kStarted, kExitPending, kExited };

// The phase a job of this persisted state is in (a restarted head's view of it).
JobPhase PhaseOfState(herd::v1::JobState state);
// The persisted state of a job in this phase.
herd::v1::JobState StateOfPhase(JobPhase phase);

// KillJob was sent: a cancel stays a cancel.
inline JobStop Killed(JobStop stop) { return stop == JobStop::kNone ? JobStop::kKilling : stop; }

// A process of the job exited with exit_code.
struct RankExitStep {
  int exit_code = 0;       // what is recorded for it
  bool fail_fast = false;  // kill every other process of the job (the first failure)
};
RankExitStep OnRankExit(int exit_code, JobStop stop);

// A process of the current phase at the time of the check.
struct PhaseProcess {
  int rank = 0;
  bool exited = false;
  int exit_code = 0;
};
struct PhaseStep {
  enum class Next {
    kWait,      // a process of the phase has not exited
    kStartRun,  // setup succeeded everywhere: start the run phase
    kFinalize,  // the job ends in `state`, with error_line (empty: none) in its log and message
  };
  Next next = Next::kWait;
  herd::v1::JobState state = herd::v1::JOB_STATE_PENDING;
  std::string error_line;
};
struct PhaseCheck {
  int64_t job_id = 0;
  JobPhase phase = JobPhase::kPending;
  JobStop stop = JobStop::kNone;
  std::string driver_error;  // set when output could not be stored: FAILED_DRIVER with it
  // Set when herd stopped the job itself (its time limit, a hung rank): FAILED with it, whatever
  // the ranks' exit codes (a rank that saves on SIGTERM exits 0).
  std::string stop_error;
  int first_failed_rank = -1;
  std::string first_failed_node;
  std::vector<PhaseProcess> processes;  // of the current phase, any order
};
// What follows once a phase's processes may all have exited.
PhaseStep DecidePhaseEnd(const PhaseCheck& check);

// The state a job ends in when a node it runs on is lost (not cancelled).
herd::v1::JobState LostNodeState(JobPhase phase);

}  // namespace herd::agent
