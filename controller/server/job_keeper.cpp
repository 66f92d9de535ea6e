#include "controller/server/job_keeper.hpp"

#include <signal.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "controller/jobs/managed_job_store.hpp"
#include "controller/server/command_runner.hpp"
#include "controller/server/store/api_store.hpp"
#include "controller/state/herd_home.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"
#include "shared/common/unix_time.hpp"

namespace herd::server {

std::string ManagedLeaseName(const std::string& user, int64_t id) {
  return "managed/" + user + "/" + std::to_string(id);
}

// ---- The decisions ------------------------------------------------------------------------------

void JobKeeper::Drop(const std::string& lease, bool release) {
  auto it = held_.find(lease);
  if (it == held_.end()) return;
  world_.StopController(it->second.job);
  if (release) world_.Release(lease);
  held_.erase(it);
}

void JobKeeper::Fail(const std::string& lease, const KeptJob& job, const std::string& why) {
  world_.FailJob(job, why);
  world_.ReleaseStorage(job);
  Drop(lease, true);
}

// A job whose lease this keeper holds: its controller runs, or is started (again).
void JobKeeper::Keep(Holding& h, bool unfinished) {
  const std::string lease = ManagedLeaseName(h.job.user, h.job.id);
  if (world_.ControllerRunning(h.job)) return;
  if (!unfinished) {
    // Over (its controller wrote the end and exited): the lease goes.
    HERD_LOG(kInfo) << "managed job " << lease << " ended; lease released";
    Drop(lease, true);
    return;
  }
  const auto now = clock_.Now();
  if (h.ever_started) {
    // It exited (or died) while the job is unfinished: started again after a wait; a controller
    // that keeps exiting at once cannot run, and the job ends.
    h.ever_started = false;
    h.quick_exits = now - h.started < limits::kManagedControllerQuickExit ? h.quick_exits + 1 : 0;
    h.restart_at = now + limits::kManagedControllerRestartWait;
    HERD_LOG(kWarn) << "managed job " << lease << ": its controller exited before the job ended ("
                    << h.quick_exits << " quick exit(s) in a row)";
  }
  if (h.quick_exits >= limits::kManagedControllerMaxQuickExits) {
    Fail(lease, h.job,
         "its controller exited " + std::to_string(h.quick_exits) +
             " times in a row soon after its start (see the job's controller.log)");
    return;
  }
  if (now < h.restart_at) return;
  Status s = world_.StartController(h.job);
  if (s.code() == Code::kNotFound) {
    Fail(lease, h.job, "cannot start its controller: " + s.message());
    return;
  }
  if (!s.ok()) {
    HERD_LOG(kWarn) << "managed job " << lease << ": cannot start its controller: " << s.message();
    ++h.quick_exits;
    h.restart_at = now + limits::kManagedControllerRestartWait;
    return;
  }
  HERD_LOG(kInfo) << "managed job " << lease << ": controller started";
  h.ever_started = true;
  h.started = now;
}

void JobKeeper::Tick() {
  // Fence first: a lease not renewed for TTL - margin may be another server's soon.
  const auto fence_after = limits::kManagedLeaseTtl - limits::kManagedLeaseFenceMargin;
  for (auto it = held_.begin(); it != held_.end();) {
    auto next = std::next(it);
    if (clock_.Now() - it->second.renewed >= fence_after) {
      HERD_LOG(kWarn) << "managed job " << it->first
                      << ": lease not renewed in time; its controller is stopped here";
      Drop(it->first, true);
    }
    it = next;
  }
  for (auto it = held_.begin(); it != held_.end();) {
    auto next = std::next(it);
    Status s = world_.Renew(it->first);
    if (s.ok()) {
      it->second.renewed = clock_.Now();
    } else if (s.code() == Code::kFailedPrecondition) {
      // Expired and taken, or gone: whoever holds it now runs the controller.
      HERD_LOG(kWarn) << "managed job " << it->first << ": lease lost (" << s.message() << ")";
      Drop(it->first, false);
    } else {
      HERD_LOG(kWarn) << "managed job " << it->first << ": cannot renew its lease: " << s.message();
    }
    it = next;
  }

  auto jobs = world_.ListJobs();
  if (!jobs.ok()) {
    HERD_LOG(kWarn) << "managed jobs: cannot list them: " << jobs.status().message();
    return;
  }
  std::set<std::string> listed;
  for (const KeptJob& job : *jobs) {
    const std::string lease = ManagedLeaseName(job.user, job.id);
    listed.insert(lease);
    auto it = held_.find(lease);
    if (job.finished) {
      if (it != held_.end()) Keep(it->second, false);
      if (!job.secrets_ref.empty() && secrets_dropped_.insert(lease).second) {
        world_.DropSecrets(job);
      }
      continue;
    }
    if (it == held_.end()) {
      auto got = world_.TryAcquire(lease);
      if (!got.ok()) {
        HERD_LOG(kWarn) << "managed job " << lease << ": lease: " << got.status().message();
        continue;
      }
      if (!*got) continue;  // another server's
      HERD_LOG(kInfo) << "managed job " << lease << ": lease taken";
      it = held_.emplace(lease, Holding{.job = job, .renewed = clock_.Now()}).first;
    } else {
      it->second.job = job;
    }
    Keep(it->second, true);
  }
  // A held job no longer listed (its user's table is gone): let go once its controller is.
  for (auto it = held_.begin(); it != held_.end();) {
    auto next = std::next(it);
    if (!listed.count(it->first)) Keep(it->second, false);
    it = next;
  }
}

void JobKeeper::StopAll() {
  while (!held_.empty()) Drop(held_.begin()->first, true);
}

std::vector<std::string> JobKeeper::Held() const {
  std::vector<std::string> out;
  for (const auto& [lease, h] : held_) out.push_back(lease);
  return out;
}

// ---- The server's world -------------------------------------------------------------------------

namespace {

namespace fs = std::filesystem;

// Alive and not a zombie: a controller that died is a zombie until the command's reader thread
// reaps it, which waits for its output pipes (a grandchild may still hold them).
bool ProcessLive(int pid) {
  auto stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return false;
  auto paren = stat->rfind(')');
  return paren != std::string::npos && paren + 2 < stat->size() && (*stat)[paren + 2] != 'Z';
}

class ServerKeeperWorld final : public KeeperWorld {
 public:
  ServerKeeperWorld(ApiStore& store, ServerKeeperOptions o) : store_(store), o_(std::move(o)) {}

  std::string HerdHomeOf(const std::string& user) const {
    return o_.state_dir + "/users/" + user + "/herd";
  }

  Result<std::vector<KeptJob>> ListJobs() override {
    HERD_ASSIGN_OR_RETURN(auto users, store_.ListUsers());
    std::vector<KeptJob> out;
    for (const auto& u : users) {
      const std::string path = jobs::ManagedJobsDbPathIn(HerdHomeOf(u.name));
      std::error_code ec;
      if (!fs::exists(path, ec)) continue;  // never launched a managed job
      auto& db = dbs_[u.name];
      if (!db) {
        auto opened = jobs::ManagedJobStore::Open(path);
        if (!opened.ok()) {
          HERD_LOG(kWarn) << "managed jobs of " << u.name << ": " << opened.status().message();
          continue;
        }
        db = std::move(*opened);
      }
      auto list = db->List();
      if (!list.ok()) {
        HERD_LOG(kWarn) << "managed jobs of " << u.name << ": " << list.status().message();
        dbs_.erase(u.name);
        continue;
      }
      for (const auto& j : *list) {
        out.push_back({.user = u.name,
                       .id = j.id,
                       .finished = jobs::IsTerminal(j.state),
                       .secrets_ref = j.secrets_ref});
      }
    }
    return out;
  }

  Result<bool> TryAcquire(const std::string& lease) override {
    return store_.TryAcquireLease(lease, o_.holder, limits::kManagedLeaseTtl.count(), NowUnixMs());
  }
  Status Renew(const std::string& lease) override {
    return store_.RenewLease(lease, o_.holder, limits::kManagedLeaseTtl.count(), NowUnixMs());
  }
  void Release(const std::string& lease) override {
    if (auto s = store_.ReleaseLease(lease, o_.holder); !s.ok()) {
      HERD_LOG(kWarn) << "managed job " << lease << ": release: " << s.message();
    }
  }

  Status StartController(const KeptJob& job) override {
    std::string secrets;
    if (!job.secrets_ref.empty()) {
      auto got = store_.GetSecret(job.user, jobs::ManagedSecretsKey(job.secrets_ref));
      if (!got.ok() && got.status().code() == Code::kNotFound) {
        return NotFound("its secrets are not in the server's database");
      }
      HERD_RETURN_IF_ERROR(got.status());
      secrets = std::move(*got);
    }
    const std::string dir = jobs::ManagedJobDirIn(HerdHomeOf(job.user), job.id);
    HERD_RETURN_IF_ERROR(controller::EnsureDir(dir, 0700));
    CommandSpec spec;
    spec.argv = {o_.herd_binary, "jobs", "_controller", std::to_string(job.id)};
    spec.env = o_.user_env(job.user);
    if (!secrets.empty()) spec.env.push_back(std::string(jobs::kManagedSecretsOnStdinEnv) + "=1");
    spec.cwd = o_.state_dir + "/users/" + job.user;
    spec.stdin_data = std::move(secrets);
    spec.log_path = dir + "/controller.log";
    // Started from the keeper's thread: PR_SET_PDEATHSIG kills it with that thread (the server).
    HERD_ASSIGN_OR_RETURN(auto cmd, RunningCommand::Start(std::move(spec), nullptr));
    running_[ManagedLeaseName(job.user, job.id)] = std::move(cmd);
    return Status::Ok();
  }

  bool ControllerRunning(const KeptJob& job) override {
    auto it = running_.find(ManagedLeaseName(job.user, job.id));
    if (it == running_.end()) return false;
    if (it->second->done() || !ProcessLive(it->second->pid())) {
      running_.erase(it);
      return false;
    }
    return true;
  }

  void StopController(const KeptJob& job) override {
    auto it = running_.find(ManagedLeaseName(job.user, job.id));
    if (it == running_.end()) return;
    ::kill(-it->second->pid(), SIGKILL);
    ::kill(it->second->pid(), SIGKILL);
    running_.erase(it);
  }

  void FailJob(const KeptJob& job, const std::string& why) override {
    HERD_LOG(kWarn) << "managed job " << ManagedLeaseName(job.user, job.id) << " fails: " << why;
    auto db = jobs::ManagedJobStore::Open(jobs::ManagedJobsDbPathIn(HerdHomeOf(job.user)));
    if (!db.ok()) return;
    auto j = (*db)->Get(job.id);
    if (!j.ok() || !j->has_value() || jobs::IsTerminal((*j)->state)) return;
    (*j)->state = jobs::ManagedState::kFailedController;
    (*j)->ended_unix_ms = NowUnixMs();
    (*j)->message = why;
    if (!(*j)->cluster.empty()) {
      (*j)->message +=
          "; cluster " + (*j)->cluster + " may still be up (herd down " + (*j)->cluster + ")";
    }
    (void)(*db)->Put(**j);
  }

  void ReleaseStorage(const KeptJob& job) override {
    const std::string lease = ManagedLeaseName(job.user, job.id);
    // Releases that ended are forgotten; one still running for this job is left to finish.
    for (auto it = releasing_.begin(); it != releasing_.end();) {
      it = it->second->done() ? releasing_.erase(it) : std::next(it);
    }
    if (releasing_.count(lease)) return;
    const std::string dir = jobs::ManagedJobDirIn(HerdHomeOf(job.user), job.id);
    if (Status s = controller::EnsureDir(dir, 0700); !s.ok()) {
      HERD_LOG(kWarn) << "managed job " << lease << ": cannot release its buckets: " << s.message();
      return;
    }
    CommandSpec spec;
    spec.argv = {o_.herd_binary, "jobs", "_release", std::to_string(job.id)};
    spec.env = o_.user_env(job.user);
    spec.cwd = o_.state_dir + "/users/" + job.user;
    // After the controller's own lines: why the job failed, then what its release did.
    spec.log_path = dir + "/controller.log";
    // From the keeper's thread, like the controllers: a server that stops kills a release in
    // flight; the job's hold then stays in the storage table, where `herd storage delete` lets an
    // ended job's hold go.
    auto cmd = RunningCommand::Start(std::move(spec), nullptr);
    if (!cmd.ok()) {
      HERD_LOG(kWarn) << "managed job " << lease
                      << ": cannot release its buckets: " << cmd.status().message();
      return;
    }
    (*cmd)->OnExit([lease](int code) {
      if (code != 0) {
        HERD_LOG(kWarn) << "managed job " << lease << ": releasing its buckets exited " << code
                        << " (see the job's controller.log)";
      }
    });
    releasing_[lease] = std::move(*cmd);
  }

  void DropSecrets(const KeptJob& job) override {
    Status s = store_.DeleteSecret(job.user, jobs::ManagedSecretsKey(job.secrets_ref));
    if (!s.ok() && s.code() != Code::kNotFound) {
      HERD_LOG(kWarn) << "managed job " << ManagedLeaseName(job.user, job.id)
                      << ": deleting its secrets: " << s.message();
    }
  }

 private:
  ApiStore& store_;
  ServerKeeperOptions o_;
  std::map<std::string, std::unique_ptr<jobs::ManagedJobStore>> dbs_;
  std::map<std::string, std::shared_ptr<RunningCommand>> running_;
  std::map<std::string, std::shared_ptr<RunningCommand>> releasing_;  // `herd jobs _release`s
};

class ServerKeeperImpl final : public ServerKeeper {
 public:
  ServerKeeperImpl(ApiStore& store, ServerKeeperOptions o)
      : world_(store, std::move(o)), keeper_(world_, clock_) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~ServerKeeperImpl() override { Stop(); }

  void Kick() override {
    std::lock_guard<std::mutex> l(mu_);
    kicked_ = true;
    cv_.notify_all();
  }

  void Stop() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) return;
      stopping_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  // The controllers are forked by this thread (PR_SET_PDEATHSIG is the forking thread's): it lives
  // as long as the server, and stops them itself before it ends.
  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (!stopping_) {
      kicked_ = false;
      l.unlock();
      keeper_.Tick();
      l.lock();
      cv_.wait_for(l, limits::kManagedKeeperTick, [this] { return stopping_ || kicked_; });
    }
    l.unlock();
    keeper_.StopAll();
  }

  SystemClock clock_;
  ServerKeeperWorld world_;
  JobKeeper keeper_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool kicked_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<ServerKeeper>> StartServerKeeper(ApiStore& store,
                                                        ServerKeeperOptions options) {
  if (options.holder.empty() || options.state_dir.empty() || options.herd_binary.empty() ||
      !options.user_env) {
    return InvalidArgument("the managed job keeper needs a holder, a state dir, herd and an env");
  }
  return std::unique_ptr<ServerKeeper>(new ServerKeeperImpl(store, std::move(options)));
}

}  // namespace herd::server
