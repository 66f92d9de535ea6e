// What the managed-job controller (managed_jobs.cpp) and the table's readers
// (managed_jobs_follow.cpp) share: the job table opened, a job loaded, a controller's liveness.
#pragma once

#include <cstdint>
#include <memory>

#include "controller/jobs/managed_job_store.hpp"
#include "shared/common/status.hpp"

namespace herd::controller::managed_internal {

// The managed job table ($HERD_HOME/managed_jobs.db).
Result<std::unique_ptr<jobs::ManagedJobStore>> OpenJobs();

// The job `id`; NotFound when the table has none.
Result<jobs::ManagedJob> Load(jobs::ManagedJobStore& store, int64_t id);

// The controller process is alive when /proc/PID is this job's `herd jobs _controller ID`; a job
// without a controller pid yet is alive for limits::kManagedControllerStartGrace from its submit
// (now_unix_ms: the caller's clock).
bool ControllerAlive(const jobs::ManagedJob& job, int64_t now_unix_ms);

}  // namespace herd::controller::managed_internal
