#include "controller/server/command_runner.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"

namespace herd::server {

struct RunningCommand::State {
  std::mutex mu;
  std::condition_variable cv;
  bool exited = false;  // the process was reaped: OnExit runs functions at once
  bool done = false;    // and the OnExit functions ran: Wait returns
  int exit_code = -1;
  std::vector<std::function<void(int)>> on_exit;
  std::atomic<bool> cancel{false};
};

namespace {

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// What the child of SpawnProcess reads between its start and exec, all made before it starts.
struct ChildSetup {
  char** argv;
  char** envp;
  const char* cwd;  // nullptr: stay here
  int in, out, err;
  pid_t parent;
  int max_fd;
};

// The child, up to exec. It shares the server's memory (CLONE_VM) and runs on a stack of its own
// while the thread that started it waits, so only system calls here: no allocation, no lock,
// nothing another of the server's threads could hold.
int ChildMain(void* arg) {
  const auto* c = static_cast<const ChildSetup*>(arg);
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != c->parent) ::_exit(127);  // the server died before the line above
  int null = ::open("/dev/null", O_RDWR);
  ::dup2(c->in >= 0 ? c->in : null, STDIN_FILENO);
  ::dup2(c->out >= 0 ? c->out : null, STDOUT_FILENO);
  ::dup2(c->err >= 0 ? c->err : null, STDERR_FILENO);
  if (::syscall(SYS_close_range, 3u, ~0u, 0u) != 0) {
    for (int fd = 3; fd < c->max_fd; ++fd) ::close(fd);
  }
  // The child's signal dispositions are its own (no CLONE_SIGHAND): resetting them here leaves
  // the server's as they are.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (c->cwd && ::chdir(c->cwd) != 0) ::_exit(126);
  ::execve(c->argv[0], c->argv, c->envp);
  ::_exit(127);
}

}  // namespace

Result<int> SpawnProcess(std::vector<std::string> args, std::vector<std::string> env,
                         const std::string& cwd, int in, int out, int err) {
  if (args.empty()) return InvalidArgument("no command to run");
  // Everything the child needs is made before it starts: it runs only system calls up to exec.
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  // The child keeps only stdin, stdout and stderr: the server's listener, its clients'
  // connections and its files are opened without close-on-exec by the libraries (Asio), and a
  // command that lives on (a detached managed-job controller) would hold them.
  int max_fd = 1 << 16;
  if (rlimit rl{}; ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    max_fd = static_cast<int>(std::min<rlim_t>(rl.rlim_cur, 1 << 20));
  }
  ChildSetup setup{argv.data(), envp.data(), cwd.empty() ? nullptr : cwd.c_str(), in, out, err,
                   ::getpid(),  max_fd};
  // The child shares the server's memory until its exec (CLONE_VM | CLONE_VFORK, as
  // posix_spawn does; posix_spawn cannot set PR_SET_PDEATHSIG). A fork would copy the server's
  // page tables and make every page the server's threads write next fault once to be copied or
  // taken back, with a TLB flush on every CPU that runs one of them: under load that stalled the
  // server for a second per few commands started.
  constexpr std::size_t kStack = 256 << 10;
  void* stack = ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return ErrnoError("mmap (a child's stack)", errno);
  // Every signal is blocked across the start, in the child until it has reset every disposition:
  // a signal sent to the child's group (Cancel) before its exec must not run one of the server's
  // handlers there (Asio's SIGINT/SIGTERM handler writes to a pipe the server reads, and the
  // server would stop).
  sigset_t all, old_mask;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  // Returns once the child has exec'd or exited (CLONE_VFORK): its stack is free again then.
  const pid_t pid = ::clone(ChildMain, static_cast<char*>(stack) + kStack,
                            CLONE_VM | CLONE_VFORK | SIGCHLD, &setup);
  const int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  ::munmap(stack, kStack);
  if (pid < 0) return ErrnoError("clone", clone_errno);
  ::setpgid(pid, pid);  // also here: no race with a signal to its group (Cancel) right after
  return pid;
}

Result<std::shared_ptr<RunningCommand>> RunningCommand::Start(CommandSpec spec,
                                                              OutputFn on_output) {
  if (spec.argv.empty()) return InvalidArgument("no command to run");
  int in = -1;
  if (!spec.stdin_data.empty()) {
    in = ::memfd_create("herd-api-stdin", MFD_CLOEXEC);
    if (in < 0) return ErrnoError("memfd_create", errno);
    if (int err = WriteAll(in, spec.stdin_data); err != 0) {
      ::close(in);
      return ErrnoError("writing the command's stdin", err);
    }
    ::lseek(in, 0, SEEK_SET);
  }
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return ErrnoError("pipe", errno);
  }
  auto spawned = SpawnProcess(spec.argv, spec.env, spec.cwd, in, out[1], err[1]);
  if (!spawned.ok()) {
    for (int fd : {out[0], out[1], err[0], err[1], in}) {
      if (fd >= 0) ::close(fd);
    }
    return spawned.status();
  }
  const pid_t pid = *spawned;
  ::close(out[1]);
  ::close(err[1]);
  if (in >= 0) ::close(in);

  auto state = std::make_shared<State>();
  std::thread([state, pid, fo = out[0], fe = err[0], on_output = std::move(on_output),
               log_path = spec.log_path, grace = spec.cancel_grace]() mutable {
    int log = log_path.empty()
                  ? -1
                  : ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    std::vector<pollfd> fds = {{fo, POLLIN, 0}, {fe, POLLIN, 0}};
    int open_fds = 2;
    bool interrupted = false;
    std::chrono::steady_clock::time_point kill_at{};
    std::string buf(limits::kApiMaxFrameBytes, '\0');
    auto last_output = std::chrono::steady_clock::now();
    auto honour_cancel = [&] {
      if (state->cancel && !interrupted) {
        interrupted = true;
        ::kill(-pid, SIGINT);
        kill_at = std::chrono::steady_clock::now() + grace;
      }
      if (interrupted && std::chrono::steady_clock::now() >= kill_at) ::kill(-pid, SIGKILL);
    };
    while (open_fds > 0) {
      if (std::chrono::steady_clock::now() - last_output >= limits::kApiStreamHeartbeat) {
        if (on_output) on_output(FrameTag::kStdout, {});
        last_output = std::chrono::steady_clock::now();
      }
      honour_cancel();
      int n = ::poll(fds.data(), fds.size(), 100);
      if (n < 0 && errno != EINTR) break;
      for (std::size_t i = 0; n > 0 && i < fds.size(); ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        ssize_t got = ::read(fds[i].fd, buf.data(), buf.size());
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got <= 0) {
          ::close(fds[i].fd);
          fds[i].fd = -1;
          --open_fds;
          continue;
        }
        std::string_view bytes(buf.data(), static_cast<std::size_t>(got));
        last_output = std::chrono::steady_clock::now();
        if (log >= 0) (void)WriteAll(log, bytes);
        if (on_output) on_output(i == 0 ? FrameTag::kStdout : FrameTag::kStderr, bytes);
      }
    }
    for (auto& p : fds) {
      if (p.fd >= 0) ::close(p.fd);
    }
    // A command may close its output and run on (`exec >/dev/null`): it is still cancellable
    // until it exits, so wait for it without blocking.
    // Its exit is waited for on a pidfd (no polling interval added to every command's end).
    int status = 0;
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    while (true) {
      const pid_t got = ::waitpid(pid, &status, WNOHANG);
      if (got == pid || (got < 0 && errno != EINTR)) break;
      honour_cancel();
      if (pidfd >= 0) {
        pollfd p{pidfd, POLLIN, 0};
        (void)::poll(&p, 1, 100);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    if (pidfd >= 0) ::close(pidfd);
    if (log >= 0) ::close(log);
    // What the caller handed in is let go of, and the OnExit functions have run and are gone,
    // before Wait returns: the caller may tear down what they refer to right after.
    on_output = nullptr;
    const int code = ExitCodeOf(status);
    std::vector<std::function<void(int)>> callbacks;
    {
      std::lock_guard<std::mutex> l(state->mu);
      state->exited = true;
      state->exit_code = code;
      callbacks.swap(state->on_exit);
    }
    for (auto& fn : callbacks) fn(code);
    callbacks.clear();
    {
      std::lock_guard<std::mutex> l(state->mu);
      state->done = true;
    }
    state->cv.notify_all();
  }).detach();
  return std::shared_ptr<RunningCommand>(new RunningCommand(state, pid));
}

RunningCommand::~RunningCommand() = default;

void RunningCommand::Cancel() { state_->cancel = true; }

int RunningCommand::Wait() {
  std::unique_lock<std::mutex> l(state_->mu);
  state_->cv.wait(l, [&] { return state_->done; });
  return state_->exit_code;
}

void RunningCommand::OnExit(std::function<void(int)> fn) {
  int code = 0;
  {
    std::lock_guard<std::mutex> l(state_->mu);
    if (!state_->exited) {
      state_->on_exit.push_back(std::move(fn));
      return;
    }
    code = state_->exit_code;
  }
  fn(code);
}

bool RunningCommand::done() const {
  std::lock_guard<std::mutex> l(state_->mu);
  return state_->done;
}

}  // namespace herd::server
