// herd_managed_jobs: the recovery decision (a pure function, driven with made-up outcomes), the
// task's stored form, and the managed job table.
#include <doctest/doctest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>

#include "controller/jobs/managed_job_store.hpp"
#include "controller/jobs/recovery.hpp"
#include "controller/jobs/task_codec.hpp"

namespace herd::jobs {
namespace {

namespace fs = std::filesystem;

task::JobRecovery Policy(int max_restarts_on_errors) {
  task::JobRecovery p;
  p.max_restarts_on_errors = max_restarts_on_errors;
  return p;
}

constexpr int kMaxLaunch = 3;

TEST_CASE("a lost node is always recovered and counted as a recovery") {
  RecoveryCounters c;
  for (int i = 1; i <= 5; ++i) {
    Decision d = Decide(AttemptOutcome::kNodeLost, c, Policy(0), false, kMaxLaunch);
    CHECK(d.action == NextAction::kRelaunch);
    CHECK(d.counters.recoveries == i);
    CHECK(d.counters.restarts_on_errors == 0);
    CHECK(d.reason.find("lost") != std::string::npos);
    c = d.counters;
  }
}

TEST_CASE("a user error is relaunched only up to max_restarts_on_errors") {
  RecoveryCounters c;
  Decision d = Decide(AttemptOutcome::kUserFailed, c, Policy(0), false, kMaxLaunch);
  CHECK(d.action == NextAction::kFinish);
  CHECK(d.final_state == ManagedState::kFailed);

  d = Decide(AttemptOutcome::kUserFailed, c, Policy(2), false, kMaxLaunch);
  CHECK(d.action == NextAction::kRelaunch);
  CHECK(d.counters.restarts_on_errors == 1);
  d = Decide(AttemptOutcome::kUserFailed, d.counters, Policy(2), false, kMaxLaunch);
  CHECK(d.action == NextAction::kRelaunch);
  CHECK(d.counters.restarts_on_errors == 2);
  d = Decide(AttemptOutcome::kUserFailed, d.counters, Policy(2), false, kMaxLaunch);
  CHECK(d.action == NextAction::kFinish);
  CHECK(d.final_state == ManagedState::kFailed);
  CHECK(d.reason == "the task failed after 2 restart(s) on errors");

  // Node losses do not use up the user-error budget, and the other way round.
  RecoveryCounters mixed{.recoveries = 4, .restarts_on_errors = 0};
  d = Decide(AttemptOutcome::kUserFailed, mixed, Policy(1), false, kMaxLaunch);
  CHECK(d.action == NextAction::kRelaunch);
  CHECK(d.counters.recoveries == 4);
}

TEST_CASE("success, setup failure and a cancel on the cluster end the job") {
  RecoveryCounters c;
  CHECK(Decide(AttemptOutcome::kSucceeded, c, Policy(5), false, kMaxLaunch).final_state ==
        ManagedState::kSucceeded);
  Decision setup = Decide(AttemptOutcome::kSetupFailed, c, Policy(5), false, kMaxLaunch);
  CHECK(setup.action == NextAction::kFinish);
  CHECK(setup.final_state == ManagedState::kFailedSetup);
  CHECK(Decide(AttemptOutcome::kCancelled, c, Policy(5), false, kMaxLaunch).final_state ==
        ManagedState::kCancelled);
}

TEST_CASE("a cancel request wins over every outcome") {
  for (auto o : {AttemptOutcome::kSucceeded, AttemptOutcome::kUserFailed, AttemptOutcome::kNodeLost,
                 AttemptOutcome::kLaunchFailed, AttemptOutcome::kSetupFailed}) {
    Decision d = Decide(o, {}, Policy(5), true, kMaxLaunch);
    CHECK(d.action == NextAction::kFinish);
    CHECK(d.final_state == ManagedState::kCancelled);
  }
}

TEST_CASE("launch failures are retried, then FAILED_NO_RESOURCE; a good attempt resets them") {
  RecoveryCounters c;
  Decision d = Decide(AttemptOutcome::kLaunchFailed, c, Policy(0), false, kMaxLaunch);
  CHECK(d.action == NextAction::kRetryLaunch);
  d = Decide(AttemptOutcome::kLaunchFailed, d.counters, Policy(0), false, kMaxLaunch);
  CHECK(d.action == NextAction::kRetryLaunch);
  RecoveryCounters after_two = d.counters;
  d = Decide(AttemptOutcome::kLaunchFailed, after_two, Policy(0), false, kMaxLaunch);
  CHECK(d.action == NextAction::kFinish);
  CHECK(d.final_state == ManagedState::kFailedNoResource);
  d = Decide(AttemptOutcome::kNodeLost, after_two, Policy(0), false, kMaxLaunch);
  CHECK(d.counters.consecutive_launch_failures == 0);
}

TEST_CASE("state names round-trip and terminal states are the end states") {
  for (auto s : {ManagedState::kPending, ManagedState::kStarting, ManagedState::kRunning,
                 ManagedState::kRecovering, ManagedState::kCancelling, ManagedState::kSucceeded,
                 ManagedState::kCancelled, ManagedState::kFailed, ManagedState::kFailedSetup,
                 ManagedState::kFailedNoResource, ManagedState::kFailedController}) {
    ManagedState back = ManagedState::kPending;
    REQUIRE(ParseState(StateName(s), back));
    CHECK(back == s);
  }
  ManagedState x;
  CHECK_FALSE(ParseState("BOGUS", x));
  CHECK(IsTerminal(ManagedState::kFailedController));
  CHECK_FALSE(IsTerminal(ManagedState::kRecovering));
  CHECK_FALSE(IsTerminal(ManagedState::kCancelling));
}

TEST_CASE("the policy comes from the primary resources, else the top level, else FAILOVER/0") {
  task::Task t;
  CHECK(PolicyOf(t).strategy == "FAILOVER");
  CHECK(PolicyOf(t).max_restarts_on_errors == 0);
  t.resources.job_recovery = Policy(2);
  CHECK(PolicyOf(t).max_restarts_on_errors == 2);
  task::Resources candidate;
  candidate.job_recovery = Policy(7);
  t.resources.ordered.push_back(candidate);
  CHECK(PolicyOf(t).max_restarts_on_errors == 7);
}

TEST_CASE("a task survives its stored form, secrets left out") {
  task::Task t;
  t.name = "train";
  t.workdir = "/src/proj";
  t.num_nodes = 2;
  t.resources.cpus = 4;
  t.resources.cpus_at_least = true;
  t.resources.accelerator = "L4";
  t.resources.accelerator_count = 0.5;
  t.resources.infra = "local";
  t.resources.ports = {"8080"};
  t.resources.disk_size = 100;
  t.resources.job_recovery = Policy(3);
  task::Resources c = t.resources;
  c.memory_gb = 32;
  t.resources.any_of.push_back(c);
  t.envs = {{"A", "1"}};
  t.secrets = {{"TOKEN", "s3cret"}};
  t.file_mounts = {{"/data", "/local/data"}};
  t.setup = "pip install x";
  t.run = "python train.py";
  std::string text = EncodeTask(t);
  CHECK(text.find("s3cret") == std::string::npos);
  auto back = DecodeTask(text);
  REQUIRE(back.ok());
  CHECK(back->name == "train");
  CHECK(back->workdir == "/src/proj");
  CHECK(back->num_nodes == 2);
  CHECK(*back->resources.cpus == 4);
  CHECK(back->resources.cpus_at_least);
  CHECK(back->resources.accelerator_count == 0.5);
  CHECK(back->resources.ports == std::vector<std::string>{"8080"});
  CHECK(*back->resources.disk_size == 100);
  CHECK(back->resources.job_recovery->max_restarts_on_errors == 3);
  REQUIRE(back->resources.any_of.size() == 1);
  CHECK(*back->resources.any_of[0].memory_gb == 32);
  CHECK(back->envs == t.envs);
  CHECK(back->secrets.empty());
  CHECK(back->file_mounts == t.file_mounts);
  CHECK(back->run == t.run);
  CHECK(EncodeTask(*back) == text);
  CHECK_FALSE(DecodeTask("{\"name\": 1}").ok());
}

TEST_CASE("a decoded task's container image is checked as the YAML parser checks it") {
  // A task record comes from a client through the server (the SDK builds it): an image that
  // podman would read as an option, or with blanks, is refused; a good one comes back.
  task::Task t;
  t.name = "c";
  t.run = "true";
  t.resources.container_image = "nvcr.io/nvidia/pytorch:24.01-py3";
  auto good = DecodeTask(EncodeTask(t));
  REQUIRE(good.ok());
  CHECK(good->resources.container_image == t.resources.container_image);
  for (const char* bad : {"--privileged", "img name", "img;rm"}) {
    task::Task b = t;
    b.resources.container_image = bad;
    auto back = DecodeTask(EncodeTask(b));
    CHECK_MESSAGE(back.status().code() == Code::kInvalidArgument, bad);
    CHECK(back.status().message().find("resources.image_id") != std::string::npos);
    // In a candidate too.
    task::Task a = t;
    task::Resources c = a.resources;
    c.container_image = bad;
    a.resources.any_of.push_back(c);
    CHECK_FALSE(DecodeTask(EncodeTask(a)).ok());
  }
}

TEST_CASE("recover_on_exit_codes: a run that exits with one of them is recovered, not failed") {
  task::JobRecovery p = Policy(0);
  p.recover_on_exit_codes = {33, 34};
  RecoveryCounters c;
  // Code 34 with max_restarts_on_errors 0: relaunched anyway, as a recovery, many times over.
  for (int i = 1; i <= 3; ++i) {
    Decision d = Decide(AttemptOutcome::kUserFailed, c, p, false, kMaxLaunch, {34});
    CHECK(d.action == NextAction::kRelaunch);
    CHECK(d.counters.recoveries == i);
    CHECK(d.counters.restarts_on_errors == 0);
    CHECK(d.reason.find("exited with 34, one of recover_on_exit_codes") != std::string::npos);
    c = d.counters;
  }
  // Another code is a user error: with no restarts on errors left, the job fails.
  Decision other = Decide(AttemptOutcome::kUserFailed, c, p, false, kMaxLaunch, {1});
  CHECK(other.action == NextAction::kFinish);
  CHECK(other.final_state == ManagedState::kFailed);
  // No code known (the head was lost before it said): the ordinary rule.
  CHECK(Decide(AttemptOutcome::kUserFailed, c, p, false, kMaxLaunch).final_state ==
        ManagedState::kFailed);
  // Without the list, 33 is just an error.
  CHECK(Decide(AttemptOutcome::kUserFailed, {}, Policy(0), false, kMaxLaunch, {33}).final_state ==
        ManagedState::kFailed);
  // With restarts on errors left, an unlisted code uses one of them, a listed one does not.
  task::JobRecovery both = Policy(1);
  both.recover_on_exit_codes = {33};
  Decision listed = Decide(AttemptOutcome::kUserFailed, {}, both, false, kMaxLaunch, {33});
  CHECK(listed.counters.restarts_on_errors == 0);
  Decision unlisted = Decide(AttemptOutcome::kUserFailed, {}, both, false, kMaxLaunch, {2});
  CHECK(unlisted.action == NextAction::kRelaunch);
  CHECK(unlisted.counters.restarts_on_errors == 1);
  // A failed setup is final and cancel wins, whatever the code.
  CHECK(Decide(AttemptOutcome::kSetupFailed, {}, p, false, kMaxLaunch, {33}).final_state ==
        ManagedState::kFailedSetup);
  CHECK(Decide(AttemptOutcome::kUserFailed, {}, p, true, kMaxLaunch, {33}).final_state ==
        ManagedState::kCancelled);
}

TEST_CASE("the failed ranks' exit codes: the first failed rank's, else every non-zero one") {
  herd::v1::JobInfo j;
  j.set_first_failed_rank(1);
  auto add = [&](int rank, int code) {
    auto* e = j.add_exits();
    e->set_rank(rank);
    e->set_exit_code(code);
  };
  add(0, 137);  // killed by herd after rank 1 failed
  add(1, 33);
  add(2, 137);
  CHECK(FailureExitCodes(j) == std::vector<int>{33});
  j.set_first_failed_rank(-1);
  CHECK(FailureExitCodes(j) == std::vector<int>{137, 33, 137});
  herd::v1::JobInfo ok;
  ok.set_first_failed_rank(-1);
  ok.add_exits()->set_exit_code(0);
  CHECK(FailureExitCodes(ok).empty());
}

TEST_CASE("job_recovery none: a lost node ends the job instead of relaunching it") {
  task::JobRecovery none = Policy(2);
  none.strategy = "NONE";
  Decision d = Decide(AttemptOutcome::kNodeLost, {}, none, false, kMaxLaunch);
  CHECK(d.action == NextAction::kFinish);
  CHECK(d.final_state == ManagedState::kFailed);
  CHECK(d.reason.find("job_recovery is none") != std::string::npos);
  // Restarts on errors are asked for separately and still apply.
  CHECK(Decide(AttemptOutcome::kUserFailed, {}, none, false, kMaxLaunch).action ==
        NextAction::kRelaunch);
}

TEST_CASE("recover_on_exit_codes and a git workdir survive the stored form") {
  task::Task t;
  task::JobRecovery p = Policy(1);
  p.strategy = "NONE";
  p.recover_on_exit_codes = {33, 7};
  t.resources.job_recovery = p;
  t.git_workdir = task::GitWorkdir{"file:///srv/repo.git", "v1"};
  auto back = DecodeTask(EncodeTask(t));
  REQUIRE(back.ok());
  CHECK(back->resources.job_recovery->strategy == "NONE");
  CHECK(back->resources.job_recovery->recover_on_exit_codes == std::vector<int>{33, 7});
  REQUIRE(back->git_workdir.has_value());
  CHECK(back->git_workdir->url == "file:///srv/repo.git");
  CHECK(back->git_workdir->ref == "v1");
  // A record written before the field existed still reads.
  auto old = DecodeTask(
      "{\"name\":\"\",\"workdir\":\"\",\"num_nodes\":1,\"resources\":{\"cpus_at_least\":false,"
      "\"memory_at_least\":false,\"accelerator\":\"\",\"accelerator_count\":0,\"infra\":\"\","
      "\"ports\":[],\"use_spot\":false,\"instance_type\":\"\",\"job_recovery\":{\"strategy\":"
      "\"FAILOVER\",\"max_restarts_on_errors\":2},\"any_of\":[],\"ordered\":[]},\"envs\":{},"
      "\"file_mounts\":{},\"setup\":\"\",\"run\":\"\"}");
  REQUIRE(old.ok());
  CHECK(old->resources.job_recovery->recover_on_exit_codes.empty());
  CHECK_FALSE(old->git_workdir.has_value());
}

TEST_CASE("the job table: create, update, cancel flag kept apart from the controller's writes") {
  fs::path dir = fs::temp_directory_path() / ("mj-store-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto store = ManagedJobStore::Open((dir / "managed_jobs.db").string());
  REQUIRE(store.ok());
  ManagedJob j;
  j.name = "train";
  j.task_json = "{}";
  auto id1 = (*store)->Create(j);
  auto id2 = (*store)->Create(j);
  REQUIRE(id1.ok());
  REQUIRE(id2.ok());
  CHECK(*id2 == *id1 + 1);

  auto got = (*store)->Get(*id1);
  REQUIRE(got.ok());
  REQUIRE(got->has_value());
  ManagedJob a = **got;
  CHECK(a.state == ManagedState::kPending);
  CHECK_FALSE(a.cancel_requested);

  REQUIRE((*store)->RequestCancel(*id1).value());
  CHECK_FALSE((*store)->RequestCancel(999).value());
  // The controller writes a record it read before the cancel: the request stays.
  a.state = ManagedState::kRunning;
  a.attempts.push_back({.attempt = 1,
                        .cluster = "train-1-1",
                        .cluster_job_id = 1,
                        .start_unix_ms = 5,
                        .outcome = "",
                        .reason = ""});
  REQUIRE((*store)->Put(a).ok());
  auto again = (*store)->Get(*id1);
  REQUIRE(again.ok());
  CHECK((*again)->cancel_requested);
  CHECK((*again)->state == ManagedState::kRunning);
  REQUIRE((*again)->attempts.size() == 1);
  CHECK((*again)->attempts[0].cluster == "train-1-1");

  auto list = (*store)->List();
  REQUIRE(list.ok());
  REQUIRE(list->size() == 2);
  CHECK((*list)[0].id == *id2);  // newest first

  ManagedJob unknown = a;
  unknown.id = 999;
  CHECK((*store)->Put(unknown).code() == Code::kNotFound);
  CHECK_FALSE((*store)->Get(999)->has_value());
  fs::remove_all(dir);
}

TEST_CASE("EAGER_NEXT_REGION avoids the last attempt's region, FAILOVER prefers it") {
  task::JobRecovery eager;
  eager.strategy = "EAGER_NEXT_REGION";
  RegionPreference p = RecoveryPreference(eager, "aws/us-east-1/us-east-1b");
  CHECK(p.avoid == std::vector<std::string>{"aws/us-east-1"});
  CHECK(p.prefer.empty());
  p = RecoveryPreference(eager, "aws/eu-west-1");
  CHECK(p.avoid == std::vector<std::string>{"aws/eu-west-1"});

  task::JobRecovery failover;  // the default strategy
  p = RecoveryPreference(failover, "aws/us-west-2/us-west-2a");
  CHECK(p.prefer == std::vector<std::string>{"aws/us-west-2"});
  CHECK(p.avoid.empty());

  task::JobRecovery none;
  none.strategy = "NONE";
  CHECK(RecoveryPreference(none, "aws/us-east-1").avoid.empty());
  CHECK(RecoveryPreference(none, "aws/us-east-1").prefer.empty());
  // Off AWS, or before a first attempt: no region to move from.
  CHECK(RecoveryPreference(eager, "local").avoid.empty());
  CHECK(RecoveryPreference(eager, "").avoid.empty());
  CHECK(RecoveryPreference(eager, "aws").avoid.empty());
}

herd::v1::NodesReply Reply(const std::vector<std::pair<std::string, bool>>& nodes) {
  herd::v1::NodesReply r;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    auto* n = r.add_nodes();
    n->set_node_id(nodes[i].first);
    n->set_is_head(i == 0);
    r.add_alive(nodes[i].second);
  }
  return r;
}

TEST_CASE(
    "a lost worker is replaced alone while the head's node is alive; else the whole cluster") {
  task::JobRecovery failover;  // the default strategy
  using V = std::vector<std::string>;
  CHECK(ReplaceableLostNodes(Reply({{"h", true}, {"w1", false}, {"w2", true}}), failover) ==
        V{"w1"});
  CHECK(ReplaceableLostNodes(Reply({{"h", true}, {"w1", false}, {"w2", false}}), failover) ==
        V{"w1", "w2"});
  // Nothing lost (a hung rank, a drained node): the whole cluster.
  CHECK(ReplaceableLostNodes(Reply({{"h", true}, {"w1", true}}), failover).empty());
  // The head's own node lost.
  CHECK(ReplaceableLostNodes(Reply({{"h", false}, {"w1", false}}), failover).empty());
  CHECK(ReplaceableLostNodes(Reply({{"h", false}, {"w1", true}}), failover).empty());
  // A reply without a head, or with fewer alive flags than nodes (a node not known alive is lost).
  herd::v1::NodesReply headless = Reply({{"h", true}, {"w1", false}});
  headless.mutable_nodes(0)->set_is_head(false);
  CHECK(ReplaceableLostNodes(headless, failover).empty());
  herd::v1::NodesReply short_alive = Reply({{"h", true}, {"w1", true}});
  short_alive.mutable_alive()->RemoveLast();
  CHECK(ReplaceableLostNodes(short_alive, failover) == V{"w1"});
  CHECK(ReplaceableLostNodes(herd::v1::NodesReply(), failover).empty());
  // A strategy that moves the job elsewhere relaunches it whole.
  task::JobRecovery eager;
  eager.strategy = "EAGER_NEXT_REGION";
  CHECK(ReplaceableLostNodes(Reply({{"h", true}, {"w1", false}}), eager).empty());
}

TEST_CASE("a job table written by a newer herd is refused, naming the file") {
  fs::path dir = fs::temp_directory_path() / ("mj-newer-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string path = (dir / "managed_jobs.db").string();
  REQUIRE(ManagedJobStore::Open(path).ok());
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  auto newer = ManagedJobStore::Open(path);
  REQUIRE_FALSE(newer.ok());
  CHECK(newer.status().code() == Code::kFailedPrecondition);
  CHECK(newer.status().message().find(path) != std::string::npos);
  CHECK(newer.status().message().find("schema version 99 is newer") != std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace herd::jobs
