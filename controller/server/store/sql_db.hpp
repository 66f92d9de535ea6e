// The API server's seam to its database: one connection to SQLite (the embedded default) or to
// PostgreSQL (a team's shared server), with parameterized statements only.
//
// SQL is written once, with `?` placeholders, in the subset both dialects accept (INSERT ... ON
// CONFLICT, BIGINT, TEXT, LIMIT ?). The SQLite backend binds `?` as is; the PostgreSQL backend
// rewrites the n-th `?` outside quotes into `$n` (ToPostgresPlaceholders) and sends the values
// apart from the text (PQexecParams), so no value is ever part of the SQL text. Values travel as
// text or 64-bit integers and come back as text (NULL as nullopt): PostgreSQL refuses a NUL byte
// or invalid UTF-8 in text, so callers store binary data encoded (the API store uses base64 and
// hex).
//
// A SqlDb is one connection. Its calls are serialized by a lock of its own, so threads may share
// one; a transaction holds that lock from BEGIN to COMMIT.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "shared/common/status.hpp"

namespace herd::server {

// A value bound to a `?`: NULL, an integer or text.
using SqlParam = std::variant<std::nullptr_t, std::int64_t, std::string>;
using SqlParams = std::vector<SqlParam>;

// One row of a result; cells in the order of the SELECT list.
class SqlRow {
 public:
  explicit SqlRow(std::vector<std::optional<std::string>> cells) : cells_(std::move(cells)) {}
  std::size_t size() const { return cells_.size(); }
  bool IsNull(std::size_t col) const { return !cells_.at(col).has_value(); }
  // The cell as text; "" for NULL.
  const std::string& Text(std::size_t col) const;
  // The cell as an integer; 0 for NULL or for text that is not a decimal integer.
  std::int64_t Int(std::size_t col) const;
  const std::optional<std::string>& Cell(std::size_t col) const { return cells_.at(col); }

 private:
  std::vector<std::optional<std::string>> cells_;
};
using SqlRows = std::vector<SqlRow>;

class SqlDb {
 public:
  virtual ~SqlDb() = default;

  // "sqlite" or "postgresql".
  virtual std::string_view Dialect() const = 0;
  // What errors call the database: "API database sqlite:/var/lib/herd/api.db",
  // "API database postgresql://herd@db:5432/herd" (never a password: RedactDbUrl).
  virtual const std::string& Name() const = 0;

  // One statement (no ';'-separated lists). Returns the number of rows it inserted, updated or
  // deleted (0 for any other statement). Errors name the database: AlreadyExists for a unique or
  // primary key violation, Unavailable when the database is busy or unreachable, DeadlineExceeded
  // when a statement ran past limits::kApiDbStatementTimeout (PostgreSQL), Io otherwise.
  virtual Result<std::int64_t> Exec(std::string_view sql, const SqlParams& params = {}) = 0;
  virtual Result<SqlRows> Query(std::string_view sql, const SqlParams& params = {}) = 0;

  // Runs `body` in one transaction, committed when it returns OK and rolled back otherwise (its
  // Status is returned). SQLite: BEGIN IMMEDIATE, so writers of several processes take turns.
  // PostgreSQL: SERIALIZABLE; when the database reports a serialization failure or a deadlock,
  // the whole transaction is run again (up to limits::kApiDbTransactionAttempts times), so `body`
  // must derive everything from what it reads inside and may run more than once. A call inside
  // `body` joins the outer transaction.
  virtual Status InTransaction(const std::function<Status()>& body) = 0;

  // Like InTransaction, but all callers that pass the same `lock_key` take turns, each statement
  // of `body` seeing every row committed before the turn began. PostgreSQL: READ COMMITTED and
  // pg_advisory_xact_lock(lock_key), released at COMMIT/ROLLBACK (a serializable snapshot could
  // predate the lock). SQLite: BEGIN IMMEDIATE (the file's write lock is the turn). Not retried.
  virtual Status InLockedTransaction(std::int64_t lock_key,
                                     const std::function<Status()>& body) = 0;
};

// "sqlite:PATH" or a plain PATH: SQLite (file created 0600, WAL, busy timeout
// limits::kSqliteBusyTimeout). "postgresql://..." or "postgres://...": PostgreSQL through libpq
// (connect timeout limits::kApiDbConnectTimeout, statement_timeout limits::kApiDbStatementTimeout).
// InvalidArgument for an empty URL or another scheme; errors name the database without its
// password.
Result<std::unique_ptr<SqlDb>> OpenSqlDb(const std::string& url);
Result<std::unique_ptr<SqlDb>> OpenSqliteDb(const std::string& path);
Result<std::unique_ptr<SqlDb>> OpenPostgresDb(const std::string& url);

// The URL with any password removed: "postgresql://u:secret@h/db?password=x&sslmode=require"
// -> "postgresql://u@h/db?sslmode=require".
std::string RedactDbUrl(std::string_view url);

// `?` -> `$1`, `$2`, ... in order, except inside '...' strings, "..." identifiers and -- comments.
std::string ToPostgresPlaceholders(std::string_view sql);

// A numbered schema change. Versions start at 1 and rise by one.
struct Migration {
  int version;
  std::string_view description;
  // Runs inside the migration's transaction; may branch on db.Dialect().
  std::function<Status(SqlDb& db)> apply;
};

// Brings the database to the newest of `migrations`: table schema_migrations(version,
// description) records each one applied. Each pending migration runs in one InLockedTransaction
// that first re-reads the version, so two processes opening a fresh database at once apply each
// migration exactly once (the second finds it done). FailedPrecondition naming the database when
// it holds a version newer than the newest migration (written by a newer herd): nothing is
// changed then. Returns the version the database is at.
Result<int> Migrate(SqlDb& db, std::span<const Migration> migrations);

}  // namespace herd::server
