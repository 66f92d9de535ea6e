// SqlDb on SQLite (shared/common/sqlite_db.hpp's open, WAL and errors), with a prepared statement
// kept per SQL text.
#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <unordered_map>

#include "controller/server/store/sql_db.hpp"
#include "shared/common/sqlite_db.hpp"

namespace herd::server {
namespace {

class SqliteSqlDb final : public SqlDb {
 public:
  SqliteSqlDb(sqlite3* db, sqlite::Label label) : db_(db), label_(std::move(label)) {}
  ~SqliteSqlDb() override {
    statements_.clear();
    sqlite3_close(db_);
  }

  std::string_view Dialect() const override { return "sqlite"; }
  const std::string& Name() const override { return label_.name; }

  Result<std::int64_t> Exec(std::string_view sql, const SqlParams& params) override {
    std::lock_guard lock(mu_);
    HERD_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Bind(sql, params));
    sqlite::ResetOnExit reset(stmt);
    // The difference of the running total, not sqlite3_changes(): that one keeps the count of the
    // last INSERT/UPDATE/DELETE through any other statement (CREATE TABLE would report it).
    const sqlite3_int64 before = sqlite3_total_changes64(db_);
    int rc = sqlite3_step(stmt);
    while (rc == SQLITE_ROW) rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE) return StepError(sql, rc);
    return static_cast<std::int64_t>(sqlite3_total_changes64(db_) - before);
  }

  Result<SqlRows> Query(std::string_view sql, const SqlParams& params) override {
    std::lock_guard lock(mu_);
    HERD_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Bind(sql, params));
    sqlite::ResetOnExit reset(stmt);
    SqlRows rows;
    const int columns = sqlite3_column_count(stmt);
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      std::vector<std::optional<std::string>> cells;
      cells.reserve(static_cast<std::size_t>(columns));
      for (int c = 0; c < columns; ++c) {
        if (sqlite3_column_type(stmt, c) == SQLITE_NULL) {
          cells.emplace_back();
          continue;
        }
        const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, c));
        cells.emplace_back(std::string(text != nullptr ? text : "",
                                       static_cast<std::size_t>(sqlite3_column_bytes(stmt, c))));
      }
      rows.emplace_back(std::move(cells));
    }
    if (rc != SQLITE_DONE) return StepError(sql, rc);
    return rows;
  }

  Status InTransaction(const std::function<Status()>& body) override { return Transaction(body); }

  Status InLockedTransaction(std::int64_t, const std::function<Status()>& body) override {
    return Transaction(body);
  }

 private:
  // BEGIN IMMEDIATE takes the file's write lock at once (waiting up to the busy timeout), so a
  // transaction never fails half-way for a lock another connection took after its first read.
  Status Transaction(const std::function<Status()>& body) {
    std::lock_guard lock(mu_);
    if (depth_ > 0) {
      ++depth_;
      Status status = body();
      --depth_;
      return status;
    }
    HERD_RETURN_IF_ERROR(sqlite::Exec(db_, label_, "BEGIN IMMEDIATE"));
    ++depth_;
    Status status = body();
    --depth_;
    if (status.ok()) status = sqlite::Exec(db_, label_, "COMMIT");
    if (!status.ok() && !sqlite3_get_autocommit(db_)) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
    return status;
  }

  Result<sqlite3_stmt*> Bind(std::string_view sql, const SqlParams& params) {
    std::string key(sql);
    auto it = statements_.find(key);
    if (it == statements_.end()) {
      sqlite3_stmt* s = nullptr;
      const char* tail = nullptr;
      const int rc = sqlite3_prepare_v3(db_, key.c_str(), static_cast<int>(key.size()),
                                        SQLITE_PREPARE_PERSISTENT, &s, &tail);
      if (rc != SQLITE_OK) return sqlite::Error(db_, label_, "prepare " + key, rc);
      sqlite::Stmt stmt(s);
      if (tail != nullptr &&
          std::string_view(tail).find_first_not_of(" \t\r\n;") != std::string_view::npos) {
        return Internal(label_.name + ": more than one statement in one call: " + key);
      }
      it = statements_.emplace(std::move(key), std::move(stmt)).first;
    }
    sqlite3_stmt* stmt = it->second.get();
    if (sqlite3_bind_parameter_count(stmt) != static_cast<int>(params.size())) {
      return Internal(label_.name + ": " + std::to_string(params.size()) + " values for " +
                      std::to_string(sqlite3_bind_parameter_count(stmt)) + " placeholders in " +
                      std::string(sql));
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      const int index = static_cast<int>(i) + 1;
      int rc = SQLITE_OK;
      if (const auto* n = std::get_if<std::int64_t>(&params[i])) {
        rc = sqlite3_bind_int64(stmt, index, *n);
      } else if (const auto* s = std::get_if<std::string>(&params[i])) {
        rc = sqlite3_bind_text64(stmt, index, s->data(), s->size(), SQLITE_TRANSIENT, SQLITE_UTF8);
      } else {
        rc = sqlite3_bind_null(stmt, index);
      }
      if (rc != SQLITE_OK) {
        sqlite3_reset(stmt);
        sqlite3_clear_bindings(stmt);
        return sqlite::Error(db_, label_, "bind", rc);
      }
    }
    return stmt;
  }

  Status StepError(std::string_view sql, int rc) {
    if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY) {
      return AlreadyExists(label_.name + ": " + sqlite3_errmsg(db_));
    }
    return sqlite::Error(db_, label_, sql.substr(0, 60), rc);
  }

  sqlite3* db_;
  sqlite::Label label_;
  std::recursive_mutex mu_;
  int depth_ = 0;
  std::unordered_map<std::string, sqlite::Stmt> statements_;
};

}  // namespace

Result<std::unique_ptr<SqlDb>> OpenSqliteDb(const std::string& path) {
  sqlite::Label label{"API database sqlite:" + path, "a herd API database"};
  // Created 0600 before SQLite opens it (its WAL and shm files take the same mode): the file
  // holds token hashes and sealed secrets.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return ErrnoError(label.name + ": open", errno);
  ::close(fd);
  HERD_ASSIGN_OR_RETURN(sqlite3 * db, sqlite::Open(path, label, SQLITE_OPEN_FULLMUTEX));
  auto sql_db = std::make_unique<SqliteSqlDb>(db, label);
  HERD_RETURN_IF_ERROR(sqlite::EnableWal(db, label));
  HERD_RETURN_IF_ERROR(sqlite::Exec(db, label, "PRAGMA foreign_keys=ON"));
  // Deleted rows (revoked tokens, replaced secrets) are overwritten, not left in free pages.
  HERD_RETURN_IF_ERROR(sqlite::Exec(db, label, "PRAGMA secure_delete=ON"));
  return std::unique_ptr<SqlDb>(std::move(sql_db));
}

}  // namespace herd::server
