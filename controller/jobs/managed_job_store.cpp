#include "controller/jobs/managed_job_store.hpp"

#include <sqlite3.h>

#include <boost/json.hpp>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string_view>

#include "controller/state/herd_home.hpp"

namespace herd::jobs {
namespace {

namespace json = boost::json;

// PRAGMA user_version of the schema below; a bigger one was written by a newer herd.
constexpr int kSchemaVersion = 1;

constexpr const char* kSchema = R"sql(
CREATE TABLE managed_jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  state TEXT NOT NULL,                        -- copy of record.state, for a look with sqlite3
  cancel_requested INTEGER NOT NULL DEFAULT 0, -- written by `herd jobs cancel` only
  record TEXT NOT NULL                        -- the ManagedJob as JSON (no secrets)
);
)sql";

sqlite::Label LabelFor(const std::string& path) {
  return {"managed job store " + path, "a herd managed job store"};
}

int BindText(sqlite3_stmt* s, int index, const std::string& text) {
  return sqlite3_bind_text64(s, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
}

std::string ToJson(const ManagedJob& j) {
  json::object o;
  o["name"] = j.name;
  o["user"] = j.user;
  o["state"] = std::string(StateName(j.state));
  o["submitted_unix_ms"] = j.submitted_unix_ms;
  o["started_unix_ms"] = j.started_unix_ms;
  o["ended_unix_ms"] = j.ended_unix_ms;
  o["task_id"] = j.task_id;
  o["task"] = j.task_json;
  o["resources"] = j.resources;
  o["infra"] = j.infra;
  o["controller_pid"] = j.controller_pid;
  o["recoveries"] = j.recoveries;
  o["restarts_on_errors"] = j.restarts_on_errors;
  o["cluster"] = j.cluster;
  o["message"] = j.message;
  if (!j.secrets_ref.empty()) o["secrets_ref"] = j.secrets_ref;
  json::array attempts;
  for (const auto& a : j.attempts) {
    attempts.push_back(json::object{{"attempt", a.attempt},
                                    {"cluster", a.cluster},
                                    {"cluster_job_id", a.cluster_job_id},
                                    {"start_unix_ms", a.start_unix_ms},
                                    {"end_unix_ms", a.end_unix_ms},
                                    {"outcome", a.outcome},
                                    {"reason", a.reason}});
  }
  o["attempts"] = std::move(attempts);
  return json::serialize(o);
}

std::string Str(const json::object& o, const char* key) {
  return std::string(o.at(key).as_string());
}

Result<ManagedJob> FromJson(int64_t id, const std::string& text) {
  try {
    json::object o = json::parse(text).as_object();
    ManagedJob j;
    j.id = id;
    j.name = Str(o, "name");
    j.user = Str(o, "user");
    if (!ParseState(Str(o, "state"), j.state)) {
      return IoError("unknown state '" + Str(o, "state") + "'");
    }
    j.submitted_unix_ms = o.at("submitted_unix_ms").to_number<int64_t>();
    j.started_unix_ms = o.at("started_unix_ms").to_number<int64_t>();
    j.ended_unix_ms = o.at("ended_unix_ms").to_number<int64_t>();
    j.task_id = Str(o, "task_id");
    j.task_json = Str(o, "task");
    j.resources = Str(o, "resources");
    j.infra = Str(o, "infra");
    j.controller_pid = o.at("controller_pid").to_number<int>();
    j.recoveries = o.at("recoveries").to_number<int>();
    j.restarts_on_errors = o.at("restarts_on_errors").to_number<int>();
    j.cluster = Str(o, "cluster");
    j.message = Str(o, "message");
    if (o.contains("secrets_ref")) j.secrets_ref = Str(o, "secrets_ref");
    for (const auto& v : o.at("attempts").as_array()) {
      const auto& a = v.as_object();
      AttemptRecord r;
      r.attempt = a.at("attempt").to_number<int>();
      r.cluster = Str(a, "cluster");
      r.cluster_job_id = a.at("cluster_job_id").to_number<int64_t>();
      r.start_unix_ms = a.at("start_unix_ms").to_number<int64_t>();
      r.end_unix_ms = a.at("end_unix_ms").to_number<int64_t>();
      r.outcome = Str(a, "outcome");
      r.reason = Str(a, "reason");
      j.attempts.push_back(std::move(r));
    }
    return j;
  } catch (const std::exception& e) {
    return IoError(e.what());
  }
}

}  // namespace

std::string ManagedJobsDbPath() { return ManagedJobsDbPathIn(controller::HerdHome()); }
std::string ManagedJobDir(int64_t id) { return ManagedJobDirIn(controller::HerdHome(), id); }
std::string ManagedJobsDbPathIn(const std::string& herd_home) {
  return herd_home + "/managed_jobs.db";
}
std::string ManagedJobDirIn(const std::string& herd_home, int64_t id) {
  return herd_home + "/managed_jobs/" + std::to_string(id);
}

bool ManagedSupervised() {
  const char* v = std::getenv(kManagedSupervisedEnv);
  return v != nullptr && std::string_view(v) == "1";
}

std::string ManagedSecretsKey(const std::string& secrets_ref) { return "managed_" + secrets_ref; }
std::string AttemptLogPath(int64_t id, int attempt) {
  return ManagedJobDir(id) + "/attempt-" + std::to_string(attempt) + ".log";
}

Result<std::unique_ptr<ManagedJobStore>> ManagedJobStore::Open(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (!dir.empty()) {
    if (Status s = controller::EnsureDir(dir, 0700); !s.ok()) {
      return s.WithContext("managed job store " + path);
    }
  }
  HERD_ASSIGN_OR_RETURN(sqlite3 * db, sqlite::Open(path, LabelFor(path), SQLITE_OPEN_NOMUTEX));
  std::unique_ptr<ManagedJobStore> store(new ManagedJobStore(path, db));
  HERD_RETURN_IF_ERROR(store->Init());
  return store;
}

ManagedJobStore::~ManagedJobStore() { sqlite3_close(db_); }

Status ManagedJobStore::Exec(const char* sql) { return sqlite::Exec(db_, LabelFor(path_), sql); }

Status ManagedJobStore::Init() {
  HERD_RETURN_IF_ERROR(sqlite::EnableWal(db_, LabelFor(path_)));
  HERD_RETURN_IF_ERROR(Exec("PRAGMA synchronous=NORMAL"));
  return sqlite::CreateSchemaOnce(db_, LabelFor(path_), kSchema, kSchemaVersion);
}

Result<ManagedJob> ManagedJobStore::Decode(sqlite3_stmt* s) const {
  const int64_t id = sqlite3_column_int64(s, 0);
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, 1));
  auto job = FromJson(id, text ? text : "");
  if (!job.ok()) {
    return IoError("managed job store " + path_ + ": job " + std::to_string(id) +
                   ": damaged record: " + job.status().message());
  }
  job->cancel_requested = sqlite3_column_int(s, 2) != 0;
  return job;
}

Result<int64_t> ManagedJobStore::Create(const ManagedJob& job) {
  std::lock_guard lock(mu_);
  HERD_ASSIGN_OR_RETURN(
      sqlite::Stmt st, sqlite::Prepare(db_, LabelFor(path_),
                                       "INSERT INTO managed_jobs (state, record) VALUES (?1, ?2)"));
  BindText(st.get(), 1, std::string(StateName(job.state)));
  BindText(st.get(), 2, ToJson(job));
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) return sqlite::Error(db_, LabelFor(path_), "add job", rc);
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
}

Status ManagedJobStore::Put(const ManagedJob& job) {
  std::lock_guard lock(mu_);
  HERD_ASSIGN_OR_RETURN(
      sqlite::Stmt st,
      sqlite::Prepare(db_, LabelFor(path_),
                      "UPDATE managed_jobs SET state = ?1, record = ?2 WHERE id = ?3"));
  BindText(st.get(), 1, std::string(StateName(job.state)));
  BindText(st.get(), 2, ToJson(job));
  sqlite3_bind_int64(st.get(), 3, job.id);
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) {
    return sqlite::Error(db_, LabelFor(path_), "update job " + std::to_string(job.id), rc);
  }
  if (sqlite3_changes(db_) == 0)
    return NotFound("managed job " + std::to_string(job.id) + " not found");
  return Status::Ok();
}

Result<std::optional<ManagedJob>> ManagedJobStore::Get(int64_t id) {
  std::lock_guard lock(mu_);
  HERD_ASSIGN_OR_RETURN(sqlite::Stmt st,
                        sqlite::Prepare(db_, LabelFor(path_),
                                        "SELECT id, record, cancel_requested FROM managed_jobs "
                                        "WHERE id = ?1"));
  sqlite3_bind_int64(st.get(), 1, id);
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return std::optional<ManagedJob>();
  if (rc != SQLITE_ROW) {
    return sqlite::Error(db_, LabelFor(path_), "get job " + std::to_string(id), rc);
  }
  HERD_ASSIGN_OR_RETURN(ManagedJob job, Decode(st.get()));
  return std::optional<ManagedJob>(std::move(job));
}

Result<std::vector<ManagedJob>> ManagedJobStore::List() {
  std::lock_guard lock(mu_);
  HERD_ASSIGN_OR_RETURN(sqlite::Stmt st,
                        sqlite::Prepare(db_, LabelFor(path_),
                                        "SELECT id, record, cancel_requested FROM managed_jobs "
                                        "ORDER BY id DESC"));
  std::vector<ManagedJob> out;
  while (true) {
    int rc = sqlite3_step(st.get());
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return sqlite::Error(db_, LabelFor(path_), "list jobs", rc);
    HERD_ASSIGN_OR_RETURN(ManagedJob job, Decode(st.get()));
    out.push_back(std::move(job));
  }
  return out;
}

Result<bool> ManagedJobStore::RequestCancel(int64_t id) {
  std::lock_guard lock(mu_);
  HERD_ASSIGN_OR_RETURN(
      sqlite::Stmt st,
      sqlite::Prepare(db_, LabelFor(path_),
                      "UPDATE managed_jobs SET cancel_requested = 1 WHERE id = ?1"));
  sqlite3_bind_int64(st.get(), 1, id);
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) {
    return sqlite::Error(db_, LabelFor(path_), "cancel job " + std::to_string(id), rc);
  }
  return sqlite3_changes(db_) > 0;
}

}  // namespace herd::jobs
