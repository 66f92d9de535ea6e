// /api/v1/users, /api/v1/tokens and /api/v1/audit: users and their tokens (a token is printed
// once; the store keeps a salted hash), and the audit trail; admins only, but a user's own tokens.
#include <boost/json.hpp>
#include <chrono>

#include "controller/server/server_impl.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/unix_time.hpp"

namespace herd::server::detail {

using api_http::FieldSpec;
using api_http::FieldType;
using api_http::Target;

namespace {

boost::json::object TokenJson(const TokenInfo& t) {
  return {{"id", t.id},
          {"user", t.user},
          {"created_at_ms", t.created_at_ms},
          {"expires_at_ms", t.expires_at_ms},
          {"revoked_at_ms", t.revoked_at_ms}};
}

}  // namespace

Result<boost::json::value> ServerImpl::ListUsers(const User& user) {
  HERD_RETURN_IF_ERROR(RequireAdmin(user));
  HERD_ASSIGN_OR_RETURN(auto users, store_->ListUsers());
  boost::json::array arr;
  for (const auto& u : users) arr.push_back(UserJson(u));
  return boost::json::value(arr);
}

Result<boost::json::value> ServerImpl::AddUser(const User& admin, const std::string& raw) {
  auto done = [&](const Status& s, const std::string& name) {
    Audit(admin, "api.users.add", name, s.ok() ? "ok" : s.message());
  };
  HERD_ASSIGN_OR_RETURN(auto body,
                        api_http::DecodeBody(raw, {FieldSpec{"name", FieldType::kString, true},
                                                   FieldSpec{"role", FieldType::kString}}));
  const std::string name = body.String("name");
  // A malformed name is a bad request, refused before anything is recorded (the audit, too).
  HERD_RETURN_IF_ERROR(api_http::ValidateName("name", name));
  if (auto s = RequireAdmin(admin); !s.ok()) {
    done(s, name);
    return s;
  }
  HERD_ASSIGN_OR_RETURN(Role role, ParseRole(body.String("role", "user")));
  if (auto s = store_->AddUser(name, role, NowUnixMs()); !s.ok()) {
    done(s, name);
    return s;
  }
  HERD_ASSIGN_OR_RETURN(auto token, store_->CreateToken(name, 0, NowUnixMs()));
  HERD_RETURN_IF_ERROR(EnsureUserHome(name));
  done(Status::Ok(), name);
  return boost::json::value(boost::json::object{{"name", name},
                                                {"role", std::string(RoleName(role))},
                                                {"token", token.token},
                                                {"token_id", token.id}});
}

Result<boost::json::value> ServerImpl::DeleteUser(const User& admin, const std::string& name) {
  HERD_RETURN_IF_ERROR(RequireAdmin(admin));
  HERD_RETURN_IF_ERROR(api_http::ValidateName("user", name));
  Status s = store_->DeleteUser(name);
  Audit(admin, "api.users.delete", name, s.ok() ? "ok" : s.message());
  HERD_RETURN_IF_ERROR(s);
  return boost::json::value(boost::json::object{{"deleted", name}});
}

Result<boost::json::value> ServerImpl::ListTokens(const User& user, const Target& t) {
  std::string who = std::string(t.Query("user").value_or(user.name));
  if (t.Query("all").value_or("") == "1") who = "";
  if (who != user.name) HERD_RETURN_IF_ERROR(RequireAdmin(user));
  HERD_ASSIGN_OR_RETURN(auto tokens, store_->ListTokens(who));
  boost::json::array arr;
  for (const auto& tk : tokens) arr.push_back(TokenJson(tk));
  return boost::json::value(arr);
}

Result<boost::json::value> ServerImpl::CreateToken(const User& user, const std::string& raw) {
  HERD_ASSIGN_OR_RETURN(auto body,
                        api_http::DecodeBody(raw, {FieldSpec{"user", FieldType::kString},
                                                   FieldSpec{"expires_in_s", FieldType::kInt}}));
  const std::string who = body.String("user", user.name);
  if (who != user.name) HERD_RETURN_IF_ERROR(RequireAdmin(user));
  const int64_t in_s = body.Int("expires_in_s", 0);
  if (in_s < 0) return InvalidArgument("expires_in_s: must be 0 (never) or more");
  // Checked before the arithmetic below, which a larger value would overflow.
  const int64_t max_s =
      std::chrono::duration_cast<std::chrono::seconds>(limits::kApiTokenMaxLifetime).count();
  if (in_s > max_s) {
    return InvalidArgument("expires_in_s: at most " + std::to_string(max_s) + " (" +
                           std::to_string(max_s / 86400) + " days)");
  }
  const int64_t now = NowUnixMs();
  auto token = store_->CreateToken(who, in_s == 0 ? 0 : now + in_s * 1000, now);
  Audit(user, "api.tokens.create", who, token.ok() ? "ok " + token->id : token.status().message());
  HERD_RETURN_IF_ERROR(token.status());
  return boost::json::value(
      boost::json::object{{"id", token->id},
                          {"token", token->token},
                          {"user", who},
                          {"expires_at_ms", in_s == 0 ? 0 : now + in_s * 1000}});
}

Result<boost::json::value> ServerImpl::RevokeToken(const User& user, const std::string& id) {
  HERD_RETURN_IF_ERROR(api_http::ValidateName("token", id));
  HERD_ASSIGN_OR_RETURN(auto tokens,
                        store_->ListTokens(user.role == Role::kAdmin ? "" : user.name));
  bool found = false;
  for (const auto& tk : tokens) found = found || tk.id == id;
  if (!found) return NotFound("token " + id + " does not exist");
  Status s = store_->RevokeToken(id, NowUnixMs());
  Audit(user, "api.tokens.revoke", id, s.ok() ? "ok" : s.message());
  HERD_RETURN_IF_ERROR(s);
  return boost::json::value(boost::json::object{{"revoked", id}});
}

Result<boost::json::value> ServerImpl::Audit(const User& user, const Target& t) {
  HERD_RETURN_IF_ERROR(RequireAdmin(user));
  int limit = 0;
  if (auto l = t.Query("limit")) {
    HERD_ASSIGN_OR_RETURN(int64_t n, api_http::ParseId("limit", *l));
    limit = static_cast<int>(std::min<int64_t>(n, 1 << 20));
  }
  HERD_ASSIGN_OR_RETURN(auto entries, store_->ListAudit(limit, 0));
  boost::json::array arr;
  for (const auto& e : entries) {
    arr.push_back(boost::json::object{{"id", e.id},
                                      {"at_ms", e.at_ms},
                                      {"user", e.user},
                                      {"verb", e.verb},
                                      {"target", e.target},
                                      {"result", e.result}});
  }
  return boost::json::value(arr);
}

}  // namespace herd::server::detail
