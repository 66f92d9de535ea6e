#include "controller/state/cluster_store.hpp"

#include <sqlite3.h>

#include <filesystem>
#include <string_view>
#include <utility>

#include "controller/state/herd_home.hpp"
#include "shared/common/limits.hpp"

namespace herd::controller {
namespace {

// PRAGMA user_version of the schema below. Bump it with a migration step in Init when the schema
// changes; a file with a bigger version was written by a newer herd and is refused.
constexpr int kSchemaVersion = 1;

constexpr const char* kSchema = R"sql(
CREATE TABLE clusters (
  name TEXT PRIMARY KEY,
  status TEXT NOT NULL,      -- copy of record.status: INIT, UP, STOPPED, AUTOSTOPPING
  record TEXT NOT NULL       -- the ClusterRecord as JSON
);
)sql";

using Reset = sqlite::ResetOnExit;

using sqlite::BindText;
using sqlite::ColumnText;

sqlite::Label LabelFor(const std::string& path) {
  return {"cluster store " + path, "a herd state file"};
}

}  // namespace

Result<std::unique_ptr<ClusterStore>> ClusterStore::Open(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (!dir.empty()) {
    if (Status s = EnsureDir(dir, 0700); !s.ok()) return s.WithContext("cluster store " + path);
  }
  HERD_ASSIGN_OR_RETURN(sqlite3 * db, sqlite::Open(path, LabelFor(path), SQLITE_OPEN_NOMUTEX));
  std::unique_ptr<ClusterStore> store(new ClusterStore(path, db));
  HERD_RETURN_IF_ERROR(store->Init());
  return store;
}

ClusterStore::~ClusterStore() {
  // Statements must be finalized before the connection closes.
  get_.reset();
  list_.reset();
  put_.reset();
  remove_.reset();
  sqlite3_close(db_);
}

Status ClusterStore::Error(std::string_view what, int rc) const {
  return sqlite::Error(db_, LabelFor(path_), what, rc);
}

Status ClusterStore::Exec(const char* sql) { return sqlite::Exec(db_, LabelFor(path_), sql); }

Result<ClusterStore::Stmt> ClusterStore::Prepare(const char* sql) {
  return sqlite::Prepare(db_, LabelFor(path_), sql);
}

Status ClusterStore::Init() {
  // WAL lets `herd status` read while another command writes. Switching to WAL needs a moment of
  // exclusive access (EnableWal waits for it).
  HERD_RETURN_IF_ERROR(sqlite::EnableWal(db_, LabelFor(path_)));
  // The -wal and -shm files stay when the last connection closes: otherwise every `herd` command
  // that is alone with the file creates both, sizes and maps the index, checkpoints and deletes
  // them at exit. Cluster records hold no secret, so what earlier
  // frames leave in the kept WAL is no more than the database itself holds (unlike the stores of
  // jobs, whose secrets are scrubbed and must not linger in a WAL: job_store_test).
  int persist = 1;
  sqlite3_file_control(db_, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
  // A kept WAL must be emptied when the last connection closes: SQLite then truncates it after
  // its checkpoint. A WAL left full is read whole to rebuild the index by the next command that
  // opens the file alone, and checkpointed (with fsyncs) again at its close, writing nothing new.
  HERD_RETURN_IF_ERROR(Exec("PRAGMA journal_size_limit=0"));
  HERD_RETURN_IF_ERROR(Exec("PRAGMA synchronous=NORMAL"));
  HERD_RETURN_IF_ERROR(sqlite::CreateSchemaOnce(db_, LabelFor(path_), kSchema, kSchemaVersion));
  HERD_ASSIGN_OR_RETURN(get_, Prepare("SELECT name, record FROM clusters WHERE name = ?1"));
  HERD_ASSIGN_OR_RETURN(list_, Prepare("SELECT name, record FROM clusters ORDER BY name"));
  HERD_ASSIGN_OR_RETURN(
      put_, Prepare("INSERT OR REPLACE INTO clusters (name, status, record) VALUES (?1, ?2, ?3)"));
  HERD_ASSIGN_OR_RETURN(remove_, Prepare("DELETE FROM clusters WHERE name = ?1"));
  return Status::Ok();
}

Result<ClusterRecord> ClusterStore::Decode(sqlite3_stmt* s) {
  const std::string name(ColumnText(s, 0));
  auto record = ClusterRecordFromJson(ColumnText(s, 1));
  if (!record.ok()) {
    return IoError("cluster store " + path_ + ": cluster " + name +
                   ": damaged record: " + record.status().message());
  }
  // The key column is the truth; the JSON copy of the name cannot disagree with it.
  record->name = name;
  return record;
}

Result<std::optional<ClusterRecord>> ClusterStore::Get(const std::string& name) {
  std::lock_guard lock(mu_);
  Reset reset(get_.get());
  if (int rc = BindText(get_.get(), 1, name); rc != SQLITE_OK) return Error("bind", rc);
  const int rc = sqlite3_step(get_.get());
  if (rc == SQLITE_DONE) return std::optional<ClusterRecord>();
  if (rc != SQLITE_ROW) return Error("get cluster " + name, rc);
  HERD_ASSIGN_OR_RETURN(ClusterRecord record, Decode(get_.get()));
  return std::optional<ClusterRecord>(std::move(record));
}

Result<std::vector<ClusterRecord>> ClusterStore::List() {
  std::lock_guard lock(mu_);
  Reset reset(list_.get());
  std::vector<ClusterRecord> out;
  while (true) {
    const int rc = sqlite3_step(list_.get());
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return Error("list clusters", rc);
    HERD_ASSIGN_OR_RETURN(ClusterRecord record, Decode(list_.get()));
    out.push_back(std::move(record));
  }
  return out;
}

Status ClusterStore::Put(const ClusterRecord& c) {
  HERD_RETURN_IF_ERROR(ValidateClusterName(c.name));
  const std::string json = ToJson(c);
  std::lock_guard lock(mu_);
  Reset reset(put_.get());
  int rc = BindText(put_.get(), 1, c.name);
  if (rc == SQLITE_OK) rc = BindText(put_.get(), 2, Name(c.status));
  if (rc == SQLITE_OK) rc = BindText(put_.get(), 3, json);
  if (rc != SQLITE_OK) return Error("bind", rc);
  // A single statement is its own transaction; the busy timeout covers a concurrent writer.
  rc = sqlite3_step(put_.get());
  if (rc != SQLITE_DONE) return Error("put cluster " + c.name, rc);
  return Status::Ok();
}

Status ClusterStore::Remove(const std::string& name) {
  std::lock_guard lock(mu_);
  Reset reset(remove_.get());
  int rc = BindText(remove_.get(), 1, name);
  if (rc != SQLITE_OK) return Error("bind", rc);
  rc = sqlite3_step(remove_.get());
  if (rc != SQLITE_DONE) return Error("remove cluster " + name, rc);
  return Status::Ok();
}

}  // namespace herd::controller
