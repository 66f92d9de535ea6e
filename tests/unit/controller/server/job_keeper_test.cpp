// JobKeeper's decisions (job_keeper.hpp) over a fake world: a lease table with expiries on a fake
// clock that several keepers (servers) share, controllers that are only flags, jobs as a list.
// Time moves by hand; no case sleeps.
#include "controller/server/job_keeper.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "controller/jobs/managed_job_store.hpp"
#include "controller/server/store/api_store.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "tests/fakes/fake_clock.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::server {
namespace {

using namespace std::chrono_literals;
using herd::testing::FakeClock;

// The database's lease rows, as ApiStore keeps them (holder, expiry in ms).
struct FakeLeases {
  explicit FakeLeases(FakeClock& clock) : clock(clock) {}
  FakeClock& clock;
  struct Row {
    std::string holder;
    int64_t expires = 0;
  };
  std::map<std::string, Row> rows;
  bool down = false;  // the database does not answer

  int64_t now() { return clock.UnixMs(); }
  Result<bool> TryAcquire(const std::string& name, const std::string& holder) {
    if (down) return Unavailable("database down");
    auto& r = rows[name];
    if (r.holder.empty() || r.expires <= now() || r.holder == holder) {
      r = {holder, now() + limits::kManagedLeaseTtl.count()};
      return true;
    }
    return false;
  }
  Status Renew(const std::string& name, const std::string& holder) {
    if (down) return Unavailable("database down");
    auto it = rows.find(name);
    if (it == rows.end() || it->second.holder != holder || it->second.expires <= now()) {
      return FailedPrecondition("lease " + name + " is not " + holder + "'s");
    }
    it->second.expires = now() + limits::kManagedLeaseTtl.count();
    return Status::Ok();
  }
  void Release(const std::string& name, const std::string& holder) {
    if (down) return;
    auto it = rows.find(name);
    if (it != rows.end() && it->second.holder == holder) rows.erase(it);
  }
};

// One server's view: its controllers are flags; the jobs are shared.
class FakeWorld final : public KeeperWorld {
 public:
  FakeWorld(FakeLeases& leases, std::vector<KeptJob>& jobs, std::string holder)
      : leases_(leases), jobs_(jobs), holder_(std::move(holder)) {}

  Result<std::vector<KeptJob>> ListJobs() override {
    if (leases_.down) return Unavailable("database down");
    return jobs_;
  }
  Result<bool> TryAcquire(const std::string& lease) override {
    return leases_.TryAcquire(lease, holder_);
  }
  Status Renew(const std::string& lease) override { return leases_.Renew(lease, holder_); }
  void Release(const std::string& lease) override { leases_.Release(lease, holder_); }
  Status StartController(const KeptJob& job) override {
    ++starts[job.id];
    if (!start_error.ok()) return start_error;
    running[job.id] = true;
    return Status::Ok();
  }
  bool ControllerRunning(const KeptJob& job) override { return running[job.id]; }
  void StopController(const KeptJob& job) override {
    if (running[job.id]) ++stops[job.id];
    running[job.id] = false;
  }
  void FailJob(const KeptJob& job, const std::string& why) override {
    failed[job.id] = why;
    for (auto& j : jobs_) {
      if (j.id == job.id && j.user == job.user) j.finished = true;
    }
  }
  void ReleaseStorage(const KeptJob& job) override {
    // Only for a job FailJob ended: the controller's own end releases the others.
    CHECK(failed.count(job.id) == 1);
    ++storage_released[job.id];
  }
  void DropSecrets(const KeptJob& job) override { ++secrets_dropped[job.id]; }

  std::map<int64_t, bool> running;
  std::map<int64_t, int> starts, stops, secrets_dropped, storage_released;
  std::map<int64_t, std::string> failed;
  Status start_error = Status::Ok();

 private:
  FakeLeases& leases_;
  std::vector<KeptJob>& jobs_;
  std::string holder_;
};

struct Fixture {
  FakeClock clock;
  FakeLeases leases{clock};
  std::vector<KeptJob> jobs = {{.user = "alice", .id = 1, .finished = false, .secrets_ref = "ab"}};
  FakeWorld a_world{leases, jobs, "srv-a"};
  FakeWorld b_world{leases, jobs, "srv-b"};
  JobKeeper a{a_world, clock};
  JobKeeper b{b_world, clock};
  // Both keepers tick once, then time moves one tick.
  void Round(bool a_alive = true, bool b_alive = true) {
    if (a_alive) a.Tick();
    if (b_alive) b.Tick();
    clock.Advance(limits::kManagedKeeperTick);
  }
};

TEST_CASE("a free job's lease is taken by one keeper, which runs its controller once") {
  Fixture f;
  for (int i = 0; i < 20; ++i) {
    f.Round();
    CHECK(f.a_world.running[1] + f.b_world.running[1] == 1);
  }
  CHECK(ManagedLeaseName("alice", 1) == "managed/alice/1");
  CHECK(f.a.Held() == std::vector<std::string>{"managed/alice/1"});
  CHECK(f.b.Held().empty());
  CHECK(f.a_world.starts[1] == 1);  // renewed all along: never started twice
  CHECK(f.b_world.starts[1] == 0);
  CHECK(f.leases.rows.at("managed/alice/1").holder == "srv-a");
}

TEST_CASE("a dead server's jobs are taken over by another within kManagedTakeoverWithin") {
  Fixture f;
  f.Round();
  REQUIRE(f.a_world.running[1]);
  // Server a dies (SIGKILL): its controller dies with it, it ticks no more.
  f.a_world.running[1] = false;
  const auto died = f.clock.Now();
  while (!f.b_world.running[1]) {
    f.Round(/*a_alive=*/false);
    REQUIRE(f.clock.Now() - died <= limits::kManagedTakeoverWithin);
  }
  CHECK(f.b_world.starts[1] == 1);
  CHECK(f.clock.Now() - died >= limits::kManagedLeaseTtl);  // not before the lease expired
  CHECK(f.b.Held() == std::vector<std::string>{"managed/alice/1"});
}

TEST_CASE("a controller that exits while its job is unfinished is started again after a wait") {
  Fixture f;
  f.a.Tick();
  REQUIRE(f.a_world.starts[1] == 1);
  for (auto ran = 0ms; ran < limits::kManagedControllerQuickExit;  // a long run ...
       ran += limits::kManagedKeeperTick) {
    f.clock.Advance(limits::kManagedKeeperTick);
    f.a.Tick();
  }
  REQUIRE(f.a_world.starts[1] == 1);
  f.clock.Advance(limits::kManagedKeeperTick);
  f.a_world.running[1] = false;  // ... then it is killed
  f.a.Tick();                    // seen exited: not restarted in the same breath
  CHECK(f.a_world.starts[1] == 1);
  f.clock.Advance(limits::kManagedControllerRestartWait);
  f.a.Tick();
  CHECK(f.a_world.starts[1] == 2);
  CHECK(f.a_world.running[1]);
  CHECK(f.a_world.failed.empty());
}

TEST_CASE("a controller that keeps exiting at once ends its job FAILED_CONTROLLER") {
  Fixture f;
  for (int i = 0; i < 100 && f.a_world.failed.empty(); ++i) {
    f.a.Tick();
    f.a_world.running[1] = false;  // exits as soon as it starts
    f.clock.Advance(limits::kManagedKeeperTick);
  }
  REQUIRE(f.a_world.failed.count(1) == 1);
  CHECK(f.a_world.failed[1].find("exited") != std::string::npos);
  CHECK(f.a_world.starts[1] == limits::kManagedControllerMaxQuickExits);
  CHECK(f.a_world.storage_released[1] == 1);  // its buckets go, as at a controller's own end
  CHECK(f.a.Held().empty());
  CHECK(f.leases.rows.count("managed/alice/1") == 0);  // released
  // Later ticks (its secrets dropped) do not release again.
  f.a.Tick();
  f.b.Tick();
  CHECK(f.a_world.storage_released[1] == 1);
  CHECK(f.b_world.storage_released[1] == 0);
}

TEST_CASE("a keeper that cannot renew stops its controller before the lease can expire") {
  Fixture f;
  f.a.Tick();
  REQUIRE(f.a_world.running[1]);
  f.leases.down = true;
  const auto cut = f.clock.Now();
  const auto lease_expires = cut + limits::kManagedLeaseTtl;
  while (f.a_world.running[1]) {
    f.clock.Advance(limits::kManagedKeeperTick);
    f.a.Tick();
    REQUIRE(f.clock.Now() < lease_expires);
  }
  CHECK(f.a_world.stops[1] == 1);
  CHECK(f.a.Held().empty());
  // The database is back: the lease (expired by now) is taken again and the controller resumed.
  f.clock.Advance(limits::kManagedLeaseTtl);
  f.leases.down = false;
  f.a.Tick();
  CHECK(f.a_world.running[1]);
  CHECK(f.a_world.starts[1] == 2);
}

TEST_CASE("a lease taken by another server stops this server's controller") {
  Fixture f;
  f.a.Tick();
  REQUIRE(f.a_world.running[1]);
  f.leases.rows["managed/alice/1"] = {"srv-b", f.leases.now() + 60'000};
  f.a.Tick();
  CHECK_FALSE(f.a_world.running[1]);
  CHECK(f.a.Held().empty());
  CHECK(f.leases.rows.at("managed/alice/1").holder == "srv-b");  // not released by a
}

TEST_CASE("a finished job's lease is released once its controller exits; its secrets go once") {
  Fixture f;
  f.a.Tick();
  f.jobs[0].finished = true;
  f.a.Tick();  // the controller still writes its last lines
  CHECK(f.a.Held().size() == 1);
  f.a_world.running[1] = false;
  f.a.Tick();
  CHECK(f.a.Held().empty());
  CHECK(f.leases.rows.count("managed/alice/1") == 0);
  f.b.Tick();
  f.a.Tick();
  CHECK(f.a_world.starts[1] == 1);
  CHECK(f.b_world.starts[1] == 0);
  CHECK(f.a_world.secrets_dropped[1] == 1);
  // Its controller released its buckets at its end: the keeper does not.
  CHECK(f.a_world.storage_released.empty());
}

TEST_CASE("a job whose secrets are gone fails instead of running without them") {
  Fixture f;
  f.a_world.start_error = NotFound("its secrets are not in the server's database");
  f.a.Tick();
  CHECK(f.a_world.failed[1].find("secrets") != std::string::npos);
  CHECK(f.a_world.storage_released[1] == 1);
  CHECK(f.a.Held().empty());
  CHECK(f.leases.rows.count("managed/alice/1") == 0);
}

TEST_CASE("a start that fails for a passing reason is tried again, not failed") {
  Fixture f;
  f.a_world.start_error = Unavailable("database down");
  f.a.Tick();
  CHECK(f.a_world.failed.empty());
  f.a_world.start_error = Status::Ok();
  f.clock.Advance(limits::kManagedControllerRestartWait);
  f.a.Tick();
  CHECK(f.a_world.running[1]);
}

TEST_CASE("StopAll kills the controllers and frees the leases for the next server at once") {
  Fixture f;
  f.a.Tick();
  REQUIRE(f.a_world.running[1]);
  f.a.StopAll();
  CHECK_FALSE(f.a_world.running[1]);
  f.b.Tick();  // no wait for the TTL
  CHECK(f.b_world.running[1]);
}

TEST_CASE("a job's row keeps the reference its secrets are sealed under, never the secrets") {
  herd::testing::TempDir dir("keeper-jobs");
  auto store = jobs::ManagedJobStore::Open(jobs::ManagedJobsDbPathIn(dir.path()));
  REQUIRE(store.ok());
  jobs::ManagedJob with, without;
  with.task_json = without.task_json = "{}";
  with.secrets_ref = "0123abcd";
  auto a = (*store)->Create(with);
  auto b = (*store)->Create(without);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  with.id = *a;
  REQUIRE((*store)->Put(with).ok());
  CHECK((*(*store)->Get(*a))->secrets_ref == "0123abcd");
  CHECK((*(*store)->Get(*b))->secrets_ref.empty());
  CHECK(jobs::ManagedSecretsKey("0123abcd") == "managed_0123abcd");
  CHECK(jobs::ManagedJobDirIn("/h", 7) == "/h/managed_jobs/7");
}

TEST_CASE("a server's keeper that fails a job runs `herd jobs _release ID` as the job's user") {
  herd::testing::TempDir dir("keeper-release");
  const std::string state = dir / "state";
  const std::string home = state + "/users/alice";
  auto store = ApiStore::Open("sqlite:" + (dir / "api.db"), dir / "secrets.key");
  REQUIRE(store.ok());
  REQUIRE((*store)->AddUser("alice", Role::kUser, 1).ok());
  // A job whose sealed secrets are gone: its controller cannot start, and the job fails at once.
  auto jobs_db = jobs::ManagedJobStore::Open(jobs::ManagedJobsDbPathIn(home + "/herd"));
  REQUIRE(jobs_db.ok());
  jobs::ManagedJob job;
  job.task_json = "{}";
  job.state = jobs::ManagedState::kRunning;
  job.cluster = "herd-mj-1";
  job.secrets_ref = "0123abcd";
  auto id = (*jobs_db)->Create(job);
  REQUIRE(id.ok());
  // The herd it runs: records its argv and the environment it was given, in the user's home.
  const std::string herd = dir.Write("herd",
                                     "#!/bin/sh\n"
                                     "echo \"$* $HERD_TEST_USER $(pwd)\" > \"$HOME/ran\"\n"
                                     "echo 'released (fake herd)'\n");
  REQUIRE(::chmod(herd.c_str(), 0755) == 0);
  auto keeper = StartServerKeeper(**store, {.holder = "srv-test",
                                            .state_dir = state,
                                            .herd_binary = herd,
                                            .user_env = [&](const std::string& user) {
                                              return std::vector<std::string>{
                                                  "HOME=" + state + "/users/" + user,
                                                  "PATH=/usr/bin:/bin", "HERD_TEST_USER=" + user};
                                            }});
  REQUIRE(keeper.ok());
  const std::string ran = home + "/ran";
  const std::string log = jobs::ManagedJobDirIn(home + "/herd", *id) + "/controller.log";
  auto has_line = [](const std::string& path, const std::string& text) {
    auto got = ReadFile(path);
    return got.ok() && got->find(text) != std::string::npos;
  };
  // Bounded: the keeper ticks at once, and the fake herd exits at once.
  for (int i = 0; i < 200 && !has_line(log, "released (fake herd)"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  (*keeper)->Stop();
  auto args = ReadFile(ran);
  REQUIRE(args.ok());
  CHECK(*args == "jobs _release " + std::to_string(*id) + " alice " + home + "\n");
  CHECK(has_line(log, "released (fake herd)"));
  auto after = (*jobs_db)->Get(*id);
  REQUIRE(after.ok());
  REQUIRE(after->has_value());
  CHECK((*after)->state == jobs::ManagedState::kFailedController);
  CHECK((*after)->message.find("secrets") != std::string::npos);
}

}  // namespace
}  // namespace herd::server
