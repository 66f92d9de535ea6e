// The web dashboard (`/dashboard`), served by the team server (api_server.hpp) behind its users.
//
// Login: `herd dashboard` asks the server for a one-time code with the user's bearer token (POST
// /api/v1/dashboard/login-code) and prints https://SERVER/dashboard/login?code=CODE. Opening it
// spends the code, sets an HttpOnly, SameSite=Strict session cookie (Secure over TLS) and
// redirects to the pages; the token itself never travels in a URL (sessions.hpp,
// web_security.hpp). Logout ends the session. A session is its user's: the pages show what that
// user's `herd status`/`queue`/`logs` show (another user's cluster is "not found"); an admin sees
// every user's clusters and the users page.
//
// Pages: plain HTML, CSS and JavaScript from controller/server/dashboard/web, built into the
// server binary (web_assets.hpp); no CDN, nothing fetched from elsewhere. They call the JSON
// routes below, which run the CLI's own commands for the user through the server's command path
// (command_sink.hpp: the same checks, requests and audit as a remote CLI).
//
// Routes (every /dashboard/api route needs the session cookie; POSTs also the same-origin check):
//   GET  /dashboard/login?code=C            spends C, sets the cookie, 303 to /dashboard/
//   POST /dashboard/logout                  ends the session
//   GET  /dashboard/, /dashboard/FILE       the pages
//   GET  /dashboard/api/me                  {"name", "role", "expires_at_ms"}
//   GET  /dashboard/api/clusters            `status -o json` (admins: every user's, with "user")
//   GET  /dashboard/api/clusters/C          `status C -o json`'s one cluster
//   GET  /dashboard/api/clusters/C/jobs     `queue C -o json`
//   GET  /dashboard/api/clusters/C/nodes    `nodes C -o json`
//   GET  /dashboard/api/clusters/C/gpus     {"cluster": `infra C -o json`'s cluster (its nodes
//        with GPUs and GPUs in use), "samples": [[at_ms, gpus, in_use], ...] oldest first,
//        "interval_ms", "now_ms"}; the samples are the server's (gpu_sampler.hpp): a GET records
//        nothing
//   GET  /dashboard/api/infra               `infra -o json` (admins: every user's, each infra with
//        "user")
//   GET  /dashboard/api/clusters/C/jobs/J/log?offset=N   a window of the log from byte N:
//        {"offset", "next_offset", "text", "more"} (at most limits::kDashboardLogWindowBytes)
//   GET  /dashboard/api/clusters/C/jobs/J/events?offset=N  the log followed live (server-sent
//        events: "log" with a JSON string and the next offset as its id, then "end")
//   GET  /dashboard/api/clusters/C/jobs/J/download        the whole log, streamed
//   POST /dashboard/api/clusters/C/jobs/J/cancel          `cancel C J`
//   POST /dashboard/api/clusters/C/{stop,start,down}      `stop|start|down C -y`
//   GET  /dashboard/api/managed                           `jobs queue -o json`
//   POST /dashboard/api/managed/J/cancel                  `jobs cancel J -y`
//   GET  /dashboard/api/users                             (admins) the users
// An admin acting on another user's cluster runs the command as its owner; the audit names both.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/json/value.hpp>

#include "controller/server/dashboard/sessions.hpp"
#include "controller/server/http/http_server.hpp"
#include "controller/server/http/request_codec.hpp"
#include "controller/server/store/api_store.hpp"

namespace herd::server::dashboard {

// What the dashboard asks of the server it is part of.
struct DashboardHost {
  ApiStore* store = nullptr;
  bool tls = true;  // cookies are Secure, and the origin check expects https
  // Runs a CLI command for `user` exactly as POST /api/v1/run with `request`'s body would.
  std::function<void(const User& user, api_http::HttpRequest request,
                     std::shared_ptr<api_http::Responder> responder)>
      run;
  // The time in Unix ms (sessions' and codes' expiry); empty: the system's clock.
  std::function<std::int64_t()> now_ms;
};

class Dashboard {
 public:
  explicit Dashboard(DashboardHost host);
  ~Dashboard();

  // Whether the request is the dashboard's: everything under /dashboard. The server hands such
  // requests to Handle before its bearer-token check (the dashboard's is the cookie).
  static bool Owns(const api_http::Target& target);
  void Handle(api_http::HttpRequest request, std::shared_ptr<api_http::Responder> responder);

  // POST /api/v1/dashboard/login-code of a user authenticated by token: body {"session_ttl_s"}
  // (optional) -> {"code", "path", "expires_at_ms"}.
  Result<boost::json::value> IssueLoginCode(const User& user, const std::string& body);

  SessionTable& sessions();

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace herd::server::dashboard
