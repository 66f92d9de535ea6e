// The user's table of buckets herd mounted (`herd storage ls`, `herd storage delete`), SkyPilot's
// storage table: one SQLite file, <herd home>/storage.db, in the style of the cluster store
// (WAL, busy timeout, one row per bucket with its record as JSON). It holds no credentials.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shared/common/sqlite_db.hpp"
#include "shared/common/status.hpp"

namespace herd::storage {

struct StorageRecord {
  std::string name;        // the bucket
  std::string store;       // "s3"
  std::string endpoint;    // where it lives ("" = AWS), as S3Access::Describe says it
  std::string source;      // the local directory uploaded into it ("" = none)
  std::string mode;        // the mode of its last mount
  bool herd_made = false;  // herd created the bucket (only those are deleted with a cluster)
  bool persistent = true;  // false: deleted when the last cluster using it goes down
  std::vector<std::string> clusters;  // clusters that mount it now
  // Managed jobs whose clusters mount it: the bucket outlives each attempt's cluster (a
  // non-persistent one is deleted once the job ended and no cluster mounts it).
  std::vector<int64_t> managed_jobs;
  int64_t created_unix_ms = 0;
};

// The record's fields but its name, as JSON: what the table stores for it, and (with the name)
// what `herd storage ls -o json` prints.
boost::json::object StorageRecordJson(const StorageRecord& r);

// <herd home>/storage.db
std::string StorageDbPath();

class StorageTable {
 public:
  static Result<std::unique_ptr<StorageTable>> Open(const std::string& path = StorageDbPath());
  ~StorageTable();
  StorageTable(const StorageTable&) = delete;
  StorageTable& operator=(const StorageTable&) = delete;

  Result<std::optional<StorageRecord>> Get(const std::string& name);
  Result<std::vector<StorageRecord>> List();  // by name
  Status Put(const StorageRecord& r);
  Status Remove(const std::string& name);  // not there: no error

 private:
  StorageTable(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}
  Status Init();

  std::string path_;
  sqlite3* db_ = nullptr;
};

}  // namespace herd::storage
