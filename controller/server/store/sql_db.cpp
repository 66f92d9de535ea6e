#include "controller/server/store/sql_db.hpp"

#include <charconv>

namespace herd::server {
namespace {

// The advisory lock key of schema migrations (PostgreSQL): any constant that herd uses for
// nothing else; "herdmigr" in ASCII.
constexpr std::int64_t kMigrationLockKey = 0x686572646d696772;

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

const std::string& SqlRow::Text(std::size_t col) const {
  static const std::string kEmpty;
  const auto& cell = cells_.at(col);
  return cell ? *cell : kEmpty;
}

std::int64_t SqlRow::Int(std::size_t col) const {
  const std::string& text = Text(col);
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return 0;
  return value;
}

Result<std::unique_ptr<SqlDb>> OpenSqlDb(const std::string& url) {
  if (url.empty()) return InvalidArgument("empty database URL");
  if (StartsWith(url, "postgresql://") || StartsWith(url, "postgres://")) {
    return OpenPostgresDb(url);
  }
  if (StartsWith(url, "sqlite:")) {
    std::string path = url.substr(7);
    // sqlite:///abs/path as well as sqlite:/abs/path and sqlite:rel/path.
    if (StartsWith(path, "//")) path = path.substr(2);
    if (path.empty()) return InvalidArgument("database URL '" + url + "' names no file");
    return OpenSqliteDb(path);
  }
  if (const auto colon = url.find("://"); colon != std::string::npos) {
    return InvalidArgument("database URL '" + RedactDbUrl(url) +
                           "': unknown scheme; use sqlite:PATH, a file path, or "
                           "postgresql://USER@HOST:PORT/DB");
  }
  return OpenSqliteDb(url);
}

std::string RedactDbUrl(std::string_view url) {
  std::string out;
  std::string_view rest = url;
  if (const auto scheme = url.find("://"); scheme != std::string_view::npos) {
    out = std::string(url.substr(0, scheme + 3));
    rest = url.substr(scheme + 3);
    // userinfo ends at the last '@' before the path (a password may hold '@' or '/' encoded, but
    // a raw '@' there would end the authority early: take the last '@' of the authority).
    const auto path_start = rest.find_first_of("/?");
    const std::string_view authority = rest.substr(0, path_start);
    if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
      const std::string_view userinfo = authority.substr(0, at);
      out += std::string(userinfo.substr(0, userinfo.find(':')));
      out += '@';
      rest = rest.substr(at + 1);
    }
  }
  const auto query = rest.find('?');
  out += std::string(rest.substr(0, query));
  if (query == std::string_view::npos) return out;
  // Query parameters, without password=...
  std::string_view params = rest.substr(query + 1);
  std::string kept;
  while (!params.empty()) {
    const auto amp = params.find('&');
    const std::string_view param = params.substr(0, amp);
    params = amp == std::string_view::npos ? std::string_view() : params.substr(amp + 1);
    if (StartsWith(param, "password=") || param == "password") continue;
    if (!kept.empty()) kept += '&';
    kept += std::string(param);
  }
  if (!kept.empty()) out += "?" + kept;
  return out;
}

std::string ToPostgresPlaceholders(std::string_view sql) {
  std::string out;
  out.reserve(sql.size() + 16);
  int n = 0;
  char quote = 0;  // the quote we are inside, or 0
  for (std::size_t i = 0; i < sql.size(); ++i) {
    const char c = sql[i];
    if (quote != 0) {
      out += c;
      if (c == quote) quote = 0;  // a doubled quote ('') closes and reopens: same result
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      out += c;
    } else if (c == '-' && i + 1 < sql.size() && sql[i + 1] == '-') {
      const auto eol = sql.find('\n', i);
      const auto end = eol == std::string_view::npos ? sql.size() : eol;
      out += std::string(sql.substr(i, end - i));
      i = end - 1;
    } else if (c == '?') {
      out += '$' + std::to_string(++n);
    } else {
      out += c;
    }
  }
  return out;
}

Result<int> Migrate(SqlDb& db, std::span<const Migration> migrations) {
  const int newest = migrations.empty() ? 0 : migrations.back().version;
  for (std::size_t i = 0; i < migrations.size(); ++i) {
    if (migrations[i].version != static_cast<int>(i) + 1) {
      return Internal("migration " + std::to_string(i + 1) + " has version " +
                      std::to_string(migrations[i].version));
    }
  }
  int at = 0;
  auto read_version = [&]() -> Status {
    HERD_RETURN_IF_ERROR(
        db.Exec("CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, "
                "description TEXT NOT NULL)")
            .status());
    HERD_ASSIGN_OR_RETURN(SqlRows rows, db.Query("SELECT MAX(version) FROM schema_migrations"));
    at = rows.empty() ? 0 : static_cast<int>(rows[0].Int(0));
    if (at > newest) {
      return FailedPrecondition(db.Name() + ": schema version " + std::to_string(at) +
                                " is newer than this herd's (" + std::to_string(newest) +
                                "); upgrade herd, or point it at another database");
    }
    return Status::Ok();
  };
  HERD_RETURN_IF_ERROR(db.InLockedTransaction(kMigrationLockKey, read_version));
  for (const Migration& m : migrations) {
    if (m.version <= at) continue;
    Status applied = db.InLockedTransaction(kMigrationLockKey, [&]() -> Status {
      HERD_RETURN_IF_ERROR(read_version());
      if (at >= m.version) return Status::Ok();  // another process applied it meanwhile
      HERD_RETURN_IF_ERROR(m.apply(db));
      HERD_RETURN_IF_ERROR(
          db.Exec("INSERT INTO schema_migrations (version, description) VALUES (?, ?)",
                  {std::int64_t{m.version}, std::string(m.description)})
              .status());
      at = m.version;
      return Status::Ok();
    });
    if (!applied.ok()) {
      return applied.WithContext("schema migration " + std::to_string(m.version) + " (" +
                                 std::string(m.description) + ")");
    }
  }
  return at;
}

}  // namespace herd::server
