#include "shared/common/sqlite_db.hpp"

#include <sqlite3.h>

#include <chrono>
#include <thread>

#include "shared/common/limits.hpp"

namespace herd::sqlite {

void StmtDeleter::operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }

std::string_view ColumnText(sqlite3_stmt* s, int col) {
  const unsigned char* data = sqlite3_column_text(s, col);
  const int size = sqlite3_column_bytes(s, col);
  if (data == nullptr || size <= 0) return {};
  return {reinterpret_cast<const char*>(data), static_cast<std::size_t>(size)};
}

int BindText(sqlite3_stmt* s, int index, std::string_view text) {
  return sqlite3_bind_text64(s, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
}

ResetOnExit::~ResetOnExit() {
  sqlite3_reset(s_);
  sqlite3_clear_bindings(s_);
}

Result<sqlite3*> Open(const std::string& path, const Label& label, int extra_flags) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | extra_flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string message =
        label.name + ": open: " + (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_close(db);
    return IoError(std::move(message));
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, static_cast<int>(limits::kSqliteBusyTimeout.count()));
  return db;
}

Status Error(sqlite3* db, const Label& label, std::string_view what, int rc) {
  std::string message = label.name + ": " + std::string(what) + ": " + sqlite3_errmsg(db);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Unavailable(message + " (another process held it for " +
                         std::to_string(limits::kSqliteBusyTimeout.count()) + " ms)");
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return IoError(message + " (the file is damaged or is not " + label.file_kind + ")");
    default:
      return IoError(std::move(message));
  }
}

Status Exec(sqlite3* db, const Label& label, const char* sql) {
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  // The statement's start is enough to say which step failed.
  if (rc != SQLITE_OK) return Error(db, label, std::string_view(sql).substr(0, 40), rc);
  return Status::Ok();
}

Status EnableWal(sqlite3* db, const Label& label) {
  const auto deadline = std::chrono::steady_clock::now() + limits::kSqliteBusyTimeout;
  while (true) {
    HERD_ASSIGN_OR_RETURN(Stmt wal, Prepare(db, label, "PRAGMA journal_mode=WAL"));
    const int rc = sqlite3_step(wal.get());
    if (rc == SQLITE_ROW) {
      const char* mode = reinterpret_cast<const char*>(sqlite3_column_text(wal.get(), 0));
      if (mode == nullptr || std::string_view(mode) != "wal") {
        return IoError(label.name + ": the file system does not support WAL mode");
      }
      return Status::Ok();
    }
    if ((rc & 0xff) != SQLITE_BUSY || std::chrono::steady_clock::now() > deadline) {
      return Error(db, label, "enable WAL", rc);
    }
    wal.reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Result<Stmt> Prepare(sqlite3* db, const Label& label, const char* sql) {
  sqlite3_stmt* s = nullptr;
  const int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr);
  if (rc != SQLITE_OK) return Error(db, label, std::string("prepare ") + sql, rc);
  return Stmt(s);
}

Result<int> SchemaVersion(sqlite3* db, const Label& label, int newest) {
  HERD_ASSIGN_OR_RETURN(Stmt version, Prepare(db, label, "PRAGMA user_version"));
  const int rc = sqlite3_step(version.get());
  if (rc != SQLITE_ROW) return Error(db, label, "read schema version", rc);
  const int found = sqlite3_column_int(version.get(), 0);
  if (found > newest) {
    return FailedPrecondition(label.name + ": schema version " + std::to_string(found) +
                              " is newer than this herd's (" + std::to_string(newest) +
                              "); upgrade herd");
  }
  return found;
}

Status CreateSchemaOnce(sqlite3* db, const Label& label, const char* schema, int version) {
  HERD_RETURN_IF_ERROR(Exec(db, label, "BEGIN IMMEDIATE"));
  auto create = [&]() -> Status {
    HERD_ASSIGN_OR_RETURN(const int found, SchemaVersion(db, label, version));
    if (found != 0) return Status::Ok();
    HERD_RETURN_IF_ERROR(Exec(db, label, schema));
    return Exec(db, label, ("PRAGMA user_version=" + std::to_string(version)).c_str());
  };
  Status status = create();
  if (status.ok()) status = Exec(db, label, "COMMIT");
  if (!status.ok() && !sqlite3_get_autocommit(db)) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  return status;
}

}  // namespace herd::sqlite
