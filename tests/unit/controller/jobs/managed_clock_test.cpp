// The managed-job table's readers on simulated time (tests/fakes/fake_clock.hpp): a controller's
// start grace and the cancel's wait run on the clock given (the ops' clock, FollowManagedLogs'
// clock), whose sleeps advance it, so these cases take no real time for the minutes they cover.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <chrono>
#include <memory>
#include <sstream>

#include "controller/jobs/managed_job_store.hpp"
#include "controller/jobs/managed_jobs.hpp"
#include "controller/ops/cluster_ops.hpp"
#include "shared/common/limits.hpp"
#include "tests/fakes/fake_clock.hpp"
#include "tests/unit/controller/jobs/managed_job_support.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::controller {
namespace {

using std::chrono::milliseconds;
using testing::FakeClock;

// A HERD_HOME of its own (the job table lives there), and HERD_MANAGED_SUPERVISED as the case
// sets it; both unset at the end.
struct Home {
  herd::testing::TempDir dir{"herd-mj-clock"};
  explicit Home(bool supervised) {
    REQUIRE(::setenv("HERD_HOME", dir.path().c_str(), 1) == 0);
    if (supervised) REQUIRE(::setenv(jobs::kManagedSupervisedEnv, "1", 1) == 0);
  }
  ~Home() {
    ::unsetenv("HERD_HOME");
    ::unsetenv(jobs::kManagedSupervisedEnv);
  }
};

// Ops with nothing but the clock: the cases reach no cluster (the jobs have none) and no bucket.
ops::ClusterOps OpsOn(std::shared_ptr<FakeClock> clock) {
  ops::ClusterOpsParts parts;
  parts.clock = std::move(clock);
  return ops::ClusterOps(std::move(parts));
}

// A job recorded as submitted now on the clock, its controller not started yet (pid 0).
int64_t Submit(FakeClock& clock, jobs::ManagedState state) {
  auto db = jobs::ManagedJobStore::Open(jobs::ManagedJobsDbPath());
  REQUIRE(db.ok());
  jobs::ManagedJob job;
  job.name = "clocked";
  job.state = state;
  job.submitted_unix_ms = clock.UnixMs();
  auto id = (*db)->Create(job);
  REQUIRE(id.ok());
  return *id;
}

jobs::ManagedJob Stored(int64_t id) { return herd::testing::StoredJob(id); }

milliseconds Since(FakeClock& clock, std::chrono::steady_clock::time_point from) {
  return std::chrono::duration_cast<milliseconds>(clock.Now() - from);
}

TEST_CASE("a cancel waits out a never-started controller's start grace, then cancels the job") {
  Home home(/*supervised=*/false);
  auto clock = std::make_shared<FakeClock>();
  ops::ClusterOps ops = OpsOn(clock);
  const int64_t id = Submit(*clock, jobs::ManagedState::kPending);
  const auto start = clock->Now();
  std::ostringstream out, err;
  CHECK(CancelManagedJobs(ops, {id}, false, out, err) == 0);
  CHECK(err.str().empty());
  // Within its grace the controller may still start and cancel the job itself; once the grace
  // passed (one poll after it at most) nobody will, and the cancel does it.
  const milliseconds grace = limits::kManagedControllerStartGrace;
  const milliseconds poll = limits::kManagedLogsPoll;
  CHECK(Since(*clock, start) >= grace);
  CHECK(Since(*clock, start) < grace + poll + poll);
  const jobs::ManagedJob job = Stored(id);
  CHECK(job.state == jobs::ManagedState::kCancelled);
  CHECK(job.message == "cancelled by the user (its controller was gone)");
  CHECK(job.ended_unix_ms == clock->UnixMs());  // stamped with the ops' clock
  CHECK(out.str().find("Managed job " + std::to_string(id) + ": CANCELLED") != std::string::npos);
}

TEST_CASE("a cancel leaves a server's job to its controller after kManagedCancelWait") {
  Home home(/*supervised=*/true);
  auto clock = std::make_shared<FakeClock>();
  ops::ClusterOps ops = OpsOn(clock);
  const int64_t id = Submit(*clock, jobs::ManagedState::kRunning);
  const auto start = clock->Now();
  std::ostringstream out, err;
  CHECK(CancelManagedJobs(ops, {id}, false, out, err) == 0);
  const milliseconds wait = limits::kManagedCancelWait;
  const milliseconds poll = limits::kManagedLogsPoll;
  CHECK(Since(*clock, start) > wait);
  CHECK(Since(*clock, start) <= wait + poll);
  const jobs::ManagedJob job = Stored(id);
  CHECK(job.state == jobs::ManagedState::kRunning);  // the server's controller ends it
  CHECK(job.cancel_requested);
  CHECK(out.str().find("is still RUNNING; its controller finishes the cancel") !=
        std::string::npos);
}

TEST_CASE("following a job whose controller never starts ends FAILED_CONTROLLER after the grace") {
  Home home(/*supervised=*/false);
  FakeClock clock;
  const int64_t id = Submit(clock, jobs::ManagedState::kPending);
  const auto start = clock.Now();
  std::ostringstream out, err;
  const int code = FollowManagedLogs(
      id, /*follow=*/true, out, err, [] { return false; }, &clock);
  CHECK(code == kExitFailed);
  const milliseconds grace = limits::kManagedControllerStartGrace;
  const milliseconds poll = limits::kManagedLogsPoll;
  CHECK(Since(clock, start) >= grace);
  CHECK(Since(clock, start) < grace + poll + poll);
  CHECK(clock.sleeps > 1);  // it polled the table while the grace ran
  CHECK(Stored(id).state == jobs::ManagedState::kFailedController);
  CHECK(err.str().find("the controller process never started") != std::string::npos);
}

}  // namespace
}  // namespace herd::controller
