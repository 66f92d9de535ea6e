// The managed jobs table (`herd jobs`): $HERD_HOME/managed_jobs.db, SQLite (WAL, every write in
// BEGIN IMMEDIATE), one row per job with its attempts. Written by `herd jobs launch` (the row),
// the job's controller process (everything about its progress) and `herd jobs cancel` (only the
// cancel_requested column, so a cancel is never overwritten by the controller's next write).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "controller/jobs/recovery.hpp"
#include "shared/common/sqlite_db.hpp"
#include "shared/common/status.hpp"

namespace herd::jobs {

struct AttemptRecord {
  int attempt = 0;             // 1, 2, ... (HERD_ATTEMPT of its processes)
  std::string cluster;         // the cluster this attempt ran on
  int64_t cluster_job_id = 0;  // the job id on that cluster's head; 0 before the submit
  int64_t start_unix_ms = 0;
  int64_t end_unix_ms = 0;  // 0 while it runs
  std::string outcome;      // OutcomeName(...); "" while it runs
  std::string reason;       // what the controller decided, in words
};

struct ManagedJob {
  int64_t id = 0;
  std::string name;
  std::string user;
  ManagedState state = ManagedState::kPending;
  bool cancel_requested = false;  // read from its own column; Put never writes it
  int64_t submitted_unix_ms = 0;
  int64_t started_unix_ms = 0;  // the first attempt's task started; 0 before
  int64_t ended_unix_ms = 0;
  std::string task_id;     // SKYPILOT_TASK_ID of every attempt
  std::string task_json;   // EncodeTask(...)
  std::string resources;   // "2x(cpus=1)"
  std::string infra;       // LaunchOptions.infra ("" = the task's)
  int controller_pid = 0;  // 0 until the controller started
  int recoveries = 0;      // relaunches after node loss / preemption
  int restarts_on_errors = 0;
  std::string cluster;  // the current (or last) attempt's cluster
  std::string message;  // why it ended (or what it is doing)
  // Under a team server (kManagedSupervisedEnv): the name under which the server keeps the job's
  // secrets sealed (ManagedSecretsKey), "" when the job has none. Never the secrets themselves.
  std::string secrets_ref;
  std::vector<AttemptRecord> attempts;
};

class ManagedJobStore {
 public:
  static Result<std::unique_ptr<ManagedJobStore>> Open(const std::string& path);
  ~ManagedJobStore();
  ManagedJobStore(const ManagedJobStore&) = delete;
  ManagedJobStore& operator=(const ManagedJobStore&) = delete;

  // Inserts job (its id is ignored) and returns the new id.
  Result<int64_t> Create(const ManagedJob& job);
  // Replaces the row of job.id (every field but cancel_requested). NotFound for an unknown id.
  Status Put(const ManagedJob& job);
  Result<std::optional<ManagedJob>> Get(int64_t id);
  Result<std::vector<ManagedJob>> List();  // newest first
  // Sets cancel_requested; false when the job is unknown.
  Result<bool> RequestCancel(int64_t id);

 private:
  ManagedJobStore(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}
  Status Init();
  Result<ManagedJob> Decode(sqlite3_stmt* s) const;
  Status Exec(const char* sql);

  std::string path_;
  sqlite3* db_;
  std::mutex mu_;
};

// Set to "1" by a team server (herd-api) in the environment of every command it runs and of the
// controllers it starts: the server supervises managed jobs' controllers (it starts each one as its
// own child, and starts it again when it dies). `herd jobs launch` then records the job and leaves
// the controller to the server, and a job whose controller process is gone is waiting for the
// server, not FAILED_CONTROLLER.
inline constexpr char kManagedSupervisedEnv[] = "HERD_MANAGED_SUPERVISED";
// Set by the server on a `herd jobs launch` whose task has secrets: the reference it sealed them
// under (ManagedJob::secrets_ref).
inline constexpr char kManagedSecretsRefEnv[] = "HERD_MANAGED_SECRETS_REF";
// "1" when a controller finds its task's secrets on its stdin (a JSON object in an anonymous file).
inline constexpr char kManagedSecretsOnStdinEnv[] = "HERD_MANAGED_SECRETS_ON_STDIN";
// Whether kManagedSupervisedEnv is "1" in this process.
bool ManagedSupervised();
// The key a server seals a job's secrets under (ApiStore::PutSecret, owner: the job's user).
std::string ManagedSecretsKey(const std::string& secrets_ref);

// $HERD_HOME/managed_jobs.db and $HERD_HOME/managed_jobs/<id>/ (attempt logs, controller log).
std::string ManagedJobsDbPath();
std::string ManagedJobDir(int64_t id);
// The same below another herd home (a team server looks into each user's).
std::string ManagedJobsDbPathIn(const std::string& herd_home);
std::string ManagedJobDirIn(const std::string& herd_home, int64_t id);
// The local copy of one attempt's merged log, written by the controller as it streams.
std::string AttemptLogPath(int64_t id, int attempt);

}  // namespace herd::jobs
