// SqlDb on PostgreSQL through libpq: `?` rewritten to `$n` (ToPostgresPlaceholders), every value
// sent apart from the SQL text (PQexecParams, text format), results read as text.
#include <libpq-fe.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "controller/server/store/sql_db.hpp"
#include "shared/common/limits.hpp"

namespace herd::server {
namespace {

struct ResultFree {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, ResultFree>;

// SQLSTATEs (PostgreSQL's appendix A).
constexpr std::string_view kSerializationFailure = "40001";
constexpr std::string_view kDeadlockDetected = "40P01";
constexpr std::string_view kUniqueViolation = "23505";
constexpr std::string_view kQueryCanceled = "57014";  // statement_timeout
constexpr std::string_view kLockNotAvailable = "55P03";

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

class PostgresSqlDb final : public SqlDb {
 public:
  PostgresSqlDb(PGconn* conn, std::string name) : conn_(conn), name_(std::move(name)) {}
  ~PostgresSqlDb() override { PQfinish(conn_); }

  std::string_view Dialect() const override { return "postgresql"; }
  const std::string& Name() const override { return name_; }

  Result<std::int64_t> Exec(std::string_view sql, const SqlParams& params) override {
    std::lock_guard lock(mu_);
    HERD_ASSIGN_OR_RETURN(PgResult res, Run(sql, params));
    const char* tuples = PQcmdTuples(res.get());
    return tuples != nullptr && tuples[0] != '\0' ? std::stoll(tuples) : 0;
  }

  Result<SqlRows> Query(std::string_view sql, const SqlParams& params) override {
    std::lock_guard lock(mu_);
    HERD_ASSIGN_OR_RETURN(PgResult res, Run(sql, params));
    SqlRows rows;
    const int n = PQntuples(res.get());
    const int columns = PQnfields(res.get());
    rows.reserve(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      std::vector<std::optional<std::string>> cells;
      cells.reserve(static_cast<std::size_t>(columns));
      for (int c = 0; c < columns; ++c) {
        if (PQgetisnull(res.get(), r, c)) {
          cells.emplace_back();
        } else {
          cells.emplace_back(std::string(PQgetvalue(res.get(), r, c),
                                         static_cast<std::size_t>(PQgetlength(res.get(), r, c))));
        }
      }
      rows.emplace_back(std::move(cells));
    }
    return rows;
  }

  Status InTransaction(const std::function<Status()>& body) override {
    std::lock_guard lock(mu_);
    if (depth_ > 0) return Nested(body);
    Status status;
    for (int attempt = 1; attempt <= limits::kApiDbTransactionAttempts; ++attempt) {
      retryable_ = false;
      status = Once("BEGIN ISOLATION LEVEL SERIALIZABLE", body);
      if (status.ok() || !retryable_) return status;
      // Another transaction won a conflict; back off a little (growing) before running again.
      std::this_thread::sleep_for(std::chrono::milliseconds(attempt));
    }
    return Unavailable(status.message() + " (gave up after " +
                       std::to_string(limits::kApiDbTransactionAttempts) + " attempts)");
  }

  Status InLockedTransaction(std::int64_t lock_key, const std::function<Status()>& body) override {
    std::lock_guard lock(mu_);
    if (depth_ > 0) return Nested(body);
    SqlParams key;
    key.emplace_back(lock_key);
    return Once("BEGIN ISOLATION LEVEL READ COMMITTED", [&]() -> Status {
      HERD_RETURN_IF_ERROR(Run("SELECT pg_advisory_xact_lock(?)", key).status());
      return body();
    });
  }

  // The session's settings, on a new connection and on one made again by PQreset: the statement
  // timeout, and no NOTICEs (libpq prints them on stderr; "relation already exists, skipping"
  // is expected at every open).
  Status ApplySettings() {
    const std::string ms = std::to_string(limits::kApiDbStatementTimeout.count());
    const std::pair<const char*, const char*> settings[] = {{"statement_timeout", ms.c_str()},
                                                            {"client_min_messages", "warning"}};
    for (const auto& [name, value] : settings) {
      const char* values[] = {name, value};
      PgResult res(PQexecParams(conn_, "SELECT set_config($1, $2, false)", 2, nullptr, values,
                                nullptr, nullptr, 0));
      if (!res || PQresultStatus(res.get()) != PGRES_TUPLES_OK) {
        return ErrorOf(res.get(), std::string("set ") + name);
      }
    }
    return Status::Ok();
  }

 private:
  Status Nested(const std::function<Status()>& body) {
    ++depth_;
    Status status = body();
    --depth_;
    return status;
  }

  Status Once(const char* begin, const std::function<Status()>& body) {
    HERD_RETURN_IF_ERROR(Run(begin, {}).status());
    ++depth_;
    Status status = body();
    --depth_;
    if (status.ok()) status = Run("COMMIT", {}).status();
    if (!status.ok() && PQtransactionStatus(conn_) != PQTRANS_IDLE) {
      PgResult(PQexec(conn_, "ROLLBACK"));
    }
    return status;
  }

  Result<PgResult> Run(std::string_view sql, const SqlParams& params) {
    // A connection lost since the last call is made again first (never in the middle of a
    // transaction: the transaction fails and its caller sees why).
    if (depth_ == 0 && PQstatus(conn_) == CONNECTION_BAD) {
      PQreset(conn_);
      if (PQstatus(conn_) != CONNECTION_OK) {
        return Unavailable(name_ +
                           ": connection lost and not made again: " + Trim(PQerrorMessage(conn_)));
      }
      // The session's settings went with the old connection.
      HERD_RETURN_IF_ERROR(ApplySettings());
    }
    const std::string text = ToPostgresPlaceholders(sql);
    std::vector<std::string> storage(params.size());
    std::vector<const char*> values(params.size(), nullptr);
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (const auto* n = std::get_if<std::int64_t>(&params[i])) {
        storage[i] = std::to_string(*n);
        values[i] = storage[i].c_str();
      } else if (const auto* s = std::get_if<std::string>(&params[i])) {
        values[i] = s->c_str();
      }
    }
    PgResult res(PQexecParams(conn_, text.c_str(), static_cast<int>(params.size()), nullptr,
                              values.data(), nullptr, nullptr, 0));
    const ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return res;
    return ErrorOf(res.get(), sql);
  }

  Status ErrorOf(const PGresult* res, std::string_view sql) {
    const char* state = res != nullptr ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
    const std::string_view sqlstate = state != nullptr ? state : "";
    const char* primary =
        res != nullptr ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : nullptr;
    std::string message = name_ + ": " + std::string(sql.substr(0, 60)) + ": " +
                          (primary != nullptr ? std::string(primary) : Trim(PQerrorMessage(conn_)));
    if (sqlstate == kSerializationFailure || sqlstate == kDeadlockDetected) {
      retryable_ = true;
      return Unavailable(std::move(message));
    }
    if (sqlstate == kUniqueViolation) return AlreadyExists(std::move(message));
    if (sqlstate == kQueryCanceled || sqlstate == kLockNotAvailable) {
      return DeadlineExceeded(message + " (limit " +
                              std::to_string(limits::kApiDbStatementTimeout.count()) + " ms)");
    }
    if (sqlstate.substr(0, 2) == "08" || PQstatus(conn_) == CONNECTION_BAD) {
      return Unavailable(std::move(message));
    }
    return IoError(std::move(message));
  }

  PGconn* conn_;
  std::string name_;
  std::recursive_mutex mu_;
  int depth_ = 0;
  bool retryable_ = false;  // a serialization failure or deadlock in the current attempt
};

}  // namespace

Result<std::unique_ptr<SqlDb>> OpenPostgresDb(const std::string& url) {
  const std::string name = "API database " + RedactDbUrl(url);
  const std::string timeout_s = std::to_string(
      std::chrono::duration_cast<std::chrono::seconds>(limits::kApiDbConnectTimeout).count());
  // Keywords before dbname are defaults the URL may override (libpq's expand_dbname order).
  const char* keys[] = {"connect_timeout", "application_name", "dbname", nullptr};
  const char* values[] = {timeout_s.c_str(), "herd-api", url.c_str(), nullptr};
  PGconn* conn = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (conn == nullptr) return Internal(name + ": out of memory");
  if (PQstatus(conn) != CONNECTION_OK) {
    // libpq's message names host and port, never the password.
    std::string why = Trim(PQerrorMessage(conn));
    PQfinish(conn);
    return Unavailable(name + ": cannot connect: " + why);
  }
  auto db = std::make_unique<PostgresSqlDb>(conn, name);
  HERD_RETURN_IF_ERROR(db->ApplySettings());
  return std::unique_ptr<SqlDb>(std::move(db));
}

}  // namespace herd::server
