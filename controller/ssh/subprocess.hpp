// Running local programs without a shell: bounded one-shot commands (ssh, rsync, ip) and detached
// long-lived ones (port forwards, node daemons).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "shared/common/status.hpp"

namespace herd::controller {

struct ProcResult {
  // The exit status; 128 + signal number when the process was killed by a signal (as shells do).
  int exit_code = -1;
  std::string out, err;
  // The timeout ran out and the child's process group was killed.
  bool timed_out = false;
};

// Runs argv[0] (looked up in PATH) with argv, feeding stdin_data and collecting stdout and stderr.
// The child gets its own process group; on timeout the whole group gets SIGKILL. extra_env is
// added to (and overrides) this process's environment. An error means the program could not be
// started at all; a non-zero exit is a ProcResult.
Result<ProcResult> RunProcess(const std::vector<std::string>& argv, std::string_view stdin_data,
                              std::chrono::milliseconds timeout,
                              const std::map<std::string, std::string>& extra_env = {});

// Starts argv in a session of its own (setsid; pid == process group id), stdin from /dev/null,
// stdout and stderr appended to log_path, and returns its pid. The process is not a child of the
// caller (double fork), so it outlives the caller and never becomes the caller's zombie.
// before_exec, when given, runs in the new process just before the exec (after setsid and the
// redirections): only async-signal-safe calls (system calls on data made before), and a non-zero
// return is an errno that fails the start, reported as "cannot prepare <argv[0]>: ...".
Result<pid_t> SpawnDetached(const std::vector<std::string>& argv, const std::string& log_path,
                            const std::map<std::string, std::string>& extra_env = {},
                            const std::function<int()>& before_exec = {});

// "a b 'c d'": argv for messages and logs.
std::string JoinArgv(const std::vector<std::string>& argv);

}  // namespace herd::controller
