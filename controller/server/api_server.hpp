// `herd api`: the team server. It holds users, tokens, requests and the audit trail in its
// database (controller/server/store: SQLite in its home by default, PostgreSQL for teams) and
// serves the CLI of every user over HTTPS (controller/server/http) with bearer tokens.
//
// What a remote CLI asks for runs here: each command (`herd launch`, `status`, `logs`, ...) is a
// `herd` child process with the user's own home (<home>/users/<user>: HOME, and HERD_HOME under
// it), so the server does the provisioning, SSH and agent connections, a user's clusters and jobs
// are theirs alone (another user's cluster is "not found"), and a command's output, -o json and
// exit code are exactly those of local mode. The output streams back as it comes
// (stream_frames.hpp); a client that goes away (Ctrl-C) interrupts the command as Ctrl-C would.
// Every mutating command is a request (an id at once, a row in the database, its output in
// <state>/requests/<id>.log) and an audit entry. Managed jobs' controllers are the server's own
// children, one server per job by a lease in the database, resumed when they die
// (job_keeper.hpp); several servers on one database share <state> (--state-dir;
// docs/TEAM_SERVER.md).
//
// Routes (JSON unless said; every one but the health check needs "Authorization: Bearer TOKEN"):
//   GET  /api/v1/health                       {"status": "ok", "version", "server"}
//   GET  /api/v1/whoami                       {"name", "role", "created_at_ms"}
//   POST /api/v1/run                          a command, streamed in frames
//   POST /api/v1/uploads                      a tar archive (workdir, file mount): {"id"}
//   GET  /api/v1/requests[?all=1&limit=N]     newest first (all users: admins)
//   GET  /api/v1/requests/ID                  one request
//   GET  /api/v1/requests/ID/log[?follow=1]   its output, followed until it ends
//   POST /api/v1/requests/ID/cancel
//   GET  /api/v1/users, POST /api/v1/users {"name", "role"}, DELETE /api/v1/users/NAME  (admins)
//   GET  /api/v1/tokens, POST /api/v1/tokens {"user", "expires_in_s"}, POST
//   /api/v1/tokens/ID/revoke GET  /api/v1/audit[?limit=N]              (admins)
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "shared/common/limits.hpp"
#include "shared/common/status.hpp"

namespace herd::server {

struct ApiServerOptions {
  std::string home;  // the server's home (files below), made 0700
  // What every server of one database must share (users' homes, requests' directories, uploads,
  // the secrets key): "" is the home. Servers on one database give the same directory (a shared
  // filesystem, at the same path on each; docs/TEAM_SERVER.md).
  std::string state_dir;
  std::string host = "127.0.0.1";
  uint16_t port = 0;   // 0: any free port
  std::string db_url;  // "" : sqlite:<home>/api.db
  // A certificate and key of the caller's; "" : the server's own CA (<home>/tls, made at first
  // start) issues one for host, 127.0.0.1 and localhost.
  std::string cert_file, key_file;
  bool plain_http = false;  // loopback only (the HTTP layer refuses it elsewhere)
  std::string herd_binary;  // the `herd` that runs users' commands
  // Warm workers per user for read commands (warm_workers.hpp); 0: every read starts a process.
  std::size_t warm_workers_per_user = limits::kApiWarmWorkersPerUser;
  std::string version;  // shown by the health check
};

// The files of a server's home, and of the state it shares with the other servers of its database
// (state: the home unless --state-dir).
struct ServerHome {
  explicit ServerHome(std::string dir, std::string state_dir = "")
      : dir(dir), state(state_dir.empty() ? std::move(dir) : std::move(state_dir)) {}
  std::string dir;
  std::string state;
  std::string Db() const { return dir + "/api.db"; }
  std::string SecretsKey() const { return state + "/secrets.key"; }
  // This server's id in the lease rows of managed jobs' controllers (made once).
  std::string ServerId() const { return dir + "/server.id"; }
  std::string TlsDir() const { return dir + "/tls"; }
  std::string CaCert() const { return dir + "/tls/ca.crt"; }
  std::string AdminToken() const { return dir + "/admin.token"; }
  // What `herd api status` reads: the running server's pid, endpoint, CA and admin token paths.
  std::string ServerJson() const { return dir + "/server.json"; }
  std::string Log() const { return dir + "/server.log"; }
  std::string UserHome(const std::string& user) const { return state + "/users/" + user; }
  std::string RequestDir(const std::string& id) const { return state + "/requests/" + id; }
  std::string RequestLog(const std::string& id) const { return state + "/requests/" + id + ".log"; }
  std::string UploadDir(const std::string& user) const { return state + "/uploads/" + user; }
};

inline constexpr char kFirstAdmin[] = "admin";

class ApiServer {
 public:
  // Opens the database (migrations run), fails what a previous run of this server left unfinished,
  // makes the TLS files and the first admin (with its token in <home>/admin.token, 0600) at first
  // start, and starts listening on io (run it on a few threads).
  static Result<std::unique_ptr<ApiServer>> Start(boost::asio::io_context& io,
                                                  ApiServerOptions options);
  virtual ~ApiServer() = default;
  virtual uint16_t port() const = 0;
  virtual std::string endpoint() const = 0;  // "https://HOST:PORT" (http:// when plain)
  // Stops listening and interrupts the commands still running (their requests end CANCELLED).
  virtual void Stop() = 0;
};

// `herd api start --foreground`: the server until SIGTERM or SIGINT; writes <home>/server.json
// once it listens and removes it at exit. The process exit code.
int RunApiServer(ApiServerOptions options);

}  // namespace herd::server
