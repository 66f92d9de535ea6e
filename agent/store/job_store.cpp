#include "agent/store/job_store.hpp"

#include <string_view>
#include <utility>

#include "agent/sched/node_order.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::agent {
namespace {

// PRAGMA user_version of the schema below. Bump it with a migration step in Init when the schema
// changes; a file with a bigger version was written by a newer herd and is refused.
constexpr int kSchemaVersion = 1;

constexpr const char* kSchema = R"sql(
CREATE TABLE jobs (
  job_id INTEGER PRIMARY KEY AUTOINCREMENT,  -- AUTOINCREMENT: ids are never reused
  state INTEGER NOT NULL,                    -- herd.v1.JobState, copy of info.state
  info BLOB NOT NULL,                        -- herd.v1.JobInfo
  spec BLOB NOT NULL                         -- herd.v1.TaskSpec
);
CREATE INDEX jobs_by_state ON jobs (state, job_id);
CREATE TABLE nodes (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,     -- first-seen order
  node_id TEXT NOT NULL UNIQUE,
  info BLOB NOT NULL                         -- herd.v1.NodeInfo
);
)sql";

// The SQL below filters on state numbers; these pin the numbers it relies on.
static_assert(herd::v1::JOB_STATE_PENDING == 2 && herd::v1::JOB_STATE_SETTING_UP == 3 &&
                  herd::v1::JOB_STATE_RUNNING == 4,
              "active states are 2..4");
static_assert(herd::v1::JOB_STATE_SUCCEEDED == 5 && herd::v1::JOB_STATE_CANCELLED == 9 &&
                  herd::v1::JobState_MAX == 9,
              "terminal states are 5..9, the last ones");

using Reset = sqlite::ResetOnExit;

std::string_view ColumnBytes(sqlite3_stmt* s, int col) {
  const void* data = sqlite3_column_blob(s, col);
  const int size = sqlite3_column_bytes(s, col);
  if (data == nullptr || size <= 0) return {};
  return {static_cast<const char*>(data), static_cast<std::size_t>(size)};
}

int BindBlob(sqlite3_stmt* s, int index, const std::string& bytes) {
  return sqlite3_bind_blob64(s, index, bytes.data(), bytes.size(), SQLITE_TRANSIENT);
}

sqlite::Label LabelFor(const std::string& path) {
  return {"job store " + path, "a herd job store"};
}

}  // namespace

Result<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  HERD_ASSIGN_OR_RETURN(sqlite3 * db, sqlite::Open(path, LabelFor(path)));
  std::unique_ptr<JobStore> store(new JobStore(path, db));
  HERD_RETURN_IF_ERROR(store->Init());
  return store;
}

JobStore::~JobStore() {
  // Statements must be finalized before the connection closes.
  insert_job_.reset();
  set_job_info_.reset();
  update_job_.reset();
  get_job_.reset();
  list_jobs_.reset();
  list_unfinished_jobs_.reset();
  active_jobs_.reset();
  latest_job_id_.reset();
  upsert_node_.reset();
  list_nodes_.reset();
  sqlite3_close(db_);
}

Status JobStore::Error(std::string_view what) const { return Error(what, sqlite3_errcode(db_)); }

Status JobStore::Error(std::string_view what, int rc) const {
  return sqlite::Error(db_, LabelFor(path_), what, rc);
}

Status JobStore::Exec(const char* sql) { return sqlite::Exec(db_, LabelFor(path_), sql); }

Result<JobStore::Stmt> JobStore::Prepare(const char* sql) {
  return sqlite::Prepare(db_, LabelFor(path_), sql);
}

template <typename F>
Status JobStore::InWriteTransaction(F&& body) {
  // IMMEDIATE takes the write lock up front (waiting up to the busy timeout), so two writers never
  // deadlock upgrading read locks.
  HERD_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  Status status = body();
  if (status.ok()) status = Exec("COMMIT");
  if (!status.ok()) {
    if (!sqlite3_get_autocommit(db_)) {
      Status rollback = Exec("ROLLBACK");
      if (!rollback.ok()) {
        HERD_LOG(kWarn) << rollback.ToString();
      }
    }
    return status;
  }
  return Status::Ok();
}

Status JobStore::Init() {
  // Fails here with "file is not a database" for a file that is not SQLite.
  HERD_RETURN_IF_ERROR(sqlite::EnableWal(db_, LabelFor(path_)));
  // With WAL, NORMAL syncs only at checkpoints: a commit survives a crash of the agent (the
  // WAL is in the page cache), only a power loss of the head node can take the last ones, and
  // such a loss ends its jobs anyway. FULL cost one fdatasync per job state change (3-4 per job,
  // 1-6 ms each here) on the submit-to-SUCCEEDED path (bench/README.md).
  HERD_RETURN_IF_ERROR(Exec("PRAGMA synchronous=NORMAL"));
  {
    // Catches damaged pages now, with a clear message, rather than on some later query.
    HERD_ASSIGN_OR_RETURN(Stmt check, Prepare("PRAGMA quick_check"));
    const int rc = sqlite3_step(check.get());
    if (rc != SQLITE_ROW) return Error("integrity check", rc);
    const std::string verdict = reinterpret_cast<const char*>(sqlite3_column_text(check.get(), 0));
    if (verdict != "ok") {
      return IoError("job store " + path_ + ": integrity check failed: " + verdict);
    }
  }

  HERD_RETURN_IF_ERROR(InWriteTransaction([&]() -> Status {
    HERD_ASSIGN_OR_RETURN(Stmt version, Prepare("PRAGMA user_version"));
    if (sqlite3_step(version.get()) != SQLITE_ROW) return Error("read schema version");
    const int found = sqlite3_column_int(version.get(), 0);
    if (found > kSchemaVersion) {
      return FailedPrecondition("job store " + path_ + ": schema version " + std::to_string(found) +
                                " is newer than this herd's (" + std::to_string(kSchemaVersion) +
                                "); upgrade herd");
    }
    if (found == kSchemaVersion) return Status::Ok();
    // Version 0: a new file, unless something else already put tables in it.
    HERD_ASSIGN_OR_RETURN(Stmt tables, Prepare("SELECT count(*) FROM sqlite_master"));
    if (sqlite3_step(tables.get()) != SQLITE_ROW) return Error("read schema");
    if (sqlite3_column_int(tables.get(), 0) != 0) {
      return FailedPrecondition("job store " + path_ +
                                ": the file is an SQLite database but not a herd job store");
    }
    HERD_RETURN_IF_ERROR(Exec(kSchema));
    return Exec("PRAGMA user_version = 1");
  }));
  static_assert(kSchemaVersion == 1, "update the PRAGMA above");

  HERD_ASSIGN_OR_RETURN(insert_job_,
                        Prepare("INSERT INTO jobs (state, info, spec) VALUES (?1, x'', ?2)"));
  HERD_ASSIGN_OR_RETURN(set_job_info_, Prepare("UPDATE jobs SET info = ?2 WHERE job_id = ?1"));
  HERD_ASSIGN_OR_RETURN(update_job_, Prepare("UPDATE jobs SET state = ?2, info = ?3, spec = ?4 "
                                             "WHERE job_id = ?1"));
  HERD_ASSIGN_OR_RETURN(get_job_, Prepare("SELECT job_id, info, spec FROM jobs WHERE job_id = ?1"));
  HERD_ASSIGN_OR_RETURN(list_jobs_, Prepare("SELECT job_id, info, spec FROM jobs "
                                            "ORDER BY job_id DESC LIMIT ?1"));
  HERD_ASSIGN_OR_RETURN(list_unfinished_jobs_, Prepare("SELECT job_id, info, spec FROM jobs "
                                                       "WHERE state < 5 "
                                                       "ORDER BY job_id DESC LIMIT ?1"));
  HERD_ASSIGN_OR_RETURN(active_jobs_, Prepare("SELECT job_id, info, spec FROM jobs "
                                              "WHERE state IN (2, 3, 4) ORDER BY job_id ASC"));
  HERD_ASSIGN_OR_RETURN(latest_job_id_, Prepare("SELECT COALESCE(MAX(job_id), 0) FROM jobs"));
  HERD_ASSIGN_OR_RETURN(upsert_node_, Prepare("INSERT INTO nodes (node_id, info) VALUES (?1, ?2) "
                                              "ON CONFLICT (node_id) DO UPDATE "
                                              "SET info = excluded.info"));
  HERD_ASSIGN_OR_RETURN(list_nodes_, Prepare("SELECT node_id, info FROM nodes ORDER BY seq"));
  return Status::Ok();
}

Result<int64_t> JobStore::AddJob(JobRecord record) {
  std::lock_guard lock(mu_);
  std::string spec;
  if (!record.spec.SerializeToString(&spec)) return Internal("job store: cannot serialize spec");
  int64_t job_id = 0;
  HERD_RETURN_IF_ERROR(InWriteTransaction([&]() -> Status {
    {
      Reset reset(insert_job_.get());
      sqlite3_bind_int(insert_job_.get(), 1, record.info.state());
      BindBlob(insert_job_.get(), 2, spec);
      const int rc = sqlite3_step(insert_job_.get());
      if (rc != SQLITE_DONE) return Error("add job", rc);
      job_id = sqlite3_last_insert_rowid(db_);
    }
    // The id is only known after the insert, and the info blob carries it too.
    record.info.set_job_id(job_id);
    std::string info;
    if (!record.info.SerializeToString(&info)) return Internal("job store: cannot serialize info");
    Reset reset(set_job_info_.get());
    sqlite3_bind_int64(set_job_info_.get(), 1, job_id);
    BindBlob(set_job_info_.get(), 2, info);
    const int rc = sqlite3_step(set_job_info_.get());
    if (rc != SQLITE_DONE) return Error("add job", rc);
    return Status::Ok();
  }));
  return job_id;
}

Status JobStore::UpdateJob(const JobRecord& record) {
  std::lock_guard lock(mu_);
  const int64_t job_id = record.info.job_id();
  std::string info, spec;
  if (!record.info.SerializeToString(&info) || !record.spec.SerializeToString(&spec)) {
    return Internal("job store: cannot serialize job " + std::to_string(job_id));
  }
  return InWriteTransaction([&]() -> Status {
    Reset reset(update_job_.get());
    sqlite3_bind_int64(update_job_.get(), 1, job_id);
    sqlite3_bind_int(update_job_.get(), 2, record.info.state());
    BindBlob(update_job_.get(), 3, info);
    BindBlob(update_job_.get(), 4, spec);
    const int rc = sqlite3_step(update_job_.get());
    if (rc != SQLITE_DONE) return Error("update job " + std::to_string(job_id), rc);
    if (sqlite3_changes(db_) == 0) return NotFound("job " + std::to_string(job_id) + " not found");
    return Status::Ok();
  });
}

Result<std::vector<JobRecord>> JobStore::ReadJobs(sqlite3_stmt* stmt) {
  std::vector<JobRecord> jobs;
  for (;;) {
    const int rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return Error("read jobs", rc);
    JobRecord record;
    const int64_t job_id = sqlite3_column_int64(stmt, 0);
    const std::string_view info = ColumnBytes(stmt, 1);
    const std::string_view spec = ColumnBytes(stmt, 2);
    if (!record.info.ParseFromArray(info.data(), static_cast<int>(info.size())) ||
        !record.spec.ParseFromArray(spec.data(), static_cast<int>(spec.size()))) {
      return IoError("job store " + path_ + ": the record of job " + std::to_string(job_id) +
                     " is damaged");
    }
    record.info.set_job_id(job_id);
    jobs.push_back(std::move(record));
  }
  return jobs;
}

Result<JobRecord> JobStore::GetJob(int64_t job_id) {
  std::lock_guard lock(mu_);
  Reset reset(get_job_.get());
  sqlite3_bind_int64(get_job_.get(), 1, job_id);
  HERD_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, ReadJobs(get_job_.get()));
  if (jobs.empty()) return NotFound("job " + std::to_string(job_id) + " not found");
  return std::move(jobs.front());
}

Result<std::vector<JobRecord>> JobStore::ListJobs(bool skip_finished, int limit) {
  std::lock_guard lock(mu_);
  sqlite3_stmt* stmt = skip_finished ? list_unfinished_jobs_.get() : list_jobs_.get();
  Reset reset(stmt);
  sqlite3_bind_int(stmt, 1, limit > 0 ? limit : -1);  // LIMIT -1: no limit
  return ReadJobs(stmt);
}

Result<std::vector<JobRecord>> JobStore::ActiveJobs() {
  std::lock_guard lock(mu_);
  Reset reset(active_jobs_.get());
  return ReadJobs(active_jobs_.get());
}

Result<int64_t> JobStore::LatestJobId() {
  std::lock_guard lock(mu_);
  Reset reset(latest_job_id_.get());
  const int rc = sqlite3_step(latest_job_id_.get());
  if (rc != SQLITE_ROW) return Error("latest job id", rc);
  return static_cast<int64_t>(sqlite3_column_int64(latest_job_id_.get(), 0));
}

Status JobStore::UpsertNode(const herd::v1::NodeInfo& node) {
  std::lock_guard lock(mu_);
  if (node.node_id().empty()) return InvalidArgument("job store: a node needs a node_id");
  std::string info;
  if (!node.SerializeToString(&info)) return Internal("job store: cannot serialize node");
  return InWriteTransaction([&]() -> Status {
    Reset reset(upsert_node_.get());
    sqlite3_bind_text(upsert_node_.get(), 1, node.node_id().c_str(),
                      static_cast<int>(node.node_id().size()), SQLITE_TRANSIENT);
    BindBlob(upsert_node_.get(), 2, info);
    const int rc = sqlite3_step(upsert_node_.get());
    if (rc != SQLITE_DONE) return Error("upsert node " + node.node_id(), rc);
    return Status::Ok();
  });
}

Result<std::vector<herd::v1::NodeInfo>> JobStore::ListNodes() {
  std::lock_guard lock(mu_);
  Reset reset(list_nodes_.get());
  std::vector<herd::v1::NodeInfo> nodes;
  for (;;) {
    const int rc = sqlite3_step(list_nodes_.get());
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return Error("list nodes", rc);
    const std::string_view info = ColumnBytes(list_nodes_.get(), 1);
    herd::v1::NodeInfo node;
    if (!node.ParseFromArray(info.data(), static_cast<int>(info.size()))) {
      return IoError("job store " + path_ + ": the record of node " +
                     reinterpret_cast<const char*>(sqlite3_column_text(list_nodes_.get(), 0)) +
                     " is damaged");
    }
    nodes.push_back(std::move(node));
  }
  // Order is recomputed from what the nodes report, so it survives re-registration and reopen.
  SortClusterOrder(nodes);
  return nodes;
}

}  // namespace herd::agent
