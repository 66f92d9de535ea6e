#include "controller/server/api_server.hpp"

#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/json.hpp>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "controller/server/server_impl.hpp"
#include "controller/state/herd_home.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"
#include "shared/common/unix_time.hpp"
#include "shared/tls/certs.hpp"

namespace herd::server {
namespace detail {

using api_http::HttpError;
using api_http::HttpRequest;
using api_http::HttpResponse;
using api_http::Responder;
using api_http::Target;

HttpResponse Json(const boost::json::value& v, int status) {
  HttpResponse r;
  r.status = status;
  r.body = boost::json::serialize(v) + "\n";
  return r;
}

boost::json::object UserJson(const User& u) {
  return {{"name", u.name},
          {"role", std::string(RoleName(u.role))},
          {"created_at_ms", u.created_at_ms}};
}

Status ServerImpl::Listen(boost::asio::io_context& io) {
  api_http::HttpServerOptions ho;
  ho.host = options_.host;
  ho.port = options_.port;
  ho.plain_http = options_.plain_http;
  ho.cert_file = options_.cert_file;
  ho.key_file = options_.key_file;
  ho.max_body_bytes = limits::kApiMaxUploadBytes;
  std::weak_ptr<ServerImpl> weak = shared_from_this();
  dashboard_ = std::make_unique<dashboard::Dashboard>(dashboard::DashboardHost{
      store_.get(), !options_.plain_http,
      [weak](const User& user, HttpRequest req, std::shared_ptr<Responder> res) {
        if (auto self = weak.lock()) return self->Run(user, req, res);
        res->Respond(HttpError(Unavailable("the server is stopping")));
      },
      /*now_ms=*/{}});
  ho.handler = [weak](HttpRequest req, std::shared_ptr<Responder> res) {
    auto self = weak.lock();
    if (!self) return res->Respond(HttpError(Unavailable("the server is stopping")));
    self->requests_seen_.fetch_add(1, std::memory_order_relaxed);
    boost::asio::post(self->pool_, [self, req = std::move(req), res]() mutable {
      self->Handle(std::move(req), res);
    });
  };
  HERD_ASSIGN_OR_RETURN(http_, api_http::ListenHttp(io, std::move(ho)));
  std::lock_guard<std::mutex> l(trim_mu_);
  trim_timer_ = std::make_unique<boost::asio::steady_timer>(io);
  ArmIdleTrim();
  return Status::Ok();
}

void ServerImpl::TrimHeap() { ::malloc_trim(0); }

void ServerImpl::ArmIdleTrim() {
  trim_timer_->expires_after(limits::kApiIdleTrimAfter);
  trim_timer_->async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (ec || !self) return;
    std::lock_guard<std::mutex> l(self->trim_mu_);
    if (self->trim_stopped_) return;
    self->idle_trim_.Tick(self->requests_seen_.load(std::memory_order_relaxed));
    self->ArmIdleTrim();
  });
}

uint16_t ServerImpl::port() const { return http_ ? http_->port() : 0; }

std::string ServerImpl::endpoint() const {
  std::string host =
      options_.host.find(':') != std::string::npos ? "[" + options_.host + "]" : options_.host;
  return std::string(options_.plain_http ? "http://" : "https://") + host + ":" +
         std::to_string(port());
}

void ServerImpl::Stop() {
  {
    std::lock_guard<std::mutex> l(trim_mu_);
    trim_stopped_ = true;
    if (trim_timer_) trim_timer_->cancel();
  }
  if (keeper_) keeper_->Stop();    // its controllers die, its leases go to another server
  if (sampler_) sampler_->Stop();  // its read in progress is interrupted
  StopAutostopSweeps();            // a stop in progress is interrupted
  if (http_) http_->Stop();
  StopCommands();
  // The handlers in progress. Only now: a command dies with the thread that forked it
  // (PR_SET_PDEATHSIG), and the pool's threads end here.
  pool_.join();
  warm_.Close();  // a read's round still running ends with its worker
  reads_pool_.join();
  StopCommands();  // what a handler started meanwhile
}

void ServerImpl::StopCommands() {
  for (auto& [id, c] : RunningById()) {
    (void)store_->RequestCancel(id);
    c->Cancel();
  }
  std::vector<std::shared_ptr<RunningCommand>> started;
  {
    std::lock_guard<std::mutex> l(mu_);
    started.swap(started_);
  }
  for (auto& c : started) c->Wait();
}

Status ServerImpl::TakeOver(std::string holder) {
  holder_ = std::move(holder);
  HERD_ASSIGN_OR_RETURN(int64_t failed,
                        store_->FailUnfinished(holder_,
                                               "the server stopped (killed or crashed) before "
                                               "this request ended; its command did not finish",
                                               NowUnixMs()));
  if (failed > 0) {
    HERD_LOG(kWarn) << "failed " << failed << " request(s) left unfinished by the last run";
  }
  return Status::Ok();
}

std::map<std::string, std::shared_ptr<RunningCommand>> ServerImpl::RunningById() {
  std::lock_guard<std::mutex> l(mu_);
  return running_;
}

void ServerImpl::Handle(HttpRequest req, const std::shared_ptr<Responder>& res) {
  auto target = api_http::ParseTarget(req.target);
  if (!target.ok()) return res->Respond(HttpError(target.status()));
  const Target& t = *target;
  if (t.Match({"api", "v1", "health"}) && req.method == "GET") {
    return res->Respond(Json(
        boost::json::object{{"status", "ok"}, {"version", options_.version}, {"server", holder_}}));
  }
  // The web dashboard authenticates by its session cookie (dashboard/dashboard.hpp).
  if (dashboard::Dashboard::Owns(t)) return dashboard_->Handle(std::move(req), res);
  auto user = Authenticate(req);
  if (!user.ok()) return res->Respond(HttpError(user.status()));
  std::vector<std::string> cap;
  const std::string& m = req.method;
  if (t.Match({"api", "v1", "whoami"}) && m == "GET") {
    return res->Respond(Json(UserJson(*user)));
  }
  if (t.Match({"api", "v1", "run"}) && m == "POST") return Run(*user, req, res);
  if (t.Match({"api", "v1", "uploads"}) && m == "POST") return Upload(*user, req, res);
  if (t.Match({"api", "v1", "requests"}) && m == "GET") return ListRequests(*user, t, res);
  if (t.Match({"api", "v1", "requests", ":id"}, &cap) && m == "GET") {
    return res->Respond(Answer(GetRequest(*user, cap[0])));
  }
  if (t.Match({"api", "v1", "requests", ":id", "log"}, &cap) && m == "GET") {
    return RequestLog(*user, cap[0], t.Query("follow").value_or("") == "1", res);
  }
  if (t.Match({"api", "v1", "requests", ":id", "cancel"}, &cap) && m == "POST") {
    return res->Respond(Answer(CancelRequest(*user, cap[0])));
  }
  if (t.Match({"api", "v1", "users"}) && m == "GET") return res->Respond(Answer(ListUsers(*user)));
  if (t.Match({"api", "v1", "users"}) && m == "POST") {
    return res->Respond(Answer(AddUser(*user, req.body)));
  }
  if (t.Match({"api", "v1", "users", ":name"}, &cap) && m == "DELETE") {
    return res->Respond(Answer(DeleteUser(*user, cap[0])));
  }
  if (t.Match({"api", "v1", "tokens"}) && m == "GET") {
    return res->Respond(Answer(ListTokens(*user, t)));
  }
  if (t.Match({"api", "v1", "tokens"}) && m == "POST") {
    return res->Respond(Answer(CreateToken(*user, req.body)));
  }
  if (t.Match({"api", "v1", "tokens", ":id", "revoke"}, &cap) && m == "POST") {
    return res->Respond(Answer(RevokeToken(*user, cap[0])));
  }
  if (t.Match({"api", "v1", "audit"}) && m == "GET") return res->Respond(Answer(Audit(*user, t)));
  if (t.Match({"api", "v1", "dashboard", "login-code"}) && m == "POST") {
    return res->Respond(Answer(dashboard_->IssueLoginCode(*user, req.body)));
  }
  res->Respond(HttpError(NotFound("no route " + m + " " + req.target)));
}

HttpResponse ServerImpl::Answer(const Result<boost::json::value>& v) {
  if (!v.ok()) return HttpError(v.status());
  return Json(*v);
}

Result<User> ServerImpl::Authenticate(const HttpRequest& req) {
  auto token = api_http::BearerToken(req.headers);
  if (!token) {
    return api_http::Unauthenticated("no token (log in with `herd api login -e URL --token T`)");
  }
  auto user = store_->Authenticate(*token, NowUnixMs());
  if (!user.ok()) return api_http::Unauthenticated(user.status().message());
  return user;
}

Status ServerImpl::RequireAdmin(const User& u) {
  if (u.role == Role::kAdmin) return Status::Ok();
  return PermissionDenied("only an admin may do this (" + u.name + " is a user)");
}

void ServerImpl::Audit(const User& u, const std::string& verb, const std::string& target,
                       const std::string& result) {
  if (auto s = store_->RecordAudit(u.name, verb, target, result, NowUnixMs()); !s.ok()) {
    HERD_LOG(kWarn) << "audit: " << s.message();
  }
}

}  // namespace detail

namespace {

namespace fs = std::filesystem;
using detail::ServerImpl;

bool IsIpLiteral(const std::string& host) {
  return host.find_first_not_of("0123456789.") == std::string::npos ||
         host.find(':') != std::string::npos;
}

// The server's own CA and a certificate for its host, made once.
Status EnsureServerTls(const ServerHome& home, const std::string& host) {
  const std::string dir = home.TlsDir();
  std::error_code ec;
  if (fs::exists(dir + "/server.crt", ec) && fs::exists(dir + "/server.key", ec)) {
    return Status::Ok();
  }
  HERD_RETURN_IF_ERROR(controller::EnsureDir(dir));
  tls::Pem ca;
  if (fs::exists(home.CaCert(), ec)) {
    HERD_ASSIGN_OR_RETURN(ca.cert, ReadFile(home.CaCert()));
    HERD_ASSIGN_OR_RETURN(ca.key, ReadFile(dir + "/ca.key"));
  } else {
    HERD_ASSIGN_OR_RETURN(ca, tls::CreateCa("herd-api"));
    HERD_RETURN_IF_ERROR(WriteFileAtomic(dir + "/ca.key", ca.key, 0600));
    HERD_RETURN_IF_ERROR(WriteFileAtomic(home.CaCert(), ca.cert, 0644));
  }
  std::vector<std::string> dns = {"localhost"}, ips = {"127.0.0.1"};
  if (!host.empty() && host != "0.0.0.0" && host != "::") {
    if (IsIpLiteral(host)) {
      if (host != "127.0.0.1") ips.push_back(host);
    } else if (host != "localhost") {
      dns.push_back(host);
    }
  }
  HERD_ASSIGN_OR_RETURN(tls::Pem cert, tls::IssueServerCertificate(ca, "herd-api", dns, ips));
  HERD_RETURN_IF_ERROR(WriteFileAtomic(dir + "/server.key", cert.key, 0600));
  HERD_RETURN_IF_ERROR(WriteFileAtomic(dir + "/server.crt", cert.cert, 0644));
  return Status::Ok();
}

// The first admin and its token (0600 in the home), when the database has no user yet.
Status EnsureFirstAdmin(ApiStore& store, const ServerHome& home) {
  HERD_ASSIGN_OR_RETURN(auto users, store.ListUsers());
  if (!users.empty()) return Status::Ok();
  HERD_RETURN_IF_ERROR(store.AddUser(kFirstAdmin, Role::kAdmin, NowUnixMs()));
  HERD_ASSIGN_OR_RETURN(auto token, store.CreateToken(kFirstAdmin, 0, NowUnixMs()));
  return WriteFileAtomic(home.AdminToken(), token.token + "\n", 0600);
}

}  // namespace

Result<std::unique_ptr<ApiServer>> ApiServer::Start(boost::asio::io_context& io,
                                                    ApiServerOptions options) {
  if (options.home.empty()) return InvalidArgument("--home: the server needs a home directory");
  if (options.herd_binary.empty()) return InvalidArgument("the server needs the herd binary");
  ServerHome home(options.home, options.state_dir);
  HERD_RETURN_IF_ERROR(controller::EnsureDir(home.dir));
  HERD_RETURN_IF_ERROR(controller::EnsureDir(home.state));
  const std::string url = options.db_url.empty() ? "sqlite:" + home.Db() : options.db_url;
  HERD_ASSIGN_OR_RETURN(auto store, ApiStore::Open(url, home.SecretsKey()));
  HERD_RETURN_IF_ERROR(EnsureFirstAdmin(*store, home));
  if (!options.plain_http && options.cert_file.empty()) {
    HERD_RETURN_IF_ERROR(EnsureServerTls(home, options.host));
    options.cert_file = home.TlsDir() + "/server.crt";
    options.key_file = home.TlsDir() + "/server.key";
  }
  auto impl = std::make_shared<ServerImpl>(options, std::move(store));
  HERD_RETURN_IF_ERROR(impl->Listen(io));
  // Requests are this server's by its address: one that starts again on it ends what it left.
  // (Known once it listens; no request is handled before: handlers run once io runs.)
  HERD_RETURN_IF_ERROR(impl->TakeOver(options.host + ":" + std::to_string(impl->port())));
  HERD_RETURN_IF_ERROR(impl->StartKeeper());
  HERD_RETURN_IF_ERROR(impl->StartSampler());
  impl->StartAutostopSweeps();
  struct Handle final : ApiServer {
    std::shared_ptr<ServerImpl> impl;
    uint16_t port() const override { return impl->port(); }
    std::string endpoint() const override { return impl->endpoint(); }
    void Stop() override { impl->Stop(); }
    ~Handle() override { impl->Stop(); }
  };
  auto h = std::make_unique<Handle>();
  h->impl = impl;
  return std::unique_ptr<ApiServer>(std::move(h));
}

int RunApiServer(ApiServerOptions options) {
  ServerHome home(options.home);
  boost::asio::io_context io;
  auto server = ApiServer::Start(io, options);
  if (!server.ok()) {
    std::fprintf(stderr, "herd: api server: %s\n", server.status().message().c_str());
    return 1;
  }
  boost::json::object info{
      {"pid", ::getpid()},
      {"endpoint", (*server)->endpoint()},
      {"home", home.dir},
      {"state_dir", options.state_dir.empty() ? home.dir : options.state_dir},
      {"db", RedactDbUrl(options.db_url.empty() ? "sqlite:" + home.Db() : options.db_url)}};
  if (!options.plain_http) {
    info["ca_cert"] = options.cert_file.empty() ? home.CaCert() : "";
  }
  info["admin_token"] = home.AdminToken();
  if (auto s = WriteFileAtomic(home.ServerJson(), boost::json::serialize(info) + "\n", 0600);
      !s.ok()) {
    std::fprintf(stderr, "herd: api server: %s\n", s.message().c_str());
    return 1;
  }
  HERD_LOG(kInfo) << "herd api server listening on " << (*server)->endpoint();
  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](const boost::system::error_code&, int sig) {
    HERD_LOG(kInfo) << "signal " << sig << ": stopping";
    (*server)->Stop();
    io.stop();
  });
  ::signal(SIGPIPE, SIG_IGN);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) threads.emplace_back([&io] { io.run(); });
  io.run();
  for (auto& t : threads) t.join();
  std::error_code ec;
  fs::remove(home.ServerJson(), ec);
  return 0;
}

}  // namespace herd::server
