#include "agent/process/step.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "agent/process/proc_scan.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"

extern char** environ;

namespace herd::agent {
namespace {

using Clock = std::chrono::steady_clock;

struct StepArgs {
  std::string log, exit, marker, cgroup_procs, cwd;
  bool pipe = false;
  std::vector<std::string> argv;
};

bool ParseArgs(int argc, char** argv, StepArgs& a) {
  int i = 1;
  for (; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "--pipe") {
      a.pipe = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    std::string value = argv[++i];
    if (arg == "--log")
      a.log = value;
    else if (arg == "--exit")
      a.exit = value;
    else if (arg == "--marker")
      a.marker = value;
    else if (arg == "--cgroup-procs")
      a.cgroup_procs = value;
    else if (arg == "--cwd")
      a.cwd = value;
    else
      return false;
  }
  for (; i < argc; ++i) a.argv.emplace_back(argv[i]);
  return !a.log.empty() && !a.exit.empty() && !a.argv.empty() &&
         a.marker.find('=') != std::string::npos;
}

void Report(const std::string& line) { WriteAll(STDOUT_FILENO, line); }

// The job process and every process of its group (found by the marker, as the agent's KillGroup
// finds them; the supervisor does not carry the marker itself).
void SignalGroup(pid_t child, bool child_done, const std::string& marker, int sig) {
  if (!child_done) ::kill(child, sig);
  for (int pid : procfs::FindLiveByEnvEntry(marker)) ::kill(pid, sig);
}

// The exit record goes over the bytes reserved at start (no new blocks needed on a full disk),
// then takes its name atomically: not WriteFileAtomic, which would need new blocks, but its
// WriteAll. Falls back to WriteFileAtomic where that fails. No fsync (as the registration and the
// agent's process table), which would delay every process's end: the record is read by this
// node's agent, also after the agent's crash; a power failure or kernel crash ends the job and its
// supervisor anyway (the agent then reports it killed).
bool WriteExitRecord(const std::string& path, int reserve_fd, const std::string& reserve_path,
                     const std::string& record) {
  if (reserve_fd >= 0) {
    bool ok = ::lseek(reserve_fd, 0, SEEK_SET) == 0 && WriteAll(reserve_fd, record) == 0 &&
              ::ftruncate(reserve_fd, static_cast<off_t>(record.size())) == 0;
    ::close(reserve_fd);
    if (ok && ::rename(reserve_path.c_str(), path.c_str()) == 0) return true;
    ::unlink(reserve_path.c_str());
  }
  return WriteFileAtomic(path, record, 0644, Durability::kProcessCrash).ok();
}

// A pty whose slave is in raw mode (no \n -> \r\n, no echo, no signals from control characters),
// so the job's bytes reach the log unaltered; programs see a terminal and line-buffer (Python).
bool OpenPty(int& master, int& slave) {
  master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) return false;
  char name[128];
  if (::grantpt(master) != 0 || ::unlockpt(master) != 0 ||
      ::ptsname_r(master, name, sizeof name) != 0) {
    ::close(master);
    return false;
  }
  slave = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (slave < 0) {
    ::close(master);
    return false;
  }
  struct termios t {};
  if (::tcgetattr(slave, &t) == 0) {
    ::cfmakeraw(&t);
    ::tcsetattr(slave, TCSANOW, &t);
  }
  struct winsize ws {};
  ws.ws_row = 50;
  ws.ws_col = 200;
  ::ioctl(slave, TIOCSWINSZ, &ws);
  return true;
}

// In the forked child, before exec: only async-signal-safe calls and the environment.
[[noreturn]] void ExecChild(const StepArgs& a, int out, int errpipe, bool pty) {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) ::signal(sig, SIG_DFL);
  int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0 && devnull != 0) {
    ::dup2(devnull, 0);
    ::close(devnull);
  }
  ::dup2(out, 1);
  ::dup2(out, 2);
  int err = 0;
  if (!a.cwd.empty() && ::chdir(a.cwd.c_str()) != 0) err = errno;
  if (err == 0) {
    size_t eq = a.marker.find('=');
    ::setenv(a.marker.substr(0, eq).c_str(), a.marker.substr(eq + 1).c_str(), 1);
    if (pty) {
      // stdout is a terminal nobody types on: a pager would wait forever, colours and cursor
      // movement would only clutter the log. A task's own setting wins.
      ::setenv("PAGER", "cat", 0);
      ::setenv("GIT_PAGER", "cat", 0);
      ::setenv("TERM", "dumb", 0);
    } else {
      // A pipe: Python would block-buffer its output (SkyPilot's default).
      ::setenv("PYTHONUNBUFFERED", "1", 0);
    }
    std::vector<char*> argv;
    for (const auto& s : a.argv) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    err = errno;
  }
  ssize_t ignored = ::write(errpipe, &err, sizeof err);
  (void)ignored;
  ::_exit(127);
}

// clone3's argument, as far as CLONE_ARGS_SIZE_VER2 (Linux 5.7, which added `cgroup`); declared
// here so that the build does not depend on the kernel headers' version.
struct CloneArgs {
  uint64_t flags = 0, pidfd = 0, child_tid = 0, parent_tid = 0, exit_signal = 0, stack = 0,
           stack_size = 0, tls = 0, set_tid = 0, set_tid_size = 0, cgroup = 0;
};
static_assert(sizeof(CloneArgs) == 88, "CLONE_ARGS_SIZE_VER2");
constexpr uint64_t kCloneIntoCgroup = 0x200000000ULL;  // CLONE_INTO_CGROUP

}  // namespace

pid_t ForkIntoCgroup(const std::string& cgroup_dir, bool via_clone3, bool* by_clone3) {
  if (by_clone3) *by_clone3 = false;
  if (cgroup_dir.empty()) return ::fork();
  if (via_clone3) {
    int cg = ::open(cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cg >= 0) {
      CloneArgs args;
      args.flags = kCloneIntoCgroup;
      args.exit_signal = SIGCHLD;
      args.cgroup = static_cast<uint64_t>(cg);
      long pid = ::syscall(SYS_clone3, &args, sizeof args);
      if (pid == 0) return 0;  // the child: already in the cgroup (cg is close-on-exec)
      ::close(cg);
      if (pid > 0) {
        if (by_clone3) *by_clone3 = true;
        return static_cast<pid_t>(pid);
      }
      // ENOSYS (before 5.3), E2BIG/EINVAL (before 5.7), EBADF (a v1 hierarchy), EBUSY, EPERM
      // (seccomp): the move below still works, or fails as it would have.
    }
  }
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  // The child, before anything else can run in it: only async-signal-safe calls.
  char path[4096];
  const std::string_view procs = "/cgroup.procs";
  if (cgroup_dir.size() + procs.size() < sizeof path) {
    std::memcpy(path, cgroup_dir.data(), cgroup_dir.size());
    std::memcpy(path + cgroup_dir.size(), procs.data(), procs.size());
    path[cgroup_dir.size() + procs.size()] = '\0';
    int fd = ::open(path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      char digits[24];
      size_t n = 0;
      for (unsigned long v = static_cast<unsigned long>(::getpid()); n == 0 || v != 0; v /= 10)
        digits[sizeof digits - 1 - n++] = static_cast<char>('0' + v % 10);
      ssize_t ignored = ::write(fd, digits + sizeof digits - n, n);
      (void)ignored;
      ::close(fd);
    }
  }
  return 0;
}

std::string ExitRecordPath(const std::string& log_path) { return log_path + ".exit"; }

std::string StepRegistrationPath(const std::string& log_path) { return log_path + ".pid"; }

std::optional<StepRegistration> ReadStepRegistration(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok() || text->empty() || text->back() != '\n') return std::nullopt;
  StepRegistration r;
  size_t pos = 0;
  while (pos < text->size()) {
    size_t nl = text->find('\n', pos);
    std::string line = text->substr(pos, nl - pos);
    pos = nl + 1;
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq);
    std::string v = line.substr(eq + 1);
    if (key == "pid") r.pid = std::atoi(v.c_str());
    if (key == "supervisor") r.supervisor_pid = std::atoi(v.c_str());
    if (key == "supervisor_start") r.supervisor_start = std::strtoull(v.c_str(), nullptr, 10);
    if (key == "log_start") r.log_start = std::strtoull(v.c_str(), nullptr, 10);
    if (key == "marker") r.marker = v;
  }
  if (r.pid <= 0 || r.supervisor_pid <= 0 || r.marker.empty()) return std::nullopt;
  return r;
}

std::optional<ExitRecord> ReadExitRecord(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return std::nullopt;
  ExitRecord r;
  bool have_code = false, have_end = false;
  size_t pos = 0;
  while (pos < text->size()) {
    size_t nl = text->find('\n', pos);
    if (nl == std::string::npos) return std::nullopt;  // written atomically: never half a line
    std::string line = text->substr(pos, nl - pos);
    pos = nl + 1;
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq);
    const char* v = line.c_str() + eq + 1;
    if (key == "exit_code") {
      r.exit_code = std::atoi(v);
      have_code = true;
    } else if (key == "signal") {
      r.term_signal = std::atoi(v);
    } else if (key == "end") {
      r.end = std::strtoull(v, nullptr, 10);
      have_end = true;
    } else if (key == "stdout") {
      r.pty = std::string_view(v) == "pty";
    } else if (key == "error") {
      r.error = v;
    }
  }
  if (!have_code || !have_end) return std::nullopt;
  return r;
}

int RunStep(int argc, char** argv) {
  StepArgs a;
  if (!ParseArgs(argc, argv, a)) {
    Report("err " + std::to_string(EINVAL) + " bad supervisor arguments\n");
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  int log_fd = ::open(a.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    int e = errno;
    Report("err " + std::to_string(e) + " opening log " + a.log + ": " + std::strerror(e) + "\n");
    return 1;
  }
  // Room for the exit record, taken now: once the log has filled the disk, the record (which says
  // so) must still be written.
  const std::string reserve_path = a.exit + ".reserve";
  int reserve_fd = ::open(reserve_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int reserve_err = reserve_fd < 0 ? errno : 0;
  if (reserve_fd >= 0) {
    std::string fill(limits::kExitRecordReserveBytes, '\n');
    reserve_err = WriteAll(reserve_fd, fill);
  }
  if (reserve_err != 0) {
    if (reserve_fd >= 0) ::close(reserve_fd);
    ::unlink(reserve_path.c_str());
    Report("err " + std::to_string(reserve_err) + " reserving the exit record " + reserve_path +
           ": " + std::strerror(reserve_err) + "\n");
    return 1;
  }
  struct stat log_st {};
  ::fstat(log_fd, &log_st);
  int master = -1, slave = -1;
  bool pty = !a.pipe && OpenPty(master, slave);
  if (!pty) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      int e = errno;
      Report("err " + std::to_string(e) + " pipe: " + std::strerror(e) + "\n");
      return 1;
    }
    master = fds[0];
    slave = fds[1];
  }
  int errpipe[2];
  if (::pipe2(errpipe, O_CLOEXEC) != 0) {
    int e = errno;
    Report("err " + std::to_string(e) + " pipe: " + std::strerror(e) + "\n");
    return 1;
  }
  // Signals arrive through a signalfd: SIGCHLD (the job ended) and the ones to pass on to the job.
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&mask, sig);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  int sfd = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

  // Into the group's cgroup before it can fork; a failure only costs the cgroup.
  std::string cgroup_dir;
  if (auto slash = a.cgroup_procs.rfind('/'); slash != std::string::npos && slash > 0)
    cgroup_dir = a.cgroup_procs.substr(0, slash);
  pid_t child = ForkIntoCgroup(cgroup_dir);
  if (child < 0) {
    int e = errno;
    Report("err " + std::to_string(e) + " fork: " + std::strerror(e) + "\n");
    return 1;
  }
  if (child == 0) ExecChild(a, slave, errpipe[1], pty);
  ::close(slave);
  ::close(errpipe[1]);
  int exec_err = 0;
  ssize_t n;
  do {
    n = ::read(errpipe[0], &exec_err, sizeof exec_err);
  } while (n < 0 && errno == EINTR);
  ::close(errpipe[0]);
  if (n > 0) {
    ::waitpid(child, nullptr, 0);
    Report("err " + std::to_string(exec_err) + " " + a.argv[0] + ": " + std::strerror(exec_err) +
           "\n");
    return 1;
  }
  {
    // Before "ok": an agent that dies before reading it is replaced by one that finds this.
    auto self = procfs::ReadStat(::getpid());
    std::string reg =
        "pid=" + std::to_string(child) + "\nsupervisor=" + std::to_string(::getpid()) +
        "\nsupervisor_start=" + std::to_string(self ? self->start_time : 0) +
        "\nlog_start=" + std::to_string(log_st.st_size) + "\nmarker=" + a.marker + "\n";
    // Without fsync: it is for an agent that crashes during the spawn (section 4 of
    // docs/ARCHITECTURE.md); after a power failure no supervisor is left to find.
    (void)WriteFileAtomic(StepRegistrationPath(a.log), reg, 0644, Durability::kProcessCrash);
  }
  Report("ok " + std::to_string(child) + "\n");
  int devnull = ::open("/dev/null", O_WRONLY);
  if (devnull >= 0) {
    ::dup2(devnull, STDOUT_FILENO);
    ::close(devnull);
  }

  ::fcntl(master, F_SETFL, ::fcntl(master, F_GETFL) | O_NONBLOCK);
  std::vector<char> buf(64 * 1024);
  bool output_open = true, child_done = false;
  int status = 0;
  Clock::time_point drain_until{};
  // Set when the log cannot be written (disk full, quota, I/O error): output is lost from here on,
  // so the job is stopped (SIGTERM to its group, SIGKILL sweeps after kKillGracePeriod, for at most
  // kKillSweepTimeout) and the record says why. Its output is still read (and dropped) meanwhile so
  // that it never blocks on a full pty.
  std::string log_error;
  Clock::time_point stop_started{}, next_sweep{};
  bool sweeping = false;
  while (output_open || !child_done) {
    auto now = Clock::now();
    if (sweeping) {
      if (now - stop_started > limits::kKillSweepTimeout) {
        sweeping = false;
      } else if (now >= next_sweep) {
        SignalGroup(child, child_done, a.marker, SIGKILL);
        next_sweep = now + limits::kKillSweepInterval;
      }
    }
    int timeout = -1;
    if (child_done) {
      // The job exited; something it left behind may still hold its stdout open.
      auto left = std::chrono::ceil<std::chrono::milliseconds>(drain_until - now).count();
      if (left <= 0) break;
      timeout = static_cast<int>(left);
    }
    if (sweeping) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(next_sweep - now).count();
      left = std::max<decltype(left)>(left, 1);
      if (timeout < 0 || left < timeout) timeout = static_cast<int>(left);
    }
    struct pollfd fds[2] = {{output_open ? master : -1, POLLIN, 0}, {sfd, POLLIN, 0}};
    int rc = ::poll(fds, 2, timeout);
    if (rc < 0 && errno != EINTR) break;
    if (output_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      // Read until the pty is empty, one log write per full buffer (a pty read returns at most
      // 4 KiB): each write is a syscall here and an inotify wakeup in the agent.
      size_t filled = 0;
      auto flush = [&] {
        if (filled == 0 || !log_error.empty()) {
          filled = 0;
          return;
        }
        int e = WriteAll(log_fd, std::string_view(buf.data(), filled));
        filled = 0;
        if (e == 0) return;
        log_error = "cannot write " + a.log + ": " + std::strerror(e);
        for (char& ch : log_error)
          if (ch == '\n') ch = ' ';  // one line of the record
        log_error.resize(std::min<size_t>(log_error.size(), limits::kExitRecordReserveBytes - 256));
        SignalGroup(child, child_done, a.marker, SIGTERM);
        stop_started = Clock::now();
        next_sweep = stop_started + limits::kKillGracePeriod;
        sweeping = true;
      };
      for (;;) {
        ssize_t r = ::read(master, buf.data() + filled, buf.size() - filled);
        if (r > 0) {
          // Stopping: nowhere to keep it. One chunk per poll, so that a job that ignores SIGTERM
          // and prints without pause still meets the SIGKILL sweep on time.
          if (!log_error.empty()) break;
          filled += static_cast<size_t>(r);
          if (filled == buf.size()) {
            flush();
            if (!log_error.empty()) break;
          }
          continue;
        }
        if (r < 0 && errno == EINTR) continue;
        // EOF (pipe) or EIO (pty: every holder of the slave closed it): the output is complete.
        if (r == 0 || (r < 0 && errno != EAGAIN)) output_open = false;
        break;
      }
      flush();
    }
    if (fds[1].revents & POLLIN) {
      struct signalfd_siginfo si;
      while (::read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        if (si.ssi_signo != SIGCHLD) {
          if (!child_done) ::kill(child, static_cast<int>(si.ssi_signo));
          continue;
        }
        if (!child_done && ::waitpid(child, &status, WNOHANG) == child) {
          child_done = true;
          drain_until = Clock::now() + limits::kProcessOutputDrainAfterExit;
        }
      }
    }
  }
  ::close(master);
  struct stat st {};
  ::fstat(log_fd, &st);
  ::close(log_fd);
  int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  std::string record = "exit_code=" + std::to_string(code) + "\nsignal=" + std::to_string(sig) +
                       "\nend=" + std::to_string(st.st_size) + "\npid=" + std::to_string(child) +
                       "\nstdout=" + (pty ? "pty" : "pipe") + "\n";
  if (!log_error.empty()) record += "error=" + log_error + "\n";
  return WriteExitRecord(a.exit, reserve_fd, reserve_path, record) ? 0 : 1;
}

}  // namespace herd::agent
