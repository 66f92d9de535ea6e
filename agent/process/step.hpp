// The per-process supervisor ("step", as Slurm's slurmstepd or podman's conmon): a small program
// that the launcher starts in a session of its own for every job process. It outlives the agent:
// it holds the job's stdout and stderr (a pty in raw mode, or a pipe where no pty can be opened),
// copies every byte into the node-local log (O_APPEND) and, when the job process has exited and
// its output is drained, writes an exit record next to the log (atomically, over room reserved
// at start: PATH.exit.reserve) and exits. A log it cannot write (disk full) stops the job; the
// record then carries the error. The agent
// never holds the job's output: it follows the log file and watches the supervisor, so an agent
// that dies or restarts costs the job nothing (docs/ARCHITECTURE.md, section 5).
//
// Command line (after the program name): --log PATH --exit PATH --marker KEY=VALUE
//   [--cgroup-procs PATH] [--cwd DIR] [--pipe] -- PROGRAM [ARGS...]
// The job's environment is the supervisor's own plus the marker (which the supervisor itself does
// not carry, so the kill sweep of a group never signals it). PROGRAM is a path (resolved by the
// launcher). On stdout, which the launcher reads, the supervisor reports "ok PID\n" once the
// program was exec'd, or "err ERRNO MESSAGE\n" (and exits 1, writing no exit record). Just before
// "ok" it registers itself in <log>.pid (StepRegistration, written atomically), so an agent that
// died before reading "ok" is replaced by one that can still find the process.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace herd::agent {

// Runs the supervisor; argv[0] is a program name. Returns its exit status.
int RunStep(int argc, char** argv);

// Like fork(), but the child starts in the cgroup directory `cgroup_dir` (none when empty). Where
// the kernel can (Linux 5.7+, a cgroup v2 hierarchy) the child is created there by
// clone3(CLONE_INTO_CGROUP); otherwise (or with `via_clone3` false) it is forked and moves itself
// by writing its pid to cgroup.procs before this returns in it. The move takes the kernel's
// cgroup_threadgroup_rwsem for writing, which waits for an RCU grace period unless another move
// happened just before: milliseconds per job process, where CLONE_INTO_CGROUP takes a fraction
// of one. A failed move only costs the cgroup (the
// agent's environment sweep still finds the process). Only async-signal-safe calls in the child.
// In the parent, *by_clone3 (when given) says whether clone3 created the child.
pid_t ForkIntoCgroup(const std::string& cgroup_dir, bool via_clone3 = true,
                     bool* by_clone3 = nullptr);

// What a supervisor recorded when its job process ended.
struct ExitRecord {
  int exit_code = 0;    // 128+signal when the process was killed by a signal
  int term_signal = 0;  // 0 when it exited normally
  uint64_t end = 0;     // the log's size after the process's last byte
  bool pty = false;     // stdout was a pty (else a pipe)
  // Non-empty when the log could not be written (e.g. "cannot write PATH: No space left on
  // device"): the supervisor stopped the job then, and the log ends at `end`.
  std::string error;
};

// What a supervisor registered once its job process was exec'd.
struct StepRegistration {
  int pid = 0;                    // the job process
  int supervisor_pid = 0;         // the supervisor itself
  uint64_t supervisor_start = 0;  // its start time (/proc/PID/stat field 22)
  uint64_t log_start = 0;         // the log's size when the supervisor opened it
  std::string marker;             // --marker KEY=VALUE: names the group (job and attempt)
};

// The registration next to a log.
std::string StepRegistrationPath(const std::string& log_path);
// nullopt when there is none (yet), or it cannot be parsed.
std::optional<StepRegistration> ReadStepRegistration(const std::string& path);

// The exit record next to a log.
std::string ExitRecordPath(const std::string& log_path);
// nullopt when there is none (yet), or it cannot be parsed.
std::optional<ExitRecord> ReadExitRecord(const std::string& path);

}  // namespace herd::agent
