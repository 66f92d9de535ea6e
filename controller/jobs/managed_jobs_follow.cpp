// `herd jobs queue|logs|cancel`: the managed job table read (a job whose controller is gone
// judged), an attempt's logs followed, and cancels asked of the jobs' controllers.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "controller/core/head_client.hpp"
#include "controller/jobs/managed_jobs.hpp"
#include "controller/jobs/managed_jobs_internal.hpp"
#include "controller/storage/storage_ops.hpp"
#include "shared/common/clock.hpp"
#include "shared/common/limits.hpp"

namespace herd::controller {
namespace {

namespace fs = std::filesystem;
using jobs::ManagedJob;
using jobs::ManagedJobStore;
using jobs::ManagedState;
using managed_internal::ControllerAlive;
using managed_internal::Load;
using managed_internal::OpenJobs;

// The ended job holds its buckets no longer (one its cluster still mounts goes with that
// cluster's down). One stat for users without buckets.
Status ReleaseJobBuckets(int64_t id) {
  std::error_code ec;
  if (!fs::exists(storage::StorageDbPath(), ec)) return Status::Ok();
  storage::StorageParts parts = storage::SystemStorageParts();
  return storage::ReleaseManagedJobStorage(id, parts);
}

// A job that is not over while its controller is gone is over: FAILED_CONTROLLER (recorded).
void JudgeController(ManagedJobStore& store, ManagedJob& job, Clock& clock) {
  if (jobs::IsTerminal(job.state) || ControllerAlive(job, clock.UnixMs())) return;
  if (jobs::ManagedSupervised()) {
    // A team server runs the controllers: one that is gone (or not started yet) is started
    // (again) by the server, and resumes the job where it is. Shown, never recorded.
    job.message = job.controller_pid <= 0 ? "waiting for the server to start its controller"
                                          : "its controller is being resumed by the server";
    return;
  }
  job.state = ManagedState::kFailedController;
  job.ended_unix_ms = clock.UnixMs();
  job.message = job.controller_pid > 0 ? "the controller process (pid " +
                                             std::to_string(job.controller_pid) + ") is gone"
                                       : "the controller process never started";
  if (!job.cluster.empty()) {
    job.message += "; cluster " + job.cluster + " may still be up (herd down " + job.cluster + ")";
  }
  (void)store.Put(job);
  if (Status s = ReleaseJobBuckets(job.id); !s.ok()) {
    job.message += "; buckets: " + s.message();
    (void)store.Put(job);
  }
}

int ExitCodeFor(ManagedState s) {
  switch (s) {
    case ManagedState::kSucceeded:
      return 0;
    case ManagedState::kCancelled:
      return kExitCancelled;
    case ManagedState::kFailed:
    case ManagedState::kFailedSetup:
    case ManagedState::kFailedNoResource:
    case ManagedState::kFailedController:
      return kExitFailed;
    default:
      return kExitNotFinished;
  }
}

}  // namespace

Result<std::vector<ManagedJob>> ListManagedJobs() {
  HERD_ASSIGN_OR_RETURN(auto store, OpenJobs());
  HERD_ASSIGN_OR_RETURN(auto list, store->List());
  SystemClock clock;
  for (auto& j : list) JudgeController(*store, j, clock);
  return list;
}

std::string ManagedDuration(const ManagedJob& job, int64_t now_ms) {
  if (job.started_unix_ms <= 0) return "-";
  int64_t end = job.ended_unix_ms > 0 ? job.ended_unix_ms : now_ms;
  int64_t s = std::max<int64_t>(0, (end - job.started_unix_ms) / 1000);
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m " + std::to_string(s % 60) + "s";
  return std::to_string(s / 3600) + "h " + std::to_string(s % 3600 / 60) + "m";
}

int FollowManagedLogs(int64_t id, bool follow, std::ostream& out, std::ostream& err,
                      const std::function<bool()>& interrupted, Clock* clock) {
  SystemClock system_clock;
  Clock& c = clock != nullptr ? *clock : system_clock;
  auto store = OpenJobs();
  if (!store.ok()) {
    err << "herd: " << store.status().message() << "\n";
    return 1;
  }
  std::size_t index = 0;     // the attempt being printed
  std::uint64_t offset = 0;  // bytes of its log printed
  bool header = false;
  while (true) {
    auto job = Load(**store, id);
    if (!job.ok()) {
      err << "herd: " << job.status().message() << "\n";
      return job.status().code() == Code::kNotFound ? kExitNotFound : 1;
    }
    JudgeController(**store, *job, c);
    // The row is read before the log: an attempt the row calls over has all of its log written.
    while (index < job->attempts.size()) {
      const auto& a = job->attempts[index];
      if (!header) {
        out << "=== herd jobs: job " << id << ", attempt " << a.attempt << " on cluster "
            << a.cluster << " ===\n";
        header = true;
      }
      std::ifstream in(jobs::AttemptLogPath(id, a.attempt), std::ios::binary);
      if (in) {
        in.seekg(static_cast<std::streamoff>(offset));
        char buf[65536];
        while (in.read(buf, sizeof buf) || in.gcount() > 0) {
          out.write(buf, in.gcount());
          offset += static_cast<std::uint64_t>(in.gcount());
        }
      }
      out.flush();
      const bool over =
          a.end_unix_ms > 0 || index + 1 < job->attempts.size() || jobs::IsTerminal(job->state);
      if (!over) break;
      out << "=== herd jobs: attempt " << a.attempt << " ended: " << a.outcome
          << (a.reason.empty() ? "" : " (" + a.reason + ")") << " ===\n";
      ++index;
      offset = 0;
      header = false;
    }
    if (jobs::IsTerminal(job->state) && index >= job->attempts.size()) {
      out.flush();
      err << "Managed job " << id << " " << jobs::StateName(job->state)
          << (job->message.empty() ? "" : ": " + job->message) << "\n";
      return ExitCodeFor(job->state);
    }
    if (!follow || (interrupted && interrupted())) {
      out.flush();
      err << "Managed job " << id << " is " << jobs::StateName(job->state) << ".\n";
      return kExitNotFinished;
    }
    c.SleepFor(limits::kManagedLogsPoll);
  }
}

int ReleaseEndedManagedJob(int64_t id, std::ostream& out, std::ostream& err) {
  auto store = OpenJobs();
  if (!store.ok()) {
    err << "herd: " << store.status().message() << "\n";
    return 1;
  }
  auto job = Load(**store, id);
  if (!job.ok()) {
    err << "herd: " << job.status().message() << "\n";
    return job.status().code() == Code::kNotFound ? kExitNotFound : 1;
  }
  if (!jobs::IsTerminal(job->state)) {
    err << "herd: managed job " << id << " has not ended (" << jobs::StateName(job->state)
        << "): it keeps its buckets\n";
    return 1;
  }
  if (Status s = ReleaseJobBuckets(id); !s.ok()) {
    err << "herd: managed job " << id << ": buckets: " << s.message() << "\n";
    return 1;
  }
  out << "Managed job " << id << " (" << jobs::StateName(job->state)
      << ") holds no buckets any more.\n";
  return 0;
}

int CancelManagedJobs(ops::ClusterOps& ops, const std::vector<int64_t>& ids, bool all,
                      std::ostream& out, std::ostream& err) {
  Clock& clock = *ops.parts().clock;
  auto store = OpenJobs();
  if (!store.ok()) {
    err << "herd: " << store.status().message() << "\n";
    return 1;
  }
  std::vector<int64_t> targets = ids;
  int rc = 0;
  if (all) {
    auto list = (*store)->List();
    if (!list.ok()) {
      err << "herd: " << list.status().message() << "\n";
      return 1;
    }
    for (auto& j : *list) {
      JudgeController(**store, j, clock);
      if (!jobs::IsTerminal(j.state)) targets.push_back(j.id);
    }
    if (targets.empty()) out << "No managed job to cancel.\n";
  }
  std::vector<int64_t> waiting;
  for (int64_t id : targets) {
    auto job = Load(**store, id);
    if (!job.ok()) {
      err << "herd: " << job.status().message() << "\n";
      rc = job.status().code() == Code::kNotFound ? kExitNotFound : 1;
      continue;
    }
    JudgeController(**store, *job, clock);
    if (jobs::IsTerminal(job->state)) {
      out << "Managed job " << id << " already ended (" << jobs::StateName(job->state)
          << "); nothing to cancel.\n";
      continue;
    }
    if (auto r = (*store)->RequestCancel(id); !r.ok()) {
      err << "herd: " << r.status().message() << "\n";
      rc = 1;
      continue;
    }
    out << "Cancelling managed job " << id << "...\n";
    out.flush();
    // A supervised job's controller (maybe on another server) sees the request within
    // limits::kManagedCancelPoll; the server starts one if none runs.
    if (!jobs::ManagedSupervised() && job->controller_pid > 0 &&
        ControllerAlive(*job, clock.UnixMs())) {
      ::kill(job->controller_pid, SIGTERM);
    }
    waiting.push_back(id);
  }
  const auto deadline = clock.Now() + limits::kManagedCancelWait;
  for (int64_t id : waiting) {
    while (true) {
      auto job = Load(**store, id);
      if (!job.ok()) break;
      if (!jobs::IsTerminal(job->state) && !jobs::ManagedSupervised() &&
          !ControllerAlive(*job, clock.UnixMs())) {
        // Nobody left to act on the request: do it here (the cluster may still be up).
        job->state = ManagedState::kCancelling;
        (void)(*store)->Put(*job);
        if (!job->cluster.empty() && ops.Get(job->cluster).ok()) {
          if (auto s = ops.Down(job->cluster); !s.ok()) {
            err << "herd: tearing down " << job->cluster << ": " << s.message() << "\n";
          }
        }
        if (auto s = ops.ReleaseManagedJobStorage(id); !s.ok()) {
          err << "herd: managed job " << id << ": buckets: " << s.message() << "\n";
        }
        job->state = ManagedState::kCancelled;
        job->ended_unix_ms = clock.UnixMs();
        job->message = "cancelled by the user (its controller was gone)";
        (void)(*store)->Put(*job);
      }
      if (jobs::IsTerminal(job->state)) {
        out << "Managed job " << id << ": " << jobs::StateName(job->state) << "\n";
        break;
      }
      if (clock.Now() > deadline) {
        out << "Managed job " << id << " is still " << jobs::StateName(job->state)
            << "; its controller finishes the cancel (see `herd jobs queue`).\n";
        break;
      }
      clock.SleepFor(limits::kManagedLogsPoll);
    }
  }
  return rc;
}

}  // namespace herd::controller
