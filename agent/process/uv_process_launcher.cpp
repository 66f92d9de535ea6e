#include "agent/process/uv_process_launcher.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
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
#include "agent/process/proc_scan.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

extern char** environ;

namespace herd::agent {
namespace {

using Clock = std::chrono::steady_clock;

// Spawned through this when cgroups work, so the process is in its group's cgroup before it can
// fork: it writes its own pid into cgroup.procs ($1) and execs the program. A failed write only
// costs the cgroup (the environment sweep still finds the process), never the job.
constexpr const char* kCgroupWrapper = "{ echo $$ >\"$1\"; } 2>/dev/null; shift; exec \"$@\"";

// Pids that a uv_process_t of some launcher owns. The orphan reaper must leave them to libuv,
// whose SIGCHLD handling waits for each of them by pid.
std::mutex g_registry_mu;
std::set<int> g_uv_children;  // guarded by g_registry_mu

// As a child subreaper this process inherits the orphans of its jobs (setsid'd daemons, children
// of a killed rank). Reap those that died, and nothing else: an adopted orphan is recognised by
// being in another session than ours (spawned jobs call setsid) and not being libuv's.
void ReapAdoptedZombies() {
  std::lock_guard lock(g_registry_mu);
  const int self = ::getpid();
  const int own_session = ::getsid(0);
  for (int pid : procfs::AllPids()) {
    auto st = procfs::ReadStat(pid);
    if (!st || st->state != 'Z' || st->ppid != self || st->session == own_session) continue;
    if (g_uv_children.count(pid)) continue;
    ::waitpid(pid, nullptr, WNOHANG);
  }
}

std::string UvError(std::string_view what, int err) {
  return std::string(what) + ": " + uv_strerror(err);
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
  // One spawned process: its libuv handles, its log file and what is known of its end.
  struct Child {
    Impl* impl = nullptr;
    uv_process_t process{};
    uv_pipe_t out{};
    uv_pipe_t err{};
    int handles_open = 3;  // process + 2 pipes (+ the drain timer); done when all are closed
    bool out_open = true, err_open = true;
    bool drain_timer_open = false;
    uv_timer_t drain_timer{};
    bool spawned = false;
    std::string group;
    int pid = 0;
    int log_fd = -1;
    bool log_error_reported = false;
    uint64_t total_bytes = 0;
    int64_t exit_status = 0;
    int term_signal = 0;
    std::shared_ptr<ProcessCallbacks> callbacks;
    std::unique_ptr<char[]> buffer = std::make_unique<char[]>(kReadBufferBytes);
    static constexpr size_t kReadBufferBytes = 64 * 1024;
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

  Impl(std::function<void(std::function<void()>)> post_fn, std::string scope)
      : post(std::move(post_fn)),
        cgroups(scope.empty() ? std::nullopt : DetectCgroupHierarchy(), scope),
        scope_(scope) {}

  // The environment marker of a group. /proc is shared by every agent on the machine (test nodes
  // are namespaces of one kernel), so the marker names this launcher's scope too: a sweep for
  // "job1-a1" must never reach another agent's job 1.
  std::string Marker(const std::string& group) const {
    return scope_.empty() ? group : scope_ + "/" + group;
  }

  std::function<void(std::function<void()>)> post;
  CgroupTree cgroups;
  std::string scope_;
  uv_loop_t loop{};
  uv_async_t wake{};
  uv_signal_t sigchld{};
  std::thread thread;

  std::mutex mu;
  std::deque<std::function<void()>> tasks;  // guarded by mu

  // Loop thread only.
  bool stopping = false;
  std::set<Child*> children;
  std::set<KillOp*> kills;
  std::map<std::string, int> children_per_group;
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

  static void OnWake(uv_async_t* handle) {
    auto* self = static_cast<Impl*>(handle->data);
    std::deque<std::function<void()>> batch;
    {
      std::lock_guard lock(self->mu);
      batch.swap(self->tasks);
    }
    for (auto& fn : batch) fn();
  }

  static void OnSigchld(uv_signal_t*, int) { ReapAdoptedZombies(); }

  // ---- Spawn ----------------------------------------------------------------------------------

  Result<int> DoSpawn(const SpawnRequest& req, ProcessCallbacks callbacks) {
    if (req.argv.empty() || req.argv[0].empty()) return InvalidArgument("empty argv");
    if (req.group.empty()) return InvalidArgument("empty process group");
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
    env[kGroupEnvVar] = Marker(req.group);

    if (!req.cwd.empty()) {
      struct stat st {};
      if (::stat(req.cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        return NotFound("working directory " + req.cwd + " does not exist");
    }
    auto path_it = env.find("PATH");
    HERD_ASSIGN_OR_RETURN(
        std::string program,
        ResolveProgram(req.argv[0], path_it == env.end() ? "" : path_it->second, req.cwd));

    auto child = std::make_unique<Child>();
    child->impl = this;
    child->group = req.group;
    child->callbacks = std::make_shared<ProcessCallbacks>(std::move(callbacks));
    std::filesystem::path created;  // what to remove again if the spawn fails
    if (!req.log_path.empty()) {
      std::filesystem::path log(req.log_path);
      created = FirstMissing(log);
      std::error_code ec;
      if (log.has_parent_path()) std::filesystem::create_directories(log.parent_path(), ec);
      if (ec) return IoError("creating the directory of " + req.log_path + ": " + ec.message());
      child->log_fd = ::open(req.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (child->log_fd < 0) {
        Status s = ErrnoError("opening log " + req.log_path, errno);
        if (!created.empty()) std::filesystem::remove_all(created, ec);
        return s;
      }
    }

    std::vector<std::string> args;
    if (cgroups.enabled()) {
      auto procs = cgroups.Prepare(req.group);
      if (procs.ok()) {
        args = {"/bin/sh", "-c", kCgroupWrapper, "herd-spawn", *procs};
      } else if (!cgroup_warned) {
        cgroup_warned = true;
        HERD_LOG(kWarn) << "cannot create a cgroup for group " << req.group << ": "
                        << procs.status().ToString() << "; relying on the environment sweep";
      }
    }
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

    uv_pipe_init(&loop, &child->out, 0);
    uv_pipe_init(&loop, &child->err, 0);
    child->out.data = child->err.data = child->process.data = child.get();
    uv_stdio_container_t stdio[3];
    stdio[0].flags = UV_IGNORE;  // /dev/null
    stdio[1].flags = static_cast<uv_stdio_flags>(UV_CREATE_PIPE | UV_WRITABLE_PIPE);
    stdio[1].data.stream = reinterpret_cast<uv_stream_t*>(&child->out);
    stdio[2].flags = static_cast<uv_stdio_flags>(UV_CREATE_PIPE | UV_WRITABLE_PIPE);
    stdio[2].data.stream = reinterpret_cast<uv_stream_t*>(&child->err);
    uv_process_options_t options{};
    options.exit_cb = &Impl::OnExit;
    options.file = argv_c[0];
    options.args = argv_c.data();
    options.env = env_c.data();
    options.cwd = req.cwd.empty() ? nullptr : req.cwd.c_str();
    options.flags = UV_PROCESS_DETACHED;  // setsid: the job outlives the agent
    options.stdio_count = 3;
    options.stdio = stdio;

    int rc;
    {
      // Held across the fork so that no reaper sees the new child before it is registered.
      std::lock_guard lock(g_registry_mu);
      rc = uv_spawn(&loop, &child->process, &options);
      if (rc == 0) g_uv_children.insert(child->process.pid);
    }
    Child* c = child.release();  // from here on owned by its handles' close callbacks
    if (rc != 0) {
      for (uv_handle_t* h :
           {reinterpret_cast<uv_handle_t*>(&c->process), reinterpret_cast<uv_handle_t*>(&c->out),
            reinterpret_cast<uv_handle_t*>(&c->err)})
        uv_close(h, &Impl::OnClose);
      if (children_per_group.count(req.group) == 0) {
        RemoveCgroupSoon(req.group);
      }
      std::error_code ec;
      if (c->log_fd >= 0) ::close(c->log_fd);
      c->log_fd = -1;
      if (!created.empty()) std::filesystem::remove_all(created, ec);
      std::string msg = UvError("spawning " + req.argv[0], rc);
      return rc == UV_ENOENT ? NotFound(msg) : IoError(msg);
    }
    c->spawned = true;
    c->pid = c->process.pid;
    children.insert(c);
    ++children_per_group[c->group];
    uv_read_start(reinterpret_cast<uv_stream_t*>(&c->out), &Impl::OnAlloc, &Impl::OnRead);
    uv_read_start(reinterpret_cast<uv_stream_t*>(&c->err), &Impl::OnAlloc, &Impl::OnRead);
    HERD_LOG(kDebug) << "spawned pid " << c->pid << " (" << req.argv[0] << ") in group "
                     << req.group;
    return c->pid;
  }

  static void OnAlloc(uv_handle_t* handle, size_t, uv_buf_t* buf) {
    auto* c = static_cast<Child*>(handle->data);
    // One buffer per child is enough: libuv hands each read to OnRead before the next alloc.
    *buf = uv_buf_init(c->buffer.get(), Child::kReadBufferBytes);
  }

  static void OnRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
    auto* c = static_cast<Child*>(stream->data);
    if (nread > 0) {
      c->impl->Append(c, buf->base, static_cast<size_t>(nread));
    } else if (nread < 0) {  // EOF, or an error that ends the stream just the same
      ClosePipe(c, reinterpret_cast<uv_pipe_t*>(stream));
    }
  }

  static void ClosePipe(Child* c, uv_pipe_t* pipe) {
    bool& open = pipe == &c->out ? c->out_open : c->err_open;
    if (!open) return;
    open = false;
    uv_read_stop(reinterpret_cast<uv_stream_t*>(pipe));
    uv_close(reinterpret_cast<uv_handle_t*>(pipe), &Impl::OnClose);
    if (!c->out_open && !c->err_open && c->drain_timer_open) {
      c->drain_timer_open = false;
      uv_timer_stop(&c->drain_timer);
      uv_close(reinterpret_cast<uv_handle_t*>(&c->drain_timer), &Impl::OnClose);
    }
  }

  // The process exited but something it started still holds its stdout or stderr (a daemon that
  // did not redirect them): stop waiting for EOF after kProcessOutputDrainAfterExit, so the job
  // ends when its process does. Whatever was left running is swept when the job ends.
  static void OnDrainTimeout(uv_timer_t* timer) {
    auto* c = static_cast<Child*>(timer->data);
    HERD_LOG(kInfo) << "pid " << c->pid << " exited but its output is still held open; closing it";
    c->drain_timer_open = false;
    uv_close(reinterpret_cast<uv_handle_t*>(timer), &Impl::OnClose);
    ClosePipe(c, &c->out);
    ClosePipe(c, &c->err);
  }

  // Appends to the log, then delivers the same bytes with their position in the log.
  void Append(Child* c, const char* data, size_t n) {
    auto deliver = [this, c](uint64_t offset, const char* p, size_t len) {
      Post([cb = c->callbacks, offset, bytes = std::string(p, len)] {
        if (cb->on_output) cb->on_output(offset, bytes);
      });
    };
    if (c->log_fd < 0) {  // no log: offsets count this process's bytes
      deliver(c->total_bytes, data, n);
      c->total_bytes += n;
      return;
    }
    while (n > 0) {
      ssize_t w = ::write(c->log_fd, data, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        if (!c->log_error_reported) {
          c->log_error_reported = true;
          HERD_LOG(kError) << "writing the log of pid " << c->pid << ": " << std::strerror(errno);
        }
        // The bytes still reach the callback, at the offset they would have had.
        struct stat st {};
        ::fstat(c->log_fd, &st);
        deliver(static_cast<uint64_t>(st.st_size), data, n);
        c->total_bytes += n;
        return;
      }
      // O_APPEND: after the write the position is the end of exactly these bytes, whoever else
      // appends to the same file.
      off_t end = ::lseek(c->log_fd, 0, SEEK_CUR);
      deliver(static_cast<uint64_t>(end - w), data, static_cast<size_t>(w));
      data += w;
      n -= static_cast<size_t>(w);
      c->total_bytes += static_cast<uint64_t>(w);
    }
  }

  static void OnExit(uv_process_t* process, int64_t exit_status, int term_signal) {
    auto* c = static_cast<Child*>(process->data);
    c->exit_status = exit_status;
    c->term_signal = term_signal;
    {
      std::lock_guard lock(g_registry_mu);
      g_uv_children.erase(c->pid);
    }
    uv_close(reinterpret_cast<uv_handle_t*>(process), &Impl::OnClose);
    if (c->out_open || c->err_open) {
      uv_timer_init(process->loop, &c->drain_timer);
      c->drain_timer.data = c;
      c->drain_timer_open = true;
      ++c->handles_open;
      uv_timer_start(&c->drain_timer, &Impl::OnDrainTimeout,
                     static_cast<uint64_t>(limits::kProcessOutputDrainAfterExit.count()), 0);
    }
  }

  // The child is finished when its process has exited and both pipes reached EOF.
  static void OnClose(uv_handle_t* handle) {
    auto* c = static_cast<Child*>(handle->data);
    if (--c->handles_open > 0) return;
    Impl* self = c->impl;
    if (c->log_fd >= 0) ::close(c->log_fd);
    if (c->spawned) {
      self->children.erase(c);
      int exit_code = c->term_signal ? 128 + c->term_signal : static_cast<int>(c->exit_status);
      self->Post([cb = c->callbacks, exit_code, sig = c->term_signal, total = c->total_bytes] {
        if (cb->on_exit) cb->on_exit(exit_code, sig, total);
      });
      if (--self->children_per_group[c->group] == 0) {
        self->children_per_group.erase(c->group);
        if (!self->stopping) self->RemoveCgroupSoon(c->group);
      }
    }
    delete c;
  }

  // ---- KillGroup ------------------------------------------------------------------------------

  void StartKill(const std::string& group, std::chrono::milliseconds grace) {
    if (stopping) return;
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
    std::vector<Child*> live(children.begin(), children.end());
    {
      std::lock_guard lock(g_registry_mu);
      for (Child* c : live) g_uv_children.erase(c->pid);  // let another launcher reap them
    }
    for (Child* c : live) {
      for (uv_handle_t* h :
           {reinterpret_cast<uv_handle_t*>(&c->process), reinterpret_cast<uv_handle_t*>(&c->out),
            reinterpret_cast<uv_handle_t*>(&c->err)})
        if (!uv_is_closing(h)) uv_close(h, &Impl::OnClose);
      if (c->drain_timer_open) {
        c->drain_timer_open = false;
        uv_close(reinterpret_cast<uv_handle_t*>(&c->drain_timer), &Impl::OnClose);
      }
    }
    uv_close(reinterpret_cast<uv_handle_t*>(&wake), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&sigchld), nullptr);
    for (const auto& [group, until] : pending_removals) cgroups.Remove(group);  // a last try
    uv_close(reinterpret_cast<uv_handle_t*>(&removal_timer), nullptr);
  }
};

UvProcessLauncher::UvProcessLauncher(std::function<void(std::function<void()>)> post,
                                     std::string cgroup_scope)
    : impl_(std::make_unique<Impl>(std::move(post), std::move(cgroup_scope))) {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    HERD_LOG(kWarn) << "PR_SET_CHILD_SUBREAPER: " << std::strerror(errno);
  }
  uv_loop_init(&impl_->loop);
  uv_async_init(&impl_->loop, &impl_->wake, &Impl::OnWake);
  impl_->wake.data = impl_.get();
  uv_signal_init(&impl_->loop, &impl_->sigchld);
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

Result<int> UvProcessLauncher::Spawn(const SpawnRequest& request, ProcessCallbacks callbacks) {
  std::promise<Result<int>> result;
  auto future = result.get_future();
  impl_->RunOnLoop([&] { result.set_value(impl_->DoSpawn(request, std::move(callbacks))); });
  return future.get();
}

void UvProcessLauncher::KillGroup(const std::string& group, std::chrono::milliseconds grace) {
  impl_->RunOnLoop([impl = impl_.get(), group, grace] { impl->StartKill(group, grace); });
}

std::string UvProcessLauncher::DescribeIsolation() {
  const auto& h = DetectCgroupHierarchy();
  if (h) return h->kind + " at " + h->base + " + " + kGroupEnvVar + " environment sweep";
  return std::string(kGroupEnvVar) + " environment sweep only (no usable cgroup)";
}

std::string UvProcessLauncher::CgroupDir(const std::string& group) const {
  return impl_->cgroups.GroupDir(group);
}

}  // namespace herd::agent
