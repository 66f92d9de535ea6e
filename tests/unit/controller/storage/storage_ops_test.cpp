// herd_storage: a task's buckets through a launch and a teardown, over an in-memory store, the
// real storage table in a scratch directory and nodes that are local directories
// (LocalShellRunner) with an rclone that refuses: a missing bucket fails before anything is made
// or recorded (and what this launch made is deleted again); a failed mount unmounts every node
// and undoes the launch's buckets; down deletes only non-persistent buckets herd made; a managed
// job's non-persistent bucket outlives its attempts' clusters until the job ends; a started
// cluster mounts again what its launches mounted; with an IAM, the nodes get a key of the
// cluster's own, scoped to its buckets, widened by a later launch, deleted at down (and the IAM
// calls behind it, on a scripted HttpClient).
#include <doctest/doctest.h>
#include <sqlite3.h>

#include <boost/json.hpp>
#include <filesystem>
#include <map>
#include <set>

#include "controller/storage/storage_ops.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "tests/fakes/fake_clock.hpp"
#include "tests/fakes/fake_http_client.hpp"
#include "tests/fakes/fake_ssh_runner.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::storage {
namespace {

using herd::testing::TempDir;

struct Buckets {
  std::set<std::string> names;
  std::vector<std::string> deleted;
};

class MemoryStore : public ObjectStore {
 public:
  explicit MemoryStore(Buckets& b) : b_(b) {}
  std::string Scheme() const override { return "s3"; }
  std::string Describe() const override { return "http://store"; }
  Result<bool> BucketExists(const std::string& bucket) override {
    return b_.names.count(bucket) > 0;
  }
  Status CreateBucket(const std::string& bucket) override {
    b_.names.insert(bucket);
    return Status::Ok();
  }
  Status DeleteBucket(const std::string& bucket) override {
    b_.names.erase(bucket);
    b_.deleted.push_back(bucket);
    return Status::Ok();
  }
  Result<std::vector<ObjectInfo>> ListObjects(const std::string&, const std::string&,
                                              int) override {
    return std::vector<ObjectInfo>{};
  }
  std::string RcloneConfig() const override { return "type = s3\nsecret_access_key = K\n"; }
  std::string RcloneConfigWithKey(const std::string& id, const std::string& secret) const override {
    return "type = s3\naccess_key_id = " + id + "\nsecret_access_key = " + secret + "\n";
  }

 private:
  Buckets& b_;
};

struct World {
  TempDir dir;
  Buckets buckets;
  std::vector<std::string> uploads;
  StorageParts parts;
  World() {
    parts.open_store = [this](const std::string&) -> Result<std::unique_ptr<ObjectStore>> {
      return std::unique_ptr<ObjectStore>(std::make_unique<MemoryStore>(buckets));
    };
    parts.open_table = [this] { return StorageTable::Open(dir / "storage.db"); };
    parts.upload = [this](const ObjectStore&, const std::string& local, const std::string& to) {
      uploads.push_back(local + " -> " + to);
      return Status::Ok();
    };
    parts.now_unix_ms = [] { return int64_t{42}; };
    parts.node_keys_dir = dir / "keys";
  }
  std::vector<StorageRecord> Records() {
    auto t = parts.open_table();
    REQUIRE(t.ok());
    auto all = (*t)->List();
    REQUIRE(all.ok());
    return *all;
  }
};

task::Task TaskWith(std::map<std::string, task::StorageMount> mounts) {
  task::Task t;
  t.storage_mounts = std::move(mounts);
  return t;
}

task::StorageMount Named(const std::string& bucket, const std::string& mode = "MOUNT",
                         bool persistent = true) {
  task::StorageMount m;
  m.bucket = bucket;
  m.mode = mode;
  m.create = true;
  m.persistent = persistent;
  return m;
}

TEST_CASE("a missing bucket without a name fails before anything is made or recorded") {
  World w;
  task::StorageMount uri;
  uri.bucket = "missing";
  uri.mode = "COPY";
  // "/a" comes first (map order): its bucket is made, then "/b" fails and it is deleted again.
  auto r = PrepareBuckets(TaskWith({{"/a", Named("fresh")}, {"/b", uri}}), "c1", w.parts);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kNotFound);
  CHECK(r.status().message() ==
        "file_mounts./b: bucket 'missing' does not exist at http://store; give `name: missing` "
        "to let herd make it");
  CHECK(w.buckets.names.empty());
  CHECK(w.buckets.deleted == std::vector<std::string>{"fresh"});
  CHECK(w.Records().empty());
}

TEST_CASE("prepare makes, uploads and records; undo takes it back") {
  World w;
  TempDir src;
  w.buckets.names.insert("existing");
  task::StorageMount up = Named("outs");
  up.source = src.path();
  task::StorageMount old;
  old.bucket = "existing";
  old.prefix = "x/y";
  old.mode = "COPY";
  auto r = PrepareBuckets(
      TaskWith({{"/ckpt", Named("ckpt", "MOUNT_CACHED", false)}, {"/in", old}, {"/out", up}}), "c1",
      w.parts);
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  CHECK(r->made == std::vector<std::string>{"ckpt", "outs"});
  CHECK(r->flush);
  CHECK(r->rclone_conf == "[herd-s3]\ntype = s3\nsecret_access_key = K\n");
  REQUIRE(r->mounts.size() == 3);
  CHECK(r->mounts[1].bucket_path == "existing/x/y");
  CHECK(w.uploads == std::vector<std::string>{src.path() + " -> outs"});
  auto recs = w.Records();
  REQUIRE(recs.size() == 3);
  CHECK(recs[0].name == "ckpt");
  CHECK(recs[0].herd_made);
  CHECK_FALSE(recs[0].persistent);
  CHECK(recs[0].clusters == std::vector<std::string>{"c1"});
  CHECK(recs[1].name == "existing");
  CHECK_FALSE(recs[1].herd_made);

  UndoPrepare(*r, "c1", w.parts);
  CHECK(w.buckets.names == std::set<std::string>{"existing"});
  recs = w.Records();
  REQUIRE(recs.size() == 1);  // the bucket herd did not make stays known, without the cluster
  CHECK(recs[0].clusters.empty());
}

TEST_CASE("a mount that fails on a node unmounts every node and undoes the launch") {
  World w;
  TempDir nodes;
  testing::LocalShellRunner ssh;
  ssh.homes = {{"n0", nodes.path() + "/n0"}, {"n1", nodes.path() + "/n1"}};
  std::filesystem::create_directories(nodes.path() + "/n0");
  std::filesystem::create_directories(nodes.path() + "/n1");
  // An rclone that is refused by the store, as with keys the store does not take.
  nodes.Write("bin/rclone",
              "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --log-file ] && echo 'ERROR : "
              "AccessDenied: Access Denied' >> \"$2\"; shift; done\nexit 1\n");
  std::filesystem::permissions(nodes.path() + "/bin/rclone", std::filesystem::perms::owner_all);
  ssh.path_prefix = nodes.path() + "/bin";
  task::StorageMount copy = Named("data", "COPY");
  auto prepared = PrepareBuckets(TaskWith({{"~/data", copy}}), "c1", w.parts);
  REQUIRE(prepared.ok());
  std::vector<controller::SshTarget> targets(2);
  targets[0].host = "n0";
  targets[0].name = "c1-head";
  targets[1].host = "n1";
  targets[1].name = "c1-worker1";
  Status s = MountOnNodes(ssh, targets, *prepared, w.parts, "c1");
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("c1-worker1") != std::string::npos);
  CHECK(s.message().find("file_mounts.~/data: copy from s3://data failed: ERROR : AccessDenied: "
                         "Access Denied") != std::string::npos);
  for (const char* n : {"n0", "n1"}) {
    CAPTURE(n);
    const std::string d = nodes.path() + "/" + n + "/" + NodeStorageDir();
    CHECK_FALSE(std::filesystem::exists(d + "/rclone.conf"));  // the keys are gone again
    CHECK(std::filesystem::is_empty(d + "/mounts"));
  }
  CHECK(w.buckets.names.empty());  // the bucket this launch made
  CHECK(w.Records().empty());
}

TEST_CASE("down deletes only a non-persistent bucket herd made that no cluster uses") {
  World w;
  w.buckets.names.insert("theirs");
  task::StorageMount theirs;
  theirs.bucket = "theirs";
  auto a = PrepareBuckets(
      TaskWith({{"/t", Named("tmp", "MOUNT", false)}, {"/k", Named("keep")}, {"/x", theirs}}), "c1",
      w.parts);
  REQUIRE(a.ok());
  REQUIRE(PrepareBuckets(TaskWith({{"/t", Named("tmp", "MOUNT", false)}}), "c2", w.parts).ok());
  testing::RecordingSshRunner ssh;
  REQUIRE(ReleaseClusterStorage(ssh, {}, "c1", true, w.parts).ok());
  CHECK(w.buckets.names.count("tmp") == 1);  // c2 still mounts it
  REQUIRE(ReleaseClusterStorage(ssh, {}, "c2", true, w.parts).ok());
  CHECK(w.buckets.names == std::set<std::string>{"keep", "theirs"});
  auto recs = w.Records();
  REQUIRE(recs.size() == 2);
  CHECK(recs[0].clusters.empty());

  // storage delete: refuses a bucket in use, deletes one herd made, forgets one it did not.
  REQUIRE(PrepareBuckets(TaskWith({{"/k", Named("keep")}}), "c3", w.parts).ok());
  auto busy = DeleteStorage("keep", w.parts);
  CHECK(busy.status().code() == Code::kFailedPrecondition);
  REQUIRE(ReleaseClusterStorage(ssh, {}, "c3", true, w.parts).ok());
  CHECK(*DeleteStorage("keep", w.parts) == "Deleted bucket keep (s3, http://store).");
  CHECK(DeleteStorage("theirs", w.parts)->find("herd did not make the bucket") !=
        std::string::npos);
  CHECK(w.buckets.names == std::set<std::string>{"theirs"});
  CHECK(DeleteStorage("keep", w.parts).status().code() == Code::kNotFound);
}

TEST_CASE("a managed job's non-persistent bucket outlives each attempt's cluster until it ends") {
  World w;
  testing::RecordingSshRunner ssh;
  const auto task = TaskWith({{"/checkpoints", Named("ckpt", "MOUNT_CACHED", false)}});
  // Attempt 1 makes the bucket; the job holds it besides the cluster.
  auto first = PrepareBuckets(task, "job-7-1", w.parts, 7);
  REQUIRE(first.ok());
  CHECK(first->made == std::vector<std::string>{"ckpt"});
  auto recs = w.Records();
  REQUIRE(recs.size() == 1);
  CHECK(recs[0].managed_jobs == std::vector<int64_t>{7});
  // The node is lost: attempt 1's cluster goes down; the bucket (and its checkpoint) stays.
  REQUIRE(ReleaseClusterStorage(ssh, {}, "job-7-1", true, w.parts).ok());
  CHECK(w.buckets.names == std::set<std::string>{"ckpt"});
  CHECK(w.buckets.deleted.empty());
  recs = w.Records();
  REQUIRE(recs.size() == 1);
  CHECK(recs[0].clusters.empty());
  CHECK(recs[0].herd_made);
  // `herd storage delete` refuses while the job runs.
  auto busy = DeleteStorage("ckpt", w.parts);
  REQUIRE_FALSE(busy.ok());
  CHECK(busy.status().code() == Code::kFailedPrecondition);
  CHECK(busy.status().message() ==
        "storage ckpt is held by managed job(s) 7 for their next attempts: it goes when they end "
        "(`herd jobs cancel 7`)");
  // Attempt 2 finds the bucket (not made again, still herd's), and its failed launch undone
  // leaves the job's hold as it was.
  auto second = PrepareBuckets(task, "job-7-2", w.parts, 7);
  REQUIRE(second.ok());
  CHECK(second->made.empty());
  CHECK(second->job_added.empty());
  UndoPrepare(*second, "job-7-2", w.parts);
  recs = w.Records();
  REQUIRE(recs.size() == 1);
  CHECK(recs[0].herd_made);
  CHECK(recs[0].clusters.empty());
  CHECK(recs[0].managed_jobs == std::vector<int64_t>{7});
  // A launch of another job's that failed takes that job out again, and only it.
  auto other_job = PrepareBuckets(task, "job-8-1", w.parts, 8);
  REQUIRE(other_job.ok());
  CHECK(w.Records()[0].managed_jobs == std::vector<int64_t>{7, 8});
  UndoPrepare(*other_job, "job-8-1", w.parts);
  CHECK(w.Records()[0].managed_jobs == std::vector<int64_t>{7});
  CHECK(w.Records()[0].clusters.empty());
  // Attempt 3 runs; another cluster mounts the bucket too (an ordinary launch).
  REQUIRE(PrepareBuckets(task, "job-7-3", w.parts, 7).ok());
  REQUIRE(PrepareBuckets(task, "other", w.parts).ok());
  // The job ends: its last cluster goes, then its hold; `other` still mounts the bucket.
  REQUIRE(ReleaseClusterStorage(ssh, {}, "job-7-3", true, w.parts).ok());
  REQUIRE(ReleaseManagedJobStorage(7, w.parts).ok());
  CHECK(w.buckets.names == std::set<std::string>{"ckpt"});
  recs = w.Records();
  REQUIRE(recs.size() == 1);
  CHECK(recs[0].clusters == std::vector<std::string>{"other"});
  CHECK(recs[0].managed_jobs.empty());
  // With `other` gone, nothing uses it: deleted with its record.
  REQUIRE(ReleaseClusterStorage(ssh, {}, "other", true, w.parts).ok());
  CHECK(w.buckets.deleted == std::vector<std::string>{"ckpt"});
  CHECK(w.Records().empty());
}

TEST_CASE("a managed job's end deletes its non-persistent buckets, keeps persistent ones") {
  World w;
  testing::RecordingSshRunner ssh;
  w.buckets.names.insert("theirs");
  task::StorageMount theirs;
  theirs.bucket = "theirs";
  theirs.persistent = false;  // not herd's: never deleted
  REQUIRE(PrepareBuckets(TaskWith({{"/t", Named("tmp", "MOUNT", false)},
                                   {"/k", Named("keep", "MOUNT_CACHED")},
                                   {"/x", theirs}}),
                         "job-3-1", w.parts, 3)
              .ok());
  // Another job's hold is left alone.
  REQUIRE(PrepareBuckets(TaskWith({{"/t", Named("shared", "MOUNT", false)}}), "job-4-1", w.parts, 4)
              .ok());
  REQUIRE(ReleaseClusterStorage(ssh, {}, "job-3-1", true, w.parts).ok());
  CHECK(w.buckets.deleted.empty());
  REQUIRE(ReleaseManagedJobStorage(3, w.parts).ok());
  CHECK(w.buckets.deleted == std::vector<std::string>{"tmp"});
  CHECK(w.buckets.names == std::set<std::string>{"keep", "shared", "theirs"});
  // A job that held nothing: nothing changes.
  REQUIRE(ReleaseManagedJobStorage(99, w.parts).ok());
  CHECK(w.Records().size() == 3);
  // `storage delete` of a bucket an ended job still holds (its controller died before the end):
  // allowed once the job counts as ended.
  REQUIRE(ReleaseClusterStorage(ssh, {}, "job-4-1", true, w.parts).ok());
  CHECK(DeleteStorage("shared", w.parts).status().code() == Code::kFailedPrecondition);
  w.parts.managed_job_ended = [](int64_t id) { return id == 4; };
  CHECK(*DeleteStorage("shared", w.parts) == "Deleted bucket shared (s3, http://store).");
  CHECK(w.buckets.names == std::set<std::string>{"keep", "theirs"});
}

TEST_CASE("records written before managed jobs held buckets still read") {
  World w;
  REQUIRE(w.parts.open_table().ok());  // the schema
  {
    // A row as an older herd wrote it, without the field.
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open((w.dir / "storage.db").c_str(), &db) == SQLITE_OK);
    const char* row =
        "INSERT INTO buckets (name, record) VALUES ('old', '{\"store\":\"s3\",\"endpoint\":"
        "\"\",\"source\":\"\",\"mode\":\"MOUNT\",\"herd_made\":true,\"persistent\":false,"
        "\"clusters\":[\"c1\"],\"created_unix_ms\":1}')";
    CHECK(sqlite3_exec(db, row, nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  auto recs = w.Records();
  REQUIRE(recs.size() == 1);
  CHECK(recs[0].clusters == std::vector<std::string>{"c1"});
  CHECK(recs[0].managed_jobs.empty());
  CHECK(StorageRecordJson(recs[0]).at("managed_jobs").as_array().empty());
}

// A recorded `bash -c '<script>'` with the script's own quotes as they were ('\'' -> ').
std::string Unquoted(std::string command) {
  for (std::size_t at; (at = command.find("'\\''")) != std::string::npos;) {
    command.replace(at, 4, "'");
  }
  return command;
}

TEST_CASE("a started cluster mounts again what its launches mounted, COPY and skipped ones aside") {
  World w;
  TempDir state;
  CHECK(ClusterMounts(state.path())->empty());
  REQUIRE(RecordClusterMounts(state.path(), {{"/checkpoints", "MOUNT_CACHED", "ckpt"},
                                             {"~/data", "COPY", "data/sub"},
                                             {"~/out", "MOUNT", "outs/run1"}})
              .ok());
  // A later launch mounts another bucket on ~/out: it replaces the one kept there.
  REQUIRE(RecordClusterMounts(state.path(), {{"~/out", "MOUNT", "outs/run2"}}).ok());
  auto kept = ClusterMounts(state.path());
  REQUIRE(kept.ok());
  REQUIRE(kept->size() == 2);
  CHECK((*kept)[0].target == "/checkpoints");
  CHECK((*kept)[1].bucket_path == "outs/run2");

  testing::RecordingSshRunner ssh;
  std::vector<controller::SshTarget> targets(2);
  targets[0].host = "n0";
  targets[1].host = "n1";
  REQUIRE(RemountCluster(ssh, targets, state.path(), "c1", w.parts).ok());
  auto runs = ssh.Calls("run ");
  REQUIRE(runs.size() == 2);
  for (const auto& recorded : runs) {
    const std::string r = Unquoted(recorded);
    CAPTURE(r);
    CHECK(r.find("herd_mount '/checkpoints' 'MOUNT_CACHED' 'ckpt' ") != std::string::npos);
    CHECK(r.find("herd_mount '~/out' 'MOUNT' 'outs/run2' ") != std::string::npos);
    CHECK(r.find("'COPY'") == std::string::npos);
  }
  // The targets a launch mounts itself are left to it.
  testing::RecordingSshRunner ssh2;
  REQUIRE(RemountCluster(ssh2, targets, state.path(), "c1", w.parts, {"~/out"}).ok());
  for (const auto& recorded : ssh2.Calls("run ")) {
    const std::string r = Unquoted(recorded);
    CHECK(r.find("'/checkpoints'") != std::string::npos);
    CHECK(r.find("'~/out'") == std::string::npos);
  }
  // A cluster that kept nothing runs nothing.
  TempDir none;
  testing::RecordingSshRunner ssh3;
  REQUIRE(RemountCluster(ssh3, targets, none.path(), "c2", w.parts).ok());
  CHECK(ssh3.Calls().empty());
  // A store that cannot be opened (no keys any more) names the mount; nothing runs.
  w.parts.open_store = [](const std::string&) -> Result<std::unique_ptr<ObjectStore>> {
    return FailedPrecondition("no AWS credentials found");
  };
  testing::RecordingSshRunner ssh4;
  Status s = RemountCluster(ssh4, targets, state.path(), "c1", w.parts);
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK(s.message() == "file_mounts./checkpoints: no AWS credentials found");
  CHECK(ssh4.Calls().empty());
}

TEST_CASE("a start fails, naming the mount, when a bucket the cluster mounts was deleted") {
  World w;
  TempDir state;
  REQUIRE(RecordClusterMounts(state.path(), {{"/checkpoints", "MOUNT_CACHED", "ckpt"},
                                             {"~/out", "MOUNT", "outs/run1"}})
              .ok());
  w.buckets.names = {"ckpt", "outs"};
  CHECK(CheckClusterBuckets(state.path(), w.parts).ok());
  w.buckets.names.erase("outs");  // `herd storage delete outs`, or deleted elsewhere
  Status s = CheckClusterBuckets(state.path(), w.parts);
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK(s.message().starts_with(
      "file_mounts.~/out: bucket 'outs' no longer exists at http://store (deleted since the "
      "cluster was launched)"));
  CHECK(s.message().find('\n') == std::string::npos);
  // A mount the starting launch prepares itself is not asked about.
  CHECK(CheckClusterBuckets(state.path(), w.parts, {"~/out"}).ok());
  // A cluster that kept no mounts asks no store.
  TempDir none;
  w.parts.open_store = [](const std::string&) -> Result<std::unique_ptr<ObjectStore>> {
    return FailedPrecondition("no AWS credentials found");
  };
  CHECK(CheckClusterBuckets(none.path(), w.parts).ok());
  s = CheckClusterBuckets(state.path(), w.parts);
  CHECK(s.message() == "file_mounts./checkpoints: no AWS credentials found");
}

namespace scoped {

// "bucket[/prefix] rw|ro" for each scope, MergeScopes'd: a policy as a test reads it.
std::vector<std::string> ScopeNames(const std::vector<BucketScope>& scopes) {
  std::vector<std::string> out;
  for (const auto& s : MergeScopes(scopes)) {
    out.push_back(s.bucket + (s.prefix.empty() ? "" : "/" + s.prefix) +
                  (s.read_only ? " ro" : " rw"));
  }
  return out;
}

// An IAM that keeps each user's policy as its scopes (ScopeNames); `events` is shared with the
// SSH runner below, so a test sees what happened in which order.
struct FakeIam {
  std::map<std::string, std::vector<std::string>> users;  // IAM user -> its policy's scopes
  std::vector<std::string>* events = nullptr;
  int next_key = 1;
  bool refuse = false;
};

class FakeIssuer : public NodeKeyIssuer {
 public:
  explicit FakeIssuer(FakeIam& iam) : iam_(iam) {}
  std::string Describe() const override { return "fake IAM"; }
  Result<NodeKey> Create(const std::string& cluster,
                         const std::vector<BucketScope>& scopes) override {
    if (iam_.refuse) return PermissionDenied("IAM CreateUser: AccessDenied: not allowed");
    NodeKey k{BucketsUserName(cluster), "AKIA" + std::to_string(iam_.next_key),
              "SECRET" + std::to_string(iam_.next_key), MergeScopes(scopes)};
    ++iam_.next_key;
    iam_.users[k.iam_user] = ScopeNames(scopes);
    iam_.events->push_back("create " + k.iam_user);
    return k;
  }
  Status Rescope(const std::string& user, const std::vector<BucketScope>& scopes) override {
    if (!iam_.users.count(user)) return NotFound("no user " + user);
    iam_.users[user] = ScopeNames(scopes);
    iam_.events->push_back("rescope " + user);
    return Status::Ok();
  }
  Status Remove(const std::string& user) override {
    iam_.users.erase(user);
    iam_.events->push_back("remove " + user);
    return Status::Ok();
  }

 private:
  FakeIam& iam_;
};

// Records each run with what it was given on stdin (the rclone config).
class StdinRunner : public testing::RecordingSshRunner {
 public:
  std::vector<std::string>* events = nullptr;
  std::vector<std::string> stdins;
  Result<controller::ProcResult> Run(const controller::SshTarget& t, const std::string& command,
                                     std::chrono::milliseconds timeout,
                                     std::string_view stdin_data) override {
    events->push_back("run " + t.host);
    stdins.emplace_back(stdin_data);
    return RecordingSshRunner::Run(t, command, timeout, stdin_data);
  }
};

struct ScopedWorld : World {
  FakeIam iam;
  std::vector<std::string> events;
  ScopedWorld() {
    iam.events = &events;
    parts.open_key_issuer = [this](const std::string&) -> Result<std::unique_ptr<NodeKeyIssuer>> {
      return std::unique_ptr<NodeKeyIssuer>(std::make_unique<FakeIssuer>(iam));
    };
  }
  std::string KeyFile(const std::string& cluster) { return parts.node_keys_dir + "/" + cluster; }
};

TEST_CASE("with an IAM the nodes get the cluster's own key, scoped to its buckets, until down") {
  ScopedWorld w;
  auto first = PrepareBuckets(TaskWith({{"/a", Named("bucket-a")}}), "c1", w.parts);
  REQUIRE_MESSAGE(first.ok(), first.status().message());
  CHECK(first->rclone_conf ==
        "[herd-s3]\ntype = s3\naccess_key_id = AKIA1\n"
        "secret_access_key = SECRET1\n");
  CHECK(first->node_key_made == "herd-buckets-c1");
  CHECK(w.iam.users["herd-buckets-c1"] == std::vector<std::string>{"bucket-a rw"});
  // Kept sealed on the user's side: the file does not hold the secret in clear.
  auto kept = ReadFileIfExists(w.KeyFile("c1"));
  REQUIRE(kept.ok());
  REQUIRE(kept->has_value());
  CHECK((*kept)->find("SECRET1") == std::string::npos);
  auto loaded = LoadNodeKey(w.parts.node_keys_dir, "c1");
  REQUIRE(loaded.ok());
  REQUIRE(loaded->has_value());
  CHECK((*loaded)->secret_access_key == "SECRET1");

  // A later launch naming another bucket: the same key, its policy now both buckets (the COPY
  // one read only).
  auto second = PrepareBuckets(TaskWith({{"/b", Named("bucket-b", "COPY")}}), "c1", w.parts);
  REQUIRE_MESSAGE(second.ok(), second.status().message());
  CHECK(second->rclone_conf.find("access_key_id = AKIA1\n") != std::string::npos);
  CHECK(second->node_key_made.empty());
  CHECK(second->node_key_rescoped);
  CHECK(w.iam.users["herd-buckets-c1"] == std::vector<std::string>{"bucket-a rw", "bucket-b ro"});
  CHECK(ScopeNames((*LoadNodeKey(w.parts.node_keys_dir, "c1"))->scopes) ==
        w.iam.users["herd-buckets-c1"]);
  // That launch failed: the policy is the first bucket's again, the key stays.
  UndoPrepare(*second, "c1", w.parts);
  CHECK(w.iam.users["herd-buckets-c1"] == std::vector<std::string>{"bucket-a rw"});
  CHECK(ScopeNames((*LoadNodeKey(w.parts.node_keys_dir, "c1"))->scopes) ==
        w.iam.users["herd-buckets-c1"]);

  // Another cluster has a user and key of its own.
  REQUIRE(PrepareBuckets(TaskWith({{"/a", Named("bucket-a")}}), "c2", w.parts).ok());
  CHECK(w.iam.users["herd-buckets-c2"] == std::vector<std::string>{"bucket-a rw"});

  // A start mounts with the kept key, not the user's.
  TempDir state;
  REQUIRE(RecordClusterMounts(state.path(), first->mounts).ok());
  StdinRunner ssh;
  ssh.events = &w.events;
  std::vector<controller::SshTarget> targets(1);
  targets[0].host = "n0";
  REQUIRE(RemountCluster(ssh, targets, state.path(), "c1", w.parts).ok());
  REQUIRE(ssh.stdins.size() == 1);
  CHECK(ssh.stdins[0] == first->rclone_conf);

  // Down: unmounted first (the flush uploads with the key), then the user and the kept key go.
  w.events.clear();
  REQUIRE(ReleaseClusterStorage(ssh, targets, "c1", true, w.parts).ok());
  CHECK(w.events == std::vector<std::string>{"run n0", "remove herd-buckets-c1"});
  CHECK(w.iam.users.count("herd-buckets-c1") == 0);
  CHECK(w.iam.users.count("herd-buckets-c2") == 1);
  CHECK_FALSE(std::filesystem::exists(w.KeyFile("c1")));
  // A stop keeps it.
  REQUIRE(ReleaseClusterStorage(ssh, targets, "c2", false, w.parts).ok());
  CHECK(w.iam.users.count("herd-buckets-c2") == 1);
}

task::StorageMount Under(const std::string& bucket, const std::string& prefix,
                         const std::string& mode) {
  task::StorageMount m = Named(bucket, mode);
  m.prefix = prefix;
  return m;
}

TEST_CASE("the key reads only what the cluster COPYs and reaches only the prefixes it mounts") {
  ScopedWorld w;
  auto first = PrepareBuckets(TaskWith({{"/data", Named("bucket-a", "COPY")},
                                        {"/part", Under("bucket-p", "team/x", "MOUNT")}}),
                              "c1", w.parts);
  REQUIRE_MESSAGE(first.ok(), first.status().message());
  CHECK(w.iam.users["herd-buckets-c1"] ==
        std::vector<std::string>{"bucket-a ro", "bucket-p/team/x rw"});
  // A later launch MOUNTs the bucket it COPYed: read-write now; the prefix stays.
  auto second = PrepareBuckets(TaskWith({{"/ckpt", Named("bucket-a", "MOUNT")}}), "c1", w.parts);
  REQUIRE_MESSAGE(second.ok(), second.status().message());
  CHECK(w.iam.users["herd-buckets-c1"] ==
        std::vector<std::string>{"bucket-a rw", "bucket-p/team/x rw"});
  // A COPY of it again takes nothing away (the running mount writes), nor does a COPY of another
  // prefix of the prefixed bucket widen it to the whole bucket.
  auto third = PrepareBuckets(TaskWith({{"/again", Named("bucket-a", "COPY")},
                                        {"/other", Under("bucket-p", "team/y", "COPY")}}),
                              "c1", w.parts);
  REQUIRE_MESSAGE(third.ok(), third.status().message());
  CHECK(w.iam.users["herd-buckets-c1"] ==
        std::vector<std::string>{"bucket-a rw", "bucket-p/team/x rw", "bucket-p/team/y ro"});
  UndoPrepare(*third, "c1", w.parts);
  CHECK(w.iam.users["herd-buckets-c1"] ==
        std::vector<std::string>{"bucket-a rw", "bucket-p/team/x rw"});

  // A key kept before scopes were recorded allowed every bucket of the cluster, whole and
  // read-write: a later launch keeps that and adds its own scope.
  REQUIRE(PrepareBuckets(TaskWith({{"/a", Under("bucket-a", "sub", "COPY")}}), "c2", w.parts).ok());
  auto kept = LoadNodeKey(w.parts.node_keys_dir, "c2");
  REQUIRE(kept.ok());
  REQUIRE(kept->has_value());
  NodeKey legacy = **kept;
  legacy.scopes.clear();
  REQUIRE(SaveNodeKey(w.parts.node_keys_dir, "c2", legacy).ok());
  REQUIRE(PrepareBuckets(TaskWith({{"/b", Named("bucket-b", "COPY")}}), "c2", w.parts).ok());
  CHECK(w.iam.users["herd-buckets-c2"] == std::vector<std::string>{"bucket-a rw", "bucket-b ro"});
}

TEST_CASE("an IAM that refuses fails the launch naming the mount, with nothing left made") {
  ScopedWorld w;
  w.iam.refuse = true;
  auto r = PrepareBuckets(TaskWith({{"/a", Named("fresh")}}), "c1", w.parts);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kPermissionDenied);
  CHECK(r.status().message().starts_with(
      "file_mounts./a: the nodes' bucket key (fake IAM): IAM CreateUser: AccessDenied: not "
      "allowed (herd gives the nodes an IAM user"));
  CHECK(w.buckets.deleted == std::vector<std::string>{"fresh"});
  CHECK(w.Records().empty());
  CHECK(w.iam.users.empty());
  CHECK_FALSE(std::filesystem::exists(w.KeyFile("c1")));
}

TEST_CASE("a launch whose mount fails deletes the key it made") {
  ScopedWorld w;
  auto r = PrepareBuckets(TaskWith({{"/a", Named("fresh")}}), "c1", w.parts);
  REQUIRE(r.ok());
  UndoPrepare(*r, "c1", w.parts);
  CHECK(w.iam.users.empty());
  CHECK_FALSE(std::filesystem::exists(w.KeyFile("c1")));
}

// The store as a node key reaches it: S3 refuses the key for its first `refusals` asks (IAM's
// new keys and policies reach S3 late), then answers.
class LateKeyStore : public MemoryStore {
 public:
  LateKeyStore(Buckets& b, int& refusals, std::vector<std::string>& asked)
      : MemoryStore(b), refusals_(refusals), asked_(asked) {}
  Result<bool> BucketExists(const std::string& bucket) override {
    asked_.push_back(bucket);
    if (refusals_ > 0) {
      --refusals_;
      return PermissionDenied("bucket " + bucket + ": InvalidAccessKeyId");
    }
    return MemoryStore::BucketExists(bucket);
  }

 private:
  int& refusals_;
  std::vector<std::string>& asked_;
};

TEST_CASE("the nodes mount once S3 takes the new key; a key never taken fails the launch") {
  ScopedWorld w;
  auto clock = std::make_shared<testing::FakeClock>();
  int refusals = 3;
  std::vector<std::string> listed;
  w.parts.clock = clock;
  w.parts.open_store_with_key = [&](const std::string&,
                                    const NodeKey& key) -> Result<std::unique_ptr<ObjectStore>> {
    CHECK(key.access_key_id.starts_with("AKIA"));
    return std::unique_ptr<ObjectStore>(
        std::make_unique<LateKeyStore>(w.buckets, refusals, listed));
  };
  const auto start = clock->Now();
  auto r = PrepareBuckets(TaskWith({{"/a", Named("bucket-a")}, {"/b", Named("bucket-b")}}), "c1",
                          w.parts);
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  // Refused three times (a poll apart each), then both buckets there for the key.
  CHECK(clock->Now() - start == limits::kNodeKeyPoll * 3);
  CHECK(listed ==
        std::vector<std::string>{"bucket-a", "bucket-a", "bucket-a", "bucket-a", "bucket-b"});

  // Never taken: the launch fails after the wait, naming the key and the bucket, and the key it
  // made is deleted.
  refusals = 1'000'000;
  auto never = PrepareBuckets(TaskWith({{"/a", Named("bucket-a")}}), "c2", w.parts);
  REQUIRE_FALSE(never.ok());
  CHECK(never.status().message() ==
        "file_mounts./a: the nodes' bucket key (IAM user herd-buckets-c2) is not taken by "
        "http://store after 1m: bucket bucket-a: InvalidAccessKeyId");
  CHECK(w.iam.users.count("herd-buckets-c2") == 0);
  CHECK_FALSE(std::filesystem::exists(w.KeyFile("c2")));
  CHECK(w.iam.users.count("herd-buckets-c1") == 1);
}

TEST_CASE("a kept key does not open as another cluster's") {
  TempDir dir;
  REQUIRE(SaveNodeKey(dir.path(), "c1", {"u1", "AKIA1", "SECRET1", {}}).ok());
  std::filesystem::copy_file(dir / "c1", dir / "c2");
  CHECK_FALSE(LoadNodeKey(dir.path(), "c2").ok());
  CHECK_FALSE(LoadNodeKey(dir.path(), "../c1").ok());
  REQUIRE(ForgetNodeKey(dir.path(), "c1").ok());
  CHECK_FALSE(LoadNodeKey(dir.path(), "c1")->has_value());
  CHECK(ForgetNodeKey(dir.path(), "c1").ok());
}

TEST_CASE("the policy names exactly the buckets; IAM is found for AWS or by AWS_ENDPOINT_URL_IAM") {
  const auto doc =
      boost::json::parse(BucketsPolicy({{"b1", "", false}, {"b2", "", false}})).as_object();
  std::set<std::string> resources;
  std::set<std::string> actions;
  for (const auto& st : doc.at("Statement").as_array()) {
    CHECK(st.at("Effect").as_string() == "Allow");
    CHECK(st.as_object().if_contains("Condition") == nullptr);
    for (const auto& r : st.at("Resource").as_array()) resources.emplace(r.as_string());
    for (const auto& a : st.at("Action").as_array()) actions.emplace(a.as_string());
  }
  CHECK(resources == std::set<std::string>{"arn:aws:s3:::b1", "arn:aws:s3:::b1/*",
                                           "arn:aws:s3:::b2", "arn:aws:s3:::b2/*"});
  CHECK(actions.count("s3:GetObject") == 1);
  CHECK(actions.count("s3:PutObject") == 1);
  CHECK(actions.count("s3:ListBucket") == 1);
  CHECK(actions.count("s3:CreateBucket") == 0);
  CHECK(actions.count("s3:DeleteBucket") == 0);
  CHECK(actions.count("s3:*") == 0);

  std::map<std::string, std::string> env;
  controller::GetenvFn getenv = [&](const std::string& k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  S3Access aws;
  S3Access minio;
  minio.endpoint = "http://127.0.0.1:9000";
  CHECK(IamEndpointFor(aws, getenv) == "https://iam.amazonaws.com");
  CHECK(IamEndpointFor(minio, getenv).empty());
  env["AWS_ENDPOINT_URL_IAM"] = "http://127.0.0.1:8000/";
  CHECK(IamEndpointFor(minio, getenv) == "http://127.0.0.1:8000");
  CHECK(IamEndpointFor(aws, getenv) == "http://127.0.0.1:8000");
  CHECK(BucketsUserName("c1") == "herd-buckets-c1");
}

std::string IamReply(const std::string& action, const std::string& inner = "") {
  return "<" + action + "Response><" + action + "Result>" + inner + "</" + action + "Result></" +
         action + "Response>";
}

TEST_CASE("over IAM: a leftover user loses its old keys; rescope and remove name herd-buckets") {
  auto http = std::make_shared<testing::FakeHttp>();
  auto& R = http->replies;
  R["CreateUser"] = {{409,
                      "<ErrorResponse><Error><Code>EntityAlreadyExists</Code><Message>"
                      "exists</Message></Error></ErrorResponse>"}};
  R["ListAccessKeys"] = {{200, IamReply("ListAccessKeys",
                                        "<AccessKeyMetadata><member><AccessKeyId>AKIAOLD"
                                        "</AccessKeyId></member></AccessKeyMetadata>")}};
  R["DeleteAccessKey"] = {{200, IamReply("DeleteAccessKey")}};
  R["PutUserPolicy"] = {{200, IamReply("PutUserPolicy")}};
  R["CreateAccessKey"] = {{200, IamReply("CreateAccessKey",
                                         "<AccessKey><AccessKeyId>AKIANEW</AccessKeyId>"
                                         "<SecretAccessKey>new-secret</SecretAccessKey>"
                                         "</AccessKey>")}};
  R["DeleteUserPolicy"] = {{200, IamReply("DeleteUserPolicy")}};
  R["DeleteUser"] = {{200, IamReply("DeleteUser")}};
  controller::AwsCredentials user{"AKIDUSER", "user-secret", "", "environment"};
  auto issuer = MakeIamKeyIssuer(http, user, "http://127.0.0.1:1");
  CHECK(issuer->Describe() == "IAM at http://127.0.0.1:1");
  auto key = issuer->Create("c1", {{"b1", "", false}});
  REQUIRE_MESSAGE(key.ok(), key.status().message());
  CHECK(key->iam_user == "herd-buckets-c1");
  CHECK(key->access_key_id == "AKIANEW");
  CHECK(key->secret_access_key == "new-secret");
  CHECK(http->Actions() == std::vector<std::string>{"CreateUser", "ListAccessKeys",
                                                    "DeleteAccessKey", "PutUserPolicy",
                                                    "CreateAccessKey"});
  CHECK(http->bodies[0].find("Tags.member.1.Value=c1") != std::string::npos);
  CHECK(http->bodies[2].find("AccessKeyId=AKIAOLD") != std::string::npos);
  CHECK(http->bodies[3].find("PolicyName=herd-buckets") != std::string::npos);
  CHECK(http->bodies[3].find("arn%3Aaws%3As3%3A%3A%3Ab1%2F%2A") != std::string::npos);
  http->bodies.clear();
  REQUIRE(issuer->Rescope("herd-buckets-c1", {{"b1", "", false}, {"b2", "", false}}).ok());
  CHECK(http->bodies[0].find("arn%3Aaws%3As3%3A%3A%3Ab2") != std::string::npos);
  http->bodies.clear();
  REQUIRE(issuer->Remove("herd-buckets-c1").ok());
  CHECK(http->Actions() == std::vector<std::string>{"ListAccessKeys", "DeleteAccessKey",
                                                    "DeleteUserPolicy", "DeleteUser"});
  CHECK(http->bodies[2].find("PolicyName=herd-buckets") != std::string::npos);
}

}  // namespace scoped
}  // namespace
}  // namespace herd::storage
