// Running a short helper command (nvidia-smi, a node's health check) with its output captured and
// a time limit: the command and whatever it started are killed at the limit.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace herd::agent {

struct CapturedRun {
  bool spawned = false;    // false: it could not be started (output says why)
  bool timed_out = false;  // killed at the limit
  int exit_code = -1;      // its exit code; 128+N when killed by signal N
  std::string output;      // stdout (and stderr when asked), at most max_output bytes
  bool ok() const { return spawned && !timed_out && exit_code == 0; }
};

// Runs argv (PATH searched) with stdin from /dev/null (or `input` when given: a secret such as a
// registry password, never an argument), in a process group of its own, for at most `timeout`.
// input must fit a pipe's buffer (64 KiB).
CapturedRun RunCaptured(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                        bool with_stderr = false, std::size_t max_output = 64 * 1024,
                        const std::string& input = {});

}  // namespace herd::agent
