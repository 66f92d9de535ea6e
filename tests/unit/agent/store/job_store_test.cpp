#include "agent/store/job_store.hpp"
#include "tests/unit/test_support.hpp"

#include <doctest/doctest.h>

#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

using herd::agent::JobRecord;
using herd::agent::JobStore;

namespace {

using herd::testing::TempDir;

JobRecord Record(const std::string& name, herd::v1::JobState state = herd::v1::JOB_STATE_PENDING) {
  JobRecord r;
  r.info.set_name(name);
  r.info.set_user("alice");
  r.info.set_state(state);
  r.info.set_submitted_unix_ms(1700000000123);
  r.spec.set_name(name);
  r.spec.set_num_nodes(2);
  r.spec.set_run("echo " + name);
  return r;
}

std::unique_ptr<JobStore> MustOpen(const std::string& path) {
  auto store = JobStore::Open(path);
  REQUIRE_MESSAGE(store.ok(), store.status().ToString());
  return std::move(store).value();
}

std::vector<int64_t> IdsOf(const std::vector<JobRecord>& jobs) {
  std::vector<int64_t> ids;
  for (const auto& j : jobs) ids.push_back(j.info.job_id());
  return ids;
}

herd::v1::NodeInfo Node(const std::string& id, const std::string& address, bool head = false) {
  herd::v1::NodeInfo n;
  n.set_node_id(id);
  n.add_addresses(address);
  n.set_is_head(head);
  n.set_cpus(4);
  return n;
}

std::vector<std::string> NodeIds(const std::vector<herd::v1::NodeInfo>& nodes) {
  std::vector<std::string> ids;
  for (const auto& n : nodes) ids.push_back(n.node_id());
  return ids;
}

}  // namespace

TEST_CASE("jobs get ids 1, 2, 3 and round-trip every field") {
  TempDir dir{"herd-store"};
  auto store = MustOpen(dir / "jobs.db");
  CHECK(store->LatestJobId().value() == 0);

  JobRecord first = Record("train");
  first.info.set_job_id(42);  // ignored: the store assigns ids
  first.spec.mutable_resources()->set_accelerator("L4");
  first.spec.mutable_resources()->set_accelerator_count(0.5);
  (*first.spec.mutable_envs())["LR"] = "0.1";
  (*first.spec.mutable_secrets())["TOKEN"] = "s3cret";
  auto* exit = first.info.add_exits();
  exit->set_rank(1);
  exit->set_node_id("w1");
  exit->set_exit_code(137);
  first.info.set_first_failed_rank(0);
  first.info.add_node_ids("head");
  first.info.add_node_ids("w1");

  CHECK(store->AddJob(first).value() == 1);
  CHECK(store->AddJob(Record("eval")).value() == 2);
  CHECK(store->AddJob(Record("third")).value() == 3);
  CHECK(store->LatestJobId().value() == 3);

  auto got = store->GetJob(1);
  REQUIRE(got.ok());
  CHECK(got->info.job_id() == 1);
  first.info.set_job_id(1);
  CHECK(got->info.SerializeAsString() == first.info.SerializeAsString());
  CHECK(got->spec.SerializeAsString() == first.spec.SerializeAsString());
  CHECK(got->spec.secrets().at("TOKEN") == "s3cret");
  CHECK(got->info.exits(0).exit_code() == 137);
  CHECK(store->GetJob(2)->info.name() == "eval");
}

TEST_CASE("missing jobs are NotFound") {
  TempDir dir{"herd-store"};
  auto store = MustOpen(dir / "jobs.db");
  auto got = store->GetJob(7);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == herd::Code::kNotFound);
  CHECK(got.status().message() == "job 7 not found");

  JobRecord ghost = Record("ghost");
  ghost.info.set_job_id(9);
  herd::Status s = store->UpdateJob(ghost);
  CHECK(s.code() == herd::Code::kNotFound);
  CHECK(s.message() == "job 9 not found");
  CHECK(store->LatestJobId().value() == 0);  // the failed update created nothing
}

TEST_CASE("UpdateJob replaces the whole record and the state index follows") {
  TempDir dir{"herd-store"};
  auto store = MustOpen(dir / "jobs.db");
  const int64_t id = store->AddJob(Record("a")).value();
  JobRecord r = store->GetJob(id).value();
  r.info.set_state(herd::v1::JOB_STATE_FAILED);
  r.info.set_message("rank 1 exited 3");
  r.info.set_ended_unix_ms(1700000009999);
  r.spec.set_run("echo changed");
  REQUIRE(store->UpdateJob(r).ok());

  JobRecord back = store->GetJob(id).value();
  CHECK(back.info.state() == herd::v1::JOB_STATE_FAILED);
  CHECK(back.info.message() == "rank 1 exited 3");
  CHECK(back.spec.run() == "echo changed");
  CHECK(store->ActiveJobs().value().empty());
  CHECK(store->ListJobs(/*skip_finished=*/true, 0).value().empty());
}

TEST_CASE("ListJobs is newest first, honours limit and skip_finished") {
  TempDir dir{"herd-store"};
  auto store = MustOpen(dir / "jobs.db");
  using S = herd::v1::JobState;
  const std::vector<S> states = {herd::v1::JOB_STATE_SUCCEEDED,     herd::v1::JOB_STATE_RUNNING,
                                 herd::v1::JOB_STATE_CANCELLED,     herd::v1::JOB_STATE_PENDING,
                                 herd::v1::JOB_STATE_FAILED_DRIVER, herd::v1::JOB_STATE_INIT};
  for (std::size_t i = 0; i < states.size(); ++i) {
    REQUIRE(store->AddJob(Record("j" + std::to_string(i + 1), states[i])).ok());
  }
  CHECK(IdsOf(store->ListJobs(false, 0).value()) == std::vector<int64_t>{6, 5, 4, 3, 2, 1});
  CHECK(IdsOf(store->ListJobs(false, 2).value()) == std::vector<int64_t>{6, 5});
  CHECK(IdsOf(store->ListJobs(true, 0).value()) == std::vector<int64_t>{6, 4, 2});
  CHECK(IdsOf(store->ListJobs(true, 1).value()) == std::vector<int64_t>{6});
  CHECK(store->ListJobs(false, 0).value()[0].info.name() == "j6");
}

TEST_CASE("ActiveJobs are PENDING, SETTING_UP and RUNNING jobs in FIFO order") {
  TempDir dir{"herd-store"};
  auto store = MustOpen(dir / "jobs.db");
  REQUIRE(store->AddJob(Record("1", herd::v1::JOB_STATE_RUNNING)).ok());
  REQUIRE(store->AddJob(Record("2", herd::v1::JOB_STATE_SUCCEEDED)).ok());
  REQUIRE(store->AddJob(Record("3", herd::v1::JOB_STATE_PENDING)).ok());
  REQUIRE(store->AddJob(Record("4", herd::v1::JOB_STATE_INIT)).ok());
  REQUIRE(store->AddJob(Record("5", herd::v1::JOB_STATE_SETTING_UP)).ok());
  REQUIRE(store->AddJob(Record("6", herd::v1::JOB_STATE_PENDING)).ok());
  // Job 6 started before 3 finished: order stays by id, not by update time.
  JobRecord six = store->GetJob(6).value();
  six.info.set_state(herd::v1::JOB_STATE_RUNNING);
  REQUIRE(store->UpdateJob(six).ok());
  CHECK(IdsOf(store->ActiveJobs().value()) == std::vector<int64_t>{1, 3, 5, 6});
}

TEST_CASE("jobs and nodes persist across reopen, and ids continue") {
  TempDir dir{"herd-store"};
  const std::string path = dir / "jobs.db";
  {
    auto store = MustOpen(path);
    REQUIRE(store->AddJob(Record("a")).ok());
    REQUIRE(store->AddJob(Record("b", herd::v1::JOB_STATE_SUCCEEDED)).ok());
    REQUIRE(store->UpsertNode(Node("w1", "10.0.0.10")).ok());
    REQUIRE(store->UpsertNode(Node("head", "10.0.0.20", true)).ok());
  }
  auto store = MustOpen(path);
  CHECK(store->LatestJobId().value() == 2);
  CHECK(store->GetJob(2)->info.state() == herd::v1::JOB_STATE_SUCCEEDED);
  CHECK(IdsOf(store->ActiveJobs().value()) == std::vector<int64_t>{1});
  CHECK(store->AddJob(Record("c")).value() == 3);
  CHECK(NodeIds(store->ListNodes().value()) == std::vector<std::string>{"head", "w1"});
}

TEST_CASE("nodes come back in cluster order and keep their rank when they re-register") {
  TempDir dir{"herd-store"};
  auto store = MustOpen(dir / "jobs.db");
  REQUIRE(store->UpsertNode(Node("w10", "10.0.0.10")).ok());
  REQUIRE(store->UpsertNode(Node("w9", "10.0.0.9")).ok());
  REQUIRE(store->UpsertNode(Node("head", "10.0.0.100", true)).ok());
  REQUIRE(store->UpsertNode(Node("w11", "10.0.0.11")).ok());
  const std::vector<std::string> order = {"head", "w9", "w10", "w11"};
  CHECK(NodeIds(store->ListNodes().value()) == order);

  // w10 restarts with a new hostname and more GPUs: same place, new info, no duplicate.
  herd::v1::NodeInfo again = Node("w10", "10.0.0.10");
  again.set_hostname("w10-rebooted");
  again.set_gpu_count(2);
  REQUIRE(store->UpsertNode(again).ok());
  auto nodes = store->ListNodes().value();
  CHECK(NodeIds(nodes) == order);
  CHECK(nodes[2].hostname() == "w10-rebooted");
  CHECK(nodes[2].gpu_count() == 2);

  herd::v1::NodeInfo nameless;
  CHECK(store->UpsertNode(nameless).code() == herd::Code::kInvalidArgument);
}

TEST_CASE("two stores on one file see each other's interleaved writes") {
  TempDir dir{"herd-store"};
  const std::string path = dir / "jobs.db";
  auto a = MustOpen(path);
  auto b = MustOpen(path);
  CHECK(a->AddJob(Record("from-a")).value() == 1);
  CHECK(b->AddJob(Record("from-b")).value() == 2);
  CHECK(a->AddJob(Record("from-a-2")).value() == 3);
  CHECK(b->LatestJobId().value() == 3);

  JobRecord r = a->GetJob(2).value();
  r.info.set_state(herd::v1::JOB_STATE_RUNNING);
  REQUIRE(a->UpdateJob(r).ok());
  CHECK(b->GetJob(2)->info.state() == herd::v1::JOB_STATE_RUNNING);
  REQUIRE(b->UpsertNode(Node("w1", "10.0.0.1")).ok());
  CHECK(NodeIds(a->ListNodes().value()) == std::vector<std::string>{"w1"});
}

TEST_CASE("two processes adding jobs at once get distinct ids and lose nothing") {
  TempDir dir{"herd-store"};
  const std::string path = dir / "jobs.db";
  constexpr int kPerProcess = 60;
  std::vector<pid_t> children;
  for (int p = 0; p < 2; ++p) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      alarm(60);  // never outlive a stuck test
      // Both open the fresh file at the same moment, then race on every write.
      auto store = JobStore::Open(path);
      if (!store.ok()) {
        std::fprintf(stderr, "child %d: %s\n", p, store.status().ToString().c_str());
        _exit(2);
      }
      for (int i = 0; i < kPerProcess; ++i) {
        auto id = (*store)->AddJob(Record("p" + std::to_string(p) + "-" + std::to_string(i)));
        if (!id.ok()) _exit(3);
        JobRecord r = (*store)->GetJob(*id).value();
        r.info.set_state(herd::v1::JOB_STATE_RUNNING);
        if (!(*store)->UpdateJob(r).ok()) _exit(4);
      }
      store = herd::Status(herd::Code::kCancelled, "close");  // close before exit
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  auto store = MustOpen(path);
  auto jobs = store->ListJobs(false, 0).value();
  REQUIRE(jobs.size() == 2 * kPerProcess);
  std::set<std::string> names;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    CHECK(jobs[i].info.job_id() == static_cast<int64_t>(jobs.size() - i));
    CHECK(jobs[i].info.state() == herd::v1::JOB_STATE_RUNNING);
    names.insert(jobs[i].info.name());
  }
  CHECK(names.size() == 2 * kPerProcess);
}

TEST_CASE("a file that is not a job store gives an error naming the path") {
  TempDir dir{"herd-store"};
  SUBCASE("garbage") {
    const std::string path = dir / "garbage.db";
    {
      std::ofstream out(path, std::ios::binary);
      for (int i = 0; i < 200; ++i) out << "this is not an sqlite file ";
    }
    auto store = JobStore::Open(path);
    REQUIRE_FALSE(store.ok());
    CHECK(store.status().message().find(path) != std::string::npos);
    CHECK(store.status().message().find("not a database") != std::string::npos);
  }
  SUBCASE("damaged pages") {
    const std::string path = dir / "jobs.db";
    {
      auto store = MustOpen(path);
      for (int i = 0; i < 50; ++i) REQUIRE(store->AddJob(Record(std::string(200, 'x'))).ok());
    }  // closing the last connection checkpoints the WAL into the file
    const auto size = std::filesystem::file_size(path);
    REQUIRE(size > 3 * 4096);
    {
      std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
      f.seekp(4096);  // page 2 onwards: the tables' b-trees
      const std::string junk(2 * 4096, '\xA5');
      f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
    }
    auto store = JobStore::Open(path);
    REQUIRE_FALSE(store.ok());
    CHECK(store.status().message().find(path) != std::string::npos);
  }
  SUBCASE("another program's SQLite database") {
    const std::string path = dir / "other.db";
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "CREATE TABLE photos (id INTEGER)", nullptr, nullptr, nullptr) ==
          SQLITE_OK);
    sqlite3_close(db);
    auto store = JobStore::Open(path);
    REQUIRE_FALSE(store.ok());
    CHECK(store.status().message().find(path) != std::string::npos);
    CHECK(store.status().message().find("not a herd job store") != std::string::npos);
  }
  SUBCASE("a newer schema") {
    const std::string path = dir / "jobs.db";
    { MustOpen(path); }
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "PRAGMA user_version = 99", nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
    auto store = JobStore::Open(path);
    REQUIRE_FALSE(store.ok());
    CHECK(store.status().code() == herd::Code::kFailedPrecondition);
    CHECK(store.status().message().find("schema version 99 is newer") != std::string::npos);
  }
  SUBCASE("a directory that does not exist") {
    const std::string path = dir / "missing/jobs.db";
    auto store = JobStore::Open(path);
    REQUIRE_FALSE(store.ok());
    CHECK(store.status().message().find(path) != std::string::npos);
  }
}

namespace {

// Every byte the store left on disk: the database and its WAL (and the rollback journal, if any).
std::string RawBytes(const TempDir& dir) {
  std::string all;
  for (const char* name : {"jobs.db", "jobs.db-wal", "jobs.db-journal"}) {
    std::ifstream in(dir / name, std::ios::binary);
    all.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return all;
}

JobRecord WithSecret(const std::string& name, const std::string& value,
                     herd::v1::JobState state = herd::v1::JOB_STATE_PENDING) {
  JobRecord r = Record(name, state);
  (*r.spec.mutable_secrets())["HF_TOKEN"] = value;
  (*r.spec.mutable_envs())["PLAIN"] = "visible-env-value";
  return r;
}

}  // namespace

TEST_CASE("secrets are sealed at rest: never in the file's bytes, back in the spec when read") {
  TempDir dir{"herd-store"};
  const std::string value = "hf_SECRET_7f3a9c21d4";
  {
    auto store = MustOpen(dir / "jobs.db");
    const int64_t id = store->AddJob(WithSecret("train", value)).value();
    JobRecord rec = store->GetJob(id).value();
    CHECK(rec.spec.secrets().at("HF_TOKEN") == value);
    rec.info.set_state(herd::v1::JOB_STATE_RUNNING);
    REQUIRE(store->UpdateJob(rec).ok());
    REQUIRE(store->AddJob(WithSecret("eval", value)).ok());

    const std::string raw = RawBytes(dir);  // while open: the WAL holds the writes
    CHECK(raw.find("visible-env-value") != std::string::npos);  // the check can see plain text
    CHECK(raw.find(value) == std::string::npos);
    CHECK(raw.find("HF_TOKEN") == std::string::npos);  // the names are sealed too

    auto active = store->ActiveJobs();
    REQUIRE(active.ok());
    REQUIRE(active->size() == 2);
    for (const auto& j : *active) CHECK(j.spec.secrets().at("HF_TOKEN") == value);
    auto listed = store->ListJobs(false, 0);
    REQUIRE(listed.ok());
    for (const auto& j : *listed) {
      CHECK(j.spec.secrets().empty());  // a listing never needs them
      CHECK(j.spec.envs().at("PLAIN") == "visible-env-value");
    }
  }
  // A new process (a restarted head) reads them back with the key file.
  auto store = MustOpen(dir / "jobs.db");
  CHECK(store->GetJob(1).value().spec.secrets().at("HF_TOKEN") == value);
  CHECK(RawBytes(dir).find(value) == std::string::npos);
  struct stat st {};
  REQUIRE(::stat((dir / "secrets.key").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);

  // A finished job's secrets are dropped: nothing needs them any more.
  JobRecord done = store->GetJob(1).value();
  done.info.set_state(herd::v1::JOB_STATE_SUCCEEDED);
  REQUIRE(store->UpdateJob(done).ok());
  CHECK(store->GetJob(1).value().spec.secrets().empty());
  CHECK(store->GetJob(2).value().spec.secrets().at("HF_TOKEN") == value);
}

TEST_CASE("a sealed row moved to another job does not open") {
  TempDir dir{"herd-store"};
  {
    auto store = MustOpen(dir / "jobs.db");
    REQUIRE(store->AddJob(WithSecret("a", "value-a")).ok());
    REQUIRE(store->AddJob(Record("b")).ok());
  }
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open((dir / "jobs.db").c_str(), &db) == SQLITE_OK);
  CHECK(sqlite3_exec(db,
                     "UPDATE jobs SET secrets = (SELECT secrets FROM jobs WHERE job_id = 1) "
                     "WHERE job_id = 2",
                     nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  auto store = MustOpen(dir / "jobs.db");
  CHECK(store->GetJob(1).value().spec.secrets().at("HF_TOKEN") == "value-a");
  auto moved = store->GetJob(2);
  REQUIRE_FALSE(moved.ok());
  CHECK(moved.status().message().find("the secrets of job 2 do not open") != std::string::npos);
  CHECK(store->ListJobs(false, 0).ok());  // listing does not need them
}

TEST_CASE("a missing, replaced or unsafe key file: a clear error, nothing changed") {
  TempDir dir{"herd-store"};
  const std::string db = dir / "jobs.db";
  const std::string key = dir / "secrets.key";
  { REQUIRE(MustOpen(db)->AddJob(WithSecret("waiting", "pending-secret")).ok()); }

  SUBCASE("missing while a job waits with sealed secrets") {
    std::filesystem::rename(key, dir / "saved.key");
    auto store = JobStore::Open(db);
    REQUIRE_FALSE(store.ok());
    CHECK(store.status().code() == herd::Code::kFailedPrecondition);
    CHECK(store.status().message().find(key + " is missing") != std::string::npos);
    CHECK(store.status().message().find("job 1") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(key));  // no new key that could never open them
    std::filesystem::rename(dir / "saved.key", key);
    CHECK(MustOpen(db)->GetJob(1).value().spec.secrets().at("HF_TOKEN") == "pending-secret");
  }
  SUBCASE("replaced by another key") {
    std::filesystem::rename(key, dir / "saved.key");
    REQUIRE(herd::SecretBox::Create(key).ok());
    auto store = JobStore::Open(db);
    REQUIRE_FALSE(store.ok());
    CHECK(store.status().message().find("does not open the sealed secrets of job 1") !=
          std::string::npos);
    std::filesystem::rename(dir / "saved.key", key);
    CHECK(MustOpen(db)->GetJob(1).value().spec.secrets().at("HF_TOKEN") == "pending-secret");
  }
  SUBCASE("readable by others") {
    REQUIRE(::chmod(key.c_str(), 0644) == 0);
    auto store = JobStore::Open(db);
    REQUIRE_FALSE(store.ok());
    CHECK(store.status().message().find(db) != std::string::npos);
    CHECK(store.status().message().find(key + " has mode 0644") != std::string::npos);
    REQUIRE(::chmod(key.c_str(), 0600) == 0);
    CHECK(MustOpen(db)->GetJob(1).value().spec.secrets().at("HF_TOKEN") == "pending-secret");
  }
  SUBCASE("missing when no job holds secrets any more: a new key is made") {
    {
      auto store = MustOpen(db);
      JobRecord rec = store->GetJob(1).value();
      rec.info.set_state(herd::v1::JOB_STATE_CANCELLED);
      REQUIRE(store->UpdateJob(rec).ok());
    }
    std::filesystem::remove(key);
    auto store = MustOpen(db);
    CHECK(std::filesystem::exists(key));
    const int64_t id = store->AddJob(WithSecret("next", "new-secret")).value();
    CHECK(store->GetJob(id).value().spec.secrets().at("HF_TOKEN") == "new-secret");
  }
}

TEST_CASE("a node's agent incarnation persists; a schema 2 store gains it (0) on open") {
  TempDir dir{"herd-store"};
  const std::string path = dir / "jobs.db";
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    const std::string info = Node("w1", "10.0.0.10").SerializeAsString();
    CHECK(sqlite3_exec(db,
                       "PRAGMA journal_mode = WAL;"
                       "CREATE TABLE jobs (job_id INTEGER PRIMARY KEY AUTOINCREMENT, "
                       "state INTEGER NOT NULL, info BLOB NOT NULL, spec BLOB NOT NULL, "
                       "secrets BLOB);"
                       "CREATE INDEX jobs_by_state ON jobs (state, job_id);"
                       "CREATE TABLE nodes (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                       "node_id TEXT NOT NULL UNIQUE, info BLOB NOT NULL);"
                       "PRAGMA user_version = 2;",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_stmt* insert = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, "INSERT INTO nodes (node_id, info) VALUES ('w1', ?1)", -1,
                               &insert, nullptr) == SQLITE_OK);
    sqlite3_bind_blob(insert, 1, info.data(), static_cast<int>(info.size()), SQLITE_TRANSIENT);
    REQUIRE(sqlite3_step(insert) == SQLITE_DONE);
    sqlite3_finalize(insert);
    sqlite3_close(db);
  }
  constexpr uint64_t kIncarnation = 1796291691673ULL;  // NextIncarnation: at least unix ms
  {
    auto store = MustOpen(path);
    std::map<std::string, uint64_t> incarnations;
    CHECK(NodeIds(store->ListNodes(&incarnations).value()) == std::vector<std::string>{"w1"});
    CHECK(incarnations.at("w1") == 0);
    REQUIRE(store->UpsertNode(Node("w1", "10.0.0.10"), kIncarnation).ok());
    REQUIRE(store->UpsertNode(Node("w2", "10.0.0.11"), 7).ok());
  }
  std::map<std::string, uint64_t> incarnations;
  REQUIRE(MustOpen(path)->ListNodes(&incarnations).ok());
  CHECK(incarnations == std::map<std::string, uint64_t>{{"w1", kIncarnation}, {"w2", 7}});
}

TEST_CASE("a schema 1 store (secrets in clear) is migrated: sealed or dropped, none left") {
  TempDir dir{"herd-store"};
  const std::string path = dir / "jobs.db";
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db,
                       "PRAGMA journal_mode = WAL;"
                       "CREATE TABLE jobs (job_id INTEGER PRIMARY KEY AUTOINCREMENT, "
                       "state INTEGER NOT NULL, info BLOB NOT NULL, spec BLOB NOT NULL);"
                       "CREATE INDEX jobs_by_state ON jobs (state, job_id);"
                       "CREATE TABLE nodes (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                       "node_id TEXT NOT NULL UNIQUE, info BLOB NOT NULL);"
                       "PRAGMA user_version = 1;",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_stmt* insert = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, "INSERT INTO jobs (state, info, spec) VALUES (?1, ?2, ?3)", -1,
                               &insert, nullptr) == SQLITE_OK);
    for (auto [state, value] : {std::pair{herd::v1::JOB_STATE_PENDING, "clear-pending-secret"},
                                std::pair{herd::v1::JOB_STATE_SUCCEEDED, "clear-done-secret"}}) {
      JobRecord r = WithSecret("old", value, state);
      const std::string info = r.info.SerializeAsString();
      const std::string spec = r.spec.SerializeAsString();
      sqlite3_bind_int(insert, 1, state);
      sqlite3_bind_blob(insert, 2, info.data(), static_cast<int>(info.size()), SQLITE_TRANSIENT);
      sqlite3_bind_blob(insert, 3, spec.data(), static_cast<int>(spec.size()), SQLITE_TRANSIENT);
      REQUIRE(sqlite3_step(insert) == SQLITE_DONE);
      sqlite3_reset(insert);
    }
    sqlite3_finalize(insert);
    sqlite3_close(db);
  }
  REQUIRE(RawBytes(dir).find("clear-pending-secret") != std::string::npos);  // before
  {
    auto store = MustOpen(path);
    CHECK(store->GetJob(1).value().spec.secrets().at("HF_TOKEN") == "clear-pending-secret");
    CHECK(store->GetJob(2).value().spec.secrets().empty());
    CHECK(store->GetJob(2).value().spec.envs().at("PLAIN") == "visible-env-value");
  }
  const std::string raw = RawBytes(dir);
  CHECK(raw.find("clear-pending-secret") == std::string::npos);
  CHECK(raw.find("clear-done-secret") == std::string::npos);
  CHECK(MustOpen(path)->GetJob(1).value().spec.secrets().at("HF_TOKEN") == "clear-pending-secret");
}
