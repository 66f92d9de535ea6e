#include "agent/gpu/run_captured.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shared/common/log.hpp"

extern char** environ;

namespace herd::agent {

CapturedRun RunCaptured(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                        bool with_stderr, std::size_t max_output, const std::string& input) {
  CapturedRun run;
  int in[2] = {-1, -1};
  if (!input.empty()) {
    constexpr std::size_t kPipeBuffer = 64 * 1024;
    if (input.size() > kPipeBuffer || ::pipe2(in, O_CLOEXEC) != 0 ||
        ::write(in[1], input.data(), input.size()) != static_cast<ssize_t>(input.size())) {
      if (in[0] >= 0) ::close(in[0]);
      if (in[1] >= 0) ::close(in[1]);
      run.output = "cannot pass the input to " + (argv.empty() ? std::string("?") : argv[0]);
      return run;
    }
    ::close(in[1]);
  }
  int fds[2];
  if (argv.empty() || ::pipe2(fds, O_CLOEXEC) != 0) {
    if (in[0] >= 0) ::close(in[0]);
    run.output = argv.empty() ? "no command" : std::string("pipe: ") + std::strerror(errno);
    return run;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (in[0] >= 0) {
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  if (with_stderr) {
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group, so a timeout kills whatever it started too.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (in[0] >= 0) ::close(in[0]);
  if (rc != 0) {
    ::close(fds[0]);
    run.output = "cannot run " + argv[0] + ": " + std::strerror(rc);
    return run;
  }
  run.spawned = true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      run.timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      run.timed_out = n == 0;
      break;
    }
    char buf[4096];
    const ssize_t r = ::read(fds[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    const std::size_t room = max_output - std::min(max_output, run.output.size());
    run.output.append(buf, std::min(room, static_cast<std::size_t>(r)));
  }
  ::close(fds[0]);
  if (run.timed_out) {
    HERD_LOG(kWarn) << argv[0] << " did not finish within " << timeout.count() << " ms";
    ::kill(-pid, SIGKILL);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) {
    run.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    run.exit_code = 128 + WTERMSIG(status);
  }
  return run;
}

}  // namespace herd::agent
