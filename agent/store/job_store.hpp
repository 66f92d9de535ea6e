// The head's durable job table and cluster node list, in one SQLite file.
//
// Each row keeps the protobuf records as serialized blobs plus the columns that queries filter on
// (job_id, state). A task's `secrets` are never written in clear: they are taken out of the spec
// and kept sealed (AES-256-GCM, shared/crypto/secret_box.hpp) in a column of their own, with a key
// file next to the store (`secrets.key`, 0600), and dropped once the job reached a terminal state
// (nothing needs them any more). The file is opened in WAL mode with a busy timeout, and every
// write runs in a BEGIN IMMEDIATE transaction, so several JobStore objects (in one or several
// processes, e.g. the head and a `herd` command) can share the file safely.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "herd/v1/common.pb.h"
#include "shared/common/sqlite_db.hpp"
#include "shared/common/status.hpp"
#include "shared/crypto/secret_box.hpp"

namespace herd::agent {

struct JobRecord {
  herd::v1::JobInfo info;   // job_id, name, user, times, state, exits, first_failed_*, ...
  herd::v1::TaskSpec spec;  // what to run
};

class JobStore {
 public:
  // Creates the file (and its schema) if missing. A file that is not a herd job store, is corrupt,
  // or was written by a newer schema gives an error that names the path. A file of schema 1
  // (secrets in clear) is migrated: its secrets sealed (active jobs) or dropped (finished ones).
  // `key_path` (default: secrets.key in the store's directory) is loaded (SecretBox::Load's checks)
  // or, when missing, created; but a missing key, or one that does not open the sealed secrets the
  // store holds, is an error naming both files: the jobs waiting with those secrets could not run.
  static Result<std::unique_ptr<JobStore>> Open(const std::string& path,
                                                const std::string& key_path = "");
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Assigns the next job id (1, 2, 3, ...; never reused), stores the record with it, returns it.
  // `complete` (optional) fills in what depends on the id (the log path) before it is stored, in
  // the same transaction.
  Result<int64_t> AddJob(JobRecord record,
                         const std::function<void(herd::v1::JobInfo&)>& complete = {});
  // AddJob for several records in one transaction (a job array: consecutive ids, all or none
  // stored). `complete` is called on each, in order, once its id is set; the records are updated
  // in place with their ids and what `complete` filled in.
  Status AddJobs(std::vector<JobRecord>& records,
                 const std::function<void(herd::v1::JobInfo&)>& complete = {});
  // Replaces the whole record of info.job_id; NotFound if there is none.
  Status UpdateJob(const JobRecord& record);
  // UpdateJob for several records in one transaction (all or none): a scheduling pass that
  // changes many waiting jobs' reasons at once.
  Status UpdateJobs(const std::vector<const JobRecord*>& records);
  // NotFound("job 7 not found"). With the job's secrets while it is active.
  Result<JobRecord> GetJob(int64_t job_id);
  // Newest first. skip_finished: only jobs not in a terminal state. limit <= 0: no limit.
  // For listing: specs come WITHOUT their secrets (nothing that lists jobs needs them).
  Result<std::vector<JobRecord>> ListJobs(bool skip_finished, int limit);
  // The same jobs, the records only (their specs are not read), one at a time: `take` gets each
  // and returns false to stop. Memory for one record, whatever the store holds.
  Status ForEachJobInfo(bool skip_finished, int limit,
                        const std::function<bool(herd::v1::JobInfo)>& take);
  // How many jobs ListJobs lists without a limit.
  Result<int64_t> CountJobs(bool skip_finished);
  // Jobs in PENDING, SETTING_UP or RUNNING, oldest first (the scheduler's FIFO).
  Result<std::vector<JobRecord>> ActiveJobs();
  // 0 if there is no job.
  Result<int64_t> LatestJobId();

  // Nodes of the cluster, persisted so a relaunch keeps ranks stable. Upsert replaces the info of
  // a node_id already known (keeping its first-seen row) or adds it.
  // incarnation: the node's last accepted agent incarnation, so that a restarted head still
  // refuses an older agent and knows a newer one restarted.
  Status UpsertNode(const herd::v1::NodeInfo& node, uint64_t incarnation = 0);
  // In cluster order (agent/nodes/node_order.hpp); incarnations (if given) by node id.
  Result<std::vector<herd::v1::NodeInfo>> ListNodes(
      std::map<std::string, uint64_t>* incarnations = nullptr);

  const std::string& path() const { return path_; }

 private:
  using Stmt = sqlite::Stmt;

  JobStore(std::string path, sqlite3* db, std::string key_path)
      : path_(std::move(path)), key_path_(std::move(key_path)), db_(db) {}

  Status Init();
  // Loads or creates box_ (see Open); `version` is the schema version found in the file.
  Status LoadKey(int version);
  // Schema 1 -> 2, inside Init's write transaction: secrets out of the specs.
  Status MigrateClearSecrets(bool* changed);
  // The sealed secrets column of a record: nullopt (NULL) when it has none or has ended.
  Result<std::optional<std::string>> SealedSecrets(const JobRecord& record, int64_t job_id) const;
  // Puts the sealed secrets of a row back into its spec.
  Status OpenSecrets(int64_t job_id, std::string_view sealed, herd::v1::TaskSpec& spec) const;
  Status Exec(const char* sql);
  Result<Stmt> Prepare(const char* sql);
  Status Error(std::string_view what) const;
  Status Error(std::string_view what, int rc) const;
  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT, rolling back on error.
  template <typename F>
  Status InWriteTransaction(F&& body);
  Result<std::vector<JobRecord>> ReadJobs(sqlite3_stmt* stmt, bool with_secrets);

  std::string path_;
  std::string key_path_;
  std::optional<SecretBox> box_;
  sqlite3* db_ = nullptr;
  std::mutex mu_;  // one connection; its prepared statements are not shareable between threads
  Stmt insert_job_, set_job_info_, update_job_, get_job_, list_jobs_, list_unfinished_jobs_,
      list_job_infos_, list_unfinished_job_infos_, count_jobs_, count_unfinished_jobs_,
      active_jobs_, latest_job_id_, upsert_node_, list_nodes_;
};

}  // namespace herd::agent
