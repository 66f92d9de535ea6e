// The SQLite plumbing both durable stores share (the head's job store, the controller's cluster
// store): opening with the project's settings, statements, and errors that name the store.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "shared/common/status.hpp"

// SQLite's handles, declared here so that the stores' headers do not bring in sqlite3.h: only
// the files that run queries include it.
struct sqlite3;
struct sqlite3_stmt;

namespace herd::sqlite {

struct StmtDeleter {
  void operator()(sqlite3_stmt* s) const;
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

// Resets a statement (and drops its bindings) when a query is done, even on an early return.
class ResetOnExit {
 public:
  explicit ResetOnExit(sqlite3_stmt* s) : s_(s) {}
  ~ResetOnExit();
  ResetOnExit(const ResetOnExit&) = delete;
  ResetOnExit& operator=(const ResetOnExit&) = delete;

 private:
  sqlite3_stmt* s_;
};

// Column `col` of the current row as text ("" for NULL), valid until the statement moves on.
std::string_view ColumnText(sqlite3_stmt* s, int col);
// Binds text (copied by SQLite) to parameter `index`; SQLite's result code.
int BindText(sqlite3_stmt* s, int index, std::string_view text);

// What a store calls itself in messages: "job store /path" and what a damaged file is not.
struct Label {
  std::string name;       // "job store /var/lib/herd/jobs.db"
  std::string file_kind;  // "a herd job store"
};

// Opens (creating) with extended result codes and busy_timeout limits::kSqliteBusyTimeout.
Result<sqlite3*> Open(const std::string& path, const Label& label, int extra_flags = 0);

// "<name>: <what>: <sqlite message>", Unavailable when another process held the lock, Io else.
Status Error(sqlite3* db, const Label& label, std::string_view what, int rc);
Status Exec(sqlite3* db, const Label& label, const char* sql);
// PRAGMA journal_mode=WAL. SQLite answers SQLITE_BUSY at once, without its busy handler, when
// another connection opening the same fresh file holds a lock the switch needs; so this retries
// for up to limits::kSqliteBusyTimeout. Io when the file system cannot do WAL.
Status EnableWal(sqlite3* db, const Label& label);
Result<Stmt> Prepare(sqlite3* db, const Label& label, const char* sql);

// PRAGMA user_version. FailedPrecondition naming the store when it is above `newest` (the file
// was written by a newer herd).
Result<int> SchemaVersion(sqlite3* db, const Label& label, int newest);
// For a store with one schema version and no migrations yet: in one BEGIN IMMEDIATE transaction
// (two processes opening a fresh file at once do not both create it), a file at version 0 gets
// `schema` and user_version = `version`; a newer file is refused (SchemaVersion). Rolled back on
// any error.
Status CreateSchemaOnce(sqlite3* db, const Label& label, const char* schema, int version);

}  // namespace herd::sqlite
