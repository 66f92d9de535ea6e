#include "agent/store/job_store.hpp"

#include <sqlite3.h>

#include <openssl/crypto.h>

#include <filesystem>
#include <string_view>
#include <utility>

#include "agent/nodes/node_order.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::agent {
namespace {

// PRAGMA user_version of the schema below. Bump it with a migration step in Init when the schema
// changes; a file with a bigger version was written by a newer herd and is refused.
// Version 1 kept secrets in clear inside `spec`; 2 seals them in `secrets`; 3 keeps each node's
// last agent incarnation (fencing across head restarts).
constexpr int kSchemaVersion = 3;

constexpr const char* kSchema = R"sql(
CREATE TABLE jobs (
  job_id INTEGER PRIMARY KEY AUTOINCREMENT,  -- AUTOINCREMENT: ids are never reused
  state INTEGER NOT NULL,                    -- herd.v1.JobState, copy of info.state
  info BLOB NOT NULL,                        -- herd.v1.JobInfo
  spec BLOB NOT NULL,                        -- herd.v1.TaskSpec without its secrets
  secrets BLOB                               -- a TaskSpec of only `secrets`, sealed; NULL: none
);
CREATE INDEX jobs_by_state ON jobs (state, job_id);
CREATE TABLE nodes (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,     -- first-seen order
  node_id TEXT NOT NULL UNIQUE,
  info BLOB NOT NULL,                        -- herd.v1.NodeInfo
  incarnation INTEGER NOT NULL DEFAULT 0     -- the last accepted agent incarnation (uint64 bits)
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

// Authenticated with the sealed value: sealed secrets moved to another row do not open.
std::string SecretsContext(int64_t job_id) {
  return "herd jobs.db secrets of job " + std::to_string(job_id);
}

bool Terminal(herd::v1::JobState state) { return state >= herd::v1::JOB_STATE_SUCCEEDED; }

// The spec as stored: everything but the secrets.
std::string SpecWithoutSecrets(const herd::v1::TaskSpec& spec) {
  herd::v1::TaskSpec copy = spec;
  copy.clear_secrets();
  return copy.SerializeAsString();
}

int BindOptionalBlob(sqlite3_stmt* s, int index, const std::optional<std::string>& bytes) {
  return bytes ? BindBlob(s, index, *bytes) : sqlite3_bind_null(s, index);
}

}  // namespace

Result<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path,
                                                 const std::string& key_path) {
  HERD_ASSIGN_OR_RETURN(sqlite3 * db, sqlite::Open(path, LabelFor(path)));
  std::string key = key_path;
  if (key.empty()) key = (std::filesystem::path(path).parent_path() / "secrets.key").string();
  std::unique_ptr<JobStore> store(new JobStore(path, db, std::move(key)));
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
  list_job_infos_.reset();
  list_unfinished_job_infos_.reset();
  count_jobs_.reset();
  count_unfinished_jobs_.reset();
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
  // In WAL mode NORMAL syncs the WAL at checkpoints, not at every commit: a commit survives a crash
  // of the process (the WAL is in the page cache) but the last ones may be lost on a power failure
  // or kernel crash, which also ends the node's jobs. Every job state change is a commit; FULL
  // would cost an fdatasync each, several per job, on the head's event loop.
  HERD_RETURN_IF_ERROR(Exec("PRAGMA synchronous = NORMAL"));
  // Deleted and overwritten content is zeroed, so a migrated clear secret does not stay behind in
  // a free page.
  HERD_RETURN_IF_ERROR(Exec("PRAGMA secure_delete = ON"));
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

  auto read_version = [&] { return sqlite::SchemaVersion(db_, LabelFor(path_), kSchemaVersion); };
  {
    HERD_ASSIGN_OR_RETURN(const int found, read_version());
    HERD_RETURN_IF_ERROR(LoadKey(found));
  }
  bool migrated = false;
  HERD_RETURN_IF_ERROR(InWriteTransaction([&]() -> Status {
    HERD_ASSIGN_OR_RETURN(const int found, read_version());
    if (found == kSchemaVersion) return Status::Ok();
    if (found == 1) {
      HERD_RETURN_IF_ERROR(Exec("ALTER TABLE jobs ADD COLUMN secrets BLOB"));
      HERD_RETURN_IF_ERROR(MigrateClearSecrets(&migrated));
    }
    if (found == 1 || found == 2) {
      HERD_RETURN_IF_ERROR(
          Exec("ALTER TABLE nodes ADD COLUMN incarnation INTEGER NOT NULL DEFAULT 0"));
      return Exec("PRAGMA user_version = 3");
    }
    // Version 0: a new file, unless something else already put tables in it.
    HERD_ASSIGN_OR_RETURN(Stmt tables, Prepare("SELECT count(*) FROM sqlite_master"));
    if (sqlite3_step(tables.get()) != SQLITE_ROW) return Error("read schema");
    if (sqlite3_column_int(tables.get(), 0) != 0) {
      return FailedPrecondition("job store " + path_ +
                                ": the file is an SQLite database but not a herd job store");
    }
    HERD_RETURN_IF_ERROR(Exec(kSchema));
    return Exec("PRAGMA user_version = 3");
  }));
  static_assert(kSchemaVersion == 3, "update the PRAGMAs above");
  if (migrated) {
    // Old page images with clear secrets are in the WAL until a checkpoint overwrites the file.
    if (auto s = Exec("PRAGMA wal_checkpoint(TRUNCATE)"); !s.ok()) {
      HERD_LOG(kWarn) << s.ToString();
    }
  }

  HERD_ASSIGN_OR_RETURN(insert_job_,
                        Prepare("INSERT INTO jobs (state, info, spec) VALUES (?1, x'', ?2)"));
  HERD_ASSIGN_OR_RETURN(set_job_info_,
                        Prepare("UPDATE jobs SET info = ?2, secrets = ?3 WHERE job_id = ?1"));
  HERD_ASSIGN_OR_RETURN(update_job_,
                        Prepare("UPDATE jobs SET state = ?2, info = ?3, spec = ?4, secrets = ?5 "
                                "WHERE job_id = ?1"));
  HERD_ASSIGN_OR_RETURN(get_job_, Prepare("SELECT job_id, info, spec, secrets FROM jobs "
                                          "WHERE job_id = ?1"));
  HERD_ASSIGN_OR_RETURN(list_jobs_, Prepare("SELECT job_id, info, spec, NULL FROM jobs "
                                            "ORDER BY job_id DESC LIMIT ?1"));
  HERD_ASSIGN_OR_RETURN(list_unfinished_jobs_, Prepare("SELECT job_id, info, spec, NULL FROM jobs "
                                                       "WHERE state < 5 "
                                                       "ORDER BY job_id DESC LIMIT ?1"));
  HERD_ASSIGN_OR_RETURN(list_job_infos_, Prepare("SELECT job_id, info FROM jobs "
                                                 "ORDER BY job_id DESC LIMIT ?1"));
  HERD_ASSIGN_OR_RETURN(list_unfinished_job_infos_,
                        Prepare("SELECT job_id, info FROM jobs WHERE state < 5 "
                                "ORDER BY job_id DESC LIMIT ?1"));
  HERD_ASSIGN_OR_RETURN(count_jobs_, Prepare("SELECT count(*) FROM jobs"));
  HERD_ASSIGN_OR_RETURN(count_unfinished_jobs_,
                        Prepare("SELECT count(*) FROM jobs WHERE state < 5"));
  HERD_ASSIGN_OR_RETURN(active_jobs_, Prepare("SELECT job_id, info, spec, secrets FROM jobs "
                                              "WHERE state IN (2, 3, 4) ORDER BY job_id ASC"));
  HERD_ASSIGN_OR_RETURN(latest_job_id_, Prepare("SELECT COALESCE(MAX(job_id), 0) FROM jobs"));
  HERD_ASSIGN_OR_RETURN(
      upsert_node_, Prepare("INSERT INTO nodes (node_id, info, incarnation) VALUES (?1, ?2, ?3) "
                            "ON CONFLICT (node_id) DO UPDATE "
                            "SET info = excluded.info, incarnation = excluded.incarnation"));
  HERD_ASSIGN_OR_RETURN(list_nodes_,
                        Prepare("SELECT node_id, info, incarnation FROM nodes ORDER BY seq"));
  return Status::Ok();
}

Result<int64_t> JobStore::AddJob(JobRecord record,
                                 const std::function<void(herd::v1::JobInfo&)>& complete) {
  std::vector<JobRecord> one;
  one.push_back(std::move(record));
  HERD_RETURN_IF_ERROR(AddJobs(one, complete));
  return one[0].info.job_id();
}

Status JobStore::AddJobs(std::vector<JobRecord>& records,
                         const std::function<void(herd::v1::JobInfo&)>& complete) {
  std::lock_guard lock(mu_);
  std::vector<herd::v1::JobInfo> before;  // restored if the transaction is rolled back
  before.reserve(records.size());
  for (const auto& r : records) before.push_back(r.info);
  Status s = InWriteTransaction([&]() -> Status {
    for (JobRecord& record : records) {
      const std::string spec = SpecWithoutSecrets(record.spec);
      int64_t job_id = 0;
      {
        Reset reset(insert_job_.get());
        sqlite3_bind_int(insert_job_.get(), 1, record.info.state());
        BindBlob(insert_job_.get(), 2, spec);
        const int rc = sqlite3_step(insert_job_.get());
        if (rc != SQLITE_DONE) return Error("add job", rc);
        job_id = sqlite3_last_insert_rowid(db_);
      }
      // The id is only known after the insert, and the info blob (and the secrets' seal) carry
      // it.
      record.info.set_job_id(job_id);
      if (complete) complete(record.info);
      std::string info;
      if (!record.info.SerializeToString(&info)) {
        return Internal("job store: cannot serialize info");
      }
      HERD_ASSIGN_OR_RETURN(auto secrets, SealedSecrets(record, job_id));
      Reset reset(set_job_info_.get());
      sqlite3_bind_int64(set_job_info_.get(), 1, job_id);
      BindBlob(set_job_info_.get(), 2, info);
      BindOptionalBlob(set_job_info_.get(), 3, secrets);
      const int rc = sqlite3_step(set_job_info_.get());
      if (rc != SQLITE_DONE) return Error("add job", rc);
    }
    return Status::Ok();
  });
  if (!s.ok()) {
    for (std::size_t i = 0; i < records.size(); ++i) records[i].info = before[i];
  }
  return s;
}

Status JobStore::UpdateJob(const JobRecord& record) { return UpdateJobs({&record}); }

Status JobStore::UpdateJobs(const std::vector<const JobRecord*>& records) {
  std::lock_guard lock(mu_);
  struct Row {
    int64_t job_id;
    int state;
    std::string info, spec;
    std::optional<std::string> secrets;
  };
  std::vector<Row> rows;
  rows.reserve(records.size());
  for (const JobRecord* record : records) {
    Row row{record->info.job_id(), record->info.state(), {}, SpecWithoutSecrets(record->spec), {}};
    if (!record->info.SerializeToString(&row.info)) {
      return Internal("job store: cannot serialize job " + std::to_string(row.job_id));
    }
    HERD_ASSIGN_OR_RETURN(row.secrets, SealedSecrets(*record, row.job_id));
    rows.push_back(std::move(row));
  }
  return InWriteTransaction([&]() -> Status {
    for (const Row& row : rows) {
      Reset reset(update_job_.get());
      sqlite3_bind_int64(update_job_.get(), 1, row.job_id);
      sqlite3_bind_int(update_job_.get(), 2, row.state);
      BindBlob(update_job_.get(), 3, row.info);
      BindBlob(update_job_.get(), 4, row.spec);
      BindOptionalBlob(update_job_.get(), 5, row.secrets);
      const int rc = sqlite3_step(update_job_.get());
      if (rc != SQLITE_DONE) return Error("update job " + std::to_string(row.job_id), rc);
      if (sqlite3_changes(db_) == 0) {
        return NotFound("job " + std::to_string(row.job_id) + " not found");
      }
    }
    return Status::Ok();
  });
}

Result<std::vector<JobRecord>> JobStore::ReadJobs(sqlite3_stmt* stmt, bool with_secrets) {
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
    if (with_secrets && sqlite3_column_type(stmt, 3) != SQLITE_NULL) {
      HERD_RETURN_IF_ERROR(OpenSecrets(job_id, ColumnBytes(stmt, 3), record.spec));
    }
    jobs.push_back(std::move(record));
  }
  return jobs;
}

Result<JobRecord> JobStore::GetJob(int64_t job_id) {
  std::lock_guard lock(mu_);
  Reset reset(get_job_.get());
  sqlite3_bind_int64(get_job_.get(), 1, job_id);
  HERD_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, ReadJobs(get_job_.get(), true));
  if (jobs.empty()) return NotFound("job " + std::to_string(job_id) + " not found");
  return std::move(jobs.front());
}

Result<std::vector<JobRecord>> JobStore::ListJobs(bool skip_finished, int limit) {
  std::lock_guard lock(mu_);
  sqlite3_stmt* stmt = skip_finished ? list_unfinished_jobs_.get() : list_jobs_.get();
  Reset reset(stmt);
  sqlite3_bind_int(stmt, 1, limit > 0 ? limit : -1);  // LIMIT -1: no limit
  return ReadJobs(stmt, false);
}

Status JobStore::ForEachJobInfo(bool skip_finished, int limit,
                                const std::function<bool(herd::v1::JobInfo)>& take) {
  std::lock_guard lock(mu_);
  sqlite3_stmt* stmt = skip_finished ? list_unfinished_job_infos_.get() : list_job_infos_.get();
  Reset reset(stmt);
  sqlite3_bind_int(stmt, 1, limit > 0 ? limit : -1);  // LIMIT -1: no limit
  for (;;) {
    const int rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) return Status::Ok();
    if (rc != SQLITE_ROW) return Error("read jobs", rc);
    const int64_t job_id = sqlite3_column_int64(stmt, 0);
    const std::string_view bytes = ColumnBytes(stmt, 1);
    herd::v1::JobInfo info;
    if (!info.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      return IoError("job store " + path_ + ": the record of job " + std::to_string(job_id) +
                     " is damaged");
    }
    info.set_job_id(job_id);
    if (!take(std::move(info))) return Status::Ok();
  }
}

Result<int64_t> JobStore::CountJobs(bool skip_finished) {
  std::lock_guard lock(mu_);
  sqlite3_stmt* stmt = skip_finished ? count_unfinished_jobs_.get() : count_jobs_.get();
  Reset reset(stmt);
  const int rc = sqlite3_step(stmt);
  if (rc != SQLITE_ROW) return Error("count jobs", rc);
  return static_cast<int64_t>(sqlite3_column_int64(stmt, 0));
}

Result<std::vector<JobRecord>> JobStore::ActiveJobs() {
  std::lock_guard lock(mu_);
  Reset reset(active_jobs_.get());
  return ReadJobs(active_jobs_.get(), true);
}

Result<int64_t> JobStore::LatestJobId() {
  std::lock_guard lock(mu_);
  Reset reset(latest_job_id_.get());
  const int rc = sqlite3_step(latest_job_id_.get());
  if (rc != SQLITE_ROW) return Error("latest job id", rc);
  return static_cast<int64_t>(sqlite3_column_int64(latest_job_id_.get(), 0));
}

Status JobStore::LoadKey(int version) {
  // One sealed row, if the store has any, to check the key against.
  int64_t sealed_job = 0;
  std::string sealed;
  if (version >= 2) {
    HERD_ASSIGN_OR_RETURN(Stmt any, Prepare("SELECT job_id, secrets FROM jobs "
                                            "WHERE secrets IS NOT NULL LIMIT 1"));
    const int rc = sqlite3_step(any.get());
    if (rc == SQLITE_ROW) {
      sealed_job = sqlite3_column_int64(any.get(), 0);
      sealed = std::string(ColumnBytes(any.get(), 1));
    } else if (rc != SQLITE_DONE) {
      return Error("read secrets", rc);
    }
  }
  auto box = SecretBox::Load(key_path_);
  if (!box.ok() && box.status().code() != Code::kNotFound) {
    return box.status().WithContext("job store " + path_);
  }
  if (!box.ok()) {
    if (sealed_job != 0) {
      return FailedPrecondition("job store " + path_ + " holds sealed secrets (job " +
                                std::to_string(sealed_job) + " and maybe others) but their key " +
                                key_path_ +
                                " is missing: restore it (without it those jobs cannot get their "
                                "secrets), or move the store away to start with an empty queue");
    }
    HERD_ASSIGN_OR_RETURN(SecretBox created, SecretBox::Create(key_path_));
    box_.emplace(std::move(created));
    return Status::Ok();
  }
  if (sealed_job != 0 && !box->Open(sealed, SecretsContext(sealed_job)).ok()) {
    return FailedPrecondition("job store " + path_ + ": key " + key_path_ +
                              " does not open the sealed secrets of job " +
                              std::to_string(sealed_job) +
                              " (the key file was replaced?): restore the key the store was "
                              "written with, or move the store away to start with an empty queue");
  }
  box_.emplace(std::move(*box));
  return Status::Ok();
}

Status JobStore::MigrateClearSecrets(bool* changed) {
  struct Row {
    int64_t job_id;
    herd::v1::JobState state;
    herd::v1::TaskSpec spec;
  };
  std::vector<Row> rows;
  {
    HERD_ASSIGN_OR_RETURN(Stmt all, Prepare("SELECT job_id, state, spec FROM jobs"));
    for (;;) {
      const int rc = sqlite3_step(all.get());
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return Error("migrate secrets", rc);
      Row row{sqlite3_column_int64(all.get(), 0),
              static_cast<herd::v1::JobState>(sqlite3_column_int(all.get(), 1)),
              {}};
      const std::string_view spec = ColumnBytes(all.get(), 2);
      if (!row.spec.ParseFromArray(spec.data(), static_cast<int>(spec.size()))) {
        return IoError("job store " + path_ + ": the record of job " + std::to_string(row.job_id) +
                       " is damaged");
      }
      if (row.spec.secrets_size() > 0) rows.push_back(std::move(row));
    }
  }
  HERD_ASSIGN_OR_RETURN(Stmt update,
                        Prepare("UPDATE jobs SET spec = ?2, secrets = ?3 WHERE job_id = ?1"));
  for (const Row& row : rows) {
    JobRecord record;
    record.info.set_state(row.state);
    record.spec = row.spec;
    HERD_ASSIGN_OR_RETURN(auto secrets, SealedSecrets(record, row.job_id));
    Reset reset(update.get());
    sqlite3_bind_int64(update.get(), 1, row.job_id);
    BindBlob(update.get(), 2, SpecWithoutSecrets(row.spec));
    BindOptionalBlob(update.get(), 3, secrets);
    const int rc = sqlite3_step(update.get());
    if (rc != SQLITE_DONE) return Error("migrate secrets of job " + std::to_string(row.job_id), rc);
    *changed = true;
  }
  return Status::Ok();
}

Result<std::optional<std::string>> JobStore::SealedSecrets(const JobRecord& record,
                                                           int64_t job_id) const {
  if (record.spec.secrets_size() == 0 || Terminal(record.info.state())) {
    return std::optional<std::string>();
  }
  if (!box_) return Internal("job store " + path_ + ": no secrets key");
  herd::v1::TaskSpec only;
  *only.mutable_secrets() = record.spec.secrets();
  std::string plain = only.SerializeAsString();
  auto sealed = box_->Seal(plain, SecretsContext(job_id));
  OPENSSL_cleanse(plain.data(), plain.size());
  if (!sealed.ok()) return sealed.status();
  return std::optional<std::string>(std::move(*sealed));
}

Status JobStore::OpenSecrets(int64_t job_id, std::string_view sealed,
                             herd::v1::TaskSpec& spec) const {
  if (!box_) return Internal("job store " + path_ + ": no secrets key");
  auto plain = box_->Open(sealed, SecretsContext(job_id));
  herd::v1::TaskSpec only;
  if (!plain.ok() || !only.ParseFromString(*plain)) {
    return IoError("job store " + path_ + ": the secrets of job " + std::to_string(job_id) +
                   " do not open with key " + key_path_ +
                   " (the key file was replaced, or the record is damaged)");
  }
  OPENSSL_cleanse(plain->data(), plain->size());
  *spec.mutable_secrets() = only.secrets();
  return Status::Ok();
}

Status JobStore::UpsertNode(const herd::v1::NodeInfo& node, uint64_t incarnation) {
  std::lock_guard lock(mu_);
  if (node.node_id().empty()) return InvalidArgument("job store: a node needs a node_id");
  std::string info;
  if (!node.SerializeToString(&info)) return Internal("job store: cannot serialize node");
  return InWriteTransaction([&]() -> Status {
    Reset reset(upsert_node_.get());
    sqlite3_bind_text(upsert_node_.get(), 1, node.node_id().c_str(),
                      static_cast<int>(node.node_id().size()), SQLITE_TRANSIENT);
    BindBlob(upsert_node_.get(), 2, info);
    sqlite3_bind_int64(upsert_node_.get(), 3, static_cast<sqlite3_int64>(incarnation));
    const int rc = sqlite3_step(upsert_node_.get());
    if (rc != SQLITE_DONE) return Error("upsert node " + node.node_id(), rc);
    return Status::Ok();
  });
}

Result<std::vector<herd::v1::NodeInfo>> JobStore::ListNodes(
    std::map<std::string, uint64_t>* incarnations) {
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
    if (incarnations) {
      (*incarnations)[node.node_id()] =
          static_cast<uint64_t>(sqlite3_column_int64(list_nodes_.get(), 2));
    }
    nodes.push_back(std::move(node));
  }
  // Order is recomputed from what the nodes report, so it survives re-registration and reopen.
  SortClusterOrder(nodes);
  return nodes;
}

}  // namespace herd::agent
