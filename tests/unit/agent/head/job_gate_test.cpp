// The dependency and array gate (agent/sched/job_gate) and the head's admission of a submit
// (agent/head/job_admission): records of an array, consecutive ids in one transaction, and the
// facts the gate reads of other jobs.
#include <doctest/doctest.h>
#include <sqlite3.h>

#include <map>

#include "agent/head/job_admission.hpp"
#include "agent/sched/job_gate.hpp"
#include "shared/proto/job_array.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::agent {
namespace {

using herd::v1::JobInfo;
using herd::v1::JobState;
using sched::Gate;
using sched::GateVerdict;

// Jobs by id, as the gate's facts_of sees them.
struct World {
  std::map<int64_t, sched::JobFacts> jobs;
  std::map<int64_t, sched::DependencyState> memo;
  int asked = 0;
  sched::FactsOf facts_of() {
    return [this](int64_t id) -> std::optional<sched::JobFacts> {
      ++asked;
      auto it = jobs.find(id);
      if (it == jobs.end()) return std::nullopt;
      return it->second;
    };
  }
  sched::DependencyOf dependency_of() {
    return [this](int64_t dep) -> const sched::DependencyState& {
      auto it = memo.find(dep);
      if (it == memo.end()) it = memo.emplace(dep, SummarizeDependency(dep, facts_of())).first;
      return it->second;
    };
  }
  Gate Check(const JobInfo& job, int array_active = 0) {
    memo.clear();
    return CheckGate(job, dependency_of(), array_active);
  }
};

TEST_CASE("--after waits until every dependency ended, whatever its outcome") {
  World w;
  w.jobs[3] = {herd::v1::JOB_STATE_RUNNING};
  w.jobs[4] = {herd::v1::JOB_STATE_FAILED};
  JobInfo job;
  job.set_job_id(9);
  job.add_after_any(4);
  job.add_after_any(3);
  CHECK(sched::Gated(job));
  Gate g = w.Check(job);
  CHECK(g.verdict == GateVerdict::kWait);
  CHECK(g.reason == "waiting for job 3 (RUNNING) to end");
  w.jobs[3].state = herd::v1::JOB_STATE_CANCELLED;
  g = w.Check(job);
  CHECK(g.verdict == GateVerdict::kOpen);  // afterany: a failed or cancelled job lets it go
  CHECK(g.reason.empty());
}

TEST_CASE("--after-ok: cancelled as soon as one dependency ends without success") {
  World w;
  w.jobs[3] = {herd::v1::JOB_STATE_PENDING};
  w.jobs[4] = {herd::v1::JOB_STATE_SUCCEEDED};
  JobInfo job;
  job.add_after_ok(4);
  job.add_after_ok(3);
  CHECK(w.Check(job).reason == "waiting for job 3 (PENDING) to end");
  w.jobs[3].state = herd::v1::JOB_STATE_SUCCEEDED;
  CHECK(w.Check(job).verdict == GateVerdict::kOpen);
  w.jobs[3].state = herd::v1::JOB_STATE_FAILED_SETUP;
  Gate g = w.Check(job);
  CHECK(g.verdict == GateVerdict::kNever);
  CHECK(g.reason == "its dependency job 3 ended FAILED_SETUP (--after-ok)");
  // Decided even while another dependency still runs.
  job.add_after_any(5);
  w.jobs[5] = {herd::v1::JOB_STATE_RUNNING};
  CHECK(w.Check(job).verdict == GateVerdict::kNever);
}

TEST_CASE("a dependency on an array's id waits for every job of the array") {
  World w;
  for (int64_t id = 10; id < 14; ++id) {
    w.jobs[id] = {herd::v1::JOB_STATE_SUCCEEDED, 10, 4};
  }
  w.jobs[12].state = herd::v1::JOB_STATE_RUNNING;
  JobInfo job;
  job.add_after_ok(10);
  CHECK(w.Check(job).reason == "waiting for job 12 of array 10 (RUNNING) to end");
  w.jobs[12].state = herd::v1::JOB_STATE_FAILED;
  CHECK(w.Check(job).reason == "its dependency job 12 of array 10 ended FAILED (--after-ok)");
  w.jobs[12].state = herd::v1::JOB_STATE_SUCCEEDED;
  CHECK(w.Check(job).verdict == GateVerdict::kOpen);
  // A dependency on one job of the array (not its id) is that job alone.
  JobInfo one;
  one.add_after_any(11);
  w.jobs[13].state = herd::v1::JOB_STATE_RUNNING;
  CHECK(w.Check(one).verdict == GateVerdict::kOpen);
}

TEST_CASE("the array's running limit holds back its jobs, counted with those let through") {
  World w;
  JobInfo job;
  job.set_array_id(20);
  job.set_array_size(100);
  job.set_array_max_running(8);
  CHECK(sched::Gated(job));
  CHECK(w.Check(job, 7).verdict == GateVerdict::kOpen);
  Gate g = w.Check(job, 8);
  CHECK(g.verdict == GateVerdict::kWait);
  CHECK(g.reason == "array 20 runs its limit of 8 jobs at once");
  job.set_array_max_running(0);  // no limit
  CHECK_FALSE(sched::Gated(job));
  CHECK(w.Check(job, 1000).verdict == GateVerdict::kOpen);
}

TEST_CASE("a pass sums up a shared dependency once, not once per waiting job") {
  World w;
  for (int64_t id = 1; id <= 100; ++id) w.jobs[id] = {herd::v1::JOB_STATE_RUNNING, 1, 100};
  auto dependency_of = w.dependency_of();
  for (int k = 0; k < 50; ++k) {
    JobInfo job;
    job.add_after_any(1);
    CHECK(sched::CheckGate(job, dependency_of, 0).verdict == GateVerdict::kWait);
  }
  CHECK(w.asked == 100);  // the array's 100 jobs, looked at in the first job's check only
}

TEST_CASE("dependencies must name jobs that exist: no job waits for itself or a later one") {
  World w;
  w.jobs[1] = {herd::v1::JOB_STATE_SUCCEEDED};
  herd::v1::SubmitJob s;
  s.add_after_any(1);
  CHECK(sched::ValidateDependencies(s, w.facts_of()).ok());
  s.add_after_ok(2);  // the id this very submit would get
  Status st = sched::ValidateDependencies(s, w.facts_of());
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(st.message().rfind("--after-ok 2: no job 2 on this cluster", 0) == 0);
  CHECK(st.message().find("cannot form a cycle") != std::string::npos);
  herd::v1::SubmitJob many;
  for (int i = 0; i <= 100; ++i) many.add_after_any(1);
  CHECK(sched::ValidateDependencies(many, w.facts_of()).message() ==
        "a job may depend on at most 100 jobs");
}

herd::v1::SubmitJob ArraySubmit(const char* spec) {
  herd::v1::SubmitJob s;
  s.mutable_task()->set_name("sweep");
  s.mutable_task()->set_num_nodes(1);
  s.mutable_task()->set_run("echo $HERD_ARRAY_INDEX");
  s.set_user("alice");
  auto array = proto::ParseJobArray(spec);
  REQUIRE(array.ok());
  *s.mutable_array() = *array;
  s.add_after_any(1);
  return s;
}

TEST_CASE("SubmitRecords: one PENDING record per index, in the array's order") {
  auto recs = SubmitRecords(ArraySubmit("0-15:5%2"), 1700000000000);
  REQUIRE(recs.ok());
  REQUIRE(recs->size() == 4);
  for (int k = 0; k < 4; ++k) {
    const JobInfo& info = (*recs)[k].info;
    CHECK(info.state() == herd::v1::JOB_STATE_PENDING);
    CHECK(info.array_rank() == k);
    CHECK(info.array_index() == 5 * k);
    CHECK(info.array_size() == 4);
    CHECK(info.array_max_running() == 2);
    CHECK(info.array_spec() == "0-15:5%2");
    CHECK(info.array_id() == 0);  // known once stored
    CHECK(info.after_any_size() == 1);
    CHECK(info.attempt() == 1);
    CHECK(info.user() == "alice");
    CHECK(info.submitted_unix_ms() == 1700000000000);
  }
  herd::v1::SubmitJob plain;
  plain.mutable_task()->set_num_nodes(2);
  recs = SubmitRecords(plain, 1);
  REQUIRE(recs.ok());
  CHECK(recs->size() == 1);
  CHECK(recs->front().info.array_size() == 0);

  herd::v1::SubmitJob bad = ArraySubmit("0-3");
  bad.mutable_array()->add_indices(2);
  CHECK(SubmitRecords(bad, 1).status().message() == "array index 2 is given twice");
  bad = ArraySubmit("0-3");
  bad.set_attempt(2);
  CHECK(SubmitRecords(bad, 1).status().message() == "a managed job's attempt cannot be an array");
  bad = ArraySubmit("0-3");
  bad.mutable_task()->set_num_nodes(0);
  CHECK(SubmitRecords(bad, 1).status().message() == "num_nodes must be at least 1");
}

TEST_CASE("an array is stored in one transaction: consecutive ids, the first is the array's id") {
  herd::testing::TempDir dir;
  auto store = JobStore::Open(dir.path() + "/jobs.db");
  REQUIRE(store.ok());
  auto one = SubmitRecords(ArraySubmit("7"), 1);
  REQUIRE(one.ok());
  one->front().info.clear_array_size();  // a plain job first, so the array does not start at 1
  REQUIRE((*store)->AddJobs(*one).ok());
  auto recs = SubmitRecords(ArraySubmit("0-99"), 2);
  REQUIRE(recs.ok());
  ArrayIdSetter set_array_id;
  REQUIRE((*store)->AddJobs(*recs, [&](JobInfo& info) { set_array_id(info); }).ok());
  for (int k = 0; k < 100; ++k) {
    CHECK((*recs)[k].info.job_id() == 2 + k);
    CHECK((*recs)[k].info.array_id() == 2);
  }
  auto stored = (*store)->GetJob(101);
  REQUIRE(stored.ok());
  CHECK(stored->info.array_id() == 2);
  CHECK(stored->info.array_index() == 99);
  CHECK(stored->info.array_rank() == 99);

  // The facts the gate reads: active jobs from the head, ended ones from the store (cached).
  std::map<int64_t, JobInfo> active;
  active[101] = stored->info;
  JobFactsCache facts(**store, [&](int64_t id) -> const JobInfo* {
    auto it = active.find(id);
    return it == active.end() ? nullptr : &it->second;
  });
  auto f = facts.Get(101);
  REQUIRE(f.has_value());
  CHECK(f->state == herd::v1::JOB_STATE_PENDING);
  CHECK(f->array_id == 2);
  CHECK(f->array_size == 100);
  CHECK_FALSE(facts.Get(102).has_value());
  JobRecord ended = (*store)->GetJob(1).value();
  ended.info.set_state(herd::v1::JOB_STATE_FAILED);
  REQUIRE((*store)->UpdateJob(ended).ok());
  CHECK(facts.Get(1)->state == herd::v1::JOB_STATE_FAILED);
  // Cached once ended: a store edit behind its back is not seen (ended jobs never change).
  ended.info.set_state(herd::v1::JOB_STATE_SUCCEEDED);
  REQUIRE((*store)->UpdateJob(ended).ok());
  CHECK(facts.Get(1)->state == herd::v1::JOB_STATE_FAILED);
}

TEST_CASE("a failed array insert stores none of its jobs and gives the records back unchanged") {
  herd::testing::TempDir dir;
  const std::string path = dir.path() + "/jobs.db";
  auto store = JobStore::Open(path);
  REQUIRE(store.ok());
  {
    // The database refuses the 6th job (a disk that fills midway, say).
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db,
                         "CREATE TRIGGER full BEFORE INSERT ON jobs "
                         "WHEN (SELECT count(*) FROM jobs) >= 5 "
                         "BEGIN SELECT RAISE(ABORT, 'disk full'); END",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  auto recs = SubmitRecords(ArraySubmit("0-9"), 2);
  REQUIRE(recs.ok());
  int completed = 0;
  Status s = (*store)->AddJobs(*recs, [&](JobInfo&) { ++completed; });
  CHECK_FALSE(s.ok());
  CHECK(s.message().find("disk full") != std::string::npos);
  CHECK(completed == 5);
  CHECK((*store)->CountJobs(false).value() == 0);
  for (const auto& r : *recs) CHECK(r.info.job_id() == 0);
}

}  // namespace
}  // namespace herd::agent
