// ProcessLauncher on libuv: one uv_loop on a thread of its own watches every job process of the
// agent; callbacks reach the owner through its `post` function, never on the loop thread.
//
// Each job process runs under its own supervisor (agent/process/step.hpp), started in a session
// of its own: the supervisor holds the job's stdout/stderr (a pty) and writes the node-local log
// and an exit record. This launcher follows the log (inotify, else polling) and watches the
// supervisor (pidfd, else /proc), so processes survive the agent and a new launcher adopts them.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/process/process_launcher.hpp"

namespace herd::agent {

class UvProcessLauncher : public ProcessLauncher {
 public:
  // post(fn) must run fn later on the owner's thread, in the order posted, and must not block.
  // cgroup_scope names the directory (under the agent's own cgroup) holding one cgroup per group;
  // empty: no cgroups, the environment sweep alone (as on a machine without usable cgroups).
  // step_command starts a supervisor (argv prefix: the herd-step program, or {"/proc/self/exe",
  // "--step"} in herdlet); the supervisor's own arguments follow it.
  // Makes this process a child subreaper, so orphaned job descendants are reparented to (and
  // reaped by) it rather than escaping to init.
  UvProcessLauncher(std::function<void(std::function<void()>)> post, std::string cgroup_scope,
                    std::vector<std::string> step_command);
  // Stops supervising: running processes keep running (they are in their own sessions) and no
  // callback is posted any more. A new launcher can still KillGroup them.
  ~UvProcessLauncher() override;

  UvProcessLauncher(const UvProcessLauncher&) = delete;
  UvProcessLauncher& operator=(const UvProcessLauncher&) = delete;

  // Thread-safe. Errors (no such program, bad cwd, log file not writable) leave nothing behind.
  // Returns once the job process was exec'd (or could not be).
  Result<ProcessHandle> Spawn(const SpawnRequest& request, ProcessCallbacks callbacks) override;
  // Thread-safe, returns at once: the supervisor's report is read on the loop thread when it
  // comes. A KillGroup of the group waits until its pending spawns are settled.
  void SpawnAsync(const SpawnRequest& request, ProcessCallbacks callbacks,
                  std::function<void(Result<ProcessHandle>)> done) override;
  // Thread-safe.
  Status Adopt(const ProcessHandle& handle, uint64_t from_offset,
               ProcessCallbacks callbacks) override;
  // Thread-safe. Reads the supervisor's registration (<log>.pid); without one, looks in /proc for
  // a supervisor of that log and group and waits up to limits::kStepRegisterWait for it.
  Result<ProcessHandle> FindStarted(const std::string& group, const std::string& log_path) override;
  // Thread-safe, returns at once; the kill runs on the loop thread: SIGTERM now, SIGKILL after
  // grace, then sweeps every limits::kKillSweepInterval for up to limits::kKillSweepTimeout.
  void KillGroup(const std::string& group, std::chrono::milliseconds grace) override;
  void SignalGroup(const std::string& group, int signal) override;

  // How this machine isolates process groups, e.g. "cgroup2 at /sys/fs/cgroup/unified +
  // HERD_PROCESS_GROUP environment sweep" or "HERD_PROCESS_GROUP environment sweep only".
  static std::string DescribeIsolation();
  // The cgroup directory a group's processes are put in; "" where cgroups are not available.
  std::string CgroupDir(const std::string& group) const;
  // The directory holding every group's cgroup (the scope); "" where cgroups are not available.
  std::string CgroupScopeDir() const;

  // Flow control for output (the node-local log is the buffer): the loop reads a log further
  // only while the bytes it has posted to on_output and not yet delivered, plus
  // downstream_queued() (what the owner has queued and not yet sent: its connection to the head),
  // are under `limit`; else it tries again every limits::kOutputCoalesce. A process's exit is
  // reported after its last byte, so it waits for the reads too. Without this (the default) a
  // job printing faster than the head takes it in grew the agent's queue to the head without
  // bound. Thread-safe; downstream_queued runs on the loop thread, and an empty one turns flow
  // control off (SetOutputBacklog({}, 0) before what it asks goes away: it returns once no call
  // of the old one is in progress).
  void SetOutputBacklog(std::function<std::size_t()> downstream_queued, std::size_t limit);

  // The environment variable every spawned process carries, set to its group.
  static constexpr const char* kGroupEnvVar = "HERD_PROCESS_GROUP";

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace herd::agent
