// A `herd` command run by the API server for a remote CLI: a child process of its own (its own
// process group), with the user's environment and working directory, its stdout and stderr read
// as they come and handed to a callback and appended to the request's log file. Cancel() is the
// remote Ctrl-C: SIGINT to the group, SIGKILL after CommandSpec::cancel_grace. A server
// that dies takes its commands with it (PR_SET_PDEATHSIG): their requests are failed when it
// starts again (ApiStore::FailUnfinished). The server's managed-job controllers are
// RunningCommands too (job_keeper.hpp), and die with it the same way; what a command starts
// detached (a local cluster's nodes) lives on.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "controller/server/stream_frames.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/status.hpp"

namespace herd::server {

struct CommandSpec {
  std::vector<std::string> argv;  // argv[0]: the path of the program
  std::vector<std::string> env;   // the whole environment, "K=V" each
  std::string cwd;
  std::string stdin_data;  // the child's stdin (an anonymous file); "" gives /dev/null
  std::string log_path;    // every output byte is appended here too; "" for none
  // Between Cancel's SIGINT and the SIGKILL of a command still running.
  limits::Duration cancel_grace = limits::kApiCommandCancelGrace;
};

// Starts args (args[0]: the program's path) with exactly env, in cwd ("" : here), in a process
// group of its own, with in, out and err as its stdin, stdout and stderr (-1: /dev/null) and no
// other descriptor, every signal at its default, and SIGKILL when the calling thread ends
// (PR_SET_PDEATHSIG: start it from a thread that lives as long as the server). Returns its pid;
// the caller reaps it.
Result<int> SpawnProcess(std::vector<std::string> args, std::vector<std::string> env,
                         const std::string& cwd, int in, int out, int err);

class RunningCommand {
 public:
  // Called on the command's reader thread, in order, with kStdout or kStderr and the bytes; with
  // kStdout and no bytes after limits::kApiStreamHeartbeat without output (a heartbeat).
  using OutputFn = std::function<void(FrameTag stream, std::string_view bytes)>;

  static Result<std::shared_ptr<RunningCommand>> Start(CommandSpec spec, OutputFn on_output);
  ~RunningCommand();

  // SIGINT now (once), SIGKILL if still running after the grace. Any thread.
  void Cancel();
  // Blocks until the command exited, its output was all delivered and the OnExit functions ran,
  // and the output callback and those functions were destroyed (so what they hold may go once
  // Wait returns); its exit code (128 + signal for a killed one). Not from an OnExit function.
  int Wait();
  // Runs `fn` (on the reader thread, or at once when the command exited already) with the exit
  // code.
  void OnExit(std::function<void(int exit_code)> fn);
  // Whether Wait would return at once.
  bool done() const;
  int pid() const { return pid_; }

 private:
  struct State;
  explicit RunningCommand(std::shared_ptr<State> state, int pid)
      : state_(std::move(state)), pid_(pid) {}
  std::shared_ptr<State> state_;
  int pid_;
};

}  // namespace herd::server
