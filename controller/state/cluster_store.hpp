// The controller's durable table of clusters: one SQLite file (<home>/state.db) shared by every
// `herd` command of the user.
//
// A row is the cluster's name, a copy of its status (so `sqlite3 state.db` answers the common
// question) and the whole ClusterRecord as JSON (cluster_record.hpp), so adding a field needs no
// schema change. WAL mode, a busy timeout of limits::kSqliteBusyTimeout and BEGIN IMMEDIATE writes
// make several stores on one file (in one or many processes) safe; the per-cluster ClusterLock is
// what serialises whole commands.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "controller/state/cluster_record.hpp"
#include "shared/common/sqlite_db.hpp"
#include "shared/common/status.hpp"

namespace herd::controller {

class ClusterStore {
 public:
  // Creates the file, its directory (0700) and its schema if missing. A file that is not a herd
  // state file, is damaged, or was written by a newer schema gives an error naming the path.
  static Result<std::unique_ptr<ClusterStore>> Open(const std::string& path);
  ~ClusterStore();
  ClusterStore(const ClusterStore&) = delete;
  ClusterStore& operator=(const ClusterStore&) = delete;

  // nullopt when there is no such cluster.
  Result<std::optional<ClusterRecord>> Get(const std::string& name);
  // All clusters, ordered by name.
  Result<std::vector<ClusterRecord>> List();
  // Inserts, or replaces the record of the same name. The name must pass ValidateClusterName.
  Status Put(const ClusterRecord& c);
  // Removing a cluster that is not there is not an error (`herd down` may be retried).
  Status Remove(const std::string& name);

  const std::string& path() const { return path_; }

 private:
  using Stmt = sqlite::Stmt;

  ClusterStore(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}

  Status Init();
  Status Exec(const char* sql);
  Result<Stmt> Prepare(const char* sql);
  Status Error(std::string_view what, int rc) const;
  Result<ClusterRecord> Decode(sqlite3_stmt* s);

  std::string path_;
  sqlite3* db_ = nullptr;
  std::mutex mu_;  // one connection; its prepared statements are not shareable between threads
  Stmt get_, list_, put_, remove_;
};

}  // namespace herd::controller
