// herd api start|stop|status|login|logout|users|tokens|requests|logs|cancel|audit: the team
// server (controller/server/api_server.hpp) and this CLI's connection to it.
#include <signal.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <ostream>
#include <thread>
#include <variant>

#include "controller/cli/common.hpp"
#include "controller/cli/remote.hpp"
#include "controller/core/table.hpp"
#include "controller/server/api_server.hpp"
#include "controller/ssh/subprocess.hpp"
#include "controller/state/herd_home.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/unix_time.hpp"

namespace herd::cli {
namespace {

namespace fs = std::filesystem;
using controller::ApiConfig;

std::string DefaultHome() { return controller::HerdHome() + "/api"; }

std::string SelfPath() {
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec).string();
}

// "30d", "12h", "90m", "3600s" or a number of seconds.
Result<int64_t> ParseDuration(const std::string& text) {
  if (text.empty()) return InvalidArgument("--expires: empty");
  int64_t unit = 1;
  std::string digits = text;
  switch (text.back()) {
    case 'd':
      unit = 86400;
      digits.pop_back();
      break;
    case 'h':
      unit = 3600;
      digits.pop_back();
      break;
    case 'm':
      unit = 60;
      digits.pop_back();
      break;
    case 's':
      digits.pop_back();
      break;
    default:
      break;
  }
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos ||
      digits.size() > 9) {
    return InvalidArgument("--expires: expected a duration like 30d, 12h, 90m or 3600s, got '" +
                           text + "'");
  }
  return std::stoll(digits) * unit;
}

Result<boost::json::object> ReadServerJson(const std::string& home) {
  server::ServerHome h(home);
  HERD_ASSIGN_OR_RETURN(std::string text, ReadFile(h.ServerJson()));
  try {
    return boost::json::parse(text).as_object();
  } catch (const std::exception& e) {
    return InvalidArgument(h.ServerJson() + ": " + e.what());
  }
}

// A process that runs: not gone, and not a zombie (a server killed a moment ago that its parent
// has not reaped yet is no server).
bool Alive(int pid) {
  if (pid <= 0 || (::kill(pid, 0) != 0 && errno != EPERM)) return false;
  auto stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return true;
  const auto paren = stat->rfind(')');
  return paren == std::string::npos || paren + 2 >= stat->size() || (*stat)[paren + 2] != 'Z';
}

// The running server of a home: its server.json, when its process lives.
std::optional<boost::json::object> Running(const std::string& home) {
  auto info = ReadServerJson(home);
  if (!info.ok()) return std::nullopt;
  auto pid = info->if_contains("pid");
  if (!pid || !pid->is_int64() || !Alive(static_cast<int>(pid->as_int64()))) return std::nullopt;
  return *info;
}

std::string Str(const boost::json::object& o, const char* key) {
  auto v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : "";
}

// ca_cert: the CA to trust, "" for the one server.json names (the server's own, or none: the
// system's).
bool Healthy(const boost::json::object& info, const std::string& ca_cert = "") {
  ApiConfig api{Str(info, "endpoint"), "", ca_cert.empty() ? Str(info, "ca_cert") : ca_cert};
  auto client = ConnectApi(api);
  if (!client.ok()) return false;
  auto r = (*client)->Request("GET", "/api/v1/health", {}, std::chrono::seconds(2));
  return r.ok() && r->ok();
}

class ApiCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("api", "the team API server, and this CLI's connection to it");
    cmd_->require_subcommand(1);

    start_ = cmd_->add_subcommand("start", "start an API server (in the background)");
    start_->add_option("--home", home_, "the server's home (default ~/.herd/api)");
    start_->add_option("--host", host_, "address to listen on (default 127.0.0.1)");
    start_->add_option("--port", port_, "port to listen on (default 46580)")
        ->check(CLI::Range(1, 65535));
    start_->add_option("--db", db_,
                       "database: sqlite:PATH (default, in the home) or "
                       "postgresql://USER@HOST:PORT/DB");
    start_->add_option("--cert", cert_, "TLS certificate (default: the server's own CA's)");
    start_->add_option("--key", key_, "TLS key of --cert");
    start_->add_option("--ca-cert", ca_cert_,
                       "the CA that --cert chains to, when the system does not trust it (for "
                       "the health check that start waits for)");
    start_->add_option("--state-dir", state_dir_,
                       "state every server of one database shares (users' homes, requests, "
                       "uploads, the secrets key; default: the home)");
    start_->add_flag("--plain-http", plain_, "no TLS (loopback addresses only)");
    start_
        ->add_option("--warm-workers", warm_workers_,
                     "warm workers per user for read commands (0: none; default " +
                         std::to_string(limits::kApiWarmWorkersPerUser) + ")")
        ->check(CLI::Range(std::size_t{0}, limits::kApiWarmWorkersMax));
    start_->add_flag("--foreground", foreground_, "run in this process until SIGTERM");

    stop_ = cmd_->add_subcommand("stop", "stop the API server of a home");
    stop_->add_option("--home", home_, "the server's home (default ~/.herd/api)");
    status_ = cmd_->add_subcommand("status", "whether the API server of a home runs, and where");
    status_->add_option("--home", home_, "the server's home (default ~/.herd/api)");
    status_->add_option("-o,--output", output_, "output format")->check(CLI::IsMember({"json"}));

    login_ = cmd_->add_subcommand("login", "send this CLI's commands to an API server");
    login_->add_option("-e,--endpoint", endpoint_, "https://HOST:PORT")->required();
    login_->add_option("--token", token_, "your API token")->required();
    login_->add_option("--ca-cert", ca_cert_, "the CA the server's certificate chains to");
    logout_ = cmd_->add_subcommand("logout", "run commands on this machine again");

    users_ = cmd_->add_subcommand("users", "the server's users (admins)");
    users_->require_subcommand(1);
    users_add_ = users_->add_subcommand("add", "add a user; prints its first token once");
    users_add_->add_option("name", name_, "user name")->required();
    users_add_->add_option("--role", role_, "admin or user (default)")
        ->check(CLI::IsMember({"admin", "user"}));
    users_add_->add_option("-o,--output", output_, "output format")->check(CLI::IsMember({"json"}));
    users_list_ = users_->add_subcommand("list", "list users");
    users_list_->add_option("-o,--output", output_, "output format")
        ->check(CLI::IsMember({"json"}));
    users_delete_ = users_->add_subcommand("delete", "delete a user (its tokens stop working)");
    users_delete_->add_option("name", name_, "user name")->required();

    tokens_ = cmd_->add_subcommand("tokens", "API tokens");
    tokens_->require_subcommand(1);
    tokens_create_ = tokens_->add_subcommand("create", "a new token; printed once");
    tokens_create_->add_option("--user", name_, "for this user (admins; default yourself)");
    tokens_create_->add_option("--expires", expires_, "lifetime, e.g. 30d (default: never)");
    tokens_create_->add_option("-o,--output", output_, "output format")
        ->check(CLI::IsMember({"json"}));
    tokens_list_ = tokens_->add_subcommand("list", "your tokens (never their secrets)");
    tokens_list_->add_flag("-u,--all-users", all_, "every user's (admins)");
    tokens_list_->add_option("-o,--output", output_, "output format")
        ->check(CLI::IsMember({"json"}));
    tokens_revoke_ = tokens_->add_subcommand("revoke", "revoke a token");
    tokens_revoke_->add_option("id", id_, "token id")->required();

    requests_ = cmd_->add_subcommand("requests", "your requests, newest first");
    requests_->add_flag("-u,--all-users", all_, "every user's (admins)");
    requests_->add_option("-o,--output", output_, "output format")->check(CLI::IsMember({"json"}));
    logs_ = cmd_->add_subcommand("logs", "a request's output, followed until it ends");
    logs_->add_option("request", id_, "request id")->required();
    logs_->add_flag("--no-follow", no_follow_, "print what is there and exit");
    cancel_ = cmd_->add_subcommand("cancel", "cancel a request");
    cancel_->add_option("request", id_, "request id")->required();
    audit_ = cmd_->add_subcommand("audit", "every mutating request: who, what, when (admins)");
    audit_->add_option("--limit", limit_, "at most this many entries")->check(CLI::PositiveNumber);
    audit_->add_option("-o,--output", output_, "output format")->check(CLI::IsMember({"json"}));
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }

  int Run(CliContext& ctx) override {
    if (home_.empty()) home_ = DefaultHome();
    if (start_->parsed()) return foreground_ ? Foreground(ctx) : Start(ctx);
    if (stop_->parsed()) return Stop(ctx);
    if (status_->parsed()) return Status(ctx);
    if (login_->parsed()) return Login(ctx);
    if (logout_->parsed()) {
      if (auto s = controller::ClearApiConfig(); !s.ok()) return Fail(ctx, s);
      ctx.err << "Logged out: herd runs commands on this machine.\n";
      return 0;
    }
    // Everything else asks the server this CLI is logged in to.
    auto api = ctx.Api();
    if (!api.ok()) return Fail(ctx, api.status(), 2);
    if (!*api) {
      return Fail(ctx,
                  FailedPrecondition("not logged in to an API server "
                                     "(`herd api login -e URL --token TOKEN`)"),
                  2);
    }
    auto client = ConnectApi(**api);
    if (!client.ok()) return FailForApiError(ctx, **api, client.status());
    api_ = **api;
    client_ = std::move(*client);
    if (users_add_->parsed()) return UsersAdd(ctx);
    if (users_list_->parsed()) return UsersList(ctx);
    if (users_delete_->parsed())
      return Simple(ctx, "DELETE", "/api/v1/users/" + name_, "", "User " + name_ + " deleted.");
    if (tokens_create_->parsed()) return TokensCreate(ctx);
    if (tokens_list_->parsed()) return TokensList(ctx);
    if (tokens_revoke_->parsed()) {
      return Simple(ctx, "POST", "/api/v1/tokens/" + id_ + "/revoke", "",
                    "Token " + id_ + " revoked.");
    }
    if (requests_->parsed()) return Requests(ctx);
    if (logs_->parsed()) return Logs(ctx);
    if (cancel_->parsed()) {
      return Simple(ctx, "POST", "/api/v1/requests/" + id_ + "/cancel", "",
                    "Cancelling request " + id_ + ".");
    }
    return Audit(ctx);
  }

 private:
  // The server binary: $HERD_API_BINARY, else herd-api beside this herd (installed), else the
  // build tree's controller/server/herd-api.
  static Result<std::string> ServerBinary() {
    if (const char* env = std::getenv("HERD_API_BINARY"); env && *env) return std::string(env);
    const fs::path self = SelfPath();
    for (const fs::path& p :
         {self.parent_path() / "herd-api", self.parent_path() / "server" / "herd-api"}) {
      std::error_code ec;
      if (fs::exists(p, ec)) return p.string();
    }
    return NotFound("cannot find herd-api (the API server) next to " + self.string() +
                    "; set HERD_API_BINARY");
  }

  std::vector<std::string> ServerArgv(const std::string& binary, const std::string& home) {
    std::vector<std::string> argv = {
        binary,   "--home",  home, "--host", host_, "--port", std::to_string(port_),
        "--herd", SelfPath()};
    if (!db_.empty()) argv.insert(argv.end(), {"--db", db_});
    if (!cert_.empty()) argv.insert(argv.end(), {"--cert", cert_, "--key", key_});
    if (plain_) argv.push_back("--plain-http");
    if (warm_workers_) argv.insert(argv.end(), {"--warm-workers", std::to_string(*warm_workers_)});
    if (!state_dir_.empty()) {
      argv.insert(argv.end(), {"--state-dir", fs::absolute(state_dir_).string()});
    }
    return argv;
  }

  // The server in this process (execs herd-api): for systemd and for debugging.
  int Foreground(CliContext& ctx) {
    auto binary = ServerBinary();
    if (!binary.ok()) return Fail(ctx, binary.status());
    std::vector<std::string> argv = ServerArgv(*binary, fs::absolute(home_).string());
    if (ctx.verbose) argv.push_back("-v");
    std::vector<char*> raw;
    for (auto& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execv(raw[0], raw.data());
    return Fail(ctx, ErrnoError("exec " + *binary, errno));
  }

  int Start(CliContext& ctx) {
    const std::string home = fs::absolute(home_).string();
    if (auto running = Running(home)) {
      ctx.err << "An API server of " << home << " already runs at " << Str(*running, "endpoint")
              << " (pid " << running->at("pid").as_int64() << ").\n";
      return 0;
    }
    if (auto s = controller::EnsureDir(home); !s.ok()) return Fail(ctx, s);
    server::ServerHome h(home);
    std::error_code ec;
    fs::remove(h.ServerJson(), ec);
    auto binary = ServerBinary();
    if (!binary.ok()) return Fail(ctx, binary.status());
    auto pid = controller::SpawnDetached(ServerArgv(*binary, home), h.Log());
    if (!pid.ok()) return Fail(ctx, pid.status());
    const auto deadline = std::chrono::steady_clock::now() + limits::kApiServerStartTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
      auto info = ReadServerJson(home);
      if (info.ok() && info->if_contains("pid") && info->at("pid").as_int64() == *pid &&
          Healthy(*info, ca_cert_.empty() ? "" : fs::absolute(ca_cert_).string())) {
        ctx.err << "API server started at " << Str(*info, "endpoint") << " (pid " << *pid << ").\n";
        if (!Str(*info, "ca_cert").empty()) {
          ctx.err << "  Its CA certificate:    " << Str(*info, "ca_cert") << "\n";
        }
        ctx.err << "  The first admin token: " << Str(*info, "admin_token") << "\n"
                << "  Log in:  herd api login -e " << Str(*info, "endpoint") << " --token $(cat "
                << Str(*info, "admin_token") << ")"
                << (Str(*info, "ca_cert").empty() ? "" : " --ca-cert " + Str(*info, "ca_cert"))
                << "\n";
        return 0;
      }
      if (!Alive(*pid)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    auto read = ReadFile(h.Log());
    std::string log = read.ok() ? *read : "";
    if (log.size() > 2000) log = log.substr(log.size() - 2000);
    if (Alive(*pid)) ::kill(*pid, SIGKILL);
    return Fail(ctx, Unavailable("the API server did not come up within " +
                                 controller::FormatSeconds(limits::kApiServerStartTimeout) +
                                 "; its log (" + h.Log() + "):\n" + log));
  }

  int Stop(CliContext& ctx) {
    const std::string home = fs::absolute(home_).string();
    auto running = Running(home);
    if (!running) {
      ctx.err << "No API server of " << home << " runs.\n";
      return 0;
    }
    const int pid = static_cast<int>(running->at("pid").as_int64());
    ::kill(pid, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + limits::kApiServerStopTimeout;
    while (Alive(pid) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (Alive(pid)) ::kill(pid, SIGKILL);
    ctx.err << "API server stopped (pid " << pid << ").\n";
    return 0;
  }

  int Status(CliContext& ctx) {
    const std::string home = fs::absolute(home_).string();
    auto running = Running(home);
    if (output_ == "json") {
      boost::json::object o = running ? *running : boost::json::object{{"home", home}};
      o["running"] = running.has_value();
      o["healthy"] = running && Healthy(*running);
      ctx.out << boost::json::serialize(o) << "\n";
      return running ? 0 : 1;
    }
    if (!running) {
      ctx.out << "No API server of " << home << " runs (start one: herd api start).\n";
      return 1;
    }
    ctx.out << "API server: " << Str(*running, "endpoint") << " (pid "
            << running->at("pid").as_int64() << ", "
            << (Healthy(*running) ? "healthy" : "not answering") << ")\n"
            << "Database:   " << Str(*running, "db") << "\n";
    if (!Str(*running, "ca_cert").empty())
      ctx.out << "CA:         " << Str(*running, "ca_cert") << "\n";
    ctx.out << "Admin token: " << Str(*running, "admin_token") << "\n";
    return 0;
  }

  int Login(CliContext& ctx) {
    ApiConfig api{endpoint_, token_, ca_cert_.empty() ? "" : fs::absolute(ca_cert_).string()};
    auto client = ConnectApi(api);
    if (!client.ok()) return FailForApiError(ctx, api, client.status());
    auto r = (*client)->Request("GET", "/api/v1/whoami");
    if (!r.ok()) return FailForApiError(ctx, api, r.status());
    if (!r->ok()) return FailForResponse(ctx, *r);
    if (auto s = controller::SaveApiConfig(api); !s.ok()) return Fail(ctx, s);
    auto who = Parse(r->body);
    ctx.err << "Logged in to " << endpoint_ << " as " << Str(who, "name") << " ("
            << Str(who, "role") << "). Commands now run on the server; `herd api logout` "
            << "returns to this machine.\n";
    return 0;
  }

  static boost::json::object Parse(const std::string& body) {
    try {
      auto v = boost::json::parse(body);
      if (v.is_object()) return v.as_object();
    } catch (const std::exception&) {
    }
    return {};
  }
  static boost::json::array ParseArray(const std::string& body) {
    try {
      auto v = boost::json::parse(body);
      if (v.is_array()) return v.as_array();
    } catch (const std::exception&) {
    }
    return {};
  }

  // One call; its JSON answer, or the exit code of its failure.
  std::variant<std::string, int> Call(CliContext& ctx, std::string_view method,
                                      const std::string& path, const std::string& body = "") {
    auto r = client_->Request(method, path, body);
    if (!r.ok()) return FailForApiError(ctx, api_, r.status());
    if (!r->ok()) return FailForResponse(ctx, *r);
    return std::move(r->body);
  }

  int Simple(CliContext& ctx, std::string_view method, const std::string& path,
             const std::string& body, const std::string& done) {
    auto r = Call(ctx, method, path, body);
    if (auto* code = std::get_if<int>(&r)) return *code;
    ctx.err << done << "\n";
    return 0;
  }

  int UsersAdd(CliContext& ctx) {
    boost::json::object body{{"name", name_}, {"role", role_.empty() ? "user" : role_}};
    auto r = Call(ctx, "POST", "/api/v1/users", boost::json::serialize(body));
    if (auto* code = std::get_if<int>(&r)) return *code;
    auto o = Parse(std::get<std::string>(r));
    if (output_ == "json") {
      ctx.out << boost::json::serialize(o) << "\n";
    } else {
      ctx.out << "User " << Str(o, "name") << " (" << Str(o, "role") << ") added. Its token "
              << "(shown once):\n"
              << Str(o, "token") << "\n";
    }
    return 0;
  }

  int UsersList(CliContext& ctx) {
    auto r = Call(ctx, "GET", "/api/v1/users");
    if (auto* code = std::get_if<int>(&r)) return *code;
    if (output_ == "json") {
      ctx.out << std::get<std::string>(r);
      return 0;
    }
    controller::Table table({"NAME", "ROLE", "CREATED"});
    for (const auto& v : ParseArray(std::get<std::string>(r))) {
      const auto& o = v.as_object();
      table.AddRow({Str(o, "name"), Str(o, "role"), Ago(o.at("created_at_ms").as_int64())});
    }
    ctx.out << table.Render();
    return 0;
  }

  int TokensCreate(CliContext& ctx) {
    boost::json::object body;
    if (!name_.empty()) body["user"] = name_;
    if (!expires_.empty()) {
      auto s = ParseDuration(expires_);
      if (!s.ok()) return Fail(ctx, s.status(), 2);
      body["expires_in_s"] = *s;
    }
    auto r = Call(ctx, "POST", "/api/v1/tokens", boost::json::serialize(body));
    if (auto* code = std::get_if<int>(&r)) return *code;
    auto o = Parse(std::get<std::string>(r));
    if (output_ == "json") {
      ctx.out << boost::json::serialize(o) << "\n";
    } else {
      ctx.out << "Token " << Str(o, "id") << " for " << Str(o, "user") << " (shown once):\n"
              << Str(o, "token") << "\n";
    }
    return 0;
  }

  int TokensList(CliContext& ctx) {
    auto r = Call(ctx, "GET", std::string("/api/v1/tokens") + (all_ ? "?all=1" : ""));
    if (auto* code = std::get_if<int>(&r)) return *code;
    if (output_ == "json") {
      ctx.out << std::get<std::string>(r);
      return 0;
    }
    controller::Table table({"ID", "USER", "CREATED", "EXPIRES", "REVOKED"});
    for (const auto& v : ParseArray(std::get<std::string>(r))) {
      const auto& o = v.as_object();
      const int64_t exp = o.at("expires_at_ms").as_int64(), rev = o.at("revoked_at_ms").as_int64();
      table.AddRow({Str(o, "id"), Str(o, "user"), Ago(o.at("created_at_ms").as_int64()),
                    exp == 0 ? "never" : std::to_string((exp - NowUnixMs()) / 86400000) + " days",
                    rev == 0 ? "-" : Ago(rev)});
    }
    ctx.out << table.Render();
    return 0;
  }

  int Requests(CliContext& ctx) {
    auto r = Call(ctx, "GET", std::string("/api/v1/requests") + (all_ ? "?all=1" : ""));
    if (auto* code = std::get_if<int>(&r)) return *code;
    if (output_ == "json") {
      ctx.out << std::get<std::string>(r);
      return 0;
    }
    controller::Table table({"ID", "USER", "COMMAND", "TARGET", "STATE", "STARTED", "TOOK"});
    for (const auto& v : ParseArray(std::get<std::string>(r))) {
      const auto& o = v.as_object();
      const int64_t created = o.at("created_at_ms").as_int64();
      const int64_t finished = o.at("finished_at_ms").as_int64();
      const int64_t took = (finished > 0 ? finished : NowUnixMs()) - created;
      std::string state = Str(o, "state");
      table.AddRow({Str(o, "id"), Str(o, "user"), Str(o, "verb"),
                    Str(o, "target").empty() ? "-" : Str(o, "target"), state, Ago(created),
                    std::to_string(took / 1000) + "." + std::to_string(took % 1000 / 100) + "s"});
    }
    ctx.out << table.Render();
    return 0;
  }

  int Logs(CliContext& ctx) {
    auto r =
        client_->Stream("GET", "/api/v1/requests/" + id_ + "/log" + (no_follow_ ? "" : "?follow=1"),
                        {}, [](std::string_view chunk) {
                          std::fwrite(chunk.data(), 1, chunk.size(), stdout);
                          std::fflush(stdout);
                          return true;
                        });
    if (!r.ok()) return FailForApiError(ctx, api_, r.status());
    if (!r->ok()) return FailForResponse(ctx, *r);
    // The request's state, as the exit code tells a followed job's: 0 succeeded, 100 failed,
    // 103 cancelled, 101 still running.
    auto state = Call(ctx, "GET", "/api/v1/requests/" + id_);
    if (auto* code = std::get_if<int>(&state)) return *code;
    const std::string s = Str(Parse(std::get<std::string>(state)), "state");
    if (s == "SUCCEEDED") return 0;
    if (s == "CANCELLED") return controller::kExitCancelled;
    if (s == "FAILED") return controller::kExitFailed;
    return controller::kExitNotFinished;
  }

  int Audit(CliContext& ctx) {
    auto r =
        Call(ctx, "GET",
             "/api/v1/audit" + (limit_ > 0 ? "?limit=" + std::to_string(limit_) : std::string()));
    if (auto* code = std::get_if<int>(&r)) return *code;
    if (output_ == "json") {
      ctx.out << std::get<std::string>(r);
      return 0;
    }
    controller::Table table({"WHEN", "USER", "VERB", "TARGET", "RESULT"});
    for (const auto& v : ParseArray(std::get<std::string>(r))) {
      const auto& o = v.as_object();
      table.AddRow({Ago(o.at("at_ms").as_int64()), Str(o, "user"), Str(o, "verb"),
                    Str(o, "target").empty() ? "-" : Str(o, "target"), Str(o, "result")});
    }
    ctx.out << table.Render();
    return 0;
  }

  CLI::App* cmd_ = nullptr;
  CLI::App *start_ = nullptr, *stop_ = nullptr, *status_ = nullptr, *login_ = nullptr,
           *logout_ = nullptr, *users_ = nullptr, *users_add_ = nullptr, *users_list_ = nullptr,
           *users_delete_ = nullptr, *tokens_ = nullptr, *tokens_create_ = nullptr,
           *tokens_list_ = nullptr, *tokens_revoke_ = nullptr, *requests_ = nullptr,
           *logs_ = nullptr, *cancel_ = nullptr, *audit_ = nullptr;
  std::string home_, host_ = "127.0.0.1", db_, cert_, key_, output_, state_dir_;
  int port_ = 46580;
  std::optional<std::size_t> warm_workers_;
  bool plain_ = false, foreground_ = false, all_ = false, no_follow_ = false;
  std::string endpoint_, token_, ca_cert_, name_, role_, expires_, id_;
  int limit_ = 0;
  ApiConfig api_;
  std::unique_ptr<api_http::ApiClient> client_;
};

}  // namespace

std::unique_ptr<Command> MakeApiCommand() { return std::make_unique<ApiCommand>(); }

}  // namespace herd::cli
