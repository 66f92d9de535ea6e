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
  std::string log_path;
};

struct ProcessCallbacks {
  // Bytes from stdout or stderr, in the order read; offset is their position in log_path.
  std::function<void(uint64_t offset, std::string_view data)> on_output;
  // After the last on_output. exit_code is 128+signal when killed by a signal.
  std::function<void(int exit_code, int term_signal, uint64_t total_bytes)> on_exit;
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts the process in its own session (so it does not die with the agent) and returns its pid.
  virtual Result<int> Spawn(const SpawnRequest& request, ProcessCallbacks callbacks) = 0;
  // SIGTERM to every process of the group, including descendants that called setsid, then SIGKILL
  // to whatever is left after grace; repeated sweeps until nothing of the group is left.
  virtual void KillGroup(const std::string& group, std::chrono::milliseconds grace) = 0;
};

}  // namespace herd::agent
