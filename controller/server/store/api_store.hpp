// The API server's state (`herd api`), in one database that one or several servers share: users
// and their roles, API tokens (only a salted hash kept), a row for every mutating request (so a
// server killed mid-request ends it when it starts again), the audit trail, which user owns each
// cluster and managed-job name, leases (each managed job's controller runs on exactly one server)
// and users' secrets sealed at rest (AES-256-GCM, shared/crypto/secret_box.hpp).
//
// The store never reads a clock: every time is a unix-milliseconds argument (`now_ms`), so the
// server injects its clock and tests move time by hand. Every call is one statement or one
// transaction (SqlDb::InTransaction), safe to make from several threads and from several servers
// on one PostgreSQL database. Names and free text are checked or cleaned here, never glued into
// SQL (sql_db.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "controller/server/store/sql_db.hpp"
#include "shared/common/status.hpp"
#include "shared/crypto/secret_box.hpp"

namespace herd::server {

enum class Role { kAdmin, kUser };
std::string_view RoleName(Role role);  // "admin", "user"
Result<Role> ParseRole(std::string_view name);

struct User {
  std::string name;
  Role role = Role::kUser;
  std::int64_t created_at_ms = 0;
};

// A token as listed: never its secret (the store does not have it).
struct TokenInfo {
  std::string id;  // 16 hex characters, the public part of the token
  std::string user;
  std::int64_t created_at_ms = 0;
  std::int64_t expires_at_ms = 0;  // 0: never
  std::int64_t revoked_at_ms = 0;  // 0: not revoked
};

// What CreateToken hands out once: the plaintext is not stored and cannot be shown again.
struct NewToken {
  std::string id;
  std::string token;  // "herd_<id>_<43 base64url characters>"
};

// Why Authenticate refused a token. Each is PermissionDenied for the caller; this tells them
// apart for the server's log and for tests.
enum class AuthFailure {
  kMalformed,    // not of the token format
  kUnknown,      // no token with this id
  kWrongSecret,  // the id exists, the secret does not match
  kExpired,
  kRevoked,
  kUserDeleted,  // its user was deleted (a user added again under the name is another user)
};

enum class RequestState { kPending, kRunning, kSucceeded, kFailed, kCancelled };
std::string_view RequestStateName(RequestState state);  // "PENDING", ..., "CANCELLED"
Result<RequestState> ParseRequestState(std::string_view name);
bool IsTerminal(RequestState state);

struct RequestRecord {
  std::string id;  // "req-" + 16 hex characters
  std::string user;
  std::string verb;    // "launch", "down", "jobs.launch", ...
  std::string target;  // what it acts on: a cluster or job name, "" for none
  RequestState state = RequestState::kPending;
  std::string holder;                     // the server that accepted / runs it
  std::string message;                    // why it failed, or what it returned
  std::optional<std::int64_t> exit_code;  // set when finished with one
  bool cancel_requested = false;
  std::int64_t created_at_ms = 0;
  std::int64_t started_at_ms = 0;   // 0 until RUNNING
  std::int64_t finished_at_ms = 0;  // 0 until finished
};

struct AuditEntry {
  std::int64_t id = 0;  // rises with each entry
  std::int64_t at_ms = 0;
  std::string user;
  std::string verb;
  std::string target;
  std::string result;  // "ok", "denied", an error message
};

enum class NameKind { kCluster, kManagedJob };
std::string_view NameKindName(NameKind kind);  // "cluster", "managed_job"
Result<NameKind> ParseNameKind(std::string_view name);

struct OwnedName {
  NameKind kind = NameKind::kCluster;
  std::string name;
  std::string owner;
  std::int64_t claimed_at_ms = 0;
};

// One sample of a cluster's GPUs (the dashboard's chart of GPUs in use over time).
struct GpuSample {
  std::int64_t at_ms = 0;
  std::int64_t gpus = 0;    // the GPUs its nodes have
  std::int64_t in_use = 0;  // held by its unfinished jobs
};

// How often and how many GPU samples the store keeps (limits.hpp's by default; tests shrink them).
// A dashboard login code not yet redeemed, and a browser session (ApiStore's dashboard logins).
struct LoginCodeRow {
  std::string user;
  std::int64_t expires_at_ms = 0;
  std::int64_t session_ttl_ms = 0;  // the length of the session it opens
};
struct SessionRow {
  std::string user;
  std::int64_t created_at_ms = 0;
  std::int64_t expires_at_ms = 0;
};

struct GpuSampleBounds {
  std::int64_t interval_ms;   // a cluster's samples at least this far apart
  std::int64_t retention_ms;  // samples older than this (of any cluster) are dropped
  std::int64_t per_cluster;   // at most this many of one cluster, the oldest dropped
  static GpuSampleBounds Default();
};

// 1 to limits::kApiMaxNameBytes characters of a-z, A-Z, 0-9, '-', '_' and '.', starting with a
// letter or digit, without "..": so no quote, ';', '/', space, NUL or control character. The
// InvalidArgument names `field` and states the rule. User names and managed-job names follow it;
// cluster names follow the controller's stricter ValidateClusterName.
Status ValidateApiName(std::string_view field, std::string_view value);

class ApiStore {
 public:
  // Opens `url` (OpenSqlDb), brings its schema to this herd's version (Migrate) and loads the
  // secrets key at `secrets_key_path` (created 0600 when missing and no sealed secret exists;
  // FailedPrecondition when secrets exist but the key is missing or is not theirs).
  static Result<std::unique_ptr<ApiStore>> Open(const std::string& url,
                                                const std::string& secrets_key_path);
  // Over a connection the caller opened (tests: a second connection to the same database).
  static Result<std::unique_ptr<ApiStore>> Open(std::unique_ptr<SqlDb> db,
                                                const std::string& secrets_key_path);
  // The newest schema version this herd knows.
  static int SchemaVersion();

  SqlDb& db() { return *db_; }

  // ---- users
  // AlreadyExists when the name is taken; InvalidArgument for a bad name.
  Status AddUser(std::string_view name, Role role, std::int64_t now_ms);
  Result<User> GetUser(std::string_view name);  // NotFound
  Result<std::vector<User>> ListUsers();        // by name
  // NotFound when there is none. Its tokens stop working (kUserDeleted); its names, requests and
  // secrets stay (an admin decides what happens to its clusters).
  Status DeleteUser(std::string_view name);
  Status SetRole(std::string_view name, Role role);  // NotFound

  // ---- tokens
  // `expires_at_ms` 0: never; else after `now_ms` and at most limits::kApiTokenMaxLifetime ahead.
  // NotFound when the user does not exist.
  Result<NewToken> CreateToken(std::string_view user, std::int64_t expires_at_ms,
                               std::int64_t now_ms);
  // NotFound when no token has this id. Revoking twice keeps the first time.
  Status RevokeToken(std::string_view id, std::int64_t now_ms);
  // One user's tokens (or everyone's, user ""), oldest first; secrets are never listed.
  Result<std::vector<TokenInfo>> ListTokens(std::string_view user);
  // The token's user, or PermissionDenied with a short message fit for a 401 ("invalid token",
  // "token expired", "token revoked", "user deleted"). `why`, when given, gets the reason.
  Result<User> Authenticate(std::string_view token, std::int64_t now_ms,
                            AuthFailure* why = nullptr);

  // ---- requests
  // A PENDING row for a mutating call, before any work. `holder` names the accepting server (so
  // FailUnfinished(holder) ends its pending rows too). Verb, target are cleaned (CleanText).
  Result<std::string> CreateRequest(std::string_view user, std::string_view verb,
                                    std::string_view target, std::int64_t now_ms,
                                    std::string_view holder = {});
  // PENDING -> RUNNING by `holder`. FailedPrecondition from any other state; NotFound.
  Status SetRequestRunning(std::string_view id, std::string_view holder, std::int64_t now_ms);
  // PENDING/RUNNING -> `state` (SUCCEEDED, FAILED or CANCELLED: else InvalidArgument).
  // FailedPrecondition when already finished; NotFound.
  Status FinishRequest(std::string_view id, RequestState state, std::string_view message,
                       std::optional<std::int64_t> exit_code, std::int64_t now_ms);
  Result<RequestRecord> GetRequest(std::string_view id);
  // Newest first; `limit` <= 0: limits::kApiListDefaultLimit; capped at kApiListMaxLimit.
  Result<std::vector<RequestRecord>> ListRequests(std::string_view user, int limit);
  // Sets the cancel flag that the request's worker polls. FailedPrecondition when it already
  // finished; NotFound.
  Status RequestCancel(std::string_view id);
  Result<bool> IsCancelRequested(std::string_view id);
  // Every PENDING or RUNNING request of `holder` (all of them with holder "") becomes FAILED with
  // `message`: a server that starts again after a crash ends what it had accepted. Returns how
  // many.
  Result<std::int64_t> FailUnfinished(std::string_view holder, std::string_view message,
                                      std::int64_t now_ms);

  // ---- audit
  Status RecordAudit(std::string_view user, std::string_view verb, std::string_view target,
                     std::string_view result, std::int64_t now_ms);
  // Entries at or after `since_ms`, newest first, at most `limit` (as ListRequests).
  Result<std::vector<AuditEntry>> ListAudit(int limit, std::int64_t since_ms);

  // ---- ownership of names (global per server: one cluster "train" for all users)
  // Claims `name` for `user`: OK when free or already `user`'s, AlreadyExists naming the owner
  // when another user holds it.
  Status ClaimName(NameKind kind, std::string_view name, std::string_view user,
                   std::int64_t now_ms);
  Result<std::string> OwnerOf(NameKind kind, std::string_view name);  // NotFound when free
  Status ReleaseName(NameKind kind, std::string_view name);           // NotFound when free
  // One user's names (everyone's with user ""), by name.
  Result<std::vector<OwnedName>> ListNames(NameKind kind, std::string_view user);

  // ---- leases
  // True when `holder` holds `name` afterwards: it was free, expired (at or before now_ms), or
  // already `holder`'s (renewed). `ttl_ms` 0: limits::kApiLeaseTtl; at most kApiLeaseMaxTtl.
  // One atomic statement: of many servers racing for a free lease exactly one gets it.
  Result<bool> TryAcquireLease(std::string_view name, std::string_view holder, std::int64_t ttl_ms,
                               std::int64_t now_ms);
  // Extends a lease `holder` holds and that has not expired; FailedPrecondition naming the
  // holder (or saying it expired) otherwise.
  Status RenewLease(std::string_view name, std::string_view holder, std::int64_t ttl_ms,
                    std::int64_t now_ms);
  // Gives the lease up if `holder` holds it (a no-op otherwise).
  Status ReleaseLease(std::string_view name, std::string_view holder);
  // The live holder, nullopt when free or expired.
  Result<std::optional<std::string>> LeaseHolder(std::string_view name, std::int64_t now_ms);

  // ---- secrets sealed at rest
  // `key`: 1 to 128 characters of A-Z, a-z, 0-9 and '_', not starting with a digit (an
  // environment variable name). Replaces an existing value. The plaintext is sealed with the
  // store's key, bound to (owner, key): a sealed value copied to another row does not open.
  Status PutSecret(std::string_view owner, std::string_view key, std::string_view plaintext);
  Result<std::string> GetSecret(std::string_view owner, std::string_view key);  // NotFound
  Status DeleteSecret(std::string_view owner, std::string_view key);            // NotFound
  Result<std::vector<std::string>> ListSecretKeys(std::string_view owner);      // by key

  // ---- GPU samples (the dashboard's chart of GPUs in use per cluster)
  // Records a sample of `cluster` at now_ms unless its newest one is less than
  // bounds.interval_ms old (false then: not recorded), and drops what the bounds no longer keep.
  // Several servers sampling one cluster at once record it once. InvalidArgument for a bad
  // cluster name or a negative count.
  Result<bool> RecordGpuSample(std::string_view cluster, std::int64_t gpus, std::int64_t in_use,
                               std::int64_t now_ms,
                               const GpuSampleBounds& bounds = GpuSampleBounds::Default());
  // The cluster's samples at or after since_ms, oldest first.
  Result<std::vector<GpuSample>> ListGpuSamples(std::string_view cluster, std::int64_t since_ms);

  // ---- dashboard logins (dashboard/sessions.hpp): one-time login codes and browser sessions,
  // in the database so that every server on it knows them (two servers behind one load balancer).
  // Each is given by its secret (the code, the cookie's value) and kept under the secret's
  // SHA-256 (hex): the secret itself is never stored.
  // Stores a code. Expired codes go; past max_codes, those that expire first.
  Status PutLoginCode(std::string_view secret, const LoginCodeRow& code, std::size_t max_codes,
                      std::int64_t now_ms);
  // Removes the code and returns what it was (NotFound when unknown): of servers redeeming one
  // code at once, exactly one gets it.
  Result<LoginCodeRow> TakeLoginCode(std::string_view secret);
  // Stores a session. Sessions expired before now_ms go; past max_sessions, those that expire
  // first.
  Status PutSession(std::string_view secret, const SessionRow& session, std::size_t max_sessions,
                    std::int64_t now_ms);
  Result<SessionRow> FindSession(std::string_view secret);  // NotFound when unknown
  Status EndSession(std::string_view secret);               // a no-op for an unknown one
  // Ends every session and code of `user`.
  Status EndUserLogins(std::string_view user);
  Result<std::size_t> CountSessions();

  ApiStore(const ApiStore&) = delete;
  ApiStore& operator=(const ApiStore&) = delete;

 private:
  ApiStore(std::unique_ptr<SqlDb> db, SecretBox box) : db_(std::move(db)), box_(std::move(box)) {}
  Result<TokenInfo> TokenById(std::string_view id);

  std::unique_ptr<SqlDb> db_;
  SecretBox box_;
};

// Free text as the store keeps it: at most limits::kApiMaxTextBytes bytes, NUL and invalid UTF-8
// replaced by '?', never a cut multi-byte character (PostgreSQL refuses NUL and invalid UTF-8).
std::string CleanText(std::string_view text);

// `bytes` random bytes (OpenSSL's RAND_bytes) as lowercase hex: the random part of the ids the
// store and the server make (requests, uploads).
Result<std::string> RandomHex(std::size_t bytes);

}  // namespace herd::server
