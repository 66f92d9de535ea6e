// What keeps the dashboard's pages and cookie safe in a browser: the session cookie's attributes,
// reading it back, the same-origin check on every request that changes something (with the
// cookie's SameSite=Strict, the defence against cross-site requests), and the headers every
// response carries (a Content-Security-Policy that runs only the server's own scripts).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "controller/server/http/http_message.hpp"
#include "shared/common/status.hpp"

namespace herd::server::dashboard {

inline constexpr char kSessionCookie[] = "herd_session";
// The cookie is sent to the dashboard's paths only (never to /api/v1, which takes bearer tokens).
inline constexpr char kCookiePath[] = "/dashboard";

// "Set-Cookie" value: HttpOnly, SameSite=Strict, Path=/dashboard, Max-Age, and Secure when the
// server speaks TLS.
std::string SessionCookie(std::string_view id, std::int64_t max_age_s, bool secure);
// The value that removes the cookie (logout, a session that ended).
std::string ClearedSessionCookie(bool secure);
// The value of cookie `name` in the request's Cookie header(s).
std::optional<std::string> CookieValue(const api_http::Headers& headers, std::string_view name);

// A request that changes something must come from the dashboard's own pages: its Origin header
// must be the server's origin (scheme, and the Host header the browser sent), and a browser's
// Sec-Fetch-Site, when sent, must be same-origin. PermissionDenied otherwise.
Status CheckSameOrigin(const api_http::Headers& headers, bool tls);

// Headers of every dashboard response (CSP, no framing, no sniffing, no referrer, no caching of
// what a session sees).
void AddSecurityHeaders(api_http::Headers& headers);

}  // namespace herd::server::dashboard
