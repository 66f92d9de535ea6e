// The seam between the agent and the operating system's processes. The real implementation
// (uv_process_launcher) uses libuv; tests of the agent logic use a fake.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "shared/common/status.hpp"

namespace herd::agent {

struct SpawnRequest {
  // Groups processes for KillGroup: every process of one (job, attempt) shares a group.
  std::string group;
  std::vector<std::string> argv;           // argv[0] is looked up in PATH
  std::map<std::string, std::string> env;  // added to (or replacing in) the agent's environment
  std::vector<std::string> unset_env;      // removed from the agent's environment
  std::string cwd;                         // empty: inherit
  // Every byte of stdout and stderr is appended here (the node-local log) before on_output runs.
  // Required: the log is how the agent sees a process's output, also after an agent restart.
  std::string log_path;
};

// What an agent keeps (persisted in its state dir) to find a process again after a restart.
struct ProcessHandle {
  int pid = 0;                    // the job process
  int supervisor_pid = 0;         // its supervisor (step), which outlives the agent
  uint64_t supervisor_start = 0;  // the supervisor's start time: guards against pid reuse
  std::string group;
  std::string log_path;
  uint64_t log_start = 0;  // the log's size when the process started
};

struct ProcessCallbacks {
  // Bytes from stdout or stderr, in the order read; offset is their position in log_path.
  std::function<void(uint64_t offset, std::string_view data)> on_output;
  // After the last on_output. exit_code is 128+signal when killed by a signal; end_offset is the
  // log's size after the process's last byte. output_error is non-empty when the log could not be
  // written (disk full: "cannot write PATH: No space left on device"); the process was stopped.
  std::function<void(int exit_code, int term_signal, uint64_t end_offset,
                     const std::string& output_error)>
      on_exit;
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts the process in its own session (so it does not die with the agent).
  virtual Result<ProcessHandle> Spawn(const SpawnRequest& request, ProcessCallbacks callbacks) = 0;
  // As Spawn, without waiting for the process to start: `done` gets what Spawn would return, on
  // the owner's thread (as the callbacks), before any callback of the process. The owner's thread
  // is free meanwhile (a supervisor's start is a fork and two execs: milliseconds on a loaded
  // machine). This default runs Spawn and calls done at once.
  virtual void SpawnAsync(const SpawnRequest& request, ProcessCallbacks callbacks,
                          std::function<void(Result<ProcessHandle>)> done) {
    done(Spawn(request, std::move(callbacks)));
  }
  // Supervises a process that an earlier launcher (a previous agent process) spawned: its output
  // from from_offset on, then its exit. A process that ended meanwhile is reported at once (what
  // its log holds from from_offset, then its exit record).
  virtual Status Adopt(const ProcessHandle& handle, uint64_t from_offset,
                       ProcessCallbacks callbacks) = 0;
  // Finds a process whose Spawn (group, log_path) an earlier launcher began but whose result its
  // agent never recorded (it died in between). Its handle when the supervisor proves it is that
  // process (its registration names the group); NotFound when nothing was started for that log
  // (nothing runs); another error when a supervisor exists but cannot be proven right (it and the
  // group are then killed).
  virtual Result<ProcessHandle> FindStarted(const std::string& group,
                                            const std::string& log_path) = 0;
  // SIGTERM to every process of the group, including descendants that called setsid, then SIGKILL
  // to whatever is left after grace; repeated sweeps until nothing of the group is left.
  virtual void KillGroup(const std::string& group, std::chrono::milliseconds grace) = 0;
  // One signal to every process of the group (the same ones KillGroup finds), once; the
  // processes go on unless it ends them (a time limit's --signal).
  virtual void SignalGroup(const std::string& group, int signal) = 0;
};

}  // namespace herd::agent
