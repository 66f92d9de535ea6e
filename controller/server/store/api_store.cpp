#include "controller/server/store/api_store.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>

#include "controller/state/herd_home.hpp"
#include "shared/common/limits.hpp"

namespace herd::server {
namespace {

// ---- encodings ----------------------------------------------------------------------------------

constexpr std::string_view kTokenPrefix = "herd_";
constexpr std::size_t kTokenIdHex = 16;        // 8 random bytes
constexpr std::size_t kTokenSecretBytes = 32;  // random bytes behind the secret text
constexpr std::size_t kTokenSecretChars = 43;  // their base64url, unpadded
constexpr std::size_t kTokenSaltBytes = 16;
constexpr std::size_t kTokenChars = kTokenPrefix.size() + kTokenIdHex + 1 + kTokenSecretChars;

Result<std::string> RandomBytes(std::size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    return Internal("no random bytes");
  }
  return out;
}

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 0xf];
  }
  return out;
}

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::optional<std::string> FromHex(std::string_view hex) {
  if (hex.size() % 2 != 0 || !IsLowerHex(hex)) return std::nullopt;
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  std::string out(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<char>((nibble(hex[2 * i]) << 4) | nibble(hex[2 * i + 1]));
  }
  return out;
}

std::string Base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::optional<std::string> FromBase64(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out(3 * (text.size() / 4) + 1, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  std::size_t size = static_cast<std::size_t>(n);
  // EVP_DecodeBlock counts the zero bytes that padding stands for.
  for (std::size_t i = text.size(); i > 0 && text[i - 1] == '='; --i) --size;
  out.resize(size);
  return out;
}

// RFC 4648 section 5, without padding.
std::string Base64Url(std::string_view bytes) {
  std::string out = Base64(bytes);
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  return out;
}

bool IsBase64UrlChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

// SHA-256(salt || secret).
Result<std::string> TokenHash(std::string_view salt, std::string_view secret) {
  std::string input(salt);
  input += secret;
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  const int ok = EVP_Digest(input.data(), input.size(), md.data(), &len, EVP_sha256(), nullptr);
  OPENSSL_cleanse(input.data(), input.size());
  if (ok != 1) return Internal("SHA-256 failed");
  return std::string(reinterpret_cast<const char*>(md.data()), len);
}

// ---- checks -------------------------------------------------------------------------------------

// Lease names and holders, request holders: opaque to the store but kept to one visible word.
Status ValidateWord(std::string_view field, std::string_view value) {
  constexpr std::size_t kMax = 255;
  if (value.empty() || value.size() > kMax) {
    return InvalidArgument("invalid " + std::string(field) + ": 1 to " + std::to_string(kMax) +
                           " characters, got " + std::to_string(value.size()));
  }
  for (char c : value) {
    if (c <= ' ' || c >= 127 || c == '\'' || c == '"' || c == ';' || c == '\\') {
      return InvalidArgument("invalid " + std::string(field) +
                             ": only visible ASCII characters other than quotes, ';' and '\\'");
    }
  }
  return Status::Ok();
}

Status ValidateSecretKey(std::string_view key) {
  constexpr std::size_t kMax = 128;
  const bool ok_size = !key.empty() && key.size() <= kMax;
  bool ok = ok_size && !(key[0] >= '0' && key[0] <= '9');
  for (char c : key) {
    ok = ok &&
         ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  }
  if (ok) return Status::Ok();
  return InvalidArgument("invalid secret key: 1 to " + std::to_string(kMax) +
                         " characters of A-Z, a-z, 0-9 and '_', not starting with a digit");
}

Status ValidateNameOf(NameKind kind, std::string_view name) {
  if (kind == NameKind::kCluster) return controller::ValidateClusterName(name);
  return ValidateApiName("managed job name", name);
}

int ClampLimit(int limit) {
  if (limit <= 0) return limits::kApiListDefaultLimit;
  return std::min(limit, limits::kApiListMaxLimit);
}

std::string SecretContext(std::string_view owner, std::string_view key) {
  std::string context = "herd api secret";
  context += '\0';
  context += owner;
  context += '\0';
  context += key;
  return context;
}

// ---- schema -------------------------------------------------------------------------------------

// An integer key that rises with each insert.
std::string RisingKey(const SqlDb& db) {
  return db.Dialect() == "postgresql" ? "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
                                      : "INTEGER PRIMARY KEY";
}

Status ExecAll(SqlDb& db, const std::vector<std::string>& statements) {
  for (const std::string& sql : statements) HERD_RETURN_IF_ERROR(db.Exec(sql).status());
  return Status::Ok();
}

// Version 1. Tokens refer to their user by `user_uid`, a random id given when the user was added,
// so a user deleted and added again under the same name does not get the old tokens back.
Status CreateSchemaV1(SqlDb& db) {
  return ExecAll(
      db,
      {
          "CREATE TABLE users (name TEXT PRIMARY KEY, uid TEXT NOT NULL UNIQUE, "
          "role TEXT NOT NULL, created_at_ms BIGINT NOT NULL)",
          "CREATE TABLE tokens (id TEXT PRIMARY KEY, user_uid TEXT NOT NULL, "
          "user_name TEXT NOT NULL, salt TEXT NOT NULL, hash TEXT NOT NULL, "
          "created_at_ms BIGINT NOT NULL, expires_at_ms BIGINT NOT NULL, "
          "revoked_at_ms BIGINT NOT NULL)",
          "CREATE INDEX tokens_by_user ON tokens (user_name)",
          "CREATE TABLE requests (seq " + RisingKey(db) +
              ", id TEXT NOT NULL UNIQUE, user_name TEXT NOT NULL, verb TEXT NOT NULL, "
              "target TEXT NOT NULL, state TEXT NOT NULL, holder TEXT NOT NULL, "
              "message TEXT NOT NULL, exit_code BIGINT, cancel_requested BIGINT NOT NULL, "
              "created_at_ms BIGINT NOT NULL, started_at_ms BIGINT NOT NULL, "
              "finished_at_ms BIGINT NOT NULL)",
          "CREATE INDEX requests_by_state ON requests (state, holder)",
          "CREATE INDEX requests_by_user ON requests (user_name, seq)",
          "CREATE TABLE audit (id " + RisingKey(db) +
              ", at_ms BIGINT NOT NULL, user_name TEXT NOT NULL, verb TEXT NOT NULL, "
              "target TEXT NOT NULL, result TEXT NOT NULL)",
          "CREATE INDEX audit_by_time ON audit (at_ms)",
          "CREATE TABLE names (kind TEXT NOT NULL, name TEXT NOT NULL, owner TEXT NOT NULL, "
          "claimed_at_ms BIGINT NOT NULL, PRIMARY KEY (kind, name))",
          "CREATE TABLE leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, "
          "expires_at_ms BIGINT NOT NULL, acquired_at_ms BIGINT NOT NULL)",
          "CREATE TABLE secrets (owner TEXT NOT NULL, name TEXT NOT NULL, sealed TEXT NOT NULL, "
          "PRIMARY KEY (owner, name))",
      });
}

// Version 2: the dashboard's GPU samples, one row per cluster and time.
Status CreateSchemaV2(SqlDb& db) {
  return ExecAll(db,
                 {
                     "CREATE TABLE gpu_samples (cluster TEXT NOT NULL, at_ms BIGINT NOT NULL, "
                     "gpus BIGINT NOT NULL, in_use BIGINT NOT NULL, PRIMARY KEY (cluster, at_ms))",
                     "CREATE INDEX gpu_samples_by_time ON gpu_samples (at_ms)",
                 });
}

// Version 3: the dashboard's login codes and sessions, shared by every server on the database.
Status CreateSchemaV3(SqlDb& db) {
  return ExecAll(
      db, {
              "CREATE TABLE dashboard_codes (hash TEXT PRIMARY KEY, user_name TEXT NOT NULL, "
              "expires_at_ms BIGINT NOT NULL, session_ttl_ms BIGINT NOT NULL)",
              "CREATE TABLE dashboard_sessions (hash TEXT PRIMARY KEY, "
              "user_name TEXT NOT NULL, created_at_ms BIGINT NOT NULL, "
              "expires_at_ms BIGINT NOT NULL)",
              "CREATE INDEX dashboard_sessions_by_user ON dashboard_sessions (user_name)",
          });
}

const std::vector<Migration>& Migrations() {
  static const std::vector<Migration> kMigrations = {
      {1, "users, tokens, requests, audit, names, leases, secrets", CreateSchemaV1},
      {2, "gpu_samples", CreateSchemaV2},
      {3, "dashboard_codes, dashboard_sessions", CreateSchemaV3},
  };
  return kMigrations;
}

// ---- rows ---------------------------------------------------------------------------------------

constexpr const char* kRequestColumns =
    "id, user_name, verb, target, state, holder, message, exit_code, cancel_requested, "
    "created_at_ms, started_at_ms, finished_at_ms";

RequestRecord RequestOf(const SqlRow& row) {
  RequestRecord r;
  r.id = row.Text(0);
  r.user = row.Text(1);
  r.verb = row.Text(2);
  r.target = row.Text(3);
  r.state =
      ParseRequestState(row.Text(4)).ok() ? *ParseRequestState(row.Text(4)) : RequestState::kFailed;
  r.holder = row.Text(5);
  r.message = row.Text(6);
  if (!row.IsNull(7)) r.exit_code = row.Int(7);
  r.cancel_requested = row.Int(8) != 0;
  r.created_at_ms = row.Int(9);
  r.started_at_ms = row.Int(10);
  r.finished_at_ms = row.Int(11);
  return r;
}

User UserOf(const SqlRow& row, std::size_t first) {
  User u;
  u.name = row.Text(first);
  u.role = ParseRole(row.Text(first + 1)).ok() ? *ParseRole(row.Text(first + 1)) : Role::kUser;
  u.created_at_ms = row.Int(first + 2);
  return u;
}

TokenInfo TokenOf(const SqlRow& row) {
  return TokenInfo{row.Text(0), row.Text(1), row.Int(2), row.Int(3), row.Int(4)};
}

}  // namespace

// ---- names and enums ----------------------------------------------------------------------------

std::string_view RoleName(Role role) { return role == Role::kAdmin ? "admin" : "user"; }

Result<Role> ParseRole(std::string_view name) {
  if (name == "admin") return Role::kAdmin;
  if (name == "user") return Role::kUser;
  return InvalidArgument("invalid role '" + CleanText(name) + "': admin or user");
}

std::string_view RequestStateName(RequestState state) {
  switch (state) {
    case RequestState::kPending:
      return "PENDING";
    case RequestState::kRunning:
      return "RUNNING";
    case RequestState::kSucceeded:
      return "SUCCEEDED";
    case RequestState::kFailed:
      return "FAILED";
    case RequestState::kCancelled:
      return "CANCELLED";
  }
  return "FAILED";
}

Result<RequestState> ParseRequestState(std::string_view name) {
  for (RequestState s : {RequestState::kPending, RequestState::kRunning, RequestState::kSucceeded,
                         RequestState::kFailed, RequestState::kCancelled}) {
    if (RequestStateName(s) == name) return s;
  }
  return InvalidArgument("invalid request state '" + CleanText(name) + "'");
}

bool IsTerminal(RequestState state) {
  return state == RequestState::kSucceeded || state == RequestState::kFailed ||
         state == RequestState::kCancelled;
}

std::string_view NameKindName(NameKind kind) {
  return kind == NameKind::kCluster ? "cluster" : "managed_job";
}

Result<NameKind> ParseNameKind(std::string_view name) {
  if (name == "cluster") return NameKind::kCluster;
  if (name == "managed_job") return NameKind::kManagedJob;
  return InvalidArgument("invalid name kind '" + CleanText(name) + "': cluster or managed_job");
}

Status ValidateApiName(std::string_view field, std::string_view value) {
  auto fail = [&](std::string_view why) {
    return InvalidArgument("invalid " + std::string(field) + " '" + CleanText(value) +
                           "': " + std::string(why) + "; it must be 1 to " +
                           std::to_string(limits::kApiMaxNameBytes) +
                           " characters of a-z, A-Z, 0-9, '-', '_' and '.', starting with a "
                           "letter or digit, without '..'");
  };
  if (value.empty()) return fail("it is empty");
  if (value.size() > limits::kApiMaxNameBytes) {
    return fail("it has " + std::to_string(value.size()) + " characters");
  }
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (!alnum(value[0])) return fail("it does not start with a letter or digit");
  for (char c : value) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') {
      const bool printable = c > ' ' && c < 127;
      return fail(printable ? std::string("it contains '") + c + "'"
                            : std::string("it contains a space, NUL or control character"));
    }
  }
  if (value.find("..") != std::string_view::npos) return fail("it contains '..'");
  return Status::Ok();
}

Result<std::string> RandomHex(std::size_t bytes) {
  HERD_ASSIGN_OR_RETURN(std::string raw, RandomBytes(bytes));
  return Hex(raw);
}

std::string CleanText(std::string_view text) {
  std::string out;
  out.reserve(std::min(text.size(), limits::kApiMaxTextBytes));
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xbf;  // the allowed range of the second byte
    if (c >= 0x01 && c < 0x80) {
      len = 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // above U+10FFFF
    }
    bool valid = len > 0 && i + len <= text.size();
    for (std::size_t k = 1; valid && k < len; ++k) {
      const auto b = static_cast<unsigned char>(text[i + k]);
      valid = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xbf);
    }
    if (!valid) len = 1;
    if (out.size() + len > limits::kApiMaxTextBytes) break;
    if (valid) {
      out.append(text.substr(i, len));
    } else {
      out += '?';
    }
    i += len;
  }
  return out;
}

// ---- opening ------------------------------------------------------------------------------------

int ApiStore::SchemaVersion() { return Migrations().back().version; }

Result<std::unique_ptr<ApiStore>> ApiStore::Open(const std::string& url,
                                                 const std::string& secrets_key_path) {
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<SqlDb> db, OpenSqlDb(url));
  return Open(std::move(db), secrets_key_path);
}

Result<std::unique_ptr<ApiStore>> ApiStore::Open(std::unique_ptr<SqlDb> db,
                                                 const std::string& secrets_key_path) {
  HERD_RETURN_IF_ERROR(Migrate(*db, Migrations()).status());
  // One sealed secret, to tell whether the key file is the one the database was written with.
  HERD_ASSIGN_OR_RETURN(SqlRows any,
                        db->Query("SELECT owner, name, sealed FROM secrets ORDER BY owner, name "
                                  "LIMIT 1"));
  auto box = SecretBox::Load(secrets_key_path);
  if (!box.ok() && box.status().code() != Code::kNotFound) {
    return box.status().WithContext(db->Name());
  }
  if (!box.ok()) {
    if (!any.empty()) {
      return FailedPrecondition(db->Name() + " holds sealed secrets but their key " +
                                secrets_key_path +
                                " is missing: restore it (without it they cannot be opened)");
    }
    HERD_ASSIGN_OR_RETURN(SecretBox created, SecretBox::Create(secrets_key_path));
    return std::unique_ptr<ApiStore>(new ApiStore(std::move(db), std::move(created)));
  }
  if (!any.empty()) {
    const auto sealed = FromBase64(any[0].Text(2));
    if (!sealed || !box->Open(*sealed, SecretContext(any[0].Text(0), any[0].Text(1))).ok()) {
      return FailedPrecondition(db->Name() + ": key " + secrets_key_path +
                                " does not open its sealed secrets (the key file was replaced?): "
                                "restore the key the database was written with");
    }
  }
  return std::unique_ptr<ApiStore>(new ApiStore(std::move(db), std::move(*box)));
}

// ---- users --------------------------------------------------------------------------------------

Status ApiStore::AddUser(std::string_view name, Role role, std::int64_t now_ms) {
  HERD_RETURN_IF_ERROR(ValidateApiName("user name", name));
  HERD_ASSIGN_OR_RETURN(std::string uid, RandomBytes(16));
  HERD_ASSIGN_OR_RETURN(
      std::int64_t added,
      db_->Exec("INSERT INTO users (name, uid, role, created_at_ms) VALUES (?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                {std::string(name), Hex(uid), std::string(RoleName(role)), now_ms}));
  if (added == 0) return AlreadyExists("user '" + std::string(name) + "' already exists");
  return Status::Ok();
}

Result<User> ApiStore::GetUser(std::string_view name) {
  HERD_RETURN_IF_ERROR(ValidateApiName("user name", name));
  HERD_ASSIGN_OR_RETURN(SqlRows rows,
                        db_->Query("SELECT name, role, created_at_ms FROM users WHERE name = ?",
                                   {std::string(name)}));
  if (rows.empty()) return NotFound("no user '" + std::string(name) + "'");
  return UserOf(rows[0], 0);
}

Result<std::vector<User>> ApiStore::ListUsers() {
  HERD_ASSIGN_OR_RETURN(SqlRows rows,
                        db_->Query("SELECT name, role, created_at_ms FROM users ORDER BY name"));
  std::vector<User> users;
  for (const SqlRow& row : rows) users.push_back(UserOf(row, 0));
  return users;
}

Status ApiStore::DeleteUser(std::string_view name) {
  HERD_RETURN_IF_ERROR(ValidateApiName("user name", name));
  return db_->InTransaction([&]() -> Status {
    HERD_ASSIGN_OR_RETURN(std::int64_t deleted,
                          db_->Exec("DELETE FROM users WHERE name = ?", {std::string(name)}));
    if (deleted == 0) return NotFound("no user '" + std::string(name) + "'");
    // Their dashboard logins end with them (a user added again under the name starts logged out).
    return EndUserLogins(name);
  });
}

Status ApiStore::SetRole(std::string_view name, Role role) {
  HERD_RETURN_IF_ERROR(ValidateApiName("user name", name));
  HERD_ASSIGN_OR_RETURN(std::int64_t changed,
                        db_->Exec("UPDATE users SET role = ? WHERE name = ?",
                                  {std::string(RoleName(role)), std::string(name)}));
  if (changed == 0) return NotFound("no user '" + std::string(name) + "'");
  return Status::Ok();
}

// ---- tokens -------------------------------------------------------------------------------------

Result<NewToken> ApiStore::CreateToken(std::string_view user, std::int64_t expires_at_ms,
                                       std::int64_t now_ms) {
  HERD_RETURN_IF_ERROR(ValidateApiName("user name", user));
  const std::int64_t max_ahead = limits::kApiTokenMaxLifetime.count();
  if (expires_at_ms != 0 && (expires_at_ms <= now_ms || expires_at_ms - now_ms > max_ahead)) {
    return InvalidArgument("invalid token expiry " + std::to_string(expires_at_ms) +
                           ": 0 (never) or a unix time in milliseconds after now (" +
                           std::to_string(now_ms) + ") and at most " +
                           std::to_string(max_ahead / 86'400'000) + " days ahead");
  }
  HERD_ASSIGN_OR_RETURN(std::string id_bytes, RandomBytes(kTokenIdHex / 2));
  HERD_ASSIGN_OR_RETURN(std::string secret_bytes, RandomBytes(kTokenSecretBytes));
  HERD_ASSIGN_OR_RETURN(std::string salt, RandomBytes(kTokenSaltBytes));
  NewToken token;
  token.id = Hex(id_bytes);
  const std::string secret = Base64Url(secret_bytes);
  OPENSSL_cleanse(secret_bytes.data(), secret_bytes.size());
  token.token = std::string(kTokenPrefix) + token.id + "_" + secret;
  HERD_ASSIGN_OR_RETURN(std::string hash, TokenHash(salt, secret));
  HERD_RETURN_IF_ERROR(db_->InTransaction([&]() -> Status {
    HERD_ASSIGN_OR_RETURN(SqlRows rows,
                          db_->Query("SELECT uid FROM users WHERE name = ?", {std::string(user)}));
    if (rows.empty()) return NotFound("no user '" + std::string(user) + "'");
    return db_
        ->Exec(
            "INSERT INTO tokens (id, user_uid, user_name, salt, hash, created_at_ms, "
            "expires_at_ms, revoked_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
            {token.id, rows[0].Text(0), std::string(user), Hex(salt), Hex(hash), now_ms,
             expires_at_ms})
        .status();
  }));
  return token;
}

Status ApiStore::RevokeToken(std::string_view id, std::int64_t now_ms) {
  HERD_ASSIGN_OR_RETURN(
      std::int64_t changed,
      db_->Exec("UPDATE tokens SET revoked_at_ms = CASE WHEN revoked_at_ms = 0 THEN ? ELSE "
                "revoked_at_ms END WHERE id = ?",
                {now_ms, std::string(id)}));
  if (changed == 0) return NotFound("no token '" + CleanText(id) + "'");
  return Status::Ok();
}

Result<std::vector<TokenInfo>> ApiStore::ListTokens(std::string_view user) {
  HERD_ASSIGN_OR_RETURN(
      SqlRows rows,
      db_->Query("SELECT id, user_name, created_at_ms, expires_at_ms, revoked_at_ms FROM tokens "
                 "WHERE (CAST(? AS TEXT) = '' OR user_name = ?) ORDER BY created_at_ms, id",
                 {std::string(user), std::string(user)}));
  std::vector<TokenInfo> tokens;
  for (const SqlRow& row : rows) tokens.push_back(TokenOf(row));
  return tokens;
}

Result<User> ApiStore::Authenticate(std::string_view token, std::int64_t now_ms, AuthFailure* why) {
  auto deny = [&](AuthFailure reason, const char* message) -> Status {
    if (why != nullptr) *why = reason;
    return PermissionDenied(message);
  };
  const std::size_t id_at = kTokenPrefix.size();
  const std::size_t secret_at = id_at + kTokenIdHex + 1;
  bool well_formed = token.size() == kTokenChars && token.substr(0, id_at) == kTokenPrefix &&
                     IsLowerHex(token.substr(id_at, kTokenIdHex)) && token[secret_at - 1] == '_';
  for (std::size_t i = secret_at; well_formed && i < token.size(); ++i) {
    well_formed = IsBase64UrlChar(token[i]);
  }
  if (!well_formed) return deny(AuthFailure::kMalformed, "invalid token");
  const std::string id(token.substr(id_at, kTokenIdHex));
  HERD_ASSIGN_OR_RETURN(
      SqlRows rows,
      db_->Query("SELECT t.salt, t.hash, t.expires_at_ms, t.revoked_at_ms, u.name, u.role, "
                 "u.created_at_ms FROM tokens t LEFT JOIN users u ON u.uid = t.user_uid "
                 "WHERE t.id = ?",
                 {id}));
  if (rows.empty()) return deny(AuthFailure::kUnknown, "invalid token");
  const SqlRow& row = rows[0];
  const auto salt = FromHex(row.Text(0));
  const auto stored = FromHex(row.Text(1));
  HERD_ASSIGN_OR_RETURN(std::string hash, TokenHash(salt.value_or(""), token.substr(secret_at)));
  if (!salt || !stored || stored->size() != hash.size() ||
      CRYPTO_memcmp(stored->data(), hash.data(), hash.size()) != 0) {
    return deny(AuthFailure::kWrongSecret, "invalid token");
  }
  if (row.Int(3) != 0) return deny(AuthFailure::kRevoked, "token revoked");
  if (row.Int(2) != 0 && now_ms >= row.Int(2)) return deny(AuthFailure::kExpired, "token expired");
  if (row.IsNull(4)) return deny(AuthFailure::kUserDeleted, "user deleted");
  return UserOf(row, 4);
}

// ---- requests -----------------------------------------------------------------------------------

Result<std::string> ApiStore::CreateRequest(std::string_view user, std::string_view verb,
                                            std::string_view target, std::int64_t now_ms,
                                            std::string_view holder) {
  HERD_RETURN_IF_ERROR(ValidateApiName("user name", user));
  if (!holder.empty()) HERD_RETURN_IF_ERROR(ValidateWord("request holder", holder));
  if (verb.empty()) return InvalidArgument("a request needs a verb");
  HERD_ASSIGN_OR_RETURN(std::string random, RandomBytes(8));
  std::string id = "req-" + Hex(random);
  HERD_RETURN_IF_ERROR(
      db_->Exec("INSERT INTO requests (id, user_name, verb, target, state, holder, message, "
                "exit_code, cancel_requested, created_at_ms, started_at_ms, finished_at_ms) "
                "VALUES (?, ?, ?, ?, 'PENDING', ?, '', NULL, 0, ?, 0, 0)",
                {id, std::string(user), CleanText(verb), CleanText(target), std::string(holder),
                 now_ms})
          .status());
  return id;
}

Status ApiStore::SetRequestRunning(std::string_view id, std::string_view holder,
                                   std::int64_t now_ms) {
  HERD_RETURN_IF_ERROR(ValidateWord("request holder", holder));
  HERD_ASSIGN_OR_RETURN(std::int64_t changed,
                        db_->Exec("UPDATE requests SET state = 'RUNNING', holder = ?, "
                                  "started_at_ms = ? WHERE id = ? AND state = 'PENDING'",
                                  {std::string(holder), now_ms, std::string(id)}));
  if (changed == 1) return Status::Ok();
  HERD_ASSIGN_OR_RETURN(RequestRecord r, GetRequest(id));
  return FailedPrecondition("request " + r.id + " is " + std::string(RequestStateName(r.state)) +
                            ", not PENDING");
}

Status ApiStore::FinishRequest(std::string_view id, RequestState state, std::string_view message,
                               std::optional<std::int64_t> exit_code, std::int64_t now_ms) {
  if (!IsTerminal(state)) {
    return InvalidArgument("a request finishes SUCCEEDED, FAILED or CANCELLED, not " +
                           std::string(RequestStateName(state)));
  }
  SqlParam code = nullptr;
  if (exit_code) code = *exit_code;
  HERD_ASSIGN_OR_RETURN(
      std::int64_t changed,
      db_->Exec("UPDATE requests SET state = ?, message = ?, exit_code = ?, finished_at_ms = ? "
                "WHERE id = ? AND state IN ('PENDING', 'RUNNING')",
                {std::string(RequestStateName(state)), CleanText(message), code, now_ms,
                 std::string(id)}));
  if (changed == 1) return Status::Ok();
  HERD_ASSIGN_OR_RETURN(RequestRecord r, GetRequest(id));
  return FailedPrecondition("request " + r.id + " already finished " +
                            std::string(RequestStateName(r.state)));
}

Result<RequestRecord> ApiStore::GetRequest(std::string_view id) {
  HERD_ASSIGN_OR_RETURN(SqlRows rows, db_->Query(std::string("SELECT ") + kRequestColumns +
                                                     " FROM requests WHERE id = ?",
                                                 {std::string(id)}));
  if (rows.empty()) return NotFound("no request '" + CleanText(id) + "'");
  return RequestOf(rows[0]);
}

Result<std::vector<RequestRecord>> ApiStore::ListRequests(std::string_view user, int limit) {
  HERD_ASSIGN_OR_RETURN(SqlRows rows, db_->Query(std::string("SELECT ") + kRequestColumns +
                                                     " FROM requests WHERE (CAST(? AS TEXT) = '' "
                                                     "OR user_name = ?) ORDER BY seq DESC LIMIT ?",
                                                 {std::string(user), std::string(user),
                                                  std::int64_t{ClampLimit(limit)}}));
  std::vector<RequestRecord> out;
  for (const SqlRow& row : rows) out.push_back(RequestOf(row));
  return out;
}

Status ApiStore::RequestCancel(std::string_view id) {
  HERD_ASSIGN_OR_RETURN(std::int64_t changed,
                        db_->Exec("UPDATE requests SET cancel_requested = 1 WHERE id = ? AND "
                                  "state IN ('PENDING', 'RUNNING')",
                                  {std::string(id)}));
  if (changed == 1) return Status::Ok();
  HERD_ASSIGN_OR_RETURN(RequestRecord r, GetRequest(id));
  return FailedPrecondition("request " + r.id + " already finished " +
                            std::string(RequestStateName(r.state)));
}

Result<bool> ApiStore::IsCancelRequested(std::string_view id) {
  HERD_ASSIGN_OR_RETURN(
      SqlRows rows,
      db_->Query("SELECT cancel_requested FROM requests WHERE id = ?", {std::string(id)}));
  if (rows.empty()) return NotFound("no request '" + CleanText(id) + "'");
  return rows[0].Int(0) != 0;
}

Result<std::int64_t> ApiStore::FailUnfinished(std::string_view holder, std::string_view message,
                                              std::int64_t now_ms) {
  return db_->Exec(
      "UPDATE requests SET state = 'FAILED', message = ?, finished_at_ms = ? "
      "WHERE state IN ('PENDING', 'RUNNING') AND (CAST(? AS TEXT) = '' OR holder = ?)",
      {CleanText(message), now_ms, std::string(holder), std::string(holder)});
}

// ---- audit --------------------------------------------------------------------------------------

Status ApiStore::RecordAudit(std::string_view user, std::string_view verb, std::string_view target,
                             std::string_view result, std::int64_t now_ms) {
  // The user as given (an unauthenticated caller's claimed name is worth recording), cleaned.
  return db_
      ->Exec("INSERT INTO audit (at_ms, user_name, verb, target, result) VALUES (?, ?, ?, ?, ?)",
             {now_ms, CleanText(user), CleanText(verb), CleanText(target), CleanText(result)})
      .status();
}

Result<std::vector<AuditEntry>> ApiStore::ListAudit(int limit, std::int64_t since_ms) {
  HERD_ASSIGN_OR_RETURN(
      SqlRows rows,
      db_->Query("SELECT id, at_ms, user_name, verb, target, result FROM audit WHERE at_ms >= ? "
                 "ORDER BY id DESC LIMIT ?",
                 {since_ms, std::int64_t{ClampLimit(limit)}}));
  std::vector<AuditEntry> out;
  for (const SqlRow& row : rows) {
    out.push_back(
        AuditEntry{row.Int(0), row.Int(1), row.Text(2), row.Text(3), row.Text(4), row.Text(5)});
  }
  return out;
}

// ---- names --------------------------------------------------------------------------------------

Status ApiStore::ClaimName(NameKind kind, std::string_view name, std::string_view user,
                           std::int64_t now_ms) {
  HERD_RETURN_IF_ERROR(ValidateNameOf(kind, name));
  HERD_RETURN_IF_ERROR(ValidateApiName("user name", user));
  const std::string kind_name(NameKindName(kind));
  return db_->InTransaction([&]() -> Status {
    HERD_ASSIGN_OR_RETURN(
        std::int64_t claimed,
        db_->Exec("INSERT INTO names (kind, name, owner, claimed_at_ms) VALUES (?, ?, ?, ?) "
                  "ON CONFLICT DO NOTHING",
                  {kind_name, std::string(name), std::string(user), now_ms}));
    if (claimed == 1) return Status::Ok();
    HERD_ASSIGN_OR_RETURN(SqlRows rows,
                          db_->Query("SELECT owner FROM names WHERE kind = ? AND name = ?",
                                     {kind_name, std::string(name)}));
    if (!rows.empty() && rows[0].Text(0) == user) return Status::Ok();
    const std::string owner = rows.empty() ? "another user" : "user '" + rows[0].Text(0) + "'";
    return AlreadyExists(std::string(kind == NameKind::kCluster ? "cluster" : "managed job") +
                         " name '" + std::string(name) + "' belongs to " + owner);
  });
}

Result<std::string> ApiStore::OwnerOf(NameKind kind, std::string_view name) {
  HERD_RETURN_IF_ERROR(ValidateNameOf(kind, name));
  HERD_ASSIGN_OR_RETURN(SqlRows rows,
                        db_->Query("SELECT owner FROM names WHERE kind = ? AND name = ?",
                                   {std::string(NameKindName(kind)), std::string(name)}));
  if (rows.empty()) {
    return NotFound("no " + std::string(NameKindName(kind)) + " '" + std::string(name) + "'");
  }
  return rows[0].Text(0);
}

Status ApiStore::ReleaseName(NameKind kind, std::string_view name) {
  HERD_RETURN_IF_ERROR(ValidateNameOf(kind, name));
  HERD_ASSIGN_OR_RETURN(std::int64_t deleted,
                        db_->Exec("DELETE FROM names WHERE kind = ? AND name = ?",
                                  {std::string(NameKindName(kind)), std::string(name)}));
  if (deleted == 0) {
    return NotFound("no " + std::string(NameKindName(kind)) + " '" + std::string(name) + "'");
  }
  return Status::Ok();
}

Result<std::vector<OwnedName>> ApiStore::ListNames(NameKind kind, std::string_view user) {
  HERD_ASSIGN_OR_RETURN(
      SqlRows rows,
      db_->Query("SELECT name, owner, claimed_at_ms FROM names WHERE kind = ? AND "
                 "(CAST(? AS TEXT) = '' OR owner = ?) ORDER BY name",
                 {std::string(NameKindName(kind)), std::string(user), std::string(user)}));
  std::vector<OwnedName> out;
  for (const SqlRow& row : rows) {
    out.push_back(OwnedName{kind, row.Text(0), row.Text(1), row.Int(2)});
  }
  return out;
}

// ---- leases -------------------------------------------------------------------------------------

namespace {

Result<std::int64_t> LeaseTtl(std::int64_t ttl_ms) {
  if (ttl_ms == 0) return static_cast<std::int64_t>(limits::kApiLeaseTtl.count());
  if (ttl_ms < 0 || ttl_ms > limits::kApiLeaseMaxTtl.count()) {
    return InvalidArgument("invalid lease TTL " + std::to_string(ttl_ms) + " ms: 1 to " +
                           std::to_string(limits::kApiLeaseMaxTtl.count()) +
                           " (0 for the default)");
  }
  return ttl_ms;
}

}  // namespace

Result<bool> ApiStore::TryAcquireLease(std::string_view name, std::string_view holder,
                                       std::int64_t ttl_ms, std::int64_t now_ms) {
  HERD_RETURN_IF_ERROR(ValidateWord("lease name", name));
  HERD_RETURN_IF_ERROR(ValidateWord("lease holder", holder));
  HERD_ASSIGN_OR_RETURN(const std::int64_t ttl, LeaseTtl(ttl_ms));
  // One statement: the insert, or the update of a row that is this holder's or expired, is
  // atomic in both databases, so racing servers cannot both succeed.
  HERD_ASSIGN_OR_RETURN(
      std::int64_t changed,
      db_->Exec("INSERT INTO leases (name, holder, expires_at_ms, acquired_at_ms) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
                "holder = excluded.holder, expires_at_ms = excluded.expires_at_ms, "
                "acquired_at_ms = CASE WHEN leases.holder = excluded.holder "
                "THEN leases.acquired_at_ms ELSE excluded.acquired_at_ms END "
                "WHERE leases.holder = excluded.holder OR leases.expires_at_ms <= ?",
                {std::string(name), std::string(holder), now_ms + ttl, now_ms, now_ms}));
  return changed == 1;
}

Status ApiStore::RenewLease(std::string_view name, std::string_view holder, std::int64_t ttl_ms,
                            std::int64_t now_ms) {
  HERD_RETURN_IF_ERROR(ValidateWord("lease name", name));
  HERD_RETURN_IF_ERROR(ValidateWord("lease holder", holder));
  HERD_ASSIGN_OR_RETURN(const std::int64_t ttl, LeaseTtl(ttl_ms));
  HERD_ASSIGN_OR_RETURN(std::int64_t changed,
                        db_->Exec("UPDATE leases SET expires_at_ms = ? WHERE name = ? AND "
                                  "holder = ? AND expires_at_ms > ?",
                                  {now_ms + ttl, std::string(name), std::string(holder), now_ms}));
  if (changed == 1) return Status::Ok();
  HERD_ASSIGN_OR_RETURN(std::optional<std::string> live, LeaseHolder(name, now_ms));
  if (live) {
    return FailedPrecondition("lease " + std::string(name) + " is held by " + *live + ", not " +
                              std::string(holder));
  }
  return FailedPrecondition("lease " + std::string(name) + " of " + std::string(holder) +
                            " expired or was released");
}

Status ApiStore::ReleaseLease(std::string_view name, std::string_view holder) {
  HERD_RETURN_IF_ERROR(ValidateWord("lease name", name));
  HERD_RETURN_IF_ERROR(ValidateWord("lease holder", holder));
  return db_
      ->Exec("DELETE FROM leases WHERE name = ? AND holder = ?",
             {std::string(name), std::string(holder)})
      .status();
}

Result<std::optional<std::string>> ApiStore::LeaseHolder(std::string_view name,
                                                         std::int64_t now_ms) {
  HERD_RETURN_IF_ERROR(ValidateWord("lease name", name));
  HERD_ASSIGN_OR_RETURN(SqlRows rows,
                        db_->Query("SELECT holder FROM leases WHERE name = ? AND expires_at_ms > ?",
                                   {std::string(name), now_ms}));
  if (rows.empty()) return std::optional<std::string>();
  return std::optional<std::string>(rows[0].Text(0));
}

// ---- secrets ------------------------------------------------------------------------------------

Status ApiStore::PutSecret(std::string_view owner, std::string_view key,
                           std::string_view plaintext) {
  HERD_RETURN_IF_ERROR(ValidateApiName("secret owner", owner));
  HERD_RETURN_IF_ERROR(ValidateSecretKey(key));
  if (plaintext.size() > limits::kApiMaxSecretBytes) {
    return InvalidArgument("secret " + std::string(key) + " has " +
                           std::to_string(plaintext.size()) + " bytes, at most " +
                           std::to_string(limits::kApiMaxSecretBytes));
  }
  HERD_ASSIGN_OR_RETURN(std::string sealed, box_.Seal(plaintext, SecretContext(owner, key)));
  return db_
      ->Exec(
          "INSERT INTO secrets (owner, name, sealed) VALUES (?, ?, ?) "
          "ON CONFLICT (owner, name) DO UPDATE SET sealed = excluded.sealed",
          {std::string(owner), std::string(key), Base64(sealed)})
      .status();
}

Result<std::string> ApiStore::GetSecret(std::string_view owner, std::string_view key) {
  HERD_RETURN_IF_ERROR(ValidateApiName("secret owner", owner));
  HERD_RETURN_IF_ERROR(ValidateSecretKey(key));
  HERD_ASSIGN_OR_RETURN(SqlRows rows,
                        db_->Query("SELECT sealed FROM secrets WHERE owner = ? AND name = ?",
                                   {std::string(owner), std::string(key)}));
  if (rows.empty()) {
    return NotFound("no secret " + std::string(key) + " of user '" + std::string(owner) + "'");
  }
  const auto sealed = FromBase64(rows[0].Text(0));
  if (!sealed) {
    return FailedPrecondition(db_->Name() + ": secret " + std::string(key) + " of user '" +
                              std::string(owner) + "' is damaged (not base64)");
  }
  auto plain = box_.Open(*sealed, SecretContext(owner, key));
  if (!plain.ok()) {
    return plain.status().WithContext(db_->Name() + ": secret " + std::string(key) + " of user '" +
                                      std::string(owner) + "'");
  }
  return plain;
}

Status ApiStore::DeleteSecret(std::string_view owner, std::string_view key) {
  HERD_RETURN_IF_ERROR(ValidateApiName("secret owner", owner));
  HERD_RETURN_IF_ERROR(ValidateSecretKey(key));
  HERD_ASSIGN_OR_RETURN(std::int64_t deleted,
                        db_->Exec("DELETE FROM secrets WHERE owner = ? AND name = ?",
                                  {std::string(owner), std::string(key)}));
  if (deleted == 0) {
    return NotFound("no secret " + std::string(key) + " of user '" + std::string(owner) + "'");
  }
  return Status::Ok();
}

Result<std::vector<std::string>> ApiStore::ListSecretKeys(std::string_view owner) {
  HERD_RETURN_IF_ERROR(ValidateApiName("secret owner", owner));
  HERD_ASSIGN_OR_RETURN(
      SqlRows rows,
      db_->Query("SELECT name FROM secrets WHERE owner = ? ORDER BY name", {std::string(owner)}));
  std::vector<std::string> keys;
  for (const SqlRow& row : rows) keys.push_back(row.Text(0));
  return keys;
}

// ---- GPU samples --------------------------------------------------------------------------------

GpuSampleBounds GpuSampleBounds::Default() {
  using std::chrono::milliseconds;
  return {std::chrono::duration_cast<milliseconds>(limits::kDashboardGpuSampleInterval).count(),
          std::chrono::duration_cast<milliseconds>(limits::kDashboardGpuSampleRetention).count(),
          static_cast<std::int64_t>(limits::kDashboardGpuSamplesPerCluster)};
}

Result<bool> ApiStore::RecordGpuSample(std::string_view cluster, std::int64_t gpus,
                                       std::int64_t in_use, std::int64_t now_ms,
                                       const GpuSampleBounds& bounds) {
  HERD_RETURN_IF_ERROR(controller::ValidateClusterName(cluster));
  if (gpus < 0 || in_use < 0) return InvalidArgument("GPU sample: negative count");
  const std::string name(cluster);
  bool recorded = false;
  HERD_RETURN_IF_ERROR(db_->InTransaction([&]() -> Status {
    recorded = false;
    HERD_ASSIGN_OR_RETURN(
        SqlRows newest,
        db_->Query("SELECT at_ms FROM gpu_samples WHERE cluster = ? ORDER BY at_ms DESC LIMIT 1",
                   {name}));
    if (!newest.empty() && now_ms - newest[0].Int(0) < bounds.interval_ms) return Status::Ok();
    HERD_ASSIGN_OR_RETURN(
        std::int64_t added,
        db_->Exec("INSERT INTO gpu_samples (cluster, at_ms, gpus, in_use) VALUES (?, ?, ?, ?) "
                  "ON CONFLICT DO NOTHING",
                  {name, now_ms, gpus, in_use}));
    recorded = added == 1;
    HERD_RETURN_IF_ERROR(
        db_->Exec("DELETE FROM gpu_samples WHERE at_ms < ?", {now_ms - bounds.retention_ms})
            .status());
    // Past the cap: every sample of the cluster at or before the newest one that is too many.
    return db_
        ->Exec(
            "DELETE FROM gpu_samples WHERE cluster = ? AND at_ms <= (SELECT at_ms FROM "
            "gpu_samples WHERE cluster = ? ORDER BY at_ms DESC LIMIT 1 OFFSET ?)",
            {name, name, bounds.per_cluster})
        .status();
  }));
  return recorded;
}

Result<std::vector<GpuSample>> ApiStore::ListGpuSamples(std::string_view cluster,
                                                        std::int64_t since_ms) {
  HERD_RETURN_IF_ERROR(controller::ValidateClusterName(cluster));
  HERD_ASSIGN_OR_RETURN(SqlRows rows,
                        db_->Query("SELECT at_ms, gpus, in_use FROM gpu_samples WHERE cluster = ? "
                                   "AND at_ms >= ? ORDER BY at_ms",
                                   {std::string(cluster), since_ms}));
  std::vector<GpuSample> out;
  out.reserve(rows.size());
  for (const SqlRow& row : rows) out.push_back(GpuSample{row.Int(0), row.Int(1), row.Int(2)});
  return out;
}

// ---- dashboard logins ---------------------------------------------------------------------------

namespace {

// What the tables key a login secret by: its SHA-256 as hex (the secret itself is never stored).
std::string SecretHash(std::string_view secret) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  EVP_Digest(secret.data(), secret.size(), md.data(), &len, EVP_sha256(), nullptr);
  return Hex(std::string_view(reinterpret_cast<const char*>(md.data()), len));
}

// Deletes the rows of `table` that expire first until fewer than `max` are left (room for one).
Status MakeRoom(SqlDb& db, const std::string& table, std::size_t max) {
  HERD_ASSIGN_OR_RETURN(SqlRows count, db.Query("SELECT COUNT(*) FROM " + table));
  const std::int64_t n = count.empty() ? 0 : count[0].Int(0);
  const std::int64_t keep = max == 0 ? 0 : static_cast<std::int64_t>(max) - 1;
  if (n <= keep) return Status::Ok();
  return db
      .Exec("DELETE FROM " + table + " WHERE hash IN (SELECT hash FROM " + table +
                " ORDER BY expires_at_ms, hash LIMIT ?)",
            {n - keep})
      .status();
}

}  // namespace

Status ApiStore::PutLoginCode(std::string_view secret, const LoginCodeRow& code,
                              std::size_t max_codes, std::int64_t now_ms) {
  return db_->InTransaction([&]() -> Status {
    HERD_RETURN_IF_ERROR(
        db_->Exec("DELETE FROM dashboard_codes WHERE expires_at_ms <= ?", {now_ms}).status());
    HERD_RETURN_IF_ERROR(MakeRoom(*db_, "dashboard_codes", max_codes));
    return db_
        ->Exec(
            "INSERT INTO dashboard_codes (hash, user_name, expires_at_ms, session_ttl_ms) "
            "VALUES (?, ?, ?, ?)",
            {SecretHash(secret), code.user, code.expires_at_ms, code.session_ttl_ms})
        .status();
  });
}

Result<LoginCodeRow> ApiStore::TakeLoginCode(std::string_view secret) {
  LoginCodeRow code;
  HERD_RETURN_IF_ERROR(db_->InTransaction([&]() -> Status {
    HERD_ASSIGN_OR_RETURN(
        SqlRows rows,
        db_->Query(
            "SELECT user_name, expires_at_ms, session_ttl_ms FROM dashboard_codes WHERE hash = ?",
            {SecretHash(secret)}));
    if (rows.empty()) return NotFound("no such login code");
    HERD_ASSIGN_OR_RETURN(std::int64_t gone, db_->Exec("DELETE FROM dashboard_codes WHERE hash = ?",
                                                       {SecretHash(secret)}));
    if (gone != 1) return NotFound("no such login code");
    code = LoginCodeRow{rows[0].Text(0), rows[0].Int(1), rows[0].Int(2)};
    return Status::Ok();
  }));
  return code;
}

Status ApiStore::PutSession(std::string_view secret, const SessionRow& session,
                            std::size_t max_sessions, std::int64_t now_ms) {
  return db_->InTransaction([&]() -> Status {
    HERD_RETURN_IF_ERROR(
        db_->Exec("DELETE FROM dashboard_sessions WHERE expires_at_ms <= ?", {now_ms}).status());
    HERD_RETURN_IF_ERROR(MakeRoom(*db_, "dashboard_sessions", max_sessions));
    return db_
        ->Exec(
            "INSERT INTO dashboard_sessions (hash, user_name, created_at_ms, expires_at_ms) "
            "VALUES (?, ?, ?, ?)",
            {SecretHash(secret), session.user, session.created_at_ms, session.expires_at_ms})
        .status();
  });
}

Result<SessionRow> ApiStore::FindSession(std::string_view secret) {
  HERD_ASSIGN_OR_RETURN(SqlRows rows, db_->Query("SELECT user_name, created_at_ms, expires_at_ms "
                                                 "FROM dashboard_sessions WHERE hash = ?",
                                                 {SecretHash(secret)}));
  if (rows.empty()) return NotFound("no such session");
  return SessionRow{rows[0].Text(0), rows[0].Int(1), rows[0].Int(2)};
}

Status ApiStore::EndSession(std::string_view secret) {
  return db_->Exec("DELETE FROM dashboard_sessions WHERE hash = ?", {SecretHash(secret)}).status();
}

Status ApiStore::EndUserLogins(std::string_view user) {
  return db_->InTransaction([&]() -> Status {
    HERD_RETURN_IF_ERROR(
        db_->Exec("DELETE FROM dashboard_sessions WHERE user_name = ?", {std::string(user)})
            .status());
    return db_->Exec("DELETE FROM dashboard_codes WHERE user_name = ?", {std::string(user)})
        .status();
  });
}

Result<std::size_t> ApiStore::CountSessions() {
  HERD_ASSIGN_OR_RETURN(SqlRows rows, db_->Query("SELECT COUNT(*) FROM dashboard_sessions"));
  return static_cast<std::size_t>(rows.empty() ? 0 : rows[0].Int(0));
}

}  // namespace herd::server
