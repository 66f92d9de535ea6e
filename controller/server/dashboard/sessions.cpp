#include "controller/server/dashboard/sessions.hpp"

#include <chrono>

namespace herd::server::dashboard {

namespace {

constexpr char kRefused[] = "this login link is used or expired: run `herd dashboard` again";

int64_t Ms(limits::Duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

}  // namespace

Result<IssuedCode> SessionTable::IssueCode(const std::string& user, int64_t session_ttl_ms,
                                           int64_t now_ms) {
  if (session_ttl_ms < 0 || session_ttl_ms > Ms(limits::kDashboardSessionMaxTtl)) {
    return InvalidArgument("session_ttl_s: 0 (the default, " +
                           std::to_string(Ms(limits::kDashboardSessionTtl) / 1000) + ") or 1 to " +
                           std::to_string(Ms(limits::kDashboardSessionMaxTtl) / 1000));
  }
  HERD_ASSIGN_OR_RETURN(std::string code, RandomHex(32));
  IssuedCode issued{code, now_ms + Ms(limits::kDashboardLoginCodeTtl)};
  HERD_RETURN_IF_ERROR(store_.PutLoginCode(
      code,
      LoginCodeRow{user, issued.expires_at_ms,
                   session_ttl_ms == 0 ? Ms(limits::kDashboardSessionTtl) : session_ttl_ms},
      max_codes_, now_ms));
  return issued;
}

Result<NewSession> SessionTable::Redeem(const std::string& code, int64_t now_ms) {
  HERD_ASSIGN_OR_RETURN(std::string id, RandomHex(32));
  auto pending = store_.TakeLoginCode(code);  // spent, whatever comes next
  if (!pending.ok()) {
    if (pending.status().code() == Code::kNotFound) return PermissionDenied(kRefused);
    return pending.status();
  }
  if (pending->expires_at_ms <= now_ms) return PermissionDenied(kRefused);
  Session s{pending->user, now_ms, now_ms + pending->session_ttl_ms};
  HERD_RETURN_IF_ERROR(store_.PutSession(id, SessionRow{s.user, s.created_at_ms, s.expires_at_ms},
                                         max_sessions_, now_ms));
  return NewSession{id, s};
}

Result<Session> SessionTable::Find(const std::string& id, int64_t now_ms) {
  auto row = store_.FindSession(id);
  if (!row.ok()) {
    if (row.status().code() == Code::kNotFound) {
      return PermissionDenied("no session (logged out, or never in)");
    }
    return row.status();
  }
  // Kept until the table is pruned, so that each later use of it says why it is refused.
  if (row->expires_at_ms <= now_ms) return PermissionDenied("the session expired");
  return Session{row->user, row->created_at_ms, row->expires_at_ms};
}

Status SessionTable::End(const std::string& id) { return store_.EndSession(id); }

Status SessionTable::EndUser(const std::string& user) { return store_.EndUserLogins(user); }

Result<std::size_t> SessionTable::sessions() const { return store_.CountSessions(); }

}  // namespace herd::server::dashboard
