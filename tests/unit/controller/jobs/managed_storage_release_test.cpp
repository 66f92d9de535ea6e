// A managed job whose controller died ends as FAILED_CONTROLLER when the jobs are looked at
// (ListManagedJobs), and lets go of the buckets it held (controller/jobs/managed_jobs.cpp).
#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "controller/jobs/managed_job_store.hpp"
#include "controller/jobs/managed_jobs.hpp"
#include "controller/storage/storage_table.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::controller {
namespace {

// A bucket herd made for a managed job's checkpoints (persistent: false), still mounted by the
// job's cluster herd-mj-1: it stays until that cluster's down, whatever the job's end.
storage::StorageRecord MadeCheckpointBucket() {
  storage::StorageRecord ckpt;
  ckpt.name = "ckpt";
  ckpt.store = "s3";
  ckpt.herd_made = true;
  ckpt.persistent = false;
  ckpt.clusters = {"herd-mj-1"};
  return ckpt;
}

using herd::testing::TempDir;

// A pid that no process has any more: a child that exited and was reaped.
int DeadPid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return static_cast<int>(pid);
}

TEST_CASE("a job whose controller died is FAILED_CONTROLLER and holds its buckets no more") {
  TempDir home("herd-mj-release");
  REQUIRE(::setenv("HERD_HOME", home.path().c_str(), 1) == 0);
  struct Unset {
    ~Unset() { ::unsetenv("HERD_HOME"); }
  } unset;

  auto jobs_db = jobs::ManagedJobStore::Open(jobs::ManagedJobsDbPath());
  REQUIRE(jobs_db.ok());
  jobs::ManagedJob dead;
  dead.name = "orphan";
  dead.state = jobs::ManagedState::kRunning;
  dead.submitted_unix_ms = 1;
  dead.controller_pid = DeadPid();
  dead.cluster = "herd-mj-1";
  auto dead_id = (*jobs_db)->Create(dead);
  REQUIRE(dead_id.ok());
  jobs::ManagedJob other = dead;
  other.name = "other";
  // Ended before: not judged here, so its hold (released at its own end) is not touched.
  other.state = jobs::ManagedState::kSucceeded;
  auto other_id = (*jobs_db)->Create(other);
  REQUIRE(other_id.ok());

  auto table = storage::StorageTable::Open();
  REQUIRE(table.ok());
  storage::StorageRecord ckpt = MadeCheckpointBucket();
  ckpt.managed_jobs = {*dead_id};
  REQUIRE((*table)->Put(ckpt).ok());
  storage::StorageRecord data = ckpt;
  data.name = "data";
  data.persistent = true;
  data.clusters = {};
  data.managed_jobs = {*dead_id, *other_id};
  REQUIRE((*table)->Put(data).ok());

  auto listed = ListManagedJobs();
  REQUIRE(listed.ok());
  auto it = std::find_if(listed->begin(), listed->end(),
                         [&](const jobs::ManagedJob& j) { return j.id == *dead_id; });
  REQUIRE(it != listed->end());
  CHECK(it->state == jobs::ManagedState::kFailedController);

  auto after_ckpt = (*table)->Get("ckpt");
  REQUIRE(after_ckpt.ok());
  REQUIRE(after_ckpt->has_value());
  CHECK((*after_ckpt)->managed_jobs.empty());
  CHECK((*after_ckpt)->clusters == std::vector<std::string>{"herd-mj-1"});
  auto after_data = (*table)->Get("data");
  REQUIRE(after_data.ok());
  REQUIRE(after_data->has_value());
  CHECK((*after_data)->managed_jobs == std::vector<int64_t>{*other_id});
}

TEST_CASE("`herd jobs _release ID` lets an ended job's buckets go, and refuses a running one") {
  TempDir home("herd-mj-release");
  REQUIRE(::setenv("HERD_HOME", home.path().c_str(), 1) == 0);
  struct Unset {
    ~Unset() { ::unsetenv("HERD_HOME"); }
  } unset;
  auto jobs_db = jobs::ManagedJobStore::Open(jobs::ManagedJobsDbPath());
  REQUIRE(jobs_db.ok());
  jobs::ManagedJob failed;
  failed.state = jobs::ManagedState::kFailedController;  // as a team server's keeper ends it
  failed.cluster = "herd-mj-1";
  auto failed_id = (*jobs_db)->Create(failed);
  REQUIRE(failed_id.ok());
  jobs::ManagedJob running = failed;
  running.state = jobs::ManagedState::kRunning;
  auto running_id = (*jobs_db)->Create(running);
  REQUIRE(running_id.ok());

  auto table = storage::StorageTable::Open();
  REQUIRE(table.ok());
  storage::StorageRecord ckpt = MadeCheckpointBucket();
  ckpt.managed_jobs = {*failed_id, *running_id};
  REQUIRE((*table)->Put(ckpt).ok());

  std::ostringstream out, err;
  CHECK(ReleaseEndedManagedJob(*running_id, out, err) == 1);
  CHECK(err.str() == "herd: managed job " + std::to_string(*running_id) +
                         " has not ended (RUNNING): it keeps its buckets\n");
  CHECK(ReleaseEndedManagedJob(*failed_id, out, err) == 0);
  CHECK(out.str() == "Managed job " + std::to_string(*failed_id) +
                         " (FAILED_CONTROLLER) holds no buckets any more.\n");
  auto after = (*table)->Get("ckpt");
  REQUIRE(after.ok());
  REQUIRE(after->has_value());
  CHECK((*after)->managed_jobs == std::vector<int64_t>{*running_id});
  CHECK((*after)->clusters == std::vector<std::string>{"herd-mj-1"});
  // Again: nothing more to release.
  CHECK(ReleaseEndedManagedJob(*failed_id, out, err) == 0);
  CHECK(ReleaseEndedManagedJob(999, out, err) == 102);
}

}  // namespace
}  // namespace herd::controller
