#include "agent/process/uv_process_launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "agent/process/cgroup_tree.hpp"
#include "agent/process/crash_point.hpp"
#include "agent/process/proc_scan.hpp"
#include "agent/process/step.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

extern char** environ;

namespace herd::agent {
namespace {

using Clock = std::chrono::steady_clock;

// Serialises the orphan reaper of every launcher in the process.
std::mutex g_reap_mu;

// As a child subreaper this process inherits the orphans of its jobs (setsid'd daemons, children
// of a killed rank), and the supervisors it spawned are its children too. Reap those that died,
// and nothing else: they are in another session than ours (supervisors call setsid).
void ReapAdoptedZombies() {
  std::lock_guard lock(g_reap_mu);
  const int own_session = ::getsid(0);
  // The kernel names a dead child without reaping it (WNOWAIT); ours are reaped one by one. This
  // ran at every SIGCHLD, and a scan of every /proc/PID/stat was a quarter of a busy head's CPU.
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    const pid_t pid = info.si_pid;
    const pid_t session = ::getsid(pid);  // a zombie keeps its session until reaped
    // Ours to leave (another part of this process waits for it), or reaped meanwhile.
    if (session < 0 || session == own_session) break;
    ::waitpid(pid, nullptr, WNOHANG);
  }
  // Such a child hides the others from waitid: look at each in /proc (rare: a child of our own
  // session is reaped at once by whoever started it).
  const int self = ::getpid();
  for (int pid : procfs::AllPids()) {
    auto st = procfs::ReadStat(pid);
    if (!st || st->state != 'Z' || st->ppid != self || st->session == own_session) continue;
    ::waitpid(pid, nullptr, WNOHANG);
  }
}

// Looks argv[0] up the way execvp would in the child: in the child's PATH, relative paths from
// the child's cwd. Done here so that "no such program" is an error of Spawn, not exit code 127.
Result<std::string> ResolveProgram(const std::string& name, const std::string& path_env,
                                   const std::string& cwd) {
  auto executable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  auto from_cwd = [&](const std::string& p) {
    return (p.empty() || p[0] != '/') && !cwd.empty() ? cwd + "/" + p : p;
  };
  if (name.find('/') != std::string::npos) {
    std::string p = from_cwd(name);
    if (executable(p)) return p;
    return NotFound("no executable program " + name);
  }
  std::string path = path_env.empty() ? "/usr/local/bin:/usr/bin:/bin" : path_env;
  size_t pos = 0;
  for (;;) {
    size_t end = path.find(':', pos);
    std::string dir = path.substr(pos, end == std::string::npos ? end : end - pos);
    std::string p = from_cwd((dir.empty() ? "." : dir) + "/" + name);
    if (executable(p)) return p;
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return NotFound("program " + name + " not found in PATH " + path);
}

// The first ancestor of `path` (or path itself) that does not exist: what removing everything
// Spawn created takes.
std::filesystem::path FirstMissing(const std::filesystem::path& path) {
  std::filesystem::path missing;
  std::error_code ec;
  for (auto p = path; !p.empty() && p != p.root_path(); p = p.parent_path()) {
    if (std::filesystem::exists(p, ec)) break;
    missing = p;
  }
  return missing;
}

}  // namespace

struct UvProcessLauncher::Impl {
  // One supervised process: its supervisor's liveness watch, the follow of its log, and where it
  // has been read to.
  struct Child {
    Impl* impl = nullptr;
    ProcessHandle handle;
    std::string exit_path;
    uint64_t offset = 0;  // next log byte to deliver
    int read_fd = -1;
    int pidfd = -1;
    uv_poll_t pid_poll{};
    uv_fs_event_t fs_event{};
    uv_timer_t read_timer{};  // a read deferred by ReadSoon
    uint64_t last_read = 0;   // uv_now() of the last read on an event (0: none yet)
    int handles_open = 0;     // freed when the last one is closed
    bool poll_liveness = false, poll_output = false;  // left to the shared poll timer
    bool finished = false;
    // The supervisor is gone; the exit is reported once the log is delivered up to finish_end
    // (flow control may hold the reads back).
    bool finishing = false;
    uint64_t finish_end = 0;
    int exit_code = 0, term_signal = 0;
    std::string exit_error;
    std::shared_ptr<ProcessCallbacks> callbacks;
  };

  // A supervisor started whose "ok PID" / "err ..." report has not been read yet.
  struct PendingSpawn {
    Impl* impl = nullptr;
    std::string group, argv0, log_path, exit_path;
    std::filesystem::path created;  // what to remove again if the spawn fails
    uint64_t log_start = 0;
    pid_t step = 0;
    int report_fd = -1;
    std::string answer;
    Clock::time_point deadline;
    ProcessCallbacks callbacks;
    std::function<void(Result<ProcessHandle>)> done;  // async only
    uv_poll_t poll{};
    uv_timer_t timer{};
    int handles_open = 0;
  };

  // One KillGroup in progress.
  struct KillOp {
    Impl* impl = nullptr;
    uv_timer_t timer{};
    std::string group;
    Clock::time_point kill_at;     // SIGKILL from then on
    Clock::time_point give_up_at;  // stop sweeping
    std::set<int> termed;          // SIGTERM goes once to each process
    bool kill_logged = false;
  };

  Impl(std::function<void(std::function<void()>)> post_fn, std::string scope,
       std::vector<std::string> step)
      : post(std::move(post_fn)),
        cgroups(scope.empty() ? std::nullopt : DetectCgroupHierarchy(), scope),
        scope_(scope),
        step_command(std::move(step)) {}

  // The environment marker of a group. /proc is shared by every agent on the machine (test nodes
  // are namespaces of one kernel), so the marker names this launcher's scope too: a sweep for
  // "job1-a1" must never reach another agent's job 1.
  std::string Marker(const std::string& group) const {
    return scope_.empty() ? group : scope_ + "/" + group;
  }

  std::function<void(std::function<void()>)> post;
  CgroupTree cgroups;
  std::string scope_;
  std::vector<std::string> step_command;
  uv_loop_t loop{};
  uv_async_t wake{};
  uv_signal_t sigchld{};
  uv_timer_t poll_timer{};
  std::thread thread;

  std::mutex mu;
  std::deque<std::function<void()>> tasks;  // guarded by mu

  // Loop thread only.
  bool stopping = false;
  std::set<Child*> children;
  std::set<KillOp*> kills;
  std::map<std::string, int> children_per_group;
  std::set<PendingSpawn*> pending;
  std::map<std::string, int> pending_per_group;
  // KillGroups of a group that has spawns pending start once they are settled (a sweep before the
  // job process carries its marker and is in its cgroup would miss it).
  std::map<std::string, std::vector<std::chrono::milliseconds>> deferred_kills;
  bool cgroup_warned = false;
  // Group cgroups to remove once empty: a process that was just reaped can keep its cgroup busy
  // for a moment, and a descendant that keeps running keeps it busy until it dies.
  std::map<std::string, Clock::time_point> pending_removals;  // group -> give up at
  uv_timer_t removal_timer{};

  void RunOnLoop(std::function<void()> fn) {
    {
      std::lock_guard lock(mu);
      tasks.push_back(std::move(fn));
    }
    uv_async_send(&wake);
  }

  void Post(std::function<void()> fn) {
    if (!stopping) post(std::move(fn));
  }

  // SetOutputBacklog's settings (set from any thread: backlog_mu, held while downstream_queued
  // runs, so that clearing it waits for a call in progress), and the output bytes posted and not
  // yet handed to on_output.
  std::mutex backlog_mu;
  std::function<std::size_t()> downstream_queued;
  std::size_t backlog_limit = SIZE_MAX;
  std::shared_ptr<std::atomic<std::size_t>> in_flight =
      std::make_shared<std::atomic<std::size_t>>(0);
  bool OutputBacklogged() {
    std::lock_guard<std::mutex> lock(backlog_mu);
    if (!downstream_queued) return false;
    const std::size_t posted = in_flight->load();
    if (posted >= backlog_limit) return true;
    return downstream_queued() >= backlog_limit - posted;
  }

  static void OnWake(uv_async_t* handle) {
    auto* self = static_cast<Impl*>(handle->data);
    std::deque<std::function<void()>> batch;
    {
      std::lock_guard lock(self->mu);
      batch.swap(self->tasks);
    }
    for (auto& fn : batch) fn();
  }

  static void OnSigchld(uv_signal_t* handle, int) {
    ReapAdoptedZombies();
    // A supervisor of ours died: where there is no pidfd to say so, look now.
    auto* self = static_cast<Impl*>(handle->data);
    self->CheckPolled(false);
  }

  // ---- Spawn ----------------------------------------------------------------------------------

  Result<ProcessHandle> DoSpawn(const SpawnRequest& req, ProcessCallbacks callbacks) {
    HERD_ASSIGN_OR_RETURN(PendingSpawn * ps, BeginSpawn(req, std::move(callbacks)));
    // The supervisor answers once the job process was exec'd: "ok PID" or "err ERRNO MESSAGE".
    while (ps->answer.find('\n') == std::string::npos) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(ps->deadline - Clock::now()).count();
      if (left <= 0) break;
      struct pollfd pfd = {ps->report_fd, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left)) < 0 && errno != EINTR) break;
      char buf[512];
      ssize_t n = ::read(ps->report_fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      ps->answer.append(buf, static_cast<size_t>(n));
    }
    auto result = CompleteSpawn(ps);
    ::close(ps->report_fd);
    delete ps;
    return result;
  }

  // As DoSpawn, but the report is read when it comes (uv_poll); `done` is posted with the result
  // before any callback of the process.
  void DoSpawnAsync(const SpawnRequest& req, ProcessCallbacks callbacks,
                    std::function<void(Result<ProcessHandle>)> done) {
    auto begun = BeginSpawn(req, std::move(callbacks));
    if (!begun.ok()) {
      Post([done = std::move(done), s = begun.status()] { done(s); });
      return;
    }
    PendingSpawn* ps = *begun;
    ps->done = std::move(done);
    ::fcntl(ps->report_fd, F_SETFL, ::fcntl(ps->report_fd, F_GETFL) | O_NONBLOCK);
    uv_poll_init(&loop, &ps->poll, ps->report_fd);
    ps->poll.data = ps;
    uv_timer_init(&loop, &ps->timer);
    ps->timer.data = ps;
    ps->handles_open = 2;
    pending.insert(ps);
    uv_poll_start(&ps->poll, UV_READABLE, &Impl::OnReport);
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(ps->deadline - Clock::now()).count();
    uv_timer_start(&ps->timer, &Impl::OnReportTimeout,
                   static_cast<uint64_t>(std::max<int64_t>(ms, 1)), 0);
  }

  static void OnReport(uv_poll_t* handle, int, int) {
    auto* ps = static_cast<PendingSpawn*>(handle->data);
    for (;;) {
      char buf[512];
      ssize_t n = ::read(ps->report_fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;  // more to come
      if (n > 0) {
        ps->answer.append(buf, static_cast<size_t>(n));
        if (ps->answer.find('\n') == std::string::npos) continue;
      }
      break;  // a whole line, EOF or an error: settled
    }
    ps->impl->SettleAsync(ps);
  }

  static void OnReportTimeout(uv_timer_t* timer) {
    auto* ps = static_cast<PendingSpawn*>(timer->data);
    ps->impl->SettleAsync(ps);
  }

  void SettleAsync(PendingSpawn* ps) {
    if (pending.erase(ps) == 0) return;
    auto result = CompleteSpawn(ps);
    if (!result.ok()) {
      Post([done = std::move(ps->done), s = result.status()] { done(s); });
    }  // else posted by CompleteSpawn, before the process's first callback
    ClosePending(ps);
  }

  // A spawn of `group` is settled (watched, or failed and undone): kills that waited for the
  // group's spawns start once none is left.
  void SpawnSettled(const std::string& group) {
    if (--pending_per_group[group] > 0) return;
    pending_per_group.erase(group);
    auto kills = deferred_kills.find(group);
    if (kills == deferred_kills.end()) return;
    auto graces = std::move(kills->second);
    deferred_kills.erase(kills);
    for (auto grace : graces) StartKill(group, grace);
  }

  void ClosePending(PendingSpawn* ps) {
    auto closed = [](uv_handle_t* h) {
      auto* p = static_cast<PendingSpawn*>(h->data);
      if (--p->handles_open > 0) return;
      ::close(p->report_fd);
      delete p;
    };
    uv_close(reinterpret_cast<uv_handle_t*>(&ps->poll), closed);
    uv_close(reinterpret_cast<uv_handle_t*>(&ps->timer), closed);
  }

  // Everything up to the supervisor's start; the caller reads its report (ps->report_fd).
  Result<PendingSpawn*> BeginSpawn(const SpawnRequest& req, ProcessCallbacks callbacks) {
    if (req.argv.empty() || req.argv[0].empty()) return InvalidArgument("empty argv");
    if (req.group.empty()) return InvalidArgument("empty process group");
    if (req.log_path.empty()) return InvalidArgument("no log path");
    if (step_command.empty()) return FailedPrecondition("no supervisor program configured");
    if (stopping) return FailedPrecondition("launcher is shutting down");

    std::map<std::string, std::string> env;
    for (char** e = environ; e && *e; ++e) {
      std::string_view kv(*e);
      size_t eq = kv.find('=');
      if (eq == std::string_view::npos) continue;
      env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
    }
    for (const auto& key : req.unset_env) env.erase(key);
    for (const auto& [key, value] : req.env) env[key] = value;
    // The supervisor must not carry the marker (the kill sweep would signal it); it gives it to
    // the job process.
    env.erase(kGroupEnvVar);

    if (!req.cwd.empty()) {
      struct stat st {};
      if (::stat(req.cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        return NotFound("working directory " + req.cwd + " does not exist");
    }
    auto path_it = env.find("PATH");
    HERD_ASSIGN_OR_RETURN(
        std::string program,
        ResolveProgram(req.argv[0], path_it == env.end() ? "" : path_it->second, req.cwd));

    std::filesystem::path log(req.log_path);
    std::filesystem::path created = FirstMissing(log);  // what to remove again if the spawn fails
    std::error_code ec;
    auto undo = [&] {
      if (!created.empty()) std::filesystem::remove_all(created, ec);
    };
    if (log.has_parent_path()) std::filesystem::create_directories(log.parent_path(), ec);
    if (ec) return IoError("creating the directory of " + req.log_path + ": " + ec.message());
    int fd = ::open(req.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      Status s = ErrnoError("opening log " + req.log_path, errno);
      undo();
      return s;
    }
    struct stat log_st {};
    ::fstat(fd, &log_st);
    ::close(fd);
    const std::string exit_path = ExitRecordPath(req.log_path);
    ::unlink(exit_path.c_str());  // an earlier process's record is not this one's
    ::unlink(StepRegistrationPath(req.log_path).c_str());

    std::vector<std::string> args = step_command;
    for (std::string a : {"--log", req.log_path.c_str(), "--exit", exit_path.c_str(), "--marker"})
      args.push_back(a);
    args.push_back(std::string(kGroupEnvVar) + "=" + Marker(req.group));
    if (cgroups.enabled()) {
      auto procs = cgroups.Prepare(req.group);
      if (procs.ok()) {
        args.push_back("--cgroup-procs");
        args.push_back(*procs);
      } else if (!cgroup_warned) {
        cgroup_warned = true;
        HERD_LOG(kWarn) << "cannot create a cgroup for group " << req.group << ": "
                        << procs.status().ToString() << "; relying on the environment sweep";
      }
    }
    if (!req.cwd.empty()) {
      args.push_back("--cwd");
      args.push_back(req.cwd);
    }
    args.push_back("--");
    args.push_back(program);
    args.insert(args.end(), req.argv.begin() + 1, req.argv.end());

    std::vector<char*> argv_c;
    for (auto& a : args) argv_c.push_back(a.data());
    argv_c.push_back(nullptr);
    std::vector<std::string> env_strings;
    for (const auto& [key, value] : env) env_strings.push_back(key + "=" + value);
    std::vector<char*> env_c;
    for (auto& e : env_strings) env_c.push_back(e.data());
    env_c.push_back(nullptr);

    auto fail = [&](Status s) {
      if (children_per_group.count(req.group) == 0) RemoveCgroupSoon(req.group);
      undo();
      return s;
    };
    int hs[2];
    if (::pipe2(hs, O_CLOEXEC) != 0) return fail(ErrnoError("pipe", errno));
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&files, hs[1], 1);
    posix_spawn_file_actions_addopen(&files, 2, "/dev/null", O_WRONLY, 0);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int sig : {SIGPIPE, SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&defaults, sig);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    // setsid: the supervisor and its job outlive the agent.
    posix_spawnattr_setflags(&attr,
                             POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t step = 0;
    int rc = ::posix_spawn(&step, argv_c[0], &files, &attr, argv_c.data(), env_c.data());
    posix_spawn_file_actions_destroy(&files);
    posix_spawnattr_destroy(&attr);
    ::close(hs[1]);
    CrashPoint("spawn-before-report");
    if (rc != 0) {
      ::close(hs[0]);
      return fail(ErrnoError("starting the supervisor " + step_command[0], rc));
    }
    auto* ps = new PendingSpawn;
    ps->impl = this;
    ps->group = req.group;
    ps->argv0 = req.argv[0];
    ps->log_path = req.log_path;
    ps->exit_path = exit_path;
    ps->created = created;
    ps->log_start = static_cast<uint64_t>(log_st.st_size);
    ps->step = step;
    ps->report_fd = hs[0];
    ps->deadline = Clock::now() + limits::kStepStartTimeout;
    ps->callbacks = std::move(callbacks);
    ++pending_per_group[req.group];
    return ps;
  }

  // The supervisor reported (or did not, in time): the process's handle, watched from now on; or
  // the error, with everything BeginSpawn made removed. Does not close ps->report_fd.
  Result<ProcessHandle> CompleteSpawn(PendingSpawn* ps) {
    const std::string& answer = ps->answer;
    const pid_t step = ps->step;
    auto fail = [&](Status s) {
      if (children_per_group.count(ps->group) == 0) RemoveCgroupSoon(ps->group);
      std::error_code ec;
      if (!ps->created.empty()) std::filesystem::remove_all(ps->created, ec);
      SpawnSettled(ps->group);
      return s;
    };
    if (answer.rfind("ok ", 0) != 0) {
      ::kill(step, SIGKILL);
      {
        std::lock_guard lock(g_reap_mu);
        ::waitpid(step, nullptr, 0);
      }
      if (answer.rfind("err ", 0) == 0) {
        int err = std::atoi(answer.c_str() + 4);
        std::string msg = answer.substr(answer.find(' ', 4) + 1);
        while (!msg.empty() && msg.back() == '\n') msg.pop_back();
        return fail(err == ENOENT ? NotFound("spawning " + msg) : IoError("spawning " + msg));
      }
      return fail(IoError("the supervisor of " + ps->argv0 + " did not report within " +
                          std::to_string(limits::kStepStartTimeout.count()) + " ms"));
    }
    auto* c = new Child;
    c->impl = this;
    c->handle.pid = std::atoi(answer.c_str() + 3);
    c->handle.supervisor_pid = step;
    auto st = procfs::ReadStat(step);
    c->handle.supervisor_start = st ? st->start_time : 0;
    c->handle.group = ps->group;
    c->handle.log_path = ps->log_path;
    c->handle.log_start = ps->log_start;
    c->offset = c->handle.log_start;
    c->exit_path = ps->exit_path;
    c->callbacks = std::make_shared<ProcessCallbacks>(std::move(ps->callbacks));
    HERD_LOG(kDebug) << "spawned pid " << c->handle.pid << " (" << ps->argv0
                     << ") under supervisor " << step << " in group " << ps->group;
    ProcessHandle handle = c->handle;
    // Before Watch: the owner hears of the process before any of its output or its exit.
    if (ps->done) Post([done = std::move(ps->done), handle] { done(handle); });
    Watch(c);
    SpawnSettled(ps->group);
    return handle;
  }

  Status DoAdopt(const ProcessHandle& h, uint64_t from, ProcessCallbacks callbacks) {
    if (h.log_path.empty() || h.group.empty() || h.supervisor_pid <= 0)
      return InvalidArgument("incomplete process handle");
    if (stopping) return FailedPrecondition("launcher is shutting down");
    auto* c = new Child;
    c->impl = this;
    c->handle = h;
    c->offset = from;
    c->exit_path = ExitRecordPath(h.log_path);
    c->callbacks = std::make_shared<ProcessCallbacks>(std::move(callbacks));
    HERD_LOG(kInfo) << "adopting pid " << h.pid << " (supervisor " << h.supervisor_pid << ", group "
                    << h.group << ") from log offset " << from;
    Watch(c);
    return Status::Ok();
  }

  // The supervisor is still the process it was (not a zombie, not a reused pid).
  static bool SupervisorAlive(const Child* c) {
    auto st = procfs::ReadStat(c->handle.supervisor_pid);
    if (!st || st->state == 'Z' || st->state == 'X') return false;
    return c->handle.supervisor_start == 0 || st->start_time == c->handle.supervisor_start;
  }

  void Watch(Child* c) {
    children.insert(c);
    ++children_per_group[c->handle.group];
    c->read_fd = ::open(c->handle.log_path.c_str(), O_RDONLY | O_CLOEXEC);
    // Liveness: a pidfd polls readable when the process exits; else /proc, by the poll timer.
    int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, c->handle.supervisor_pid, 0));
    if (pidfd >= 0 && SupervisorAlive(c)) {
      c->pidfd = pidfd;
      uv_poll_init(&loop, &c->pid_poll, pidfd);
      c->pid_poll.data = c;
      ++c->handles_open;
      uv_poll_start(&c->pid_poll, UV_READABLE, &Impl::OnPidfd);
    } else {
      if (pidfd >= 0) ::close(pidfd);
      c->poll_liveness = true;
    }
    // Output: inotify on the log; else the poll timer reads it.
    uv_timer_init(&loop, &c->read_timer);
    c->read_timer.data = c;
    ++c->handles_open;
    uv_fs_event_init(&loop, &c->fs_event);
    c->fs_event.data = c;
    ++c->handles_open;
    if (uv_fs_event_start(&c->fs_event, &Impl::OnFsEvent, c->handle.log_path.c_str(), 0) != 0) {
      c->poll_output = true;
    }
    if (c->poll_liveness || c->poll_output) EnsurePollTimer();
    ReadNew(c, UINT64_MAX);
    if (!SupervisorAlive(c)) Finish(c);
  }

  void EnsurePollTimer() {
    if (uv_is_active(reinterpret_cast<uv_handle_t*>(&poll_timer))) return;
    auto every = static_cast<uint64_t>(limits::kSupervisorPollInterval.count());
    uv_timer_start(&poll_timer, &Impl::OnPollTimer, every, every);
  }

  static void OnPollTimer(uv_timer_t* timer) { static_cast<Impl*>(timer->data)->CheckPolled(true); }

  // Children without a pidfd (or inotify): their liveness (and output) by looking.
  void CheckPolled(bool read_output) {
    bool any = false;
    std::vector<Child*> snapshot(children.begin(), children.end());
    for (Child* c : snapshot) {
      if (!c->poll_liveness && !c->poll_output) continue;
      any = true;
      if (read_output && c->poll_output) ReadNew(c, UINT64_MAX);
      if (c->poll_liveness && !SupervisorAlive(c)) Finish(c);
    }
    if (!any) uv_timer_stop(&poll_timer);
  }

  static void OnPidfd(uv_poll_t* handle, int, int) {
    auto* c = static_cast<Child*>(handle->data);
    c->impl->Finish(c);
  }

  static void OnFsEvent(uv_fs_event_t* handle, const char*, int, int) {
    auto* c = static_cast<Child*>(handle->data);
    if (!c->finished && !c->finishing) c->impl->ReadSoon(c);
  }

  // Reads the log now when it was last read kOutputCoalesce ago or earlier, else once that much
  // time has passed. A line after a pause leaves at once; a flood of output leaves in chunks of
  // kOutputCoalesce's worth instead of one per write of the supervisor (4 KiB from a pty), each of
  // which cost a frame, a TLS record, a journal line and a client frame on the head.
  void ReadSoon(Child* c) {
    if (uv_is_active(reinterpret_cast<uv_handle_t*>(&c->read_timer))) return;
    const auto every = static_cast<uint64_t>(limits::kOutputCoalesce.count());
    const uint64_t now = uv_now(&loop);
    if (c->last_read == 0 || now >= c->last_read + every) {
      c->last_read = now;
      ReadNew(c, UINT64_MAX);
      return;
    }
    uv_timer_start(&c->read_timer, &Impl::OnReadTimer, c->last_read + every - now, 0);
  }

  static void OnReadTimer(uv_timer_t* timer) {
    auto* c = static_cast<Child*>(timer->data);
    if (c->finished) return;
    c->last_read = uv_now(&c->impl->loop);
    if (c->finishing) {
      c->impl->ContinueFinish(c);
    } else {
      c->impl->ReadNew(c, UINT64_MAX);
    }
  }

  // Delivers the log's bytes from c->offset up to `limit` (or its current end), as far as flow
  // control lets it; true when it got there. Held back: the read timer tries again.
  bool ReadNew(Child* c, uint64_t limit) {
    if (c->read_fd < 0) c->read_fd = ::open(c->handle.log_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (c->read_fd < 0) return true;
    struct stat st {};
    if (::fstat(c->read_fd, &st) != 0) return true;
    uint64_t end = std::min<uint64_t>(static_cast<uint64_t>(st.st_size), limit);
    while (c->offset < end) {
      if (OutputBacklogged()) {
        if (!uv_is_active(reinterpret_cast<uv_handle_t*>(&c->read_timer))) {
          uv_timer_start(&c->read_timer, &Impl::OnReadTimer,
                         static_cast<uint64_t>(limits::kOutputCoalesce.count()), 0);
        }
        return false;
      }
      size_t want = static_cast<size_t>(std::min<uint64_t>(end - c->offset, kReadChunk));
      std::string bytes(want, '\0');
      ssize_t n = ::pread(c->read_fd, bytes.data(), want, static_cast<off_t>(c->offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      bytes.resize(static_cast<size_t>(n));
      uint64_t offset = c->offset;
      c->offset += static_cast<uint64_t>(n);
      in_flight->fetch_add(bytes.size());
      Post([cb = c->callbacks, in_flight = in_flight, offset, bytes = std::move(bytes)] {
        if (cb->on_output) cb->on_output(offset, bytes);
        in_flight->fetch_sub(bytes.size());
      });
    }
    return true;
  }
  static constexpr size_t kReadChunk = 256 * 1024;

  // The supervisor is gone: deliver the rest of the log, then the exit it recorded.
  void Finish(Child* c) {
    if (c->finished || c->finishing) return;
    c->finishing = true;
    // Its pidfd stays readable: no more wakeups from it (nor from the log, read to its end now).
    if (c->pidfd >= 0) uv_poll_stop(&c->pid_poll);
    uv_fs_event_stop(&c->fs_event);
    c->poll_liveness = c->poll_output = false;
    auto record = ReadExitRecord(c->exit_path);
    if (record) {
      c->finish_end = record->end;
      c->exit_code = record->exit_code;
      c->term_signal = record->term_signal;
      c->exit_error = record->error;
    } else {
      ::unlink((c->exit_path + ".reserve").c_str());  // what it had reserved for the record
      // Killed before it could record anything (kill -9, OOM): the job's output ends here.
      HERD_LOG(kWarn) << "the supervisor of pid " << c->handle.pid << " (group " << c->handle.group
                      << ") died without an exit record; reporting it killed";
      c->finish_end = UINT64_MAX;
      c->exit_code = 128 + SIGKILL;
      c->term_signal = SIGKILL;
    }
    if (!c->exit_error.empty()) {
      HERD_LOG(kError) << "pid " << c->handle.pid << " (group " << c->handle.group
                       << ") was stopped by its supervisor: " << c->exit_error;
    }
    ContinueFinish(c);
  }

  void ContinueFinish(Child* c) {
    if (!ReadNew(c, c->finish_end)) return;  // the read timer comes back here
    c->finished = true;
    Post([cb = c->callbacks, code = c->exit_code, sig = c->term_signal, end = c->offset,
          error = std::move(c->exit_error)] {
      if (cb->on_exit) cb->on_exit(code, sig, end, error);
    });
    Release(c);
    if (--children_per_group[c->handle.group] == 0) {
      children_per_group.erase(c->handle.group);
      if (!stopping) RemoveCgroupSoon(c->handle.group);
    }
  }

  // Closes the child's handles; it is freed with the last one.
  void Release(Child* c) {
    children.erase(c);
    if (c->read_fd >= 0) ::close(c->read_fd);
    c->read_fd = -1;
    auto close = [](uv_handle_t* h) {
      if (!uv_is_closing(h)) uv_close(h, &Impl::OnChildHandleClosed);
    };
    if (c->pidfd >= 0) close(reinterpret_cast<uv_handle_t*>(&c->pid_poll));
    close(reinterpret_cast<uv_handle_t*>(&c->fs_event));
    close(reinterpret_cast<uv_handle_t*>(&c->read_timer));
  }

  static void OnChildHandleClosed(uv_handle_t* handle) {
    auto* c = static_cast<Child*>(handle->data);
    if (--c->handles_open > 0) return;
    if (c->pidfd >= 0) ::close(c->pidfd);
    delete c;
  }

  // ---- KillGroup ------------------------------------------------------------------------------

  void StartKill(const std::string& group, std::chrono::milliseconds grace) {
    if (stopping) return;
    if (pending_per_group.count(group) > 0) {
      deferred_kills[group].push_back(grace);
      return;
    }
    auto* op = new KillOp;
    op->impl = this;
    op->group = group;
    op->kill_at = Clock::now() + grace;
    op->give_up_at = op->kill_at + limits::kKillSweepTimeout;
    uv_timer_init(&loop, &op->timer);
    op->timer.data = op;
    kills.insert(op);
    Sweep(op);
  }

  std::vector<int> GroupPids(const std::string& group) const {
    std::vector<int> pids = cgroups.LivePids(group);
    for (int pid : procfs::FindLiveByEnvEntry(std::string(kGroupEnvVar) + "=" + Marker(group)))
      if (std::find(pids.begin(), pids.end(), pid) == pids.end()) pids.push_back(pid);
    return pids;
  }

  void Sweep(KillOp* op) {
    ReapAdoptedZombies();
    auto now = Clock::now();
    std::vector<int> pids = GroupPids(op->group);
    if (pids.empty()) return FinishKill(op);
    Clock::time_point next;
    if (now < op->kill_at) {
      for (int pid : pids)
        if (op->termed.insert(pid).second) ::kill(pid, SIGTERM);
      next = std::min(now + limits::kKillSweepInterval, op->kill_at);
    } else {
      if (!op->kill_logged) {
        op->kill_logged = true;
        HERD_LOG(kInfo) << "group " << op->group << ": " << pids.size()
                        << " processes left after the grace period, SIGKILL";
      }
      cgroups.KillAll(op->group);
      for (int pid : pids) ::kill(pid, SIGKILL);
      if (now >= op->give_up_at) {
        HERD_LOG(kWarn) << "group " << op->group << ": " << pids.size()
                        << " processes survive SIGKILL sweeps, giving up";
        return FinishKill(op);
      }
      next = now + limits::kKillSweepInterval;
    }
    auto delay = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
    uv_timer_start(&op->timer, &Impl::OnKillTimer,
                   static_cast<uint64_t>(std::max<int64_t>(delay, 1)), 0);
  }

  static void OnKillTimer(uv_timer_t* timer) {
    auto* op = static_cast<KillOp*>(timer->data);
    op->impl->Sweep(op);
  }

  void FinishKill(KillOp* op) {
    ReapAdoptedZombies();
    RemoveCgroupSoon(op->group);
    kills.erase(op);
    uv_close(reinterpret_cast<uv_handle_t*>(&op->timer),
             [](uv_handle_t* h) { delete static_cast<KillOp*>(h->data); });
  }

  // ---- cgroup removal ------------------------------------------------------------------------

  void RemoveCgroupSoon(const std::string& group) {
    if (!cgroups.enabled() || cgroups.Remove(group)) return;
    pending_removals[group] = Clock::now() + limits::kKillSweepTimeout;
    if (!uv_is_active(reinterpret_cast<uv_handle_t*>(&removal_timer))) {
      auto every = static_cast<uint64_t>(limits::kKillSweepInterval.count());
      uv_timer_start(&removal_timer, &Impl::OnRemovalTimer, every, every);
    }
  }

  static void OnRemovalTimer(uv_timer_t* timer) {
    auto* self = static_cast<Impl*>(timer->data);
    auto now = Clock::now();
    for (auto it = self->pending_removals.begin(); it != self->pending_removals.end();) {
      // A group that has processes again (a new Spawn) keeps its cgroup.
      bool done = self->children_per_group.count(it->first) > 0 ||
                  self->cgroups.Remove(it->first) || now >= it->second;
      it = done ? self->pending_removals.erase(it) : std::next(it);
    }
    if (self->pending_removals.empty()) uv_timer_stop(timer);
  }

  // ---- Shutdown -------------------------------------------------------------------------------

  // Closes every handle so uv_run returns; processes keep running.
  void Stop() {
    stopping = true;
    for (KillOp* op : kills) {
      uv_timer_stop(&op->timer);
      uv_close(reinterpret_cast<uv_handle_t*>(&op->timer),
               [](uv_handle_t* h) { delete static_cast<KillOp*>(h->data); });
    }
    kills.clear();
    // Spawns still waiting for their report: the processes run on, nobody hears of them (as of a
    // live one below). Their owner is going away.
    for (PendingSpawn* ps : pending) ClosePending(ps);
    pending.clear();
    deferred_kills.clear();
    std::vector<Child*> live(children.begin(), children.end());
    for (Child* c : live) Release(c);  // no callback any more; a new launcher can adopt them
    uv_close(reinterpret_cast<uv_handle_t*>(&wake), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&poll_timer), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&sigchld), nullptr);
    for (const auto& [group, until] : pending_removals) cgroups.Remove(group);  // a last try
    uv_close(reinterpret_cast<uv_handle_t*>(&removal_timer), nullptr);
  }
};

UvProcessLauncher::UvProcessLauncher(std::function<void(std::function<void()>)> post,
                                     std::string cgroup_scope,
                                     std::vector<std::string> step_command)
    : impl_(std::make_unique<Impl>(std::move(post), std::move(cgroup_scope),
                                   std::move(step_command))) {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    HERD_LOG(kWarn) << "PR_SET_CHILD_SUBREAPER: " << std::strerror(errno);
  }
  uv_loop_init(&impl_->loop);
  uv_async_init(&impl_->loop, &impl_->wake, &Impl::OnWake);
  impl_->wake.data = impl_.get();
  uv_signal_init(&impl_->loop, &impl_->sigchld);
  impl_->sigchld.data = impl_.get();
  uv_timer_init(&impl_->loop, &impl_->poll_timer);
  impl_->poll_timer.data = impl_.get();
  uv_signal_start(&impl_->sigchld, &Impl::OnSigchld, SIGCHLD);
  uv_timer_init(&impl_->loop, &impl_->removal_timer);
  impl_->removal_timer.data = impl_.get();
  impl_->thread = std::thread([impl = impl_.get()] { uv_run(&impl->loop, UV_RUN_DEFAULT); });
}

UvProcessLauncher::~UvProcessLauncher() {
  impl_->RunOnLoop([impl = impl_.get()] { impl->Stop(); });
  impl_->thread.join();
  impl_->cgroups.RemoveScope();
  uv_loop_close(&impl_->loop);
}

Result<ProcessHandle> UvProcessLauncher::Spawn(const SpawnRequest& request,
                                               ProcessCallbacks callbacks) {
  std::promise<Result<ProcessHandle>> result;
  auto future = result.get_future();
  impl_->RunOnLoop([&] { result.set_value(impl_->DoSpawn(request, std::move(callbacks))); });
  return future.get();
}

void UvProcessLauncher::SpawnAsync(const SpawnRequest& request, ProcessCallbacks callbacks,
                                   std::function<void(Result<ProcessHandle>)> done) {
  impl_->RunOnLoop([impl = impl_.get(), request, callbacks = std::move(callbacks),
                    done = std::move(done)]() mutable {
    if (impl->stopping) return;
    impl->DoSpawnAsync(request, std::move(callbacks), std::move(done));
  });
}

Status UvProcessLauncher::Adopt(const ProcessHandle& handle, uint64_t from_offset,
                                ProcessCallbacks callbacks) {
  std::promise<Status> result;
  auto future = result.get_future();
  impl_->RunOnLoop(
      [&] { result.set_value(impl_->DoAdopt(handle, from_offset, std::move(callbacks))); });
  return future.get();
}

Result<ProcessHandle> UvProcessLauncher::FindStarted(const std::string& group,
                                                     const std::string& log_path) {
  const std::string marker = std::string(kGroupEnvVar) + "=" + impl_->Marker(group);
  auto registered = [&]() -> std::optional<ProcessHandle> {
    auto r = ReadStepRegistration(StepRegistrationPath(log_path));
    if (!r || r->marker != marker) return std::nullopt;  // none, or an earlier attempt's
    ProcessHandle h;
    h.pid = r->pid;
    h.supervisor_pid = r->supervisor_pid;
    h.supervisor_start = r->supervisor_start;
    h.group = group;
    h.log_path = log_path;
    h.log_start = r->log_start;
    return h;
  };
  if (auto h = registered()) return *h;
  // Not registered (yet): a supervisor of this log and group that is still starting?
  int supervisor = 0;
  for (int pid : procfs::AllPids()) {
    auto args = procfs::ReadCmdline(pid);
    bool log = false, mark = false;
    for (std::size_t i = 0; i + 1 < args.size() && args[i] != "--"; ++i) {
      log = log || (args[i] == "--log" && args[i + 1] == log_path);
      mark = mark || (args[i] == "--marker" && args[i + 1] == marker);
    }
    if (log && mark && procfs::IsLive(pid)) {
      supervisor = pid;
      break;
    }
  }
  if (supervisor == 0) return NotFound("no supervisor was started for " + log_path);
  auto deadline = Clock::now() + limits::kStepRegisterWait;
  while (Clock::now() < deadline && procfs::IsLive(supervisor)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (auto h = registered()) return *h;
  }
  if (auto h = registered()) return *h;
  ::kill(supervisor, SIGKILL);
  KillGroup(group, limits::kKillGracePeriod);
  return DeadlineExceeded("the supervisor (pid " + std::to_string(supervisor) + ") of " + log_path +
                          " did not register within " +
                          std::to_string(limits::kStepRegisterWait.count()) +
                          " ms; it and its group were killed");
}

void UvProcessLauncher::SignalGroup(const std::string& group, int signal) {
  impl_->RunOnLoop([impl = impl_.get(), group, signal] {
    for (int pid : impl->GroupPids(group)) ::kill(pid, signal);
  });
}

void UvProcessLauncher::KillGroup(const std::string& group, std::chrono::milliseconds grace) {
  impl_->RunOnLoop([impl = impl_.get(), group, grace] { impl->StartKill(group, grace); });
}

std::string UvProcessLauncher::DescribeIsolation() {
  const auto& h = DetectCgroupHierarchy();
  if (h) return h->kind + " at " + h->base + " + " + kGroupEnvVar + " environment sweep";
  return std::string(kGroupEnvVar) + " environment sweep only (no usable cgroup)";
}

void UvProcessLauncher::SetOutputBacklog(std::function<std::size_t()> downstream_queued,
                                         std::size_t limit) {
  std::lock_guard<std::mutex> lock(impl_->backlog_mu);
  impl_->downstream_queued = std::move(downstream_queued);
  impl_->backlog_limit = limit;
}

std::string UvProcessLauncher::CgroupDir(const std::string& group) const {
  return impl_->cgroups.GroupDir(group);
}

std::string UvProcessLauncher::CgroupScopeDir() const { return impl_->cgroups.ScopeDir(); }

}  // namespace herd::agent
