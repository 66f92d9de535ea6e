#include "controller/ssh/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "shared/common/limits.hpp"

extern char** environ;

namespace herd::controller {
namespace {

using Clock = std::chrono::steady_clock;

// Writing to a pipe whose reader has gone must give EPIPE, not kill the controller.
void IgnoreSigpipeOnce() {
  static std::once_flag once;
  std::call_once(once, [] { ::signal(SIGPIPE, SIG_IGN); });
}

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Close(); }
  int get() const { return fd_; }
  void Reset(int fd) {
    Close();
    fd_ = fd;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

Status MakePipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoError("pipe2", errno);
  read_end.Reset(fds[0]);
  write_end.Reset(fds[1]);
  return Status::Ok();
}

// The environment block for the child, built before fork (no allocation after fork).
std::vector<std::string> BuildEnv(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    auto eq = entry.find('=');
    std::string key(entry.substr(0, eq));
    if (!extra.contains(key)) env.emplace_back(entry);
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Child side after fork: only async-signal-safe calls. Reports errno through report_fd and exits.
[[noreturn]] void ExecOrReport(char* const* argv, char* const* envp, int report_fd) {
  ::signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execvpe(argv[0], argv, envp);
  int err = errno;
  ssize_t ignored = ::write(report_fd, &err, sizeof err);
  (void)ignored;
  ::_exit(127);
}

// Reads the errno a child reported before exec; 0 when exec succeeded (the pipe just closed).
int ReadExecError(int fd) {
  int err = 0;
  ssize_t n;
  do {
    n = ::read(fd, &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof err) ? err : 0;
}

int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

void AppendCapped(std::string& dst, const char* data, size_t n, bool& cut) {
  if (cut) return;
  size_t room =
      limits::kMaxProcessOutputBytes - std::min(dst.size(), limits::kMaxProcessOutputBytes);
  if (n > room) {
    dst.append(data, room);
    dst.append("\n[herd: output cut]\n");
    cut = true;
    return;
  }
  dst.append(data, n);
}

}  // namespace

std::string JoinArgv(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    bool plain = !a.empty() && a.find_first_of(" \t\n'\"\\$`;&|<>(){}*?!#~") == std::string::npos;
    if (plain) {
      out += a;
    } else {
      out += '\'';
      for (char c : a) {
        if (c == '\'') {
          out += "'\\''";
        } else {
          out += c;
        }
      }
      out += '\'';
    }
  }
  return out;
}

Result<ProcResult> RunProcess(const std::vector<std::string>& argv, std::string_view stdin_data,
                              std::chrono::milliseconds timeout,
                              const std::map<std::string, std::string>& extra_env) {
  if (argv.empty()) return InvalidArgument("RunProcess: empty argv");
  IgnoreSigpipeOnce();
  std::vector<std::string> args = argv;
  std::vector<std::string> env = BuildEnv(extra_env);
  std::vector<char*> c_args = CStrings(args);
  std::vector<char*> c_env = CStrings(env);

  Fd in_r, in_w, out_r, out_w, err_r, err_w;
  HERD_RETURN_IF_ERROR(MakePipe(in_r, in_w));
  HERD_RETURN_IF_ERROR(MakePipe(out_r, out_w));
  HERD_RETURN_IF_ERROR(MakePipe(err_r, err_w));

  const auto deadline = Clock::now() + timeout;
  // posix_spawn, not fork: glibc starts the child with CLONE_VM|CLONE_VFORK, so the controller's
  // page tables (tens of MB mapped, several threads) are not copied and then faulted back in
  // copy-on-write for every ssh, ip and ssh-keygen the controller starts. The child
  // gets its own process group (kill(-pid) reaches what it starts), SIGPIPE back to default and
  // no blocked signals, and exec's errno comes back as the return value.
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_adddup2(&files, in_r.get(), STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&files, out_w.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&files, err_w.get(), STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, pipe_only;
  sigemptyset(&none);
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &pipe_only);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  int spawn_err = ::posix_spawnp(&pid, c_args[0], &files, &attr, c_args.data(), c_env.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&files);
  if (spawn_err != 0) return IoError("cannot run " + argv[0] + ": " + std::strerror(spawn_err));
  in_r.Close();
  out_w.Close();
  err_w.Close();

  // A pidfd makes the child's exit one more pollable event; without one (old kernels, some
  // sandboxes) the loop polls waitpid every few milliseconds instead.
  Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));

  ProcResult result;
  bool exited = false;
  int wait_status = 0;
  auto reap = [&](bool block) {
    if (exited) return;
    pid_t r;
    do {
      r = ::waitpid(pid, &wait_status, block ? 0 : WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == pid) exited = true;
  };

  size_t written = 0;
  if (stdin_data.empty()) in_w.Close();
  if (in_w.get() >= 0) ::fcntl(in_w.get(), F_SETFL, O_NONBLOCK);
  bool out_cut = false, err_cut = false;
  Clock::time_point drain_deadline = Clock::time_point::max();
  char buf[65536];

  while (true) {
    reap(false);
    if (exited && drain_deadline == Clock::time_point::max()) {
      drain_deadline = Clock::now() + limits::kProcessOutputDrainGrace;
    }
    bool pipes_open = out_r.get() >= 0 || err_r.get() >= 0;
    if (exited && (!pipes_open || Clock::now() >= drain_deadline)) break;
    auto now = Clock::now();
    if (now >= deadline) {
      result.timed_out = true;
      break;
    }
    auto until = std::min(deadline, drain_deadline);
    auto wait_ms = std::chrono::ceil<std::chrono::milliseconds>(until - now).count();
    if (pidfd.get() < 0 && !exited) wait_ms = std::min<long>(wait_ms, 5);

    pollfd fds[4];
    int nfds = 0;
    int i_out = -1, i_err = -1, i_in = -1;
    if (out_r.get() >= 0) fds[i_out = nfds++] = {out_r.get(), POLLIN, 0};
    if (err_r.get() >= 0) fds[i_err = nfds++] = {err_r.get(), POLLIN, 0};
    if (in_w.get() >= 0) fds[i_in = nfds++] = {in_w.get(), POLLOUT, 0};
    if (pidfd.get() >= 0 && !exited) fds[nfds++] = {pidfd.get(), POLLIN, 0};
    int pr = ::poll(fds, nfds, static_cast<int>(std::min<long>(wait_ms, 1 << 30)));
    if (pr < 0) {
      if (errno == EINTR) continue;
      Status st = ErrnoError("poll", errno);
      ::kill(-pid, SIGKILL);
      reap(true);
      return st;
    }
    auto drain = [&](int idx, Fd& fd, std::string& dst, bool& cut) {
      if (idx < 0 || fds[idx].revents == 0) return;
      ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n > 0) {
        AppendCapped(dst, buf, static_cast<size_t>(n), cut);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        fd.Close();
      }
    };
    drain(i_out, out_r, result.out, out_cut);
    drain(i_err, err_r, result.err, err_cut);
    if (i_in >= 0 && fds[i_in].revents != 0) {
      ssize_t n = ::write(in_w.get(), stdin_data.data() + written, stdin_data.size() - written);
      if (n > 0) written += static_cast<size_t>(n);
      if ((n < 0 && errno != EAGAIN && errno != EINTR) || written == stdin_data.size()) {
        in_w.Close();
      }
    }
  }

  if (result.timed_out) {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
  }
  reap(true);
  result.exit_code = DecodeWaitStatus(wait_status);
  return result;
}

Result<pid_t> SpawnDetached(const std::vector<std::string>& argv, const std::string& log_path,
                            const std::map<std::string, std::string>& extra_env,
                            const std::function<int()>& before_exec) {
  if (argv.empty()) return InvalidArgument("SpawnDetached: empty argv");
  IgnoreSigpipeOnce();
  std::vector<std::string> args = argv;
  std::vector<std::string> env = BuildEnv(extra_env);
  std::vector<char*> c_args = CStrings(args);
  std::vector<char*> c_env = CStrings(env);

  Fd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (log.get() < 0) return ErrnoError("open " + log_path, errno);
  Fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (devnull.get() < 0) return ErrnoError("open /dev/null", errno);
  Fd pid_r, pid_w, rep_r, rep_w;
  HERD_RETURN_IF_ERROR(MakePipe(pid_r, pid_w));
  HERD_RETURN_IF_ERROR(MakePipe(rep_r, rep_w));

  pid_t mid = ::fork();
  if (mid < 0) return ErrnoError("fork", errno);
  if (mid == 0) {
    pid_t grandchild = ::fork();
    if (grandchild == 0) {
      ::setsid();
      ::dup2(devnull.get(), STDIN_FILENO);
      ::dup2(log.get(), STDOUT_FILENO);
      ::dup2(log.get(), STDERR_FILENO);
      if (before_exec) {
        // Told apart from exec's errno by the sign.
        if (int err = before_exec(); err != 0) {
          int report = -err;
          ssize_t ignored = ::write(rep_w.get(), &report, sizeof report);
          (void)ignored;
          ::_exit(127);
        }
      }
      ExecOrReport(c_args.data(), c_env.data(), rep_w.get());
    }
    ssize_t ignored = ::write(pid_w.get(), &grandchild, sizeof grandchild);
    (void)ignored;
    ::_exit(grandchild < 0 ? 1 : 0);
  }
  pid_w.Close();
  rep_w.Close();
  int mid_status = 0;
  while (::waitpid(mid, &mid_status, 0) < 0 && errno == EINTR) {
  }
  pid_t pid = -1;
  ssize_t n;
  do {
    n = ::read(pid_r.get(), &pid, sizeof pid);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof pid) || pid <= 0) {
    return IoError("cannot start " + argv[0] + ": fork failed");
  }
  if (int err = ReadExecError(rep_r.get()); err != 0) {
    if (err < 0) return IoError("cannot prepare " + argv[0] + ": " + std::strerror(-err));
    return IoError("cannot run " + argv[0] + ": " + std::strerror(err));
  }
  return pid;
}

}  // namespace herd::controller
