#include "controller/server/dashboard/web_security.hpp"

namespace herd::server::dashboard {

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Attributes(bool secure) {
  return std::string("; Path=") + kCookiePath + "; HttpOnly; SameSite=Strict" +
         (secure ? "; Secure" : "");
}

}  // namespace

std::string SessionCookie(std::string_view id, std::int64_t max_age_s, bool secure) {
  return std::string(kSessionCookie) + "=" + std::string(id) + Attributes(secure) +
         "; Max-Age=" + std::to_string(max_age_s);
}

std::string ClearedSessionCookie(bool secure) {
  return std::string(kSessionCookie) + "=" + Attributes(secure) + "; Max-Age=0";
}

std::optional<std::string> CookieValue(const api_http::Headers& headers, std::string_view name) {
  for (const auto& [field, value] : headers.fields()) {
    if (!api_http::EqualsIgnoreCase(field, "Cookie")) continue;
    std::string_view rest = value;
    while (!rest.empty()) {
      const auto semi = rest.find(';');
      std::string_view pair = Trim(rest.substr(0, semi));
      rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
      const auto eq = pair.find('=');
      if (eq == std::string_view::npos) continue;
      if (Trim(pair.substr(0, eq)) == name) return std::string(Trim(pair.substr(eq + 1)));
    }
  }
  return std::nullopt;
}

Status CheckSameOrigin(const api_http::Headers& headers, bool tls) {
  if (auto site = headers.Get("Sec-Fetch-Site");
      site && *site != "same-origin" && *site != "none") {
    return PermissionDenied("cross-site request refused (Sec-Fetch-Site: " + std::string(*site) +
                            ")");
  }
  auto origin = headers.Get("Origin");
  auto host = headers.Get("Host");
  if (!origin || !host) return PermissionDenied("request without Origin or Host refused");
  const std::string own = std::string(tls ? "https://" : "http://") + std::string(Trim(*host));
  if (Trim(*origin) != own) {
    return PermissionDenied("cross-origin request refused (Origin " + std::string(*origin) +
                            " is not " + own + ")");
  }
  return Status::Ok();
}

void AddSecurityHeaders(api_http::Headers& headers) {
  headers.Set("Content-Security-Policy",
              "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
              "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'");
  headers.Set("X-Content-Type-Options", "nosniff");
  headers.Set("X-Frame-Options", "DENY");
  headers.Set("Referrer-Policy", "no-referrer");
  headers.Set("Cache-Control", "no-store");
}

}  // namespace herd::server::dashboard
