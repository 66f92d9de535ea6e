#include "controller/storage/storage_table.hpp"

#include <sqlite3.h>

#include <boost/json.hpp>
#include <filesystem>

#include "controller/state/herd_home.hpp"

namespace herd::storage {
namespace {

namespace json = boost::json;

constexpr int kSchemaVersion = 1;
constexpr const char* kSchema = R"sql(
CREATE TABLE buckets (
  name TEXT PRIMARY KEY,
  record TEXT NOT NULL       -- the StorageRecord as JSON
);
)sql";

sqlite::Label LabelFor(const std::string& path) {
  return {"storage table " + path, "a herd storage table"};
}

std::string Encode(const StorageRecord& r) { return json::serialize(StorageRecordJson(r)); }

Result<StorageRecord> Decode(const std::string& name, std::string_view text) {
  try {
    json::object o = json::parse(text).as_object();
    StorageRecord r;
    r.name = name;
    r.store = std::string(o.at("store").as_string());
    r.endpoint = std::string(o.at("endpoint").as_string());
    r.source = std::string(o.at("source").as_string());
    r.mode = std::string(o.at("mode").as_string());
    r.herd_made = o.at("herd_made").as_bool();
    r.persistent = o.at("persistent").as_bool();
    for (const auto& c : o.at("clusters").as_array()) r.clusters.emplace_back(c.as_string());
    if (const json::value* jobs = o.if_contains("managed_jobs")) {  // absent in older records
      for (const auto& j : jobs->as_array()) r.managed_jobs.push_back(j.to_number<int64_t>());
    }
    r.created_unix_ms = o.at("created_unix_ms").to_number<int64_t>();
    return r;
  } catch (const std::exception& e) {
    return IoError("storage table: bucket " + name + ": damaged record: " + e.what());
  }
}

using sqlite::BindText;
using sqlite::ColumnText;

}  // namespace

json::object StorageRecordJson(const StorageRecord& r) {
  json::array clusters;
  for (const auto& c : r.clusters) clusters.emplace_back(c);
  json::array jobs;
  for (int64_t j : r.managed_jobs) jobs.emplace_back(j);
  return json::object{
      {"store", r.store},     {"endpoint", r.endpoint},   {"source", r.source},
      {"mode", r.mode},       {"herd_made", r.herd_made}, {"persistent", r.persistent},
      {"clusters", clusters}, {"managed_jobs", jobs},     {"created_unix_ms", r.created_unix_ms}};
}

std::string StorageDbPath() { return controller::HerdHome() + "/storage.db"; }

Result<std::unique_ptr<StorageTable>> StorageTable::Open(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (!dir.empty()) {
    if (Status s = controller::EnsureDir(dir, 0700); !s.ok()) {
      return s.WithContext("storage table " + path);
    }
  }
  HERD_ASSIGN_OR_RETURN(sqlite3 * db, sqlite::Open(path, LabelFor(path), SQLITE_OPEN_NOMUTEX));
  std::unique_ptr<StorageTable> t(new StorageTable(path, db));
  HERD_RETURN_IF_ERROR(t->Init());
  return t;
}

StorageTable::~StorageTable() { sqlite3_close(db_); }

Status StorageTable::Init() {
  HERD_RETURN_IF_ERROR(sqlite::EnableWal(db_, LabelFor(path_)));
  HERD_RETURN_IF_ERROR(sqlite::Exec(db_, LabelFor(path_), "PRAGMA synchronous=NORMAL"));
  return sqlite::CreateSchemaOnce(db_, LabelFor(path_), kSchema, kSchemaVersion);
}

Result<std::optional<StorageRecord>> StorageTable::Get(const std::string& name) {
  HERD_ASSIGN_OR_RETURN(auto stmt, sqlite::Prepare(db_, LabelFor(path_),
                                                   "SELECT record FROM buckets WHERE name = ?1"));
  if (int rc = BindText(stmt.get(), 1, name); rc != SQLITE_OK) {
    return sqlite::Error(db_, LabelFor(path_), "bind", rc);
  }
  int rc = sqlite3_step(stmt.get());
  if (rc == SQLITE_DONE) return std::optional<StorageRecord>();
  if (rc != SQLITE_ROW) return sqlite::Error(db_, LabelFor(path_), "get bucket " + name, rc);
  HERD_ASSIGN_OR_RETURN(StorageRecord r, Decode(name, ColumnText(stmt.get(), 0)));
  return std::optional<StorageRecord>(std::move(r));
}

Result<std::vector<StorageRecord>> StorageTable::List() {
  HERD_ASSIGN_OR_RETURN(
      auto stmt,
      sqlite::Prepare(db_, LabelFor(path_), "SELECT name, record FROM buckets ORDER BY name"));
  std::vector<StorageRecord> out;
  for (;;) {
    int rc = sqlite3_step(stmt.get());
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return sqlite::Error(db_, LabelFor(path_), "list buckets", rc);
    HERD_ASSIGN_OR_RETURN(
        StorageRecord r, Decode(std::string(ColumnText(stmt.get(), 0)), ColumnText(stmt.get(), 1)));
    out.push_back(std::move(r));
  }
  return out;
}

Status StorageTable::Put(const StorageRecord& r) {
  HERD_ASSIGN_OR_RETURN(
      auto stmt, sqlite::Prepare(db_, LabelFor(path_),
                                 "INSERT OR REPLACE INTO buckets (name, record) VALUES (?1, ?2)"));
  int rc = BindText(stmt.get(), 1, r.name);
  if (rc == SQLITE_OK) rc = BindText(stmt.get(), 2, Encode(r));
  if (rc != SQLITE_OK) return sqlite::Error(db_, LabelFor(path_), "bind", rc);
  rc = sqlite3_step(stmt.get());
  if (rc != SQLITE_DONE) return sqlite::Error(db_, LabelFor(path_), "put bucket " + r.name, rc);
  return Status::Ok();
}

Status StorageTable::Remove(const std::string& name) {
  HERD_ASSIGN_OR_RETURN(
      auto stmt, sqlite::Prepare(db_, LabelFor(path_), "DELETE FROM buckets WHERE name = ?1"));
  int rc = BindText(stmt.get(), 1, name);
  if (rc != SQLITE_OK) return sqlite::Error(db_, LabelFor(path_), "bind", rc);
  rc = sqlite3_step(stmt.get());
  if (rc != SQLITE_DONE) return sqlite::Error(db_, LabelFor(path_), "remove bucket " + name, rc);
  return Status::Ok();
}

}  // namespace herd::storage
