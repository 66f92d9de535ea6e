#include "controller/storage/storage_ops.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <filesystem>
#include <map>
#include <sstream>

#include "controller/ssh/parallel.hpp"
#include "controller/ssh/ssh_command.hpp"
#include "controller/ssh/subprocess.hpp"
#include "shared/common/duration_text.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"
#include "shared/common/unix_time.hpp"

namespace herd::storage {
namespace {

namespace fs = std::filesystem;
using controller::ShellQuote;

std::string BucketPath(const task::StorageMount& m) {
  return m.prefix.empty() ? m.bucket : m.bucket + "/" + m.prefix;
}

// The rclone config body as environment variables of a remote named `name` (rclone reads
// RCLONE_CONFIG_<NAME>_<KEY>): the keys never appear in an argv or a file on this machine.
std::map<std::string, std::string> RcloneEnv(const std::string& name, const std::string& body) {
  std::map<std::string, std::string> env;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq);
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    env["RCLONE_CONFIG_" + name + "_" + key] = line.substr(eq + 3);
  }
  // rclone's S3 backend refuses a CA bundle given this way (LoadCustomCABundleError).
  env["AWS_CA_BUNDLE"] = "";
  return env;
}

std::string LastLine(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

Status Upload(const ObjectStore& store, const std::string& local, const std::string& bucket_path) {
  auto env = RcloneEnv("HERDUPLOAD", store.RcloneConfig());
  auto r = controller::RunProcess({"rclone", "copy", local, "HERDUPLOAD:" + bucket_path}, "",
                                  limits::kStorageTransferTimeout, env);
  if (!r.ok()) {
    return FailedPrecondition(
        "uploading " + local +
        " needs rclone on this machine (Debian: apt-get install rclone): " + r.status().message());
  }
  if (r->timed_out) return DeadlineExceeded("upload of " + local + " did not finish in time");
  if (r->exit_code != 0) {
    return Unavailable("upload of " + local + " to " + store.Scheme() + "://" + bucket_path +
                       " failed: " + LastLine(r->err));
  }
  return Status::Ok();
}

void DeleteMade(const std::vector<std::string>& made, StorageParts& parts) {
  if (made.empty()) return;
  auto store = parts.open_store("s3");
  if (!store.ok()) return;
  for (const auto& b : made) {
    if (Status s = (*store)->DeleteBucket(b); !s.ok()) {
      HERD_LOG(kWarn) << "storage: could not delete bucket " << b << " again: " << s.message();
    }
  }
}

template <typename T>
bool Contains(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// A bucket the table may delete now: herd made it, it is not persistent and nothing uses it.
bool Unused(const StorageRecord& r) {
  return r.herd_made && !r.persistent && r.clusters.empty() && r.managed_jobs.empty();
}

// Writes r back, or deletes its bucket and record when nothing uses it any more (Unused).
// `store` is opened on first need.
Status PutOrDelete(const StorageRecord& r, StorageTable& table, StorageParts& parts,
                   std::unique_ptr<ObjectStore>& store) {
  if (!Unused(r)) return table.Put(r);
  if (!store) {
    HERD_ASSIGN_OR_RETURN(store, parts.open_store(r.store));
  }
  HERD_RETURN_IF_ERROR(store->DeleteBucket(r.name));
  return table.Remove(r.name);
}

std::string KeysDir(const StorageParts& parts) {
  return parts.node_keys_dir.empty() ? NodeKeysDir() : parts.node_keys_dir;
}

std::string RcloneSection(const std::string& body) {
  return "[" + std::string(kRcloneRemote) + "]\n" + body;
}

// The buckets the table says `cluster` mounts, by name.
Result<std::vector<std::string>> ClusterBuckets(StorageTable& table, const std::string& cluster) {
  HERD_ASSIGN_OR_RETURN(auto all, table.List());
  std::vector<std::string> out;
  for (const auto& r : all) {
    if (Contains(r.clusters, cluster)) out.push_back(r.name);
  }
  return out;
}

// The store's key issuer (null: none), naming IAM in errors.
Result<std::unique_ptr<NodeKeyIssuer>> OpenIssuer(const std::string& store, StorageParts& parts) {
  if (!parts.open_key_issuer) return std::unique_ptr<NodeKeyIssuer>();
  return parts.open_key_issuer(store);
}

Status IamError(const NodeKeyIssuer& issuer, const Status& s) {
  return Status(s.code(), "the nodes' bucket key (" + issuer.Describe() + "): " + s.message() +
                              " (herd gives the nodes an IAM user of the cluster's own, scoped to "
                              "its buckets: your credentials need iam:CreateUser, "
                              "iam:PutUserPolicy, iam:CreateAccessKey and their Delete/List "
                              "counterparts)");
}

// What the task's mounts need: each bucket (or prefix of it), read only for COPY.
std::vector<BucketScope> LaunchScopes(const task::Task& task) {
  std::vector<BucketScope> out;
  for (const auto& [remote, m] : task.storage_mounts) {
    out.push_back({m.bucket, m.prefix, m.mode == "COPY"});
  }
  return out;
}

// Each of `buckets` not in `scopes`, whole and read-write: a bucket the table says the cluster
// mounts without a scope kept for it (a key kept before scopes were, or a launch that mounted it
// with the user's keys) may be mounted read-write, whole, by a start.
void AddUnscoped(const std::vector<std::string>& buckets, std::vector<BucketScope>& scopes) {
  for (const auto& b : buckets) {
    if (std::none_of(scopes.begin(), scopes.end(),
                     [&](const BucketScope& s) { return s.bucket == b; })) {
      scopes.push_back({b, "", false});
    }
  }
}

// `scopes` without the buckets not in `buckets`.
std::vector<BucketScope> OnlyBuckets(std::vector<BucketScope> scopes,
                                     const std::vector<std::string>& buckets) {
  std::erase_if(scopes, [&](const BucketScope& s) { return !Contains(buckets, s.bucket); });
  return scopes;
}

// The rclone config the nodes get for `cluster`: its node key, made or widened to allow what its
// earlier launches and this one (`launch`) need, where the store has an IAM; else the user's keys,
// said once.
Result<std::string> NodeRcloneConf(const ObjectStore& store, const std::string& cluster,
                                   const std::vector<BucketScope>& launch, StorageTable& table,
                                   StorageParts& parts, PreparedStorage& out) {
  const std::string dir = KeysDir(parts);
  HERD_ASSIGN_OR_RETURN(std::optional<NodeKey> held, LoadNodeKey(dir, cluster));
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<NodeKeyIssuer> issuer, OpenIssuer(store.Scheme(), parts));
  if (!issuer) {
    if (held) {
      return FailedPrecondition(
          "cluster " + cluster + "'s nodes mount with a key of IAM user " + held->iam_user +
          ", but no IAM is configured for " + store.Describe() +
          " now (AWS_ENDPOINT_URL_IAM): set it as at the cluster's first launch");
    }
    HERD_LOG(kWarn) << "bucket mounts: " << store.Describe()
                    << " has no IAM herd knows of (AWS_ENDPOINT_URL_IAM is not set): the nodes "
                       "of cluster "
                    << cluster << " mount with your own credentials, not a key scoped to the "
                    << "task's buckets";
    return RcloneSection(store.RcloneConfig());
  }
  // The buckets the cluster mounted before this launch.
  HERD_ASSIGN_OR_RETURN(std::vector<std::string> earlier, ClusterBuckets(table, cluster));
  std::erase_if(earlier, [&](const std::string& b) { return Contains(out.added, b); });
  NodeKey key;
  if (held) {
    std::vector<BucketScope> before = OnlyBuckets(held->scopes, earlier);
    AddUnscoped(earlier, before);
    std::vector<BucketScope> scopes = before;
    scopes.insert(scopes.begin(), launch.begin(), launch.end());
    scopes = MergeScopes(std::move(scopes));
    if (Status s = issuer->Rescope(held->iam_user, scopes); !s.ok()) return IamError(*issuer, s);
    out.node_key_rescoped = true;
    out.node_key_scopes_before = MergeScopes(std::move(before));
    key = std::move(*held);
    key.scopes = std::move(scopes);
    // What the policy allows now, for the next launch's rescope.
    HERD_RETURN_IF_ERROR(SaveNodeKey(dir, cluster, key));
  } else {
    std::vector<BucketScope> scopes = launch;
    AddUnscoped(earlier, scopes);
    auto made = issuer->Create(cluster, scopes);
    if (!made.ok()) return IamError(*issuer, made.status());
    key = std::move(*made);
    key.scopes = MergeScopes(std::move(scopes));
    out.node_key_made = key.iam_user;
    if (Status s = SaveNodeKey(dir, cluster, key); !s.ok()) {
      (void)issuer->Remove(key.iam_user);
      return s;
    }
  }
  if (parts.open_store_with_key) {
    // S3 takes a key IAM just made, or its widened policy, a few seconds late on AWS: the nodes
    // mount once it does.
    HERD_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> with_key,
                          parts.open_store_with_key(store.Scheme(), key));
    SystemClock system;
    Clock& clock = parts.clock ? *parts.clock : system;
    // On failure the launch's undo deletes a key it made or scopes a widened one back.
    if (Status s = AwaitNodeKey(*with_key, key.scopes, clock); !s.ok()) {
      return Status(s.code(), "the nodes' bucket key (IAM user " + key.iam_user +
                                  ") is not taken by " + store.Describe() + " after " +
                                  DurationText(limits::kNodeKeyUsableWait) + ": " + s.message());
    }
  }
  return RcloneSection(store.RcloneConfigWithKey(key.access_key_id, key.secret_access_key));
}

// Down: the cluster's node key and its IAM user go (OK when it has none).
Status DropNodeKey(const std::string& cluster, StorageParts& parts) {
  const std::string dir = KeysDir(parts);
  HERD_ASSIGN_OR_RETURN(std::optional<NodeKey> held, LoadNodeKey(dir, cluster));
  if (!held) return Status::Ok();
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<NodeKeyIssuer> issuer, OpenIssuer("s3", parts));
  if (!issuer) {
    return FailedPrecondition("cannot delete IAM user " + held->iam_user +
                              " (the nodes' bucket key): no IAM is configured now "
                              "(AWS_ENDPOINT_URL_IAM)");
  }
  if (Status s = issuer->Remove(held->iam_user); !s.ok()) return IamError(*issuer, s);
  return ForgetNodeKey(dir, cluster);
}

}  // namespace

Status AwaitNodeKey(ObjectStore& with_key, const std::vector<BucketScope>& scopes, Clock& clock) {
  const auto deadline = clock.Now() + limits::kNodeKeyUsableWait;
  std::size_t next = 0;  // the scopes before it answered
  while (true) {
    Status last = Status::Ok();
    for (; next < scopes.size(); ++next) {
      const BucketScope& sc = scopes[next];
      if (!sc.prefix.empty()) {
        // A prefix's key may list only under it (HeadBucket is a ListBucket without a prefix).
        // A page's worth: s3rver fails a ListObjectsV2 that would be truncated.
        auto listed = with_key.ListObjects(sc.bucket, sc.prefix + "/", limits::kS3ListPageKeys);
        if (!listed.ok()) {
          last = listed.status();
          break;
        }
        continue;
      }
      // HeadBucket: what s3:ListBucket allows, and what every S3-compatible server answers
      // (s3rver fails a ListObjectsV2 that would be truncated).
      auto there = with_key.BucketExists(sc.bucket);
      if (!there.ok()) {
        last = there.status();
        break;
      }
      if (!*there) {
        last = NotFound("bucket " + sc.bucket + " is not there for the key");
        break;
      }
    }
    if (next == scopes.size()) return Status::Ok();
    if (clock.Now() + limits::kNodeKeyPoll > deadline) return last;
    clock.SleepFor(limits::kNodeKeyPoll);
  }
}

StorageParts SystemStorageParts() {
  StorageParts p;
  auto http = std::make_shared<controller::CurlHttpClient>();
  p.open_store = [http](const std::string& store) -> Result<std::unique_ptr<ObjectStore>> {
    if (store != "s3") return InvalidArgument("store '" + store + "' is not supported");
    HERD_ASSIGN_OR_RETURN(S3Access access, LoadS3Access());
    return MakeS3Store(std::move(access), http);
  };
  p.open_key_issuer = [http](const std::string& store) -> Result<std::unique_ptr<NodeKeyIssuer>> {
    if (store != "s3") return std::unique_ptr<NodeKeyIssuer>();
    HERD_ASSIGN_OR_RETURN(S3Access access, LoadS3Access());
    std::string endpoint = IamEndpointFor(access);
    if (endpoint.empty()) return std::unique_ptr<NodeKeyIssuer>();
    return MakeIamKeyIssuer(http, std::move(access.credentials), std::move(endpoint));
  };
  p.open_store_with_key = [http](const std::string& store,
                                 const NodeKey& key) -> Result<std::unique_ptr<ObjectStore>> {
    if (store != "s3") return InvalidArgument("store '" + store + "' is not supported");
    HERD_ASSIGN_OR_RETURN(S3Access access, LoadS3Access());
    access.credentials = {key.access_key_id, key.secret_access_key, "", "IAM user " + key.iam_user};
    return MakeS3Store(std::move(access), http);
  };
  p.open_table = [] { return StorageTable::Open(); };
  p.upload = Upload;
  p.now_unix_ms = [] { return NowUnixMs(); };
  return p;
}

Result<PreparedStorage> PrepareBuckets(const task::Task& task, const std::string& cluster,
                                       StorageParts& parts, int64_t managed_job) {
  PreparedStorage out;
  out.managed_job = managed_job;
  if (task.storage_mounts.empty()) return out;
  std::unique_ptr<ObjectStore> store;
  std::vector<StorageRecord> records;
  auto fail = [&](const std::string& remote, const Status& s) {
    DeleteMade(out.made, parts);
    return Status(s.code(), "file_mounts." + remote + ": " + s.message());
  };
  for (const auto& [remote, m] : task.storage_mounts) {
    if (!store) {
      auto opened = parts.open_store(m.store);
      if (!opened.ok()) return fail(remote, opened.status());
      store = std::move(opened).value();
    }
    auto exists = store->BucketExists(m.bucket);
    if (!exists.ok()) return fail(remote, exists.status());
    bool made = false;
    if (!*exists) {
      if (!m.create) {
        return fail(remote,
                    NotFound("bucket '" + m.bucket + "' does not exist at " + store->Describe() +
                             "; give `name: " + m.bucket + "` to let herd make it"));
      }
      if (Status s = store->CreateBucket(m.bucket); !s.ok()) return fail(remote, s);
      out.made.push_back(m.bucket);
      made = true;
    }
    if (!m.source.empty()) {
      if (!fs::is_directory(m.source)) {
        return fail(remote, InvalidArgument("source " + m.source + " is not a directory"));
      }
      if (Status s = parts.upload(*store, m.source, BucketPath(m)); !s.ok()) {
        return fail(remote, s);
      }
    }
    StorageRecord r;
    r.name = m.bucket;
    r.store = m.store;
    r.endpoint = store->Describe();
    r.source = m.source;
    r.mode = m.mode;
    r.herd_made = made;
    r.persistent = m.persistent;
    records.push_back(std::move(r));
    out.mounts.push_back({remote, m.mode, BucketPath(m)});
    out.flush = out.flush || m.mode != "COPY";
  }
  auto table = parts.open_table();
  if (!table.ok()) {
    DeleteMade(out.made, parts);
    return table.status();
  }
  for (StorageRecord& r : records) {
    auto old = (*table)->Get(r.name);
    if (!old.ok()) {
      DeleteMade(out.made, parts);
      return old.status();
    }
    if (*old) {
      r.herd_made = r.herd_made || (*old)->herd_made;
      r.clusters = (*old)->clusters;
      r.managed_jobs = (*old)->managed_jobs;
      r.created_unix_ms = (*old)->created_unix_ms;
      if (r.source.empty()) r.source = (*old)->source;
    } else {
      r.created_unix_ms = parts.now_unix_ms();
    }
    if (!Contains(r.clusters, cluster)) {
      r.clusters.push_back(cluster);
      out.added.push_back(r.name);
    }
    if (managed_job > 0 && !Contains(r.managed_jobs, managed_job)) {
      r.managed_jobs.push_back(managed_job);
      out.job_added.push_back(r.name);
    }
    if (Status s = (*table)->Put(r); !s.ok()) {
      DeleteMade(out.made, parts);
      return s;
    }
  }
  auto conf = NodeRcloneConf(*store, cluster, LaunchScopes(task), **table, parts, out);
  if (!conf.ok()) {
    UndoPrepare(out, cluster, parts);
    return Status(conf.status().code(), "file_mounts." + task.storage_mounts.begin()->first + ": " +
                                            conf.status().message());
  }
  out.rclone_conf = std::move(*conf);
  return out;
}

void UndoPrepare(const PreparedStorage& prepared, const std::string& cluster, StorageParts& parts) {
  DeleteMade(prepared.made, parts);
  auto table = parts.open_table();
  if (!table.ok()) return;
  for (const auto& b : prepared.made) (void)(*table)->Remove(b);
  for (const auto& b : prepared.added) {
    if (Contains(prepared.made, b)) continue;
    auto r = (*table)->Get(b);
    if (!r.ok() || !*r) continue;
    auto& clusters = (**r).clusters;
    clusters.erase(std::remove(clusters.begin(), clusters.end(), cluster), clusters.end());
    (void)(*table)->Put(**r);
  }
  // A managed job that joined here leaves again; one that held the bucket before (an earlier
  // attempt) keeps holding it.
  for (const auto& b : prepared.job_added) {
    if (Contains(prepared.made, b)) continue;
    auto r = (*table)->Get(b);
    if (!r.ok() || !*r) continue;
    auto& jobs = (**r).managed_jobs;
    jobs.erase(std::remove(jobs.begin(), jobs.end(), prepared.managed_job), jobs.end());
    (void)(*table)->Put(**r);
  }
  if (prepared.node_key_made.empty() && !prepared.node_key_rescoped) return;
  auto issuer = OpenIssuer("s3", parts);
  if (!issuer.ok() || !*issuer) return;
  auto buckets = ClusterBuckets(**table, cluster);
  Status s;
  if (!prepared.node_key_made.empty() || (buckets.ok() && buckets->empty())) {
    s = DropNodeKey(cluster, parts);
  } else if (buckets.ok()) {
    // Back to what the earlier launches needed, of the buckets the cluster still mounts.
    auto held = LoadNodeKey(KeysDir(parts), cluster);
    if (!held.ok()) {
      s = held.status();
    } else if (*held) {
      std::vector<BucketScope> scopes = OnlyBuckets(prepared.node_key_scopes_before, *buckets);
      AddUnscoped(*buckets, scopes);
      (*held)->scopes = MergeScopes(std::move(scopes));
      s = (*issuer)->Rescope((*held)->iam_user, (*held)->scopes);
      if (s.ok()) s = SaveNodeKey(KeysDir(parts), cluster, **held);
    }
  } else {
    s = buckets.status();
  }
  if (!s.ok()) {
    HERD_LOG(kWarn) << "storage: cluster " << cluster
                    << ": the nodes' bucket key after a failed launch: " << s.message();
  }
}

Status MountOnNodes(controller::SshRunner& ssh, const std::vector<controller::SshTarget>& targets,
                    const PreparedStorage& prepared, StorageParts& parts,
                    const std::string& cluster) {
  if (prepared.mounts.empty()) return Status::Ok();
  const std::string command = "bash -c " + ShellQuote(MountScript(prepared.mounts));
  // COPY downloads data; a mount only waits for rclone to be ready.
  const bool copies = std::any_of(prepared.mounts.begin(), prepared.mounts.end(),
                                  [](const NodeMount& m) { return m.mode == "COPY"; });
  const auto timeout =
      copies ? limits::kStorageTransferTimeout
             : limits::kStorageMountReadyTimeout * static_cast<int>(prepared.mounts.size()) +
                   limits::kSshWaitTotal;
  Status s = controller::ForEachParallel(
      targets.size(),
      [&](std::size_t i) -> Status {
        HERD_ASSIGN_OR_RETURN(auto r, ssh.Run(targets[i], command, timeout, prepared.rclone_conf));
        if (r.timed_out) return DeadlineExceeded("bucket mounts did not finish in time");
        if (r.exit_code != 0) {
          std::string why = LastLine(r.out);
          if (why.empty()) why = LastLine(r.err);
          return Unavailable("file_mounts." + why);
        }
        return Status::Ok();
      },
      [&](std::size_t i) { return controller::DescribeTarget(targets[i]); });
  if (s.ok()) return s;
  // Nothing stays mounted or made after a failed launch.
  const std::string unmount = "bash -c " + ShellQuote(UnmountScript(false));
  (void)controller::ForEachParallel(targets.size(), [&](std::size_t i) -> Status {
    (void)ssh.Run(targets[i], unmount, limits::kSshWaitTotal);
    return Status::Ok();
  });
  UndoPrepare(prepared, cluster, parts);
  return s;
}

bool ClusterHasBuckets(const std::string& cluster, StorageParts& parts) {
  std::error_code ec;
  if (!fs::exists(StorageDbPath(), ec)) return false;
  auto table = parts.open_table();
  if (!table.ok()) return false;
  auto all = (*table)->List();
  if (!all.ok()) return false;
  return std::any_of(all->begin(), all->end(), [&](const StorageRecord& r) {
    return std::find(r.clusters.begin(), r.clusters.end(), cluster) != r.clusters.end();
  });
}

Status ReleaseClusterStorage(controller::SshRunner& ssh,
                             const std::vector<controller::SshTarget>& targets,
                             const std::string& cluster, bool cluster_gone, StorageParts& parts) {
  HERD_ASSIGN_OR_RETURN(auto table, parts.open_table());
  HERD_ASSIGN_OR_RETURN(auto all, table->List());
  std::vector<StorageRecord> uses;
  for (const auto& r : all) {
    if (std::find(r.clusters.begin(), r.clusters.end(), cluster) != r.clusters.end()) {
      uses.push_back(r);
    }
  }
  if (uses.empty()) return cluster_gone ? DropNodeKey(cluster, parts) : Status::Ok();
  const std::string unmount = "bash -c " + ShellQuote(UnmountScript(true));
  (void)controller::ForEachParallel(targets.size(), [&](std::size_t i) -> Status {
    auto r = ssh.Run(targets[i], unmount, limits::kStorageFlushTimeout + limits::kSshWaitTotal);
    if (!r.ok() || r->exit_code != 0) {
      HERD_LOG(kWarn) << "storage: " << controller::DescribeTarget(targets[i])
                      << ": unmount: " << (r.ok() ? LastLine(r->err) : r.status().message());
    }
    return Status::Ok();
  });
  if (!cluster_gone) return Status::Ok();
  std::unique_ptr<ObjectStore> store;
  for (StorageRecord r : uses) {
    r.clusters.erase(std::find(r.clusters.begin(), r.clusters.end(), cluster));
    if (Status s = PutOrDelete(r, *table, parts, store); !s.ok()) {
      return s.WithContext("cluster " + cluster + ": deleting its non-persistent bucket " + r.name);
    }
  }
  // After the unmount: the flush uploaded with this key.
  return DropNodeKey(cluster, parts);
}

Status ReleaseManagedJobStorage(int64_t job, StorageParts& parts) {
  HERD_ASSIGN_OR_RETURN(auto table, parts.open_table());
  HERD_ASSIGN_OR_RETURN(auto all, table->List());
  std::unique_ptr<ObjectStore> store;
  for (StorageRecord r : all) {
    auto it = std::find(r.managed_jobs.begin(), r.managed_jobs.end(), job);
    if (it == r.managed_jobs.end()) continue;
    r.managed_jobs.erase(it);
    if (Status s = PutOrDelete(r, *table, parts, store); !s.ok()) {
      return s.WithContext("managed job " + std::to_string(job) +
                           ": deleting its non-persistent bucket " + r.name);
    }
  }
  return Status::Ok();
}

Result<std::string> DeleteStorage(const std::string& name, StorageParts& parts) {
  HERD_ASSIGN_OR_RETURN(auto table, parts.open_table());
  HERD_ASSIGN_OR_RETURN(auto rec, table->Get(name));
  if (!rec) {
    return NotFound("storage " + name + " not found (`herd storage ls` lists what herd knows)");
  }
  if (!rec->clusters.empty()) {
    std::string list;
    for (const auto& c : rec->clusters) list += (list.empty() ? "" : ", ") + c;
    return FailedPrecondition("storage " + name + " is mounted by cluster(s) " + list +
                              ": take them down first (`herd down " + rec->clusters.front() + "`)");
  }
  std::string running;
  for (int64_t j : rec->managed_jobs) {
    if (parts.managed_job_ended && parts.managed_job_ended(j)) continue;
    running += (running.empty() ? "" : ", ") + std::to_string(j);
  }
  if (!running.empty()) {
    return FailedPrecondition("storage " + name + " is held by managed job(s) " + running +
                              " for their next attempts: it goes when they end (`herd jobs "
                              "cancel " +
                              running.substr(0, running.find(',')) + "`)");
  }
  std::string done;
  if (rec->herd_made) {
    HERD_ASSIGN_OR_RETURN(auto store, parts.open_store(rec->store));
    HERD_RETURN_IF_ERROR(store->DeleteBucket(name));
    done = "Deleted bucket " + name + " (" + rec->store + ", " + store->Describe() + ").";
  } else {
    done = "Removed " + name +
           " from herd's storage table; herd did not make the bucket, so it is left as it is.";
  }
  HERD_RETURN_IF_ERROR(table->Remove(name));
  return done;
}

std::string ClusterMountsPath(const std::string& state_dir) {
  return state_dir + "/storage_mounts.json";
}

Result<std::vector<NodeMount>> ClusterMounts(const std::string& state_dir) {
  const std::string path = ClusterMountsPath(state_dir);
  HERD_ASSIGN_OR_RETURN(auto text, ReadFileIfExists(path));
  std::vector<NodeMount> out;
  if (!text) return out;
  try {
    const boost::json::value parsed = boost::json::parse(*text);
    for (const auto& v : parsed.as_array()) {
      const auto& o = v.as_object();
      out.push_back({std::string(o.at("target").as_string()), std::string(o.at("mode").as_string()),
                     std::string(o.at("bucket_path").as_string())});
    }
  } catch (const std::exception& e) {
    return IoError(path + ": damaged record of the cluster's bucket mounts: " + e.what());
  }
  return out;
}

Status RecordClusterMounts(const std::string& state_dir, const std::vector<NodeMount>& mounts) {
  HERD_ASSIGN_OR_RETURN(std::vector<NodeMount> kept, ClusterMounts(state_dir));
  bool changed = false;
  for (const NodeMount& m : mounts) {
    if (m.mode == "COPY") continue;
    auto same = std::find_if(kept.begin(), kept.end(),
                             [&](const NodeMount& k) { return k.target == m.target; });
    if (same != kept.end()) {
      if (same->mode == m.mode && same->bucket_path == m.bucket_path) continue;
      kept.erase(same);
    }
    kept.push_back(m);
    changed = true;
  }
  if (!changed) return Status::Ok();
  boost::json::array arr;
  for (const NodeMount& m : kept) {
    arr.push_back(boost::json::object{
        {"target", m.target}, {"mode", m.mode}, {"bucket_path", m.bucket_path}});
  }
  return WriteFileAtomic(ClusterMountsPath(state_dir), boost::json::serialize(arr) + "\n", 0600,
                         Durability::kProcessCrash);
}

Status CheckClusterBuckets(const std::string& state_dir, StorageParts& parts,
                           const std::vector<std::string>& skip) {
  HERD_ASSIGN_OR_RETURN(std::vector<NodeMount> kept, ClusterMounts(state_dir));
  std::unique_ptr<ObjectStore> store;
  for (const NodeMount& m : kept) {
    if (Contains(skip, m.target)) continue;
    const std::string where = "file_mounts." + m.target + ": ";
    if (!store) {
      // Buckets are S3 (or S3-compatible) for now: the one store PrepareBuckets opens.
      auto opened = parts.open_store("s3");
      if (!opened.ok()) return Status(opened.status().code(), where + opened.status().message());
      store = std::move(*opened);
    }
    const std::string bucket = m.bucket_path.substr(0, m.bucket_path.find('/'));
    auto exists = store->BucketExists(bucket);
    if (!exists.ok()) return Status(exists.status().code(), where + exists.status().message());
    if (!*exists) {
      return FailedPrecondition(where + "bucket '" + bucket + "' no longer exists at " +
                                store->Describe() +
                                " (deleted since the cluster was launched); nothing was started: "
                                "make the bucket again, or `herd down` the cluster");
    }
  }
  return Status::Ok();
}

Status RemountCluster(controller::SshRunner& ssh, const std::vector<controller::SshTarget>& targets,
                      const std::string& state_dir, const std::string& cluster, StorageParts& parts,
                      const std::vector<std::string>& skip) {
  HERD_ASSIGN_OR_RETURN(std::vector<NodeMount> kept, ClusterMounts(state_dir));
  PreparedStorage prepared;
  for (NodeMount& m : kept) {
    if (!Contains(skip, m.target)) prepared.mounts.push_back(std::move(m));
  }
  if (prepared.mounts.empty()) return Status::Ok();
  // Buckets are S3 (or S3-compatible) for now: the one store PrepareBuckets opens.
  auto store = parts.open_store("s3");
  if (!store.ok()) {
    return Status(store.status().code(), "file_mounts." + prepared.mounts.front().target + ": " +
                                             store.status().message());
  }
  HERD_ASSIGN_OR_RETURN(std::optional<NodeKey> held, LoadNodeKey(KeysDir(parts), cluster));
  prepared.rclone_conf = RcloneSection(
      held ? (*store)->RcloneConfigWithKey(held->access_key_id, held->secret_access_key)
           : (*store)->RcloneConfig());
  prepared.flush = true;
  return MountOnNodes(ssh, targets, prepared, parts, cluster);
}

}  // namespace herd::storage
