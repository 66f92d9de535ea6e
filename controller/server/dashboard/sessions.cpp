#include "controller/server/dashboard/sessions.hpp"

#include <algorithm>
#include <chrono>

#include <openssl/evp.h>

namespace herd::server::dashboard {

namespace {

constexpr char kRefused[] = "this login link is used or expired: run `herd dashboard` again";

int64_t Ms(limits::Duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// What the tables are keyed by: the SHA-256 of the secret (raw bytes).
std::string Key(const std::string& secret) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(secret.data(), secret.size(), md, &n, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(md), n);
}

// Drops the entry that expires first when `m` is full.
template <typename Map>
void MakeRoom(Map& m, std::size_t max) {
  while (!m.empty() && m.size() >= max) {
    auto oldest = std::min_element(m.begin(), m.end(), [](const auto& a, const auto& b) {
      return a.second.expires_at_ms < b.second.expires_at_ms;
    });
    m.erase(oldest);
  }
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
  std::lock_guard<std::mutex> l(mu_);
  DropExpiredLocked(now_ms);
  MakeRoom(codes_, max_codes_);
  codes_[Key(code)] = {user, issued.expires_at_ms,
                       session_ttl_ms == 0 ? Ms(limits::kDashboardSessionTtl) : session_ttl_ms};
  return issued;
}

Result<NewSession> SessionTable::Redeem(const std::string& code, int64_t now_ms) {
  HERD_ASSIGN_OR_RETURN(std::string id, RandomHex(32));
  std::lock_guard<std::mutex> l(mu_);
  auto it = codes_.find(Key(code));
  if (it == codes_.end()) return PermissionDenied(kRefused);
  const PendingCode pending = it->second;
  codes_.erase(it);  // spent, whatever comes next
  if (pending.expires_at_ms <= now_ms) return PermissionDenied(kRefused);
  DropExpiredLocked(now_ms);
  MakeRoom(sessions_, max_sessions_);
  Session s{pending.user, now_ms, now_ms + pending.session_ttl_ms};
  sessions_[Key(id)] = s;
  return NewSession{id, s};
}

Result<Session> SessionTable::Find(const std::string& id, int64_t now_ms) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = sessions_.find(Key(id));
  if (it == sessions_.end()) return PermissionDenied("no session (logged out, or never in)");
  // Kept until the tables are pruned, so that each later use of it says why it is refused.
  if (it->second.expires_at_ms <= now_ms) return PermissionDenied("the session expired");
  return it->second;
}

void SessionTable::End(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  sessions_.erase(Key(id));
}

void SessionTable::EndUser(const std::string& user) {
  std::lock_guard<std::mutex> l(mu_);
  std::erase_if(sessions_, [&](const auto& kv) { return kv.second.user == user; });
  std::erase_if(codes_, [&](const auto& kv) { return kv.second.user == user; });
}

std::size_t SessionTable::sessions() const {
  std::lock_guard<std::mutex> l(mu_);
  return sessions_.size();
}

void SessionTable::DropExpiredLocked(int64_t now_ms) {
  std::erase_if(codes_, [&](const auto& kv) { return kv.second.expires_at_ms <= now_ms; });
  std::erase_if(sessions_, [&](const auto& kv) { return kv.second.expires_at_ms <= now_ms; });
}

}  // namespace herd::server::dashboard
