// A task's buckets through a cluster's life, as the cluster operations drive them:
//   launch: PrepareBuckets (user's side: each bucket exists or is made, `source` uploaded, the
//           storage table records the cluster) then MountOnNodes (rclone on every node, over
//           SSH; a failure unmounts everything again and deletes the buckets this launch made);
//   run:    WrapRunWithFlush (node_mounts.hpp) when a mount is writable (MOUNT, MOUNT_CACHED);
//   stop/down: ReleaseClusterStorage (flush, unmount; on down, buckets herd made with
//           persistent: false and no other cluster or managed job using them are deleted);
//   start:  RemountCluster (the cluster's MOUNT/MOUNT_CACHED mounts, as RecordClusterMounts
//           kept them at launch, made again on the started nodes);
//   managed jobs: PrepareBuckets with the job's id records the job as a holder, so that its
//           non-persistent buckets outlive each attempt's cluster; ReleaseManagedJobStorage at
//           the job's end lets them go;
//   `herd storage ls/delete`: the table (storage_table.hpp) and DeleteStorage.
// The nodes' rclone gets a key of the cluster's own, scoped to the buckets it mounts, where the
// store has an IAM (node_keys.hpp): PrepareBuckets makes it or widens its policy, UndoPrepare
// takes that back, RemountCluster mounts with it, ReleaseClusterStorage on down deletes it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "controller/ssh/ssh_runner.hpp"
#include "controller/storage/node_keys.hpp"
#include "controller/storage/node_mounts.hpp"
#include "controller/storage/object_store.hpp"
#include "controller/storage/storage_table.hpp"
#include "controller/task/task.hpp"
#include "shared/common/clock.hpp"

namespace herd::storage {

// The parts these operations run with; SystemStorageParts() gives the real ones (S3 through
// libcurl with the user's AWS chain, ~/.herd/storage.db, rclone on this machine for uploads).
struct StorageParts {
  std::function<Result<std::unique_ptr<ObjectStore>>(const std::string& store)> open_store;
  std::function<Result<std::unique_ptr<StorageTable>>()> open_table;
  // Copies the local directory `local` into `bucket_path` ("bucket[/prefix]") of the store.
  std::function<Status(const ObjectStore& store, const std::string& local,
                       const std::string& bucket_path)>
      upload;
  std::function<int64_t()> now_unix_ms;
  // Whether managed job `id` has ended (DeleteStorage lets an ended job's hold go). Unset: every
  // holding job counts as running.
  std::function<bool(int64_t id)> managed_job_ended;
  // The IAM that issues the nodes' keys for `store` (node_keys.hpp), or null when the store has
  // none (the nodes then get the user's keys, and the launch says so). Unset: none.
  std::function<Result<std::unique_ptr<NodeKeyIssuer>>(const std::string& store)> open_key_issuer;
  // Where the clusters' node keys are kept, sealed ("" = NodeKeysDir()).
  std::string node_keys_dir;
  // The store reached with a node key instead of the user's credentials, to wait until S3 takes
  // a key IAM just made or widened (AwaitNodeKey). Unset: no wait.
  std::function<Result<std::unique_ptr<ObjectStore>>(const std::string& store, const NodeKey& key)>
      open_store_with_key;
  // The clock of that wait (null: the system clock).
  std::shared_ptr<Clock> clock;
};
StorageParts SystemStorageParts();

// Asks for each of `scopes` through `with_key` (HeadBucket for a whole bucket, a listing under the
// prefix for a prefix) every limits::kNodeKeyPoll until every one answers, for at most
// limits::kNodeKeyUsableWait: IAM's new keys and policies reach S3 a few seconds late. The last
// refusal, naming the bucket, when the wait runs out.
Status AwaitNodeKey(ObjectStore& with_key, const std::vector<BucketScope>& scopes, Clock& clock);

struct PreparedStorage {
  std::vector<NodeMount> mounts;
  std::string rclone_conf;         // "[herd-s3]\n..." (secret)
  std::string node_key_made;       // the IAM user this launch made for the nodes' key
  bool node_key_rescoped = false;  // the cluster's kept key got this launch's buckets too
  std::vector<BucketScope> node_key_scopes_before;  // what the rescoped key allowed before
  std::vector<std::string> made;                    // buckets this launch created
  std::vector<std::string> added;                   // records the cluster joined in this launch
  int64_t managed_job = 0;             // the managed job the launch is an attempt of (0: none)
  std::vector<std::string> job_added;  // records that job joined in this launch
  // Some mount is MOUNT or MOUNT_CACHED: a run's writes must be uploaded before it is done.
  bool flush = false;
};

// Errors name the mount: "file_mounts.<remote>: bucket 'b' ...". On error, the buckets this call
// made are deleted again and the table is left as it was for them. managed_job > 0: the cluster is
// an attempt of that managed job, which is recorded as holding every bucket too. With an IAM for
// the store (parts.open_key_issuer), rclone_conf holds the cluster's node key, its policy now
// covering what this launch's mounts need (read only for COPY, only the prefix for
// s3://bucket/prefix) and what the cluster's earlier launches needed (kept with the key); IAM's
// errors fail the launch.
Result<PreparedStorage> PrepareBuckets(const task::Task& task, const std::string& cluster,
                                       StorageParts& parts, int64_t managed_job = 0);
// Undoes PrepareBuckets after a launch failed: deletes the buckets it made and takes the cluster
// (and the managed job, where this call added it) out of the records it joined; a node key it
// made is deleted, one it widened is scoped back to what it allowed before, of the buckets the
// cluster still mounts.
void UndoPrepare(const PreparedStorage& prepared, const std::string& cluster, StorageParts& parts);
// Mounts on every target; on any failure every target is unmounted and the buckets in
// prepared.made are deleted (nothing is left mounted or created), and the error names the node
// and the mount.
Status MountOnNodes(controller::SshRunner& ssh, const std::vector<controller::SshTarget>& targets,
                    const PreparedStorage& prepared, StorageParts& parts,
                    const std::string& cluster);
// Whether the table says `cluster` mounts buckets (false without a table: one stat, no SQLite,
// for the warm `exec` path of users without buckets).
bool ClusterHasBuckets(const std::string& cluster, StorageParts& parts);
// Stop/down of `cluster`: when the table says it mounts buckets, flushes and unmounts them on
// every reachable target. On down (cluster_gone) the cluster leaves every record, a bucket herd
// made with persistent: false that no cluster and no managed job uses any more is deleted with
// its record, and the cluster's node key (its IAM user) is deleted, after the unmount's flush.
Status ReleaseClusterStorage(controller::SshRunner& ssh,
                             const std::vector<controller::SshTarget>& targets,
                             const std::string& cluster, bool cluster_gone, StorageParts& parts);
// The end of managed job `job`: it leaves every record, and a bucket herd made with persistent:
// false that nothing uses any more is deleted with its record (one a cluster still mounts goes
// with that cluster's down).
Status ReleaseManagedJobStorage(int64_t job, StorageParts& parts);
// `herd storage delete NAME`: deletes a bucket herd made (emptied first) and its record; a bucket
// herd did not make only leaves the table (the message says so). NotFound when not in the table;
// FailedPrecondition while a cluster mounts it or a managed job that has not ended holds it.
// Returns what was done, for the user.
Result<std::string> DeleteStorage(const std::string& name, StorageParts& parts);

// The cluster's bucket mounts that a start makes again, kept in its state dir
// (<state_dir>/storage_mounts.json; it goes with the cluster's directory at down).
std::string ClusterMountsPath(const std::string& state_dir);
// Adds the MOUNT and MOUNT_CACHED mounts of a launch to what the cluster keeps (a mount on the
// same target replaces the one kept). COPY mounts are not kept: what they downloaded stays on the
// node's disk through a stop.
Status RecordClusterMounts(const std::string& state_dir, const std::vector<NodeMount>& mounts);
// What RecordClusterMounts kept (none when nothing was kept).
Result<std::vector<NodeMount>> ClusterMounts(const std::string& state_dir);
// `herd start` (and a launch that starts a stopped cluster), before any node starts: every bucket
// the cluster keeps mounted (RecordClusterMounts) still exists, except for the targets in `skip`
// (the launch prepares those itself). FailedPrecondition naming the first mount whose bucket is
// gone ("file_mounts./checkpoints: bucket 'ckpt' no longer exists at ..."); the store's own error,
// naming the mount, when it cannot be asked.
Status CheckClusterBuckets(const std::string& state_dir, StorageParts& parts,
                           const std::vector<std::string>& skip = {});
// `herd start` (and a launch that starts a stopped cluster): mounts what the cluster keeps on
// every target again, with the cluster's node key (else the user's keys, as at launch), except
// the targets in `skip`
// (the launch mounts those itself). Errors as MountOnNodes', with nothing left mounted.
Status RemountCluster(controller::SshRunner& ssh, const std::vector<controller::SshTarget>& targets,
                      const std::string& state_dir, const std::string& cluster, StorageParts& parts,
                      const std::vector<std::string>& skip = {});

}  // namespace herd::storage
