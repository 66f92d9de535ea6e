#include "controller/jobs/managed_jobs.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "controller/core/head_client.hpp"
#include "controller/jobs/managed_jobs_internal.hpp"
#include "controller/jobs/recovery.hpp"
#include "controller/jobs/task_codec.hpp"
#include "controller/optimizer/failover.hpp"
#include "controller/optimizer/infra.hpp"
#include "controller/optimizer/optimizer.hpp"
#include "controller/provider/herd_config.hpp"
#include "controller/ssh/subprocess.hpp"
#include "controller/ssh/tcp_probe.hpp"
#include "controller/state/herd_home.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/unix_time.hpp"
#include "shared/proto/job_state.hpp"

namespace herd::controller {
namespace managed_internal {

Result<std::unique_ptr<jobs::ManagedJobStore>> OpenJobs() {
  return jobs::ManagedJobStore::Open(jobs::ManagedJobsDbPath());
}

Result<jobs::ManagedJob> Load(jobs::ManagedJobStore& store, int64_t id) {
  HERD_ASSIGN_OR_RETURN(auto job, store.Get(id));
  if (!job) {
    return NotFound("managed job " + std::to_string(id) + " not found (see `herd jobs queue`)");
  }
  return *job;
}

// The controller process is alive when /proc/PID is this job's `herd jobs _controller ID`.
bool ControllerAlive(const jobs::ManagedJob& job, int64_t now_unix_ms) {
  if (job.controller_pid <= 0) {
    return now_unix_ms - job.submitted_unix_ms <
           std::chrono::duration_cast<std::chrono::milliseconds>(
               limits::kManagedControllerStartGrace)
               .count();
  }
  auto cmdline = ReadFile("/proc/" + std::to_string(job.controller_pid) + "/cmdline");
  const std::string cmd = cmdline.ok() ? std::move(cmdline).value() : std::string();
  std::vector<std::string> argv;
  std::string cur;
  for (char c : cmd) {
    if (c == '\0') {
      argv.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return argv.size() >= 4 && argv[argv.size() - 3] == "jobs" &&
         argv[argv.size() - 2] == "_controller" && argv.back() == std::to_string(job.id);
}

}  // namespace managed_internal

namespace {

namespace fs = std::filesystem;
using herd::v1::JobInfo;
using jobs::AttemptOutcome;
using jobs::ManagedJob;
using jobs::ManagedJobStore;
using jobs::ManagedState;

// The task's secrets reach the controller as a JSON object in an anonymous file (memfd) that is
// its stdin: never in the job table, a named file, argv or the environment, and of any size (an
// environment variable is at most MAX_ARG_STRLEN, 128 KiB, and a task may carry up to
// limits::kMaxTaskSpecBytes of secrets). The controller reads it at start and puts /dev/null in
// its place, so nothing it runs inherits it. This variable ("1") says stdin holds them.
constexpr const char* kSecretsOnStdinEnv = jobs::kManagedSecretsOnStdinEnv;

// An anonymous file holding `json`, closed on exec (the controller gets a dup of it as stdin).
Result<int> SecretsFile(const std::string& json) {
  int fd = ::memfd_create("herd-managed-secrets", MFD_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot hand the secrets to the controller: memfd_create", errno);
  if (const int err = WriteAll(fd, json); err != 0) {
    ::close(fd);
    return ErrnoError("cannot hand the secrets to the controller: write", err);
  }
  return fd;
}

using managed_internal::ControllerAlive;
using managed_internal::Load;
using managed_internal::OpenJobs;

// "sky-managed-2026-12-03-09-15-02-123456_<name>_<id>": SkyPilot's form for a managed job, the
// same for every attempt.
std::string ManagedTaskId(int64_t submitted_ms, const std::string& name, int64_t id) {
  const time_t t = static_cast<time_t>(submitted_ms / 1000);
  struct tm utc {};
  gmtime_r(&t, &utc);
  char buf[64];
  std::snprintf(buf, sizeof buf, "sky-managed-%04d-%02d-%02d-%02d-%02d-%02d-%06lld",
                utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min,
                utc.tm_sec, static_cast<long long>(submitted_ms % 1000) * 1000);
  return std::string(buf) + "_" + (name.empty() ? "job" : name) + "_" + std::to_string(id);
}

// A cluster per attempt: "<name>-<id>-<attempt>", the name reduced to what a cluster name allows
// (a-z, 0-9, '-', starting with a letter, at most 40 characters in all).
std::string AttemptCluster(const ManagedJob& job, int attempt) {
  std::string base;
  for (char c : job.name) {
    char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    bool ok = (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '-';
    base += ok ? l : '-';
  }
  if (base.empty() || base[0] < 'a' || base[0] > 'z')
    base = "herd-job" + (base.empty() ? "" : "-" + base);
  std::string suffix = "-" + std::to_string(job.id) + "-" + std::to_string(attempt);
  // A team server's users each count their job ids from 1 on one machine: the server gives each
  // user's commands a tag of [0-9a-f] that keeps their clusters' names apart.
  if (const char* tag = std::getenv("HERD_MANAGED_CLUSTER_TAG"); tag != nullptr && *tag != '\0') {
    std::string t;
    for (const char* c = tag; *c != '\0' && t.size() < 8; ++c) {
      if ((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')) t += *c;
    }
    if (!t.empty()) suffix = "-" + t + suffix;
  }
  if (base.size() + suffix.size() > 40) base.resize(40 - suffix.size());
  while (!base.empty() && base.back() == '-') base.pop_back();
  return base + suffix;
}

// ---- The controller process -------------------------------------------------------------------

// herd's config.yaml `jobs: {node_recovery: cluster}`: every recovery from a lost node relaunches
// the whole cluster, as before lost workers were replaced alone (the recovery bench compares
// both). `replace`, the default, replaces lost workers alone (jobs::ReplaceableLostNodes). An
// unreadable file or an unknown value keeps the default and says so in the controller's log.
bool WholeClusterRecovery(std::string& note) {
  const std::string file = DefaultHerdConfigFile();
  auto root = LoadHerdConfigYaml(file);
  if (!root.ok()) {
    note = root.status().message();
    return false;
  }
  if (!root->IsMap()) return false;
  const YAML::Node jobs = (*root)["jobs"];
  if (!jobs || !jobs.IsMap()) return false;
  const YAML::Node mode = jobs["node_recovery"];
  if (!mode || mode.IsNull()) return false;
  const std::string value = mode.IsScalar() ? mode.Scalar() : std::string();
  if (value == "cluster") return true;
  if (value != "replace") {
    note = file + ": jobs.node_recovery: expected replace or cluster, not '" + value + "'";
  }
  return false;
}

std::atomic<bool> g_cancel_signal{false};
void OnTerm(int) { g_cancel_signal = true; }

class Controller {
 public:
  Controller(ops::ClusterOps& ops, std::unique_ptr<ManagedJobStore> store, ManagedJob job,
             task::Task task)
      : ops_(ops),
        clock_(*ops.parts().clock),
        store_(std::move(store)),
        job_(std::move(job)),
        task_(std::move(task)) {}

  int Run() {
    const task::JobRecovery policy = jobs::PolicyOf(task_);
    jobs::RecoveryCounters counters{.recoveries = job_.recoveries,
                                    .restarts_on_errors = job_.restarts_on_errors};
    std::string note;
    whole_cluster_recovery_ = WholeClusterRecovery(note);
    if (!note.empty()) Log(note + "; replacing lost workers alone");
    Log("controller started (pid " + std::to_string(::getpid()) + "), strategy " + policy.strategy +
        ", max_restarts_on_errors " + std::to_string(policy.max_restarts_on_errors) +
        (whole_cluster_recovery_ ? ", whole-cluster recovery" : ""));
    if (auto done = Resume(policy, counters)) return *done;
    while (true) {
      if (CancelRequested()) return Finish(ManagedState::kCancelled, "cancelled by the user", "");
      const int attempt = static_cast<int>(job_.attempts.size()) + 1;
      // A lost worker being replaced alone: the next attempt runs on the same cluster.
      const std::string cluster =
          repair_cluster_.empty() ? AttemptCluster(job_, attempt) : repair_cluster_;
      job_.cluster = cluster;
      job_.attempts.push_back({.attempt = attempt,
                               .cluster = cluster,
                               .cluster_job_id = 0,
                               .start_unix_ms = clock_.UnixMs(),
                               .end_unix_ms = 0,
                               .outcome = "",
                               .reason = ""});
      if (job_.state == ManagedState::kPending) job_.state = ManagedState::kStarting;
      job_.message = "launching attempt " + std::to_string(attempt) + " on cluster " + cluster;
      Save();
      Log(job_.message);

      std::string why;
      exit_codes_.clear();
      AttemptOutcome outcome = RunAttempt(cluster, attempt, why);
      if (auto done = AfterAttempt(outcome, why, policy, counters)) return *done;
    }
  }

 private:
  // The end of the current attempt: recorded, decided (jobs::Decide), and either the job's end
  // (the exit code) or its cluster torn down for the next attempt (nullopt).
  std::optional<int> AfterAttempt(AttemptOutcome outcome, const std::string& why,
                                  const task::JobRecovery& policy,
                                  jobs::RecoveryCounters& counters) {
    auto& rec = job_.attempts.back();
    const std::string cluster = rec.cluster;
    rec.end_unix_ms = clock_.UnixMs();
    rec.outcome = std::string(jobs::OutcomeName(outcome));
    jobs::Decision d = jobs::Decide(outcome, counters, policy, CancelRequested(),
                                    limits::kManagedLaunchAttempts, exit_codes_);
    rec.reason = why.empty() ? d.reason : why + "; " + d.reason;
    counters = d.counters;
    job_.recoveries = counters.recoveries;
    job_.restarts_on_errors = counters.restarts_on_errors;
    Log("attempt " + std::to_string(rec.attempt) + ": " + rec.outcome + ": " + rec.reason);
    if (d.action == jobs::NextAction::kFinish) {
      return Finish(d.final_state, rec.reason, cluster);
    }
    job_.state = ManagedState::kRecovering;
    job_.message = rec.reason;
    Save();
    StopGracefully(cluster, outcome);
    if (d.action == jobs::NextAction::kRelaunch && outcome == AttemptOutcome::kNodeLost) {
      const std::vector<std::string> lost = LostWorkers(cluster);
      if (!lost.empty()) {
        std::string names;
        for (const auto& n : lost) names += (names.empty() ? "" : ", ") + n;
        rec.reason += "; replacing " + names + " alone on cluster " + cluster;
        job_.message = rec.reason;
        Save();
        Log("the head of " + cluster + " answers and only " + names +
            " is lost: replacing it alone (the other nodes and their agents stay)");
        repair_cluster_ = cluster;
        return std::nullopt;
      }
    }
    TearDown(cluster);
    if (d.action == jobs::NextAction::kRetryLaunch) Wait(limits::kManagedLaunchRetryWait);
    return std::nullopt;
  }

  // A controller started for a job that an earlier controller of it had begun (that one crashed,
  // was killed, or died with its server): the job goes on from its record instead of from a new
  // attempt. A running attempt is followed again on its cluster (no relaunch, no recovery
  // counted); one that was still launching is launched again under the same number (the launch
  // reuses the cluster); a decided one (RECOVERING) has its cluster torn down and the next
  // attempt comes. The exit code when the job ended here, else nullopt (the loop goes on).
  std::optional<int> Resume(const task::JobRecovery& policy, jobs::RecoveryCounters& counters) {
    if (job_.attempts.empty()) return std::nullopt;
    const jobs::AttemptRecord last = job_.attempts.back();
    Log("resuming the job (state " + std::string(jobs::StateName(job_.state)) + ", attempt " +
        std::to_string(last.attempt) + " on cluster " + last.cluster + ")");
    if (job_.state == ManagedState::kCancelling) {
      return Finish(ManagedState::kCancelled, "cancelled by the user", last.cluster);
    }
    if (last.end_unix_ms > 0) {
      TearDown(last.cluster);
      return std::nullopt;
    }
    std::string why;
    AttemptOutcome outcome = last.cluster_job_id > 0
                                 ? FollowAgain(last.cluster, last.cluster_job_id, last.attempt, why)
                                 : RunAttempt(last.cluster, last.attempt, why);
    return AfterAttempt(outcome, why, policy, counters);
  }

  // Reaches the head of a running attempt's cluster again and follows its job from what the
  // attempt's log already holds. A head that does not answer is asked again for up to
  // limits::kManagedResumeHeadWait, its machine probed (sshd) each time: the attempt is lost only
  // when the head stays silent that long, or its machine does not answer for kNodeLostAfter.
  AttemptOutcome FollowAgain(const std::string& cluster, int64_t job_id, int attempt,
                             std::string& why) {
    const auto start = clock_.Now();
    std::unique_ptr<HeadApi> head;
    ClusterRecord record;
    while (true) {
      if (CancelRequested()) return AttemptOutcome::kCancelled;
      auto got = ops_.Get(cluster);
      if (!got.ok()) {
        why = "cluster " + cluster + " is gone: " + got.status().message();
        return AttemptOutcome::kNodeLost;
      }
      auto connected = ops_.ConnectHead(*got);
      if (connected.ok()) {
        head = std::move(*connected);
        record = std::move(*got);
        last_infra_ = record.infra;
        break;
      }
      const auto waited = clock_.Now() - start;
      const bool machine_gone = HeadNodeGone(*got);
      Log("cannot reach the head of " + cluster + ": " + connected.status().message());
      if (waited >= limits::kManagedResumeHeadWait ||
          (machine_gone && waited >= limits::kNodeLostAfter)) {
        why = "lost the cluster's head: " + connected.status().message();
        return AttemptOutcome::kNodeLost;
      }
      Wait(limits::kManagedResumeRetry);
    }
    Log("following cluster job " + std::to_string(job_id) + " on " + cluster + " again");
    job_.state = ManagedState::kRunning;
    job_.message = "";
    Save();
    return Follow(cluster, record, *head, job_id, attempt, why);
  }
  void Log(const std::string& line) {
    std::cerr << "[managed job " << job_.id << "] " << line << std::endl;
  }

  void Save() {
    if (auto s = store_->Put(job_); !s.ok()) Log("cannot record the job: " + s.message());
  }

  bool CancelRequested() {
    if (g_cancel_signal) return true;
    auto now = clock_.Now();
    if (now - last_cancel_poll_ < limits::kManagedCancelPoll) return cancel_seen_;
    last_cancel_poll_ = now;
    auto j = store_->Get(job_.id);
    if (j.ok() && j->has_value() && (*j)->cancel_requested) cancel_seen_ = true;
    return cancel_seen_;
  }

  void Wait(std::chrono::milliseconds d) {
    auto end = clock_.Now() + d;
    while (clock_.Now() < end && !CancelRequested()) {
      clock_.SleepFor(std::chrono::milliseconds(100));
    }
  }

  // The job's grace: --grace / config.herd.grace, else limits::kDefaultStopGrace.
  std::chrono::milliseconds Grace() const {
    return task_.run_limits.grace.value_or(
        std::chrono::duration_cast<std::chrono::milliseconds>(limits::kDefaultStopGrace));
  }

  // Until the cluster's head lists no unfinished job (the stopped ones' processes exited: SIGTERM,
  // then SIGKILL after the grace), at most the grace and the kill sweeps; at once when the head
  // does not answer.
  void WaitJobsEnded(const std::string& cluster) {
    const auto deadline = clock_.Now() + Grace() + limits::kKillSweepTimeout;
    while (clock_.Now() < deadline) {
      auto active = ops_.Queue(cluster, /*skip_finished=*/true);
      if (!active.ok() || active->empty()) return;
      clock_.SleepFor(std::chrono::milliseconds(200));
    }
    Log("the jobs on " + cluster + " did not end within their grace period");
  }

  // The workers of `cluster` a recovery replaces alone (jobs::ReplaceableLostNodes), asking its
  // head; empty when the whole cluster is to be relaunched (the head does not answer, its node is
  // lost, the config asks for whole-cluster recovery).
  std::vector<std::string> LostWorkers(const std::string& cluster) {
    if (whole_cluster_recovery_) return {};
    auto nodes = ops_.Nodes(cluster);
    if (!nodes.ok()) {
      Log("the head of " + cluster + " does not answer (" + nodes.status().message() +
          "): relaunching the whole cluster");
      return {};
    }
    return jobs::ReplaceableLostNodes(*nodes, jobs::PolicyOf(task_));
  }

  // Before a recovery tears the attempt's cluster down, what still runs of the attempt's job on
  // the surviving nodes gets SIGTERM and the job's grace to save. When the head still lists the
  // cluster job as unfinished (it stopped streaming, or its end is not final yet), it is cancelled
  // with the grace and the teardown waits for its processes to exit (at most the grace and the
  // kill sweeps). When it ended, the head already stopped the surviving ranks itself (a lost
  // node, a hung rank, a spot interruption notice: SIGTERM and the job's grace): a task that set
  // its grace (--grace, config.herd.grace) gets that long for them to save before their nodes go.
  void StopGracefully(const std::string& cluster, AttemptOutcome outcome) {
    if (outcome != AttemptOutcome::kNodeLost) return;
    const int64_t job_id = job_.attempts.empty() ? 0 : job_.attempts.back().cluster_job_id;
    if (job_id > 0 && ops_.Get(cluster).ok()) {
      auto active = ops_.Queue(cluster, /*skip_finished=*/true);
      const bool running =
          active.ok() && std::any_of(active->begin(), active->end(),
                                     [&](const JobInfo& j) { return j.job_id() == job_id; });
      if (running) {
        Log("stopping cluster job " + std::to_string(job_id) + " on " + cluster +
            ": SIGTERM to its processes, SIGKILL after " + std::to_string(Grace().count() / 1000) +
            " s");
        auto cancelled = ops_.Cancel(cluster, {job_id}, false, Grace());
        if (cancelled.ok() && !cancelled->empty()) {
          WaitJobsEnded(cluster);
          return;
        }
      }
    }
    if (!task_.run_limits.grace) return;
    Log("giving the surviving ranks " + std::to_string(Grace().count() / 1000) +
        " s to save before their nodes go");
    Wait(Grace());
  }

  void TearDown(const std::string& cluster) {
    if (cluster.empty()) return;
    auto exists = ops_.Get(cluster);
    if (!exists.ok()) return;  // never made, or already gone
    Log("tearing down cluster " + cluster);
    if (auto s = ops_.Down(cluster); !s.ok()) {
      Log("tearing down " + cluster + " failed: " + s.message());
      job_.message += " (tearing down " + cluster + " failed: " + s.message() + ")";
    }
  }

  int Finish(ManagedState state, const std::string& reason, const std::string& cluster) {
    if (state == ManagedState::kCancelled) {
      job_.state = ManagedState::kCancelling;
      job_.message = "cancelling";
      Save();
      if (!cluster.empty() && job_.attempts.back().cluster_job_id > 0 && ops_.Get(cluster).ok()) {
        // SIGTERM and the job's grace (--grace) to save before the teardown.
        auto cancelled = ops_.Cancel(cluster, {job_.attempts.back().cluster_job_id}, false);
        if (cancelled.ok() && !cancelled->empty()) WaitJobsEnded(cluster);
      }
      auto& rec = job_.attempts.empty() ? dummy_ : job_.attempts.back();
      if (rec.end_unix_ms == 0) {
        rec.end_unix_ms = clock_.UnixMs();
        rec.outcome = std::string(jobs::OutcomeName(AttemptOutcome::kCancelled));
        rec.reason = "cancelled by the user";
      }
    }
    job_.message = reason;
    TearDown(cluster.empty() ? job_.cluster : cluster);
    if (auto s = ops_.ReleaseManagedJobStorage(job_.id); !s.ok()) Log("buckets: " + s.message());
    job_.state = state;
    job_.ended_unix_ms = clock_.UnixMs();
    Save();
    Log("job ended " + std::string(jobs::StateName(state)) + ": " + job_.message);
    return 0;
  }

  // One attempt: launch, follow to the end, classify.
  AttemptOutcome RunAttempt(std::string cluster, int attempt, std::string& why) {
    const bool repair = !repair_cluster_.empty() && repair_cluster_ == cluster;
    repair_cluster_.clear();
    ops::LaunchOptions o;
    o.cluster = cluster;
    o.repair_nodes = repair;
    o.infra = job_.infra;
    o.task_id = job_.task_id;
    o.attempt = attempt;
    o.managed_job = job_.id;  // the job's buckets outlive this attempt's cluster
    // A git workdir is cloned afresh for each attempt and removed once the launch synced it.
    task::Task attempt_task = task_;
    if (Status s = task::ResolveGitWorkdir(attempt_task, HerdHome() + "/git-workdirs"); !s.ok()) {
      why = s.message();
      return AttemptOutcome::kLaunchFailed;
    }
    auto launched = Launch(cluster, attempt_task, o);
    if (repair && !launched.ok() && !CancelRequested()) {
      // The lost worker could not be replaced: the whole cluster is relaunched, as without it.
      Log("replacing the lost node(s) of " + cluster + " failed (" + launched.status().message() +
          "); relaunching the whole cluster");
      StopGracefully(cluster, AttemptOutcome::kNodeLost);
      TearDown(cluster);
      cluster = AttemptCluster(job_, attempt);
      job_.cluster = cluster;
      job_.attempts.back().cluster = cluster;
      job_.message = "launching attempt " + std::to_string(attempt) + " on cluster " + cluster;
      Save();
      o.cluster = cluster;
      o.repair_nodes = false;
      launched = Launch(cluster, attempt_task, o);
    }
    task::RemoveGitWorkdir(attempt_task);
    if (!launched.ok()) {
      why = launched.status().message();
      return AttemptOutcome::kLaunchFailed;
    }
    last_infra_ = launched->cluster.infra;
    auto& rec = job_.attempts.back();
    rec.cluster_job_id = launched->job_id;
    if (CancelRequested()) return AttemptOutcome::kCancelled;
    job_.state = ManagedState::kRunning;
    job_.message = "";
    if (job_.started_unix_ms == 0) job_.started_unix_ms = clock_.UnixMs();
    Save();
    if (launched->job_id == 0) return AttemptOutcome::kSucceeded;  // nothing to run
    return Follow(cluster, launched->cluster, *launched->head, launched->job_id, attempt, why);
  }

  // The attempt's cluster: one that exists (a resumed controller's attempt that was launching) is
  // launched again as it is; a new one is planned as `herd launch` plans it and its candidates are
  // tried until one comes up (optimizer/failover.hpp), the last attempt's region first or last as
  // the job's strategy says (jobs::RecoveryPreference).
  Result<ops::LaunchResult> Launch(const std::string& cluster, task::Task& t,
                                   ops::LaunchOptions& o) {
    if (ops_.Get(cluster).ok()) return ops_.Launch(t, o);
    HERD_ASSIGN_OR_RETURN(auto env, optimizer::ProbeEnvironment());
    HERD_ASSIGN_OR_RETURN(auto catalog, optimizer::LoadAwsCatalog());
    HERD_ASSIGN_OR_RETURN(auto plan, optimizer::PlanTask(t, env, catalog, {job_.infra, 0}));
    jobs::RegionPreference pref = jobs::RecoveryPreference(jobs::PolicyOf(task_), last_infra_);
    optimizer::FailoverOptions fo;
    fo.preference = {pref.prefer, pref.avoid};
    fo.note = [this](const std::string& line) { Log(line); };
    std::optional<ops::LaunchResult> launched;
    auto attempt = [&](const task::Task& applied, const optimizer::Candidate& c) -> Status {
      Log("launching on " + c.infra + (c.instance_type.empty() ? "" : " " + c.instance_type));
      o.infra = c.infra;
      auto r = ops_.Launch(applied, o);
      if (!r.ok()) return r.status();
      launched = std::move(*r);
      return Status::Ok();
    };
    auto cleanup = [&](const optimizer::Candidate&) { TearDown(cluster); };
    HERD_RETURN_IF_ERROR(optimizer::LaunchWithFailover(t, plan, attempt, cleanup, fo).status());
    return std::move(*launched);
  }

  // Streams the attempt's cluster job into the attempt's log (from what the log holds: a resumed
  // controller neither loses nor doubles a line) until it ends, and classifies the end.
  AttemptOutcome Follow(const std::string& cluster, const ClusterRecord& record, HeadApi& head,
                        int64_t job_id, int attempt, std::string& why) {
    const std::string path = jobs::AttemptLogPath(job_.id, attempt);
    std::error_code ec;
    const auto have = fs::file_size(path, ec);
    const uint64_t offset = ec ? 0 : static_cast<uint64_t>(have);
    std::ofstream log(path, std::ios::app | std::ios::binary);
    HeadApi::StreamCallbacks cb;
    cb.on_data = [&](std::string_view bytes) {
      log.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      log.flush();
    };
    cb.interrupted = [&] { return CancelRequested(); };
    cb.head_node_lost = [&] { return HeadNodeGone(record); };
    Result<JobInfo> end = head.Stream(job_id, offset, true, cb);
    log.flush();
    if (CancelRequested()) return AttemptOutcome::kCancelled;
    if (end.ok()) exit_codes_ = jobs::FailureExitCodes(*end);
    return Classify(cluster, end, why);
  }

  // Whether the cluster's head machine is gone, not just its agent: its sshd does not answer
  // either (refused or silent for limits::kHeadNodeProbeTimeout).
  bool HeadNodeGone(const ClusterRecord& cluster) {
    for (const auto& n : cluster.nodes) {
      if (!n.is_head) continue;
      Status probe = controller::ProbeSshBanner(n.ip, n.ssh_port, limits::kHeadNodeProbeTimeout);
      if (probe.ok()) return false;
      Log("head node " + n.name + " (" + n.ip + ") does not answer over ssh: " + probe.message());
      return true;
    }
    return false;
  }

  // Node loss is told from a user error by asking the head which nodes are alive: a failed job on
  // a cluster whose nodes all answer is the task's own failure.
  AttemptOutcome Classify(const std::string& cluster, const Result<JobInfo>& end,
                          std::string& why) {
    if (!end.ok()) {
      why = "lost the cluster's head: " + end.status().message();
      return AttemptOutcome::kNodeLost;
    }
    const JobInfo& j = *end;
    switch (j.state()) {
      case herd::v1::JOB_STATE_SUCCEEDED:
        return AttemptOutcome::kSucceeded;
      case herd::v1::JOB_STATE_CANCELLED:
        return AttemptOutcome::kCancelled;
      case herd::v1::JOB_STATE_FAILED:
      case herd::v1::JOB_STATE_FAILED_SETUP:
      case herd::v1::JOB_STATE_FAILED_DRIVER:
        break;
      default:
        why = "the cluster job stopped streaming while " +
              std::string(proto::JobStateName(j.state()));
        return AttemptOutcome::kNodeLost;
    }
    why = j.message().empty() ? std::string(proto::JobStateName(j.state())) : j.message();
    // A hung rank is no fault of the task's code that a rerun repeats for sure (a stuck
    // collective, a bad link): recovered on new nodes, as a lost node is.
    if (j.end_reason() == herd::v1::JOB_END_REASON_HUNG) return AttemptOutcome::kNodeLost;
    auto nodes = ops_.Nodes(cluster);
    if (!nodes.ok()) {
      why += "; the cluster does not answer: " + nodes.status().message();
      return AttemptOutcome::kNodeLost;
    }
    for (int i = 0; i < nodes->nodes_size(); ++i) {
      if (i >= nodes->alive_size() || !nodes->alive(i)) {
        why += "; node " + nodes->nodes(i).node_id() + " is lost";
        return AttemptOutcome::kNodeLost;
      }
    }
    if (j.state() == herd::v1::JOB_STATE_FAILED_DRIVER) return AttemptOutcome::kNodeLost;
    return j.state() == herd::v1::JOB_STATE_FAILED_SETUP ? AttemptOutcome::kSetupFailed
                                                         : AttemptOutcome::kUserFailed;
  }

  ops::ClusterOps& ops_;
  Clock& clock_;  // the ops' clock: the waits, the cancel polls and the job's times
  std::unique_ptr<ManagedJobStore> store_;
  ManagedJob job_;
  task::Task task_;
  jobs::AttemptRecord dummy_;
  std::chrono::steady_clock::time_point last_cancel_poll_{};
  bool cancel_seen_ = false;
  // The failed ranks' exit codes of the attempt that just ended (recover_on_exit_codes).
  std::vector<int> exit_codes_;
  // The infra the last attempt ran on ("aws/us-east-1/us-east-1a"): where a relaunch looks first
  // or last (jobs::RecoveryPreference). Read again from the cluster when a controller resumes.
  std::string last_infra_;
  // The cluster whose lost workers the next attempt replaces (LostWorkers), relaunching on it with
  // LaunchOptions::repair_nodes; "" for a new cluster. Not kept across a controller's restart: a
  // resumed controller tears a decided attempt's cluster down and relaunches whole.
  std::string repair_cluster_;
  // config.yaml jobs.node_recovery: cluster (WholeClusterRecovery).
  bool whole_cluster_recovery_ = false;
};

// Workdir and local file_mounts sources made absolute: the controller may start elsewhere.
void AbsolutePaths(task::Task& t) {
  std::error_code ec;
  if (!t.workdir.empty()) t.workdir = fs::absolute(t.workdir, ec).string();
  for (auto& [remote, local] : t.file_mounts) local = fs::absolute(local, ec).string();
  for (auto& [remote, m] : t.storage_mounts) {
    if (!m.source.empty()) m.source = fs::absolute(m.source, ec).string();
  }
}

}  // namespace

Result<std::string> TakeSecretsFromStdin(const char* marker_env) {
  const char* marker = ::getenv(marker_env);
  if (marker == nullptr || std::string_view(marker) != "1") return std::string();
  ::unsetenv(marker_env);
  std::string json;
  char buf[64 * 1024];
  for (off_t off = 0;;) {
    ssize_t n = ::pread(STDIN_FILENO, buf, sizeof buf, off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("cannot read the secrets from stdin", errno);
    if (n == 0) break;
    json.append(buf, static_cast<std::size_t>(n));
    off += n;
  }
  int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null < 0 || ::dup2(null, STDIN_FILENO) < 0) {
    return ErrnoError("cannot close the secrets on stdin", errno);
  }
  ::close(null);
  return json;
}

Result<int64_t> LaunchManagedJob(task::Task task, const ManagedLaunchOptions& options) {
  if (jobs::ManagedSupervised() && !task.secrets.empty() &&
      std::getenv(jobs::kManagedSecretsRefEnv) == nullptr) {
    return FailedPrecondition("the server did not keep this job's secrets; launch it again");
  }
  AbsolutePaths(task);
  HERD_ASSIGN_OR_RETURN(auto store, OpenJobs());
  ManagedJob job;
  job.name = task.name;
  job.user = options.user;
  job.state = ManagedState::kPending;
  job.submitted_unix_ms = NowUnixMs();
  job.task_json = jobs::EncodeTask(task);
  job.resources = task::ResourcesSummary(task);
  job.infra = options.infra;
  HERD_ASSIGN_OR_RETURN(job.id, store->Create(job));
  job.task_id = ManagedTaskId(job.submitted_unix_ms, task.name, job.id);
  HERD_RETURN_IF_ERROR(store->Put(job));

  const std::string dir = jobs::ManagedJobDir(job.id);
  HERD_RETURN_IF_ERROR(EnsureDir(dir, 0700));
  if (jobs::ManagedSupervised()) {
    // The server starts the controller (and again whenever it dies), with the secrets it sealed
    // under this reference on its stdin.
    if (const char* ref = std::getenv(jobs::kManagedSecretsRefEnv); ref != nullptr) {
      job.secrets_ref = ref;
    }
    job.message = "waiting for the server to start its controller";
    HERD_RETURN_IF_ERROR(store->Put(job));
    return job.id;
  }
  std::error_code ec;
  std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec) return IoError("cannot find the herd binary: " + ec.message());
  boost::json::object secrets;
  for (const auto& [k, v] : task.secrets) secrets[k] = v;
  Result<pid_t> pid = IoError("");
  if (auto fd = SecretsFile(boost::json::serialize(secrets)); !fd.ok()) {
    pid = fd.status();
  } else {
    // In the new process, after SpawnDetached put /dev/null on stdin: the secrets instead.
    pid = SpawnDetached({self, "jobs", "_controller", std::to_string(job.id)},
                        dir + "/controller.log", {{kSecretsOnStdinEnv, "1"}}, [secrets_fd = *fd] {
                          return ::dup2(secrets_fd, STDIN_FILENO) < 0 ? errno : 0;
                        });
    ::close(*fd);
  }
  if (!pid.ok()) {
    job.state = ManagedState::kFailedController;
    job.ended_unix_ms = NowUnixMs();
    job.message = "cannot start the controller: " + pid.status().message();
    (void)store->Put(job);
    return pid.status();
  }
  return job.id;
}

int RunManagedController(ops::ClusterOps& ops, int64_t id) {
  struct sigaction sa {};
  sa.sa_handler = OnTerm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  ::signal(SIGPIPE, SIG_IGN);
  auto store = OpenJobs();
  if (!store.ok()) {
    std::cerr << "herd: " << store.status().message() << "\n";
    return 1;
  }
  auto job = Load(**store, id);
  if (!job.ok()) {
    std::cerr << "herd: " << job.status().message() << "\n";
    return 1;
  }
  if (jobs::IsTerminal(job->state)) return 0;
  // Under a team server the job's lease says who runs its controller (job_keeper.hpp).
  if (!jobs::ManagedSupervised() && job->controller_pid > 0 && job->controller_pid != ::getpid() &&
      ControllerAlive(*job, ops.parts().clock->UnixMs())) {
    std::cerr << "herd: managed job " << id << " already has a controller (pid "
              << job->controller_pid << ")\n";
    return 1;
  }
  // Secrets come on this process's stdin only (SecretsFile); children (ssh, rsync) get none.
  auto secrets_json = TakeSecretsFromStdin(kSecretsOnStdinEnv);
  auto task = jobs::DecodeTask(job->task_json);
  if (!secrets_json.ok()) {
    task = secrets_json.status();
  } else if (task.ok() && !secrets_json->empty()) {
    try {
      const boost::json::value parsed = boost::json::parse(*secrets_json);
      for (const auto& [k, v] : parsed.as_object()) {
        task->secrets[std::string(k)] = std::string(v.as_string());
      }
    } catch (const std::exception& e) {
      task = InvalidArgument(std::string("the secrets on stdin are not a JSON object of "
                                         "strings: ") +
                             e.what());
    }
  }
  job->controller_pid = ::getpid();
  if (!task.ok()) {
    job->state = ManagedState::kFailedController;
    job->ended_unix_ms = ops.parts().clock->UnixMs();
    job->message = task.status().message();
    (void)(*store)->Put(*job);
    return 1;
  }
  if (auto s = (*store)->Put(*job); !s.ok()) {
    std::cerr << "herd: " << s.message() << "\n";
    return 1;
  }
  Controller c(ops, std::move(*store), std::move(*job), std::move(*task));
  return c.Run();
}

}  // namespace herd::controller
