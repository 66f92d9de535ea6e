// POST /api/v1/run: a remote CLI's command, run as a `herd` child process in the user's home (or
// by one of the user's warm workers, for a read), its output streamed back in frames; a mutating
// command is a request (a row, an audit entry, its output in <state>/requests/<id>.log).
#include <boost/json.hpp>
#include <filesystem>
#include <map>
#include <set>

#include "controller/bootstrap/sha256.hpp"
#include "controller/jobs/managed_job_store.hpp"
#include "controller/server/server_impl.hpp"
#include "controller/server/stream_frames.hpp"
#include "controller/server/warm_protocol.hpp"
#include "controller/state/api_config.hpp"
#include "controller/state/herd_home.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"
#include "shared/common/unix_time.hpp"

extern char** environ;

namespace herd::server::detail {

namespace fs = std::filesystem;
using api_http::FieldSpec;
using api_http::FieldType;
using api_http::HttpError;
using api_http::HttpRequest;
using api_http::Responder;

namespace {

constexpr char kFramesType[] = "application/x-herd-frames";

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

}  // namespace

void ServerImpl::RunWarm(const User& user, const HttpRequest& req,
                         const std::shared_ptr<Responder>& res,
                         const std::vector<std::string>& args) {
  // Touched only on the thread that runs the read's round. A short answer (up to one frame's
  // size) is held and sent whole with its exit frame, in one hand-off to the connection; a longer
  // one streams from the point it outgrows that.
  struct Answer {
    std::string held;
    bool streaming = false;
  };
  auto answer = std::make_shared<Answer>();
  ReadCoalescer::Waiter waiter{
      [res, answer](FrameTag stream, std::string_view bytes) {
        if (answer->streaming) {
          res->Write(EncodeFrame(stream, bytes));
          return;
        }
        answer->held += EncodeFrame(stream, bytes);
        if (answer->held.size() <= limits::kApiMaxFrameBytes) return;
        answer->streaming = true;
        res->StartStream(200, kFramesType);
        res->Write(std::move(answer->held));
        answer->held.clear();
      },
      [self = shared_from_this(), user, req, res, answer](Result<int> code) {
        if (code.ok()) {
          std::string exit = EncodeFrame(FrameTag::kExit, std::to_string(*code));
          if (answer->streaming) {
            res->Write(std::move(exit));
            return res->End();
          }
          answer->held += exit;
          res->StreamWhole(200, kFramesType, {std::move(answer->held)});
          return;
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

void ServerImpl::Run(const User& user, const HttpRequest& req,
                     const std::shared_ptr<Responder>& res, bool warm) {
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
      return res->Respond(HttpError(NotFound("cluster " + cluster +
                                             " does not exist (see `herd status`; create it with " +
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
  (*cmd)->OnExit(
      [self, res, async, mutating, id, verb, cluster, user, dir, last_err, secrets_ref](int code) {
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

void ServerImpl::Finished(const User& user, const std::string& id, const std::string& verb,
                          const std::string& cluster, const std::string& dir, bool mutating,
                          int code, const std::string& last_err) {
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
    // What GPUs are held may have changed (a job started or ended, a cluster came or went): the
    // chart gets a sample now rather than at the next interval (gpu_sampler.hpp).
    if (sampler_) sampler_->Kick();
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

Status ServerImpl::MaybeReleaseUnmade(const std::string& user, const std::string& cluster) {
  std::error_code ec;
  if (fs::exists(home_.UserHome(user) + "/herd/clusters/" + cluster, ec)) return Status::Ok();
  return store_->ReleaseName(NameKind::kCluster, cluster);
}

Status ServerImpl::EnsureUserHome(const std::string& user) {
  HERD_RETURN_IF_ERROR(controller::EnsureDir(home_.UserHome(user) + "/herd"));
  return Status::Ok();
}

std::vector<std::string> ServerImpl::ChildEnv(const std::string& user, bool secrets_on_stdin) {
  std::vector<std::string> env;
  static const std::set<std::string> replaced = {"HOME",
                                                 "HERD_HOME",
                                                 "USER",
                                                 "LOGNAME",
                                                 "HERD_API_SERVER",
                                                 "HERD_API_TOKEN",
                                                 "HERD_API_CA_CERT",
                                                 "HERD_TASK_SECRETS_ON_STDIN",
                                                 controller::kAutostopByServerEnv,
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
  // Cloud clusters' autostop is this server's to carry out (server_autostop.cpp): no key to heads.
  env.push_back(std::string(controller::kAutostopByServerEnv) + "=1");
  // Managed jobs' clusters are named <name>-<id>-<attempt> with ids counted per user home: the
  // user's tag keeps two users' jobs of one name from sharing a cluster name on this machine.
  env.push_back("HERD_MANAGED_CLUSTER_TAG=" + UserTag(user));
  // Managed jobs' controllers are this server's (job_keeper.hpp), not the commands'.
  env.push_back(std::string(jobs::kManagedSupervisedEnv) + "=1");
  if (secrets_on_stdin) env.push_back("HERD_TASK_SECRETS_ON_STDIN=1");
  return env;
}

WarmWorkers::Spawn ServerImpl::WarmSpawn(const std::string& user) {
  return {{options_.herd_binary, "_serve"}, ChildEnv(user, false), home_.UserHome(user)};
}

}  // namespace herd::server::detail
