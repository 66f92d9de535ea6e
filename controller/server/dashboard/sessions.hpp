// The dashboard's logins: one-time login codes that `herd dashboard` asks for with its bearer
// token, and the browser sessions they turn into (the cookie's value). Kept in the API store's
// database (ApiStore's dashboard logins), so that every server on one database honours a code or
// a session another one issued (two servers behind a load balancer), and a restarted server
// keeps its users logged in.
//
// Codes and session ids are 32 random bytes (hex); the database keeps only their SHA-256, so a
// dump of it does not hand out live sessions. Every call takes the time: tests drive expiry
// without sleeping. Thread-safe (the store is).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "controller/server/store/api_store.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/status.hpp"

namespace herd::server::dashboard {

struct Session {
  std::string user;
  std::int64_t created_at_ms = 0;
  std::int64_t expires_at_ms = 0;
};

struct IssuedCode {
  std::string code;
  std::int64_t expires_at_ms = 0;
};

struct NewSession {
  std::string id;  // the cookie's value
  Session session;
};

class SessionTable {
 public:
  explicit SessionTable(ApiStore& store, std::size_t max_sessions = limits::kDashboardMaxSessions,
                        std::size_t max_codes = limits::kDashboardMaxLoginCodes)
      : store_(store), max_sessions_(max_sessions), max_codes_(max_codes) {}

  // A code for `user`, good once within limits::kDashboardLoginCodeTtl; the session it opens
  // lasts `session_ttl_ms` (0: limits::kDashboardSessionTtl; InvalidArgument below 0 or over
  // limits::kDashboardSessionMaxTtl).
  Result<IssuedCode> IssueCode(const std::string& user, std::int64_t session_ttl_ms,
                               std::int64_t now_ms);
  // Spends the code (used, expired or unknown: PermissionDenied, the same message for each) and
  // opens its session.
  Result<NewSession> Redeem(const std::string& code, std::int64_t now_ms);
  // The live session of this id; PermissionDenied when unknown, ended or expired.
  Result<Session> Find(const std::string& id, std::int64_t now_ms);
  // Ends the session (logout); a no-op for an unknown id.
  Status End(const std::string& id);
  // Ends every session and code of a user (deleted, or its role changed).
  Status EndUser(const std::string& user);

  Result<std::size_t> sessions() const;

 private:
  ApiStore& store_;
  const std::size_t max_sessions_, max_codes_;
};

}  // namespace herd::server::dashboard
