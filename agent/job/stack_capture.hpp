// Stacks of a rank's processes without stopping them, on the agent (CaptureStacks):
// - Python frames through the interpreter's faulthandler. The agent puts a sitecustomize.py
//   (PythonHookSource) first on the PYTHONPATH of every run process; in each Python the job starts
//   it registers faulthandler for SIGUSR2, dumping every thread into <HERD_STACKS_DIR>/<pid>.stack
//   (then runs the sitecustomize it shadows, Debian's or a virtualenv's). A capture sends SIGUSR2
//   and reads what the dump appended.
// - Native frames with eu-stack (elfutils), else gdb, where installed; each bounded by
//   limits::kNativeStackTimeout, all processes at once.
// The text is what StackReport.text carries: per process a "== pid N (comm): cmdline" line, its
// Python threads as faulthandler prints them, then its native frames.
#pragma once

#include <string>
#include <vector>

#include "shared/common/status.hpp"

namespace herd::agent {

// The environment variable that names the dump directory for the hook.
inline constexpr const char* kStacksDirEnv = "HERD_STACKS_DIR";

// The sitecustomize.py the agent installs.
std::string PythonHookSource();
// Writes it into dir (created) unless it already holds exactly that; dir is what goes first on
// PYTHONPATH.
Status InstallPythonHook(const std::string& dir);
// PYTHONPATH for a job process: hook_dir, then what it had (its own value, else the agent's).
std::string PythonPathWith(const std::string& hook_dir, const std::string& existing);

struct StackTools {
  std::string eu_stack;  // absolute paths; "" when not installed
  std::string gdb;
};
// Looks for eu-stack and gdb on PATH (and in /usr/bin).
StackTools FindStackTools();

// The stacks of pid and its descendants (at most max_processes of them), as one text of at most
// limits::kMaxStackReportBytes. dump_dir: the job's HERD_STACKS_DIR on this node.
std::string CaptureTreeStacks(int pid, const std::string& dump_dir, const StackTools& tools,
                              std::size_t max_processes = 64);

// Runs argv (no shell), returns its stdout and stderr; killed after timeout_ms. For the tools.
std::string RunBounded(const std::vector<std::string>& argv, int timeout_ms);

}  // namespace herd::agent
