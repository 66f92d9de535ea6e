#include "controller/server/api_server.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json.hpp>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "controller/bootstrap/sha256.hpp"
#include "controller/jobs/managed_job_store.hpp"
#include "controller/server/command_runner.hpp"
#include "controller/server/dashboard/dashboard.hpp"
#include "controller/server/http/http_server.hpp"
#include "controller/server/http/request_codec.hpp"
#include "controller/server/job_keeper.hpp"
#include "controller/server/read_coalescer.hpp"
#include "controller/server/store/api_store.hpp"
#include "controller/server/stream_frames.hpp"
#include "controller/server/warm_protocol.hpp"
#include "controller/server/warm_workers.hpp"
#include "controller/ssh/subprocess.hpp"
#include "controller/state/herd_home.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"
#include "shared/common/unix_time.hpp"
#include "shared/tls/certs.hpp"

extern char** environ;

namespace herd::server {

namespace fs = std::filesystem;
using api_http::FieldSpec;
using api_http::FieldType;
using api_http::HttpError;
using api_http::HttpRequest;
using api_http::HttpResponse;
using api_http::Responder;
using api_http::Target;

namespace {

constexpr char kFramesType[] = "application/x-herd-frames";

HttpResponse Json(const boost::json::value& v, int status = 200) {
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

boost::json::object RequestJson(const RequestRecord& r) {
  boost::json::object o{{"id", r.id},
                        {"user", r.user},
                        {"verb", r.verb},
                        {"target", r.target},
                        {"state", std::string(RequestStateName(r.state))},
                        {"server", r.holder},
                        {"message", r.message},
                        {"cancel_requested", r.cancel_requested},
                        {"created_at_ms", r.created_at_ms},
                        {"started_at_ms", r.started_at_ms},
                        {"finished_at_ms", r.finished_at_ms}};
  if (r.exit_code) o["exit_code"] = *r.exit_code;
  return o;
}

boost::json::object TokenJson(const TokenInfo& t) {
  return {{"id", t.id},
          {"user", t.user},
          {"created_at_ms", t.created_at_ms},
          {"expires_at_ms", t.expires_at_ms},
          {"revoked_at_ms", t.revoked_at_ms}};
}

// The commands a remote CLI may run, and which of them change something (a request each).
// "jobs" is followed by its subcommand ("jobs.launch").
const std::map<std::string, bool>& Verbs() {
  static const std::map<std::string, bool> verbs = {
      {"launch", true},      {"exec", true},       {"status", false},     {"queue", false},
      {"logs", false},       {"cancel", true},     {"stop", true},        {"start", true},
      {"down", true},        {"autostop", true},   {"nodes", false},      {"jobs.launch", true},
      {"jobs.queue", false}, {"jobs.logs", false}, {"jobs.cancel", true}, {"stack", false},
      {"infra", false},
  };
  return verbs;
}

// A short, stable tag of a user's name fit for a cluster name: 6 hex characters of its SHA-256.
std::string UserTag(const std::string& user) { return controller::Sha256Hex(user).substr(0, 6); }

// An upload's place in the command's directory: "workdir" or "mounts/N".
Status ValidateUploadName(const std::string& name) {
  if (name == "workdir") return Status::Ok();
  if (name.rfind("mounts/", 0) == 0 && name.size() > 7 && name.size() <= 12 &&
      name.find_first_not_of("0123456789", 7) == std::string::npos) {
    return Status::Ok();
  }
  return InvalidArgument("uploads: '" + name + "' is not an upload place (workdir or mounts/N)");
}

// This server's id (made once in its home): its lease rows survive its restart under it.
Result<std::string> ServerId(const ServerHome& home) {
  if (auto text = ReadFile(home.ServerId()); text.ok()) {
    std::string id = *text;
    while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
    if (!id.empty()) return id;
  }
  HERD_ASSIGN_OR_RETURN(std::string random, RandomHex(6));
  const std::string id = "srv-" + random;
  HERD_RETURN_IF_ERROR(WriteFileAtomic(home.ServerId(), id + "\n", 0600));
  return id;
}

class ServerImpl final : public ApiServer, public std::enable_shared_from_this<ServerImpl> {
 public:
  ServerImpl(ApiServerOptions o, std::unique_ptr<ApiStore> store)
      : options_(std::move(o)),
        home_(options_.home, options_.state_dir),
        store_(std::move(store)),
        pool_(4),
        warm_({std::min(options_.warm_workers_per_user, limits::kApiWarmWorkersMax),
               limits::kApiWarmWorkersMax, limits::kApiWarmQueueWait}) {}

  Status Listen(boost::asio::io_context& io) {
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
      boost::asio::post(self->pool_, [self, req = std::move(req), res]() mutable {
        self->Handle(std::move(req), res);
      });
    };
    HERD_ASSIGN_OR_RETURN(http_, api_http::ListenHttp(io, std::move(ho)));
    return Status::Ok();
  }

  uint16_t port() const override { return http_ ? http_->port() : 0; }
  std::string endpoint() const override {
    std::string host =
        options_.host.find(':') != std::string::npos ? "[" + options_.host + "]" : options_.host;
    return std::string(options_.plain_http ? "http://" : "https://") + host + ":" +
           std::to_string(port());
  }
  void Stop() override {
    if (keeper_) keeper_->Stop();  // its controllers die, its leases go to another server
    if (http_) http_->Stop();
    StopCommands();
    // The handlers in progress. Only now: a command dies with the thread that forked it
    // (PR_SET_PDEATHSIG), and the pool's threads end here.
    pool_.join();
    warm_.Close();  // a read's round still running ends with its worker
    reads_pool_.join();
    StopCommands();  // what a handler started meanwhile
  }

  // Interrupts the running commands and waits until each one's request has ended (its OnExit
  // ran Finished), not only its process: a server started again on this database must not find
  // it RUNNING. Wait also means the command let go of its Responder, whose connection must not
  // outlive the io_context.
  void StopCommands() {
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

  // Names this server in the requests it accepts, and ends what an earlier run of it (killed, or
  // crashed) left PENDING or RUNNING: their commands died with it.
  Status TakeOver(std::string holder) {
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

  // Managed jobs' controllers run here, as the keeper's children (job_keeper.hpp).
  Status StartKeeper() {
    HERD_ASSIGN_OR_RETURN(std::string id, ServerId(home_));
    std::weak_ptr<ServerImpl> weak = shared_from_this();
    HERD_ASSIGN_OR_RETURN(keeper_,
                          StartServerKeeper(*store_, {.holder = id,
                                                      .state_dir = home_.state,
                                                      .herd_binary = options_.herd_binary,
                                                      .user_env = [weak](const std::string& user) {
                                                        auto self = weak.lock();
                                                        return self ? self->ChildEnv(user, false)
                                                                    : std::vector<std::string>();
                                                      }}));
    HERD_LOG(kInfo) << "managed jobs' controllers run here as " << id;
    return Status::Ok();
  }

 private:
  std::map<std::string, std::shared_ptr<RunningCommand>> RunningById() {
    std::lock_guard<std::mutex> l(mu_);
    return running_;
  }

  // ---- dispatch
  void Handle(HttpRequest req, const std::shared_ptr<Responder>& res) {
    auto target = api_http::ParseTarget(req.target);
    if (!target.ok()) return res->Respond(HttpError(target.status()));
    const Target& t = *target;
    if (t.Match({"api", "v1", "health"}) && req.method == "GET") {
      return res->Respond(Json(boost::json::object{
          {"status", "ok"}, {"version", options_.version}, {"server", holder_}}));
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
    if (t.Match({"api", "v1", "users"}) && m == "GET")
      return res->Respond(Answer(ListUsers(*user)));
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

  static HttpResponse Answer(const Result<boost::json::value>& v) {
    if (!v.ok()) return HttpError(v.status());
    return Json(*v);
  }

  Result<User> Authenticate(const HttpRequest& req) {
    auto token = api_http::BearerToken(req.headers);
    if (!token) {
      return api_http::Unauthenticated("no token (log in with `herd api login -e URL --token T`)");
    }
    auto user = store_->Authenticate(*token, NowUnixMs());
    if (!user.ok()) return api_http::Unauthenticated(user.status().message());
    return user;
  }

  static Status RequireAdmin(const User& u) {
    if (u.role == Role::kAdmin) return Status::Ok();
    return PermissionDenied("only an admin may do this (" + u.name + " is a user)");
  }

  void Audit(const User& u, const std::string& verb, const std::string& target,
             const std::string& result) {
    if (auto s = store_->RecordAudit(u.name, verb, target, result, NowUnixMs()); !s.ok()) {
      HERD_LOG(kWarn) << "audit: " << s.message();
    }
  }

  // ---- commands
  // A read shares the next run of the same words of its user (read_coalescer.hpp) in a warm
  // worker, on a thread of reads_pool_; when no worker could run it, it runs as a child like any
  // command, from a handler thread of its own.
  void RunWarm(const User& user, const HttpRequest& req, const std::shared_ptr<Responder>& res,
               const std::vector<std::string>& args) {
    // Touched only on the thread that runs the read's round.
    auto streaming = std::make_shared<bool>(false);
    ReadCoalescer::Waiter waiter{
        [res, streaming](FrameTag stream, std::string_view bytes) {
          if (!*streaming) res->StartStream(200, kFramesType);
          *streaming = true;
          res->Write(EncodeFrame(stream, bytes));
        },
        [self = shared_from_this(), user, req, res, streaming](Result<int> code) {
          if (code.ok()) {
            if (!*streaming) res->StartStream(200, kFramesType);
            res->Write(EncodeFrame(FrameTag::kExit, std::to_string(*code)));
            return res->End();
          }
          HERD_LOG(kDebug) << "read without a warm worker: " << code.status().message();
          boost::asio::post(self->pool_,
                            [self, user, req, res] { self->Run(user, req, res, /*warm=*/false); });
        }};
    coalescer_.Join(
        ReadKey(user.name, args),
        [this, name = user.name, args](const ReadCoalescer::OutputFn& out) {
          return warm_.Run(name, WarmSpawn(name), args, out);
        },
        std::move(waiter));
  }

  void Run(const User& user, const HttpRequest& req, const std::shared_ptr<Responder>& res,
           bool warm = true) {
    auto body = api_http::DecodeBody(
        req.body,
        {FieldSpec{"args", FieldType::kStringList, true}, FieldSpec{"cluster", FieldType::kString},
         FieldSpec{"task", FieldType::kString}, FieldSpec{"secrets", FieldType::kStringMap},
         FieldSpec{"uploads", FieldType::kStringMap}, FieldSpec{"async", FieldType::kBool}},
        limits::kApiMaxBodyBytes);
    if (!body.ok()) return res->Respond(HttpError(body.status()));
    std::vector<std::string> args = body->StringList("args");
    if (args.empty()) return res->Respond(HttpError(InvalidArgument("args: no command")));
    std::string verb = args[0];
    if (verb == "jobs") verb += "." + (args.size() > 1 ? args[1] : std::string());
    auto known = Verbs().find(verb);
    if (known == Verbs().end()) {
      return res->Respond(
          HttpError(InvalidArgument("args: `" + verb + "` is not a command the server runs")));
    }
    for (const auto& a : args) {
      if (a.find('\0') != std::string::npos) {
        return res->Respond(HttpError(InvalidArgument("args: NUL in an argument")));
      }
    }
    const bool mutating = known->second;
    if (body->Bool("async") && !mutating) {
      return res->Respond(HttpError(InvalidArgument(
          "async: `" + verb + "` changes nothing and is not a request; run it without --async")));
    }
    // Everything in the body is checked before anything changes (a launch claims its name).
    auto uploads = body->StringMap("uploads");
    for (const auto& [place, id] : uploads) {
      if (auto s = ValidateUploadName(place); !s.ok()) return res->Respond(HttpError(s));
      if (auto s = api_http::ValidateName("uploads." + place, id); !s.ok()) {
        return res->Respond(HttpError(s));
      }
    }
    std::string cluster = body->String("cluster");
    if (verb == "launch") {
      // The name a launch makes is the one its arguments give, whatever the body says: that is
      // the name claimed (a local cluster's network namespaces are named after it).
      std::string named;
      for (std::size_t i = 1; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--") break;
        if ((a == "-c" || a == "--cluster") && i + 1 < args.size()) {
          named = args[i + 1];
        } else if (a.rfind("--cluster=", 0) == 0) {
          named = a.substr(10);
        } else if (a.rfind("-c", 0) == 0 && a.size() > 2 && a[2] != '-') {
          named = a.substr(2);
        }
      }
      if (named.empty()) {
        return res->Respond(HttpError(
            InvalidArgument("args: a launch through the server names its cluster (-c NAME)")));
      }
      if (!cluster.empty() && cluster != named) {
        return res->Respond(HttpError(InvalidArgument(
            "cluster: '" + cluster + "' is not the cluster the launch names ('" + named + "')")));
      }
      cluster = named;
    }
    if (!cluster.empty()) {
      if (auto s = api_http::ValidateClusterNameField("cluster", cluster); !s.ok()) {
        return res->Respond(HttpError(s));
      }
      // Names are one namespace on a server (a local cluster's network namespaces are named
      // after it): a launch claims its name, and a name held by another user is for this one a
      // cluster that does not exist.
      if (verb == "launch") {
        if (auto s = store_->ClaimName(NameKind::kCluster, cluster, user.name, NowUnixMs());
            !s.ok()) {
          Audit(user, verb, cluster, "refused: name taken");
          return res->Respond(
              HttpError(s.code() == Code::kAlreadyExists
                            ? AlreadyExists("cluster name " + cluster +
                                            " is taken on this server; choose another name")
                            : s));
        }
      } else if (auto owner = store_->OwnerOf(NameKind::kCluster, cluster);
                 owner.ok() && *owner != user.name) {
        return res->Respond(HttpError(
            NotFound("cluster " + cluster + " does not exist (see `herd status`; create it with " +
                     "`herd launch -c " + cluster + " TASK.yaml`)")));
      }
    }

    // A read runs in one of the user's warm workers when one is free (no process to start, no
    // request directory); otherwise as a child like any command.
    if (warm && options_.warm_workers_per_user > 0 && !mutating && uploads.empty() &&
        !body->Has("task") && !body->Has("secrets") && IsWarmRead(args)) {
      if (auto s = EnsureUserHome(user.name); !s.ok()) return res->Respond(HttpError(s));
      return RunWarm(user, req, res, args);
    }

    // The request: a row (mutating commands) and a directory the command runs in.
    // A launch refused from here on made nothing: the name it claimed is free again.
    auto release_unmade = [&] {
      if (verb == "launch" && !cluster.empty()) (void)MaybeReleaseUnmade(user.name, cluster);
    };
    std::string id;
    if (mutating) {
      auto created = store_->CreateRequest(user.name, verb, cluster, NowUnixMs(), holder_);
      if (!created.ok()) {
        release_unmade();
        return res->Respond(HttpError(created.status()));
      }
      id = *created;
      Audit(user, verb, cluster, "accepted " + id);
    } else {
      auto random = RandomHex(8);
      if (!random.ok()) return res->Respond(HttpError(random.status()));
      id = "read-" + *random;
    }
    const std::string dir = home_.RequestDir(id);
    auto fail = [&](const Status& s) {
      if (mutating)
        (void)store_->FinishRequest(id, RequestState::kFailed, s.message(), {}, NowUnixMs());
      release_unmade();
      std::error_code ec;
      fs::remove_all(dir, ec);
      res->Respond(HttpError(s));
    };
    if (auto s = EnsureUserHome(user.name); !s.ok()) return fail(s);
    if (auto s = controller::EnsureDir(dir); !s.ok()) return fail(s);
    if (body->Has("task")) {
      if (auto s = WriteFileAtomic(dir + "/task.json", body->String("task"), 0600); !s.ok()) {
        return fail(s);
      }
    }
    for (const auto& [place, upload] : uploads) {
      if (auto s = Unpack(user.name, upload, dir + "/" + place); !s.ok()) return fail(s);
    }
    std::string secrets, secrets_ref;
    if (body->Has("secrets")) {
      boost::json::object o;
      for (const auto& [k, v] : body->StringMap("secrets")) o[k] = v;
      secrets = boost::json::serialize(o);
    }

    CommandSpec spec;
    spec.argv.push_back(options_.herd_binary);
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.env = ChildEnv(user.name, !secrets.empty());
    if (verb == "jobs.launch" && !secrets.empty()) {
      // Sealed at rest for the job's controllers, which the keeper starts (again) on any server.
      auto ref = KeepManagedSecrets(user.name, secrets);
      if (!ref.ok()) return fail(ref.status());
      spec.env.push_back(std::string(jobs::kManagedSecretsRefEnv) + "=" + *ref);
      secrets_ref = *ref;
    }
    spec.cwd = dir;
    spec.stdin_data = secrets;
    spec.log_path = mutating ? home_.RequestLog(id) : "";
    const bool async = body->Bool("async");
    if (mutating) (void)store_->SetRequestRunning(id, holder_, NowUnixMs());

    if (!async) {
      res->StartStream(200, kFramesType);
      if (mutating) res->Write(EncodeFrame(FrameTag::kRequestId, id));
    }
    auto last_err = std::make_shared<std::string>();
    auto cmd = RunningCommand::Start(
        std::move(spec), [res, async, last_err](FrameTag stream, std::string_view bytes) {
          if (stream == FrameTag::kStderr) {
            *last_err = std::string(bytes.substr(bytes.size() > 4096 ? bytes.size() - 4096 : 0));
          }
          if (!async) res->Write(EncodeFrame(stream, bytes));
        });
    if (!cmd.ok()) {
      if (async) return fail(cmd.status());
      if (mutating) {
        (void)store_->FinishRequest(id, RequestState::kFailed, cmd.status().message(), {},
                                    NowUnixMs());
      }
      release_unmade();
      std::error_code ec;
      fs::remove_all(dir, ec);
      res->Write(EncodeFrame(FrameTag::kStderr, "herd: " + cmd.status().message() + "\n"));
      res->Write(EncodeFrame(FrameTag::kExit, "1"));
      return res->End();
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      running_[id] = *cmd;
      std::erase_if(started_, [](const auto& c) { return c->done(); });
      started_.push_back(*cmd);
    }
    if (async) {
      res->Respond(Json(boost::json::object{{"request_id", id}}));
    } else {
      // A client that went away (Ctrl-C) interrupts the command as Ctrl-C does locally: a
      // followed job is detached from and keeps running.
      std::weak_ptr<RunningCommand> weak_cmd = *cmd;
      res->OnClose([weak_cmd] {
        if (auto c = weak_cmd.lock()) c->Cancel();
      });
    }
    auto self = shared_from_this();
    (*cmd)->OnExit([self, res, async, mutating, id, verb, cluster, user, dir, last_err,
                    secrets_ref](int code) {
      // The request ends (its row, its name, its directory) before the client hears the exit
      // code, so that what the client does next sees it ended.
      self->Finished(user, id, verb, cluster, dir, mutating, code, *last_err);
      self->LaunchedManaged(user.name, verb, code, secrets_ref);
      if (!async) {
        res->Write(EncodeFrame(FrameTag::kExit, std::to_string(code)));
        res->End();
      }
    });
  }

  void Finished(const User& user, const std::string& id, const std::string& verb,
                const std::string& cluster, const std::string& dir, bool mutating, int code,
                const std::string& last_err) {
    bool cancel_requested = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      running_.erase(id);
    }
    if (mutating) {
      auto asked = store_->IsCancelRequested(id);
      cancel_requested = asked.ok() && *asked;
      std::string message = last_err;
      while (!message.empty() && (message.back() == '\n' || message.back() == '\r')) {
        message.pop_back();
      }
      if (auto nl = message.rfind('\n'); nl != std::string::npos) message = message.substr(nl + 1);
      const RequestState state = code == 0          ? RequestState::kSucceeded
                                 : cancel_requested ? RequestState::kCancelled
                                                    : RequestState::kFailed;
      (void)store_->FinishRequest(id, state, code == 0 ? "" : message, code, NowUnixMs());
      Audit(user, verb, cluster,
            code == 0 ? "ok"
                      : "exit " + std::to_string(code) + (message.empty() ? "" : ": " + message));
    }
    if (verb == "down" && code == 0 && !cluster.empty()) {
      (void)store_->ReleaseName(NameKind::kCluster, cluster);
    }
    if (verb == "launch" && code != 0 && !cluster.empty()) {
      // A launch that made nothing leaves the name free again; one that made a cluster keeps it
      // (`herd status` of its user shows it, INIT or UP).
      (void)MaybeReleaseUnmade(user.name, cluster);
    }
    // A managed job's controller relaunches from the task's workdir and mounts here: its
    // directory stays. Anything else was synced to the nodes already.
    if (verb != "jobs.launch") {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  }

  // A managed job's secrets, sealed under its user for its controllers: the reference the job
  // records (jobs::ManagedSecretsKey gives the key).
  Result<std::string> KeepManagedSecrets(const std::string& user, const std::string& json) {
    HERD_ASSIGN_OR_RETURN(std::string ref, RandomHex(8));
    HERD_RETURN_IF_ERROR(store_->PutSecret(user, jobs::ManagedSecretsKey(ref), json));
    return ref;
  }

  // After `herd jobs launch`: the keeper looks at once; a launch that failed made no job, and
  // the secrets it sealed go.
  void LaunchedManaged(const std::string& user, const std::string& verb, int code,
                       const std::string& secrets_ref) {
    if (verb != "jobs.launch") return;
    if (code != 0 && !secrets_ref.empty()) {
      (void)store_->DeleteSecret(user, jobs::ManagedSecretsKey(secrets_ref));
    }
    if (keeper_) keeper_->Kick();
  }

  Status MaybeReleaseUnmade(const std::string& user, const std::string& cluster) {
    std::error_code ec;
    if (fs::exists(home_.UserHome(user) + "/herd/clusters/" + cluster, ec)) return Status::Ok();
    return store_->ReleaseName(NameKind::kCluster, cluster);
  }

  Status EnsureUserHome(const std::string& user) {
    HERD_RETURN_IF_ERROR(controller::EnsureDir(home_.UserHome(user) + "/herd"));
    return Status::Ok();
  }

  // The command's environment: this server's, with the user's home (HOME, HERD_HOME under it)
  // and name, and never a server to send the command to again.
  std::vector<std::string> ChildEnv(const std::string& user, bool secrets_on_stdin) {
    std::vector<std::string> env;
    static const std::set<std::string> replaced = {"HOME",
                                                   "HERD_HOME",
                                                   "USER",
                                                   "LOGNAME",
                                                   "HERD_API_SERVER",
                                                   "HERD_API_TOKEN",
                                                   "HERD_API_CA_CERT",
                                                   "HERD_TASK_SECRETS_ON_STDIN",
                                                   jobs::kManagedSupervisedEnv,
                                                   jobs::kManagedSecretsRefEnv,
                                                   jobs::kManagedSecretsOnStdinEnv};
    for (char** e = environ; e && *e; ++e) {
      std::string_view kv(*e);
      auto eq = kv.find('=');
      if (eq == std::string_view::npos) continue;
      if (replaced.count(std::string(kv.substr(0, eq)))) continue;
      env.emplace_back(kv);
    }
    env.push_back("HOME=" + home_.UserHome(user));
    env.push_back("HERD_HOME=" + home_.UserHome(user) + "/herd");
    env.push_back("USER=" + user);
    env.push_back("LOGNAME=" + user);
    env.push_back("HERD_API_SERVER=local");  // this machine's state: never a server again
    // Managed jobs' clusters are named <name>-<id>-<attempt> with ids counted per user home: the
    // user's tag keeps two users' jobs of one name from sharing a cluster name on this machine.
    env.push_back("HERD_MANAGED_CLUSTER_TAG=" + UserTag(user));
    // Managed jobs' controllers are this server's (job_keeper.hpp), not the commands'.
    env.push_back(std::string(jobs::kManagedSupervisedEnv) + "=1");
    if (secrets_on_stdin) env.push_back("HERD_TASK_SECRETS_ON_STDIN=1");
    return env;
  }

  WarmWorkers::Spawn WarmSpawn(const std::string& user) {
    return {{options_.herd_binary, "_serve"}, ChildEnv(user, false), home_.UserHome(user)};
  }

  // ---- uploads
  void Upload(const User& user, const HttpRequest& req, const std::shared_ptr<Responder>& res) {
    if (req.body.empty()) return res->Respond(HttpError(InvalidArgument("upload: empty body")));
    auto random = RandomHex(8);
    if (!random.ok()) return res->Respond(HttpError(random.status()));
    const std::string id = "up-" + *random;
    const std::string dir = home_.UploadDir(user.name);
    if (auto s = controller::EnsureDir(dir); !s.ok()) return res->Respond(HttpError(s));
    if (auto s = WriteFileAtomic(dir + "/" + id + ".tar", req.body, 0600); !s.ok()) {
      return res->Respond(HttpError(s));
    }
    res->Respond(Json(boost::json::object{{"id", id}, {"bytes", req.body.size()}}, 201));
  }

  // Extracts an upload of `user` into `dest` (made), then removes the upload. GNU tar keeps
  // members inside dest: it strips leading '/' and refuses names with "..".
  Status Unpack(const std::string& user, const std::string& upload, const std::string& dest) {
    const std::string file = home_.UploadDir(user) + "/" + upload + ".tar";
    std::error_code ec;
    if (!fs::exists(file, ec)) return NotFound("uploads: no upload " + upload + " of " + user);
    HERD_RETURN_IF_ERROR(controller::EnsureDir(dest));
    HERD_ASSIGN_OR_RETURN(auto r, controller::RunProcess({"tar", "-xf", file, "-C", dest,
                                                          "--no-same-owner", "--no-overwrite-dir"},
                                                         {}, limits::kApiClientTimeout));
    fs::remove(file, ec);
    if (r.exit_code != 0)
      return InvalidArgument("uploads: " + upload + " is not a tar archive: " + r.err);
    return Status::Ok();
  }

  // ---- requests
  Result<RequestRecord> OwnRequest(const User& user, const std::string& id) {
    HERD_RETURN_IF_ERROR(api_http::ValidateName("request", id));
    auto r = store_->GetRequest(id);
    // Another user's request is, for this one, a request that does not exist.
    if (!r.ok() || (r->user != user.name && user.role != Role::kAdmin)) {
      return NotFound("request " + id + " does not exist (see `herd api requests`)");
    }
    return r;
  }

  Result<boost::json::value> GetRequest(const User& user, const std::string& id) {
    HERD_ASSIGN_OR_RETURN(auto r, OwnRequest(user, id));
    return boost::json::value(RequestJson(r));
  }

  void ListRequests(const User& user, const Target& t, const std::shared_ptr<Responder>& res) {
    const bool all = t.Query("all").value_or("") == "1";
    if (all) {
      if (auto s = RequireAdmin(user); !s.ok()) return res->Respond(HttpError(s));
    }
    int limit = 0;
    if (auto l = t.Query("limit")) {
      auto n = api_http::ParseId("limit", *l);
      if (!n.ok()) return res->Respond(HttpError(n.status()));
      limit = static_cast<int>(std::min<int64_t>(*n, 1 << 20));
    }
    auto list = store_->ListRequests(all ? "" : user.name, limit);
    if (!list.ok()) return res->Respond(HttpError(list.status()));
    boost::json::array arr;
    for (const auto& r : *list) arr.push_back(RequestJson(r));
    res->Respond(Json(arr));
  }

  void RequestLog(const User& user, const std::string& id, bool follow,
                  const std::shared_ptr<Responder>& res) {
    auto r = OwnRequest(user, id);
    if (!r.ok()) return res->Respond(HttpError(r.status()));
    const std::string path = home_.RequestLog(id);
    res->StartStream(200, "application/octet-stream");
    uint64_t offset = 0;
    while (!res->Closed()) {
      // Read what is there, then whether it ended: a request that ended has all its output in.
      auto rec = store_->GetRequest(id);
      const bool ended = !rec.ok() || IsTerminal(rec->state);
      auto data = ReadFileFrom(path, offset);
      if (data.ok() && !data->empty()) {
        offset += data->size();
        res->Write(std::move(*data));
      }
      if (!follow || ended) break;
      std::this_thread::sleep_for(limits::kApiRequestLogPoll);
    }
    res->End();
  }

  static Result<std::string> ReadFileFrom(const std::string& path, uint64_t offset) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return std::string();
    std::string out;
    if (std::fseek(f, static_cast<long>(offset), SEEK_SET) == 0) {
      char buf[64 * 1024];
      std::size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 &&
             out.size() < limits::kApiMaxFrameBytes) {
        out.append(buf, n);
      }
    }
    std::fclose(f);
    return out;
  }

  Result<boost::json::value> CancelRequest(const User& user, const std::string& id) {
    HERD_ASSIGN_OR_RETURN(auto r, OwnRequest(user, id));
    if (IsTerminal(r.state)) {
      return FailedPrecondition("request " + id + " already ended (" +
                                std::string(RequestStateName(r.state)) + ")");
    }
    HERD_RETURN_IF_ERROR(store_->RequestCancel(id));
    std::shared_ptr<RunningCommand> cmd;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (auto it = running_.find(id); it != running_.end()) cmd = it->second;
    }
    if (cmd) cmd->Cancel();
    Audit(user, "api.cancel", id, "ok");
    return boost::json::value(boost::json::object{{"id", id}, {"cancel_requested", true}});
  }

  // ---- users and tokens
  Result<boost::json::value> ListUsers(const User& user) {
    HERD_RETURN_IF_ERROR(RequireAdmin(user));
    HERD_ASSIGN_OR_RETURN(auto users, store_->ListUsers());
    boost::json::array arr;
    for (const auto& u : users) arr.push_back(UserJson(u));
    return boost::json::value(arr);
  }

  Result<boost::json::value> AddUser(const User& admin, const std::string& raw) {
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

  Result<boost::json::value> DeleteUser(const User& admin, const std::string& name) {
    HERD_RETURN_IF_ERROR(RequireAdmin(admin));
    HERD_RETURN_IF_ERROR(api_http::ValidateName("user", name));
    Status s = store_->DeleteUser(name);
    Audit(admin, "api.users.delete", name, s.ok() ? "ok" : s.message());
    HERD_RETURN_IF_ERROR(s);
    return boost::json::value(boost::json::object{{"deleted", name}});
  }

  Result<boost::json::value> ListTokens(const User& user, const Target& t) {
    std::string who = std::string(t.Query("user").value_or(user.name));
    if (t.Query("all").value_or("") == "1") who = "";
    if (who != user.name) HERD_RETURN_IF_ERROR(RequireAdmin(user));
    HERD_ASSIGN_OR_RETURN(auto tokens, store_->ListTokens(who));
    boost::json::array arr;
    for (const auto& tk : tokens) arr.push_back(TokenJson(tk));
    return boost::json::value(arr);
  }

  Result<boost::json::value> CreateToken(const User& user, const std::string& raw) {
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
    Audit(user, "api.tokens.create", who,
          token.ok() ? "ok " + token->id : token.status().message());
    HERD_RETURN_IF_ERROR(token.status());
    return boost::json::value(
        boost::json::object{{"id", token->id},
                            {"token", token->token},
                            {"user", who},
                            {"expires_at_ms", in_s == 0 ? 0 : now + in_s * 1000}});
  }

  Result<boost::json::value> RevokeToken(const User& user, const std::string& id) {
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

  Result<boost::json::value> Audit(const User& user, const Target& t) {
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

  ApiServerOptions options_;
  ServerHome home_;
  std::unique_ptr<ApiStore> store_;
  boost::asio::thread_pool pool_;
  WarmWorkers warm_;
  // A read's round holds a warm worker and a thread while it runs: as many threads as workers.
  boost::asio::thread_pool reads_pool_{limits::kApiWarmWorkersMax};
  ReadCoalescer coalescer_{
      [this](std::function<void()> fn) { boost::asio::post(reads_pool_, std::move(fn)); }};
  std::unique_ptr<api_http::HttpServer> http_;
  std::unique_ptr<ServerKeeper> keeper_;
  std::unique_ptr<dashboard::Dashboard> dashboard_;
  std::string holder_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<RunningCommand>> running_;
  // Every command started and not seen done yet, for Stop to wait on.
  std::vector<std::shared_ptr<RunningCommand>> started_;
};

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
