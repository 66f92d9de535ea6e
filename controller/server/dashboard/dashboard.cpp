#include "controller/server/dashboard/dashboard.hpp"

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>

#include <boost/json.hpp>

#include "controller/server/dashboard/command_sink.hpp"
#include "controller/server/dashboard/web_assets.hpp"
#include "controller/server/dashboard/web_security.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"
#include "shared/common/unix_time.hpp"

namespace herd::server::dashboard {

namespace {

using api_http::HttpError;
using api_http::HttpRequest;
using api_http::HttpResponse;
using api_http::Responder;
using api_http::Target;
using Res = std::shared_ptr<Responder>;

static_assert(limits::kApiStreamHeartbeat < limits::kDashboardSsePing,
              "a live log's keep-alive rides on the command stream's heartbeat");

int64_t Ms(limits::Duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

HttpResponse Secured(HttpResponse r) {
  AddSecurityHeaders(r.headers);
  return r;
}

HttpResponse JsonResponse(const boost::json::value& v, int status = 200) {
  HttpResponse r;
  r.status = status;
  r.body = boost::json::serialize(v) + "\n";
  return Secured(std::move(r));
}

HttpResponse ErrorResponse(const Status& s) { return Secured(HttpError(s)); }

// A small page for the few answers that are not the app (a spent login link): text only.
HttpResponse PlainPage(int status, const std::string& text) {
  HttpResponse r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = text + "\n";
  return Secured(std::move(r));
}

boost::json::object UserObject(const User& u) {
  return {{"name", u.name}, {"role", std::string(RoleName(u.role))}};
}

// What the CLI's command printed, parsed as the JSON it prints with -o json.
Result<boost::json::value> ParseOutput(const std::string& out) {
  boost::system::error_code ec;
  auto v = boost::json::parse(out, ec);
  if (ec) return Internal("the command's -o json output did not parse: " + ec.message());
  return v;
}

// A command's stderr as the error the page shows: its last non-empty line, "herd: " dropped.
std::string LastLine(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (auto nl = text.rfind('\n'); nl != std::string::npos) text = text.substr(nl + 1);
  if (text.rfind("herd: ", 0) == 0) text = text.substr(6);
  return text;
}

// A non-zero exit of the CLI as the herd Status the page gets (REFERENCE.md's exit codes: 102 for
// a cluster or job that does not exist, 2 for bad input).
Status CommandFailed(int code, const std::string& err) {
  std::string why = LastLine(err);
  if (why.empty()) why = "the command exited with " + std::to_string(code);
  if (code == 102) return NotFound(why);
  if (code == 2) return InvalidArgument(why);
  return FailedPrecondition(why);
}

// `herd logs` exits with the job's outcome (controller/core/head_client.hpp: 0, 100 failed, 101
// not finished, 103 cancelled); anything else means the log could not be read.
bool IsJobOutcome(int code) { return code == 0 || code == 100 || code == 101 || code == 103; }

std::string JsonString(std::string_view bytes) {
  return boost::json::serialize(boost::json::value(boost::json::string(bytes)));
}

}  // namespace

class Dashboard::Impl : public std::enable_shared_from_this<Dashboard::Impl> {
 public:
  explicit Impl(DashboardHost host) : sessions(*host.store), host_(std::move(host)) {
    if (!host_.now_ms) host_.now_ms = [] { return NowUnixMs(); };
  }

  SessionTable sessions;

  void Handle(HttpRequest req, const Res& res) {
    auto target = api_http::ParseTarget(req.target);
    if (!target.ok()) return res->Respond(ErrorResponse(target.status()));
    const Target& t = *target;
    const std::string& m = req.method;
    if (t.Match({"dashboard", "login"}) && m == "GET") return Login(req, t, res);
    if (t.segments.size() == 1 && m == "GET") return Asset("index.html", req, res);
    if (t.segments.size() == 2 && t.segments[1] != "api" && t.segments[1] != "logout" &&
        m == "GET") {
      return Asset(t.segments[1], req, res);
    }
    // Everything else needs the session; what changes something, the same origin too.
    auto who = SessionUser(req);
    if (!who.ok()) {
      HttpResponse r = ErrorResponse(who.status());
      r.headers.Set("Set-Cookie", ClearedSessionCookie(host_.tls));
      return res->Respond(std::move(r));
    }
    const User& user = who->user;
    if (m != "GET") {
      if (auto s = CheckSameOrigin(req.headers, host_.tls); !s.ok()) {
        Audit(user.name, "dashboard.refused", req.target, s.message());
        return res->Respond(ErrorResponse(s));
      }
    }
    if (t.Match({"dashboard", "logout"}) && m == "POST") {
      if (auto s = sessions.End(who->session_id); !s.ok()) return res->Respond(ErrorResponse(s));
      Audit(user.name, "dashboard.logout", "", "ok");
      HttpResponse r = JsonResponse(boost::json::object{{"logged_out", true}});
      r.headers.Set("Set-Cookie", ClearedSessionCookie(host_.tls));
      return res->Respond(std::move(r));
    }
    std::vector<std::string> cap;
    if (t.Match({"dashboard", "api", "me"}) && m == "GET") {
      auto o = UserObject(user);
      o["expires_at_ms"] = who->expires_at_ms;
      return res->Respond(JsonResponse(o));
    }
    if (t.Match({"dashboard", "api", "users"}) && m == "GET") return Users(user, res);
    if (t.Match({"dashboard", "api", "clusters"}) && m == "GET") return Clusters(user, res);
    if (t.Match({"dashboard", "api", "jobs"}) && m == "GET") {
      // Every cluster's jobs, each with its cluster: one command per user (an admin's page shows
      // every user's), whose heads are asked at once.
      // Newest first; ?offset=N&limit=M: only those (the page draws one page of rows), with the
      // total.
      Page page;
      for (auto [name, field] : {std::pair{"offset", &page.offset}, {"limit", &page.limit}}) {
        if (auto q = t.Query(name)) {
          auto n = api_http::ParseId(name, *q);
          if (!n.ok()) return res->Respond(ErrorResponse(n.status()));
          *field = static_cast<std::size_t>(*n);
        }
      }
      return GatherEveryUser(user, {"queue", "-o", "json"}, "jobs", /*tag_user=*/false,
                             limits::kApiMaxResponseBytes, res, page);
    }
    if (t.Match({"dashboard", "api", "infra"}) && m == "GET") return Infra(user, res);
    if (t.Match({"dashboard", "api", "managed"}) && m == "GET") {
      return JsonCommand(user, {"jobs", "queue", "-o", "json"}, res);
    }
    if (t.Match({"dashboard", "api", "managed", ":id", "cancel"}, &cap) && m == "POST") {
      auto id = api_http::ParseId("job", cap[0]);
      if (!id.ok()) return res->Respond(ErrorResponse(id.status()));
      return Action(user, user, {"jobs", "cancel", cap[0], "-y"}, "managed job " + cap[0], res);
    }
    if (t.segments.size() >= 4 && t.segments[1] == "api" && t.segments[2] == "clusters") {
      return ClusterRoute(user, req, t, res);
    }
    res->Respond(ErrorResponse(NotFound("no route " + m + " " + req.target)));
  }

  Result<boost::json::value> IssueLoginCode(const User& user, const std::string& raw) {
    HERD_ASSIGN_OR_RETURN(
        auto body,
        api_http::DecodeBody(raw.empty() ? "{}" : raw,
                             {api_http::FieldSpec{"session_ttl_s", api_http::FieldType::kInt}}));
    const int64_t ttl_s = body.Int("session_ttl_s", 0);
    if (ttl_s < 0 || ttl_s > Ms(limits::kDashboardSessionMaxTtl) / 1000) {
      return InvalidArgument("session_ttl_s: 0 (the default) or 1 to " +
                             std::to_string(Ms(limits::kDashboardSessionMaxTtl) / 1000));
    }
    HERD_ASSIGN_OR_RETURN(auto code, sessions.IssueCode(user.name, ttl_s * 1000, host_.now_ms()));
    Audit(user.name, "dashboard.code", "", "ok");
    return boost::json::value(boost::json::object{{"code", code.code},
                                                  {"path", "/dashboard/login?code=" + code.code},
                                                  {"expires_at_ms", code.expires_at_ms}});
  }

 private:
  struct Who {
    User user;
    std::string session_id;
    int64_t expires_at_ms = 0;
  };

  void Audit(const std::string& user, const std::string& verb, const std::string& target,
             const std::string& result) {
    if (auto s = host_.store->RecordAudit(user, verb, target, result, host_.now_ms()); !s.ok()) {
      HERD_LOG(kWarn) << "audit: " << s.message();
    }
  }

  // The session's user as the store has it now: a deleted user's session ends, a role change
  // counts at once.
  Result<Who> SessionUser(const HttpRequest& req) {
    auto id = CookieValue(req.headers, kSessionCookie);
    if (!id || id->empty()) {
      return api_http::Unauthenticated("no dashboard session: run `herd dashboard` to log in");
    }
    auto session = sessions.Find(*id, host_.now_ms());
    if (!session.ok()) {
      if (session.status().code() != Code::kPermissionDenied) return session.status();
      return api_http::Unauthenticated(session.status().message() +
                                       ": run `herd dashboard` to log in again");
    }
    auto user = host_.store->GetUser(session->user);
    if (!user.ok()) {
      (void)sessions.End(*id);
      return api_http::Unauthenticated("user " + session->user + " no longer exists");
    }
    return Who{*user, *id, session->expires_at_ms};
  }

  void Login(const HttpRequest&, const Target& t, const Res& res) {
    const std::string code = std::string(t.Query("code").value_or(""));
    auto s = sessions.Redeem(code, host_.now_ms());
    if (!s.ok()) return res->Respond(PlainPage(401, "herd dashboard: " + s.status().message()));
    Audit(s->session.user, "dashboard.login", "", "ok");
    HttpResponse r = PlainPage(303, "Logged in; the dashboard is at /dashboard/");
    r.headers.Set("Location", "/dashboard/");
    r.headers.Set("Set-Cookie",
                  SessionCookie(s->id, (s->session.expires_at_ms - s->session.created_at_ms) / 1000,
                                host_.tls));
    res->Respond(std::move(r));
  }

  void Asset(const std::string& path, const HttpRequest& req, const Res& res) {
    const WebAsset* a = FindWebAsset(path);
    if (!a) return res->Respond(ErrorResponse(NotFound("no page " + path)));
    HttpResponse r;
    r.content_type = std::string(a->content_type);
    r.headers.Set("ETag", "\"" + std::string(a->sha256) + "\"");
    AddSecurityHeaders(r.headers);
    // The pages are the same for everyone and change with the binary only: revalidated, not
    // refetched.
    r.headers.Set("Cache-Control", "no-cache");
    if (auto inm = req.headers.Get("If-None-Match");
        inm && *inm == "\"" + std::string(a->sha256) + "\"") {
      r.status = 304;
      return res->Respond(std::move(r));
    }
    r.body = std::string(a->body);
    res->Respond(std::move(r));
  }

  // Runs `args` as `as` (the session's user, or for an admin a cluster's owner); collects up to
  // `max_out` bytes of stdout (more stops the command: `truncated`).
  struct Output {
    int exit_code = 0;
    std::string out, err;
    bool truncated = false;
  };
  using DoneFn = std::function<void(Result<Output>)>;
  void Collect(const User& as, std::vector<std::string> args, std::size_t max_out, const Res& res,
               DoneFn done) {
    auto output = std::make_shared<Output>();
    auto sink = CommandSink::Make({[output, max_out](FrameTag tag, std::string_view bytes) {
                                     if (tag == FrameTag::kStderr) {
                                       if (output->err.size() < 64 * 1024)
                                         output->err.append(bytes);
                                       return true;
                                     }
                                     const std::size_t room =
                                         max_out - std::min(max_out, output->out.size());
                                     output->out.append(bytes.substr(0, room));
                                     if (bytes.size() > room) output->truncated = true;
                                     return !output->truncated;
                                   },
                                   [output, done = std::move(done)](Result<int> code) {
                                     if (!code.ok()) return done(code.status());
                                     output->exit_code = *code;
                                     done(std::move(*output));
                                   }},
                                  res);
    HttpRequest req;
    req.method = "POST";
    req.target = "/api/v1/run";
    boost::json::array a;
    for (auto& s : args) a.push_back(boost::json::string(s));
    req.body = boost::json::serialize(boost::json::object{{"args", std::move(a)}});
    host_.run(as, std::move(req), sink);
  }

  void JsonCommand(const User& as, std::vector<std::string> args, const Res& res) {
    Collect(as, std::move(args), limits::kApiMaxBodyBytes, res, [res](Result<Output> o) {
      if (!o.ok()) return res->Respond(ErrorResponse(o.status()));
      if (o->exit_code != 0)
        return res->Respond(ErrorResponse(CommandFailed(o->exit_code, o->err)));
      auto v = ParseOutput(o->out);
      if (!v.ok()) return res->Respond(ErrorResponse(v.status()));
      res->Respond(JsonResponse(*v));
    });
  }

  // A mutating command from a page: the server's request and audit entry are the user's (the
  // owner's, for an admin acting on another user's cluster); the dashboard's entry names who
  // clicked.
  void Action(const User& user, const User& as, std::vector<std::string> args,
              const std::string& cluster, const Res& res) {
    // The audit's verb: the command's ("cancel", "stop", "jobs.cancel", ...).
    std::string verb = args.empty() ? "" : args[0];
    if (verb == "jobs" && args.size() > 1) verb += "." + args[1];
    auto self = shared_from_this();
    const std::string who = user.name, owner = as.name;
    Collect(as, std::move(args), 64 * 1024, res,
            [self, res, verb, who, owner, cluster](Result<Output> o) {
              std::string result;
              Status failed = Status::Ok();
              if (!o.ok()) {
                failed = o.status();
              } else if (o->exit_code != 0) {
                failed = CommandFailed(o->exit_code, o->err);
              }
              result = failed.ok() ? "ok" : failed.message();
              if (owner != who) result += " (as " + owner + ")";
              self->Audit(who, "dashboard." + verb, cluster, result);
              if (!failed.ok()) return res->Respond(ErrorResponse(failed));
              res->Respond(JsonResponse(boost::json::object{
                  {"ok", true}, {"output", o->out}, {"message", LastLine(o->err)}}));
            });
  }

  void Users(const User& user, const Res& res) {
    if (user.role != Role::kAdmin) {
      return res->Respond(ErrorResponse(PermissionDenied("only an admin sees the users")));
    }
    auto users = host_.store->ListUsers();
    if (!users.ok()) return res->Respond(ErrorResponse(users.status()));
    auto names = host_.store->ListNames(NameKind::kCluster, "");
    std::map<std::string, int> clusters;
    if (names.ok()) {
      for (const auto& n : *names) ++clusters[n.owner];
    }
    boost::json::array arr;
    for (const auto& u : *users) {
      auto o = UserObject(u);
      o["created_at_ms"] = u.created_at_ms;
      o["clusters"] = clusters[u.name];
      arr.push_back(std::move(o));
    }
    res->Respond(JsonResponse(arr));
  }

  // The session user's clusters; an admin's page shows every user's (each user's `status` run as
  // that user, merged, each cluster with its "user").
  void Clusters(const User& user, const Res& res) {
    GatherEveryUser(user, {"status", "-o", "json"}, "clusters", /*tag_user=*/true,
                    limits::kApiMaxBodyBytes, res);
  }

  // The JSON array that `args` prints, run as the user, or for an admin as every user, joined:
  // {key: [...], "errors": ["user: why", ...]}; with tag_user each element names its user. An
  // output over max_bytes (cut) or not an array is that user's error.
  // With a page: the items sorted newest first (by submitted_at_ms), only page.limit of them from
  // page.offset, and "total" and "offset" beside them.
  struct Page {
    std::size_t offset = 0;
    std::size_t limit = SIZE_MAX;
  };
  void GatherEveryUser(const User& user, std::vector<std::string> args, const std::string& key,
                       bool tag_user, std::size_t max_bytes, const Res& res,
                       std::optional<Page> page = std::nullopt) {
    std::vector<User> whose = {user};
    if (user.role == Role::kAdmin) {
      auto users = host_.store->ListUsers();
      if (!users.ok()) return res->Respond(ErrorResponse(users.status()));
      whose = *users;
    }
    struct Gather {
      std::mutex mu;
      std::size_t left = 0;
      boost::json::array items;
      std::vector<std::string> errors;
    };
    auto g = std::make_shared<Gather>();
    g->left = whose.size();
    for (const auto& u : whose) {
      const std::string name = u.name;
      Collect(u, args, max_bytes, res,
              [g, res, name, key, max_bytes, tag_user, page](Result<Output> o) {
                std::lock_guard<std::mutex> l(g->mu);
                if (!o.ok()) {
                  g->errors.push_back(name + ": " + o.status().message());
                } else if (o->exit_code != 0) {
                  g->errors.push_back(name + ": " + CommandFailed(o->exit_code, o->err).message());
                } else if (auto v = ParseOutput(o->out); v.ok() && v->is_array()) {
                  for (auto& item : v->as_array()) {
                    if (tag_user && item.is_object()) item.as_object()["user"] = name;
                    g->items.push_back(item);
                  }
                } else {
                  g->errors.push_back(name + ": " +
                                      (o->truncated ? "the listing is over " +
                                                          std::to_string(max_bytes >> 20) + " MiB"
                                                    : std::string("not a JSON array")));
                }
                if (--g->left > 0) return;
                boost::json::array errors;
                for (auto& e : g->errors) errors.push_back(boost::json::string(e));
                boost::json::object out{{"errors", errors}};
                if (page) {
                  auto when = [](const boost::json::value& v) -> int64_t {
                    const auto* o = v.if_object();
                    const auto* t = o ? o->if_contains("submitted_at_ms") : nullptr;
                    return t && t->is_int64() ? t->as_int64() : 0;
                  };
                  std::stable_sort(g->items.begin(), g->items.end(),
                                   [&](const auto& a, const auto& b) { return when(a) > when(b); });
                  const std::size_t total = g->items.size();
                  const std::size_t from = std::min(page->offset, total);
                  const std::size_t to = from + std::min(page->limit, total - from);
                  boost::json::array shown(g->items.begin() + static_cast<std::ptrdiff_t>(from),
                                           g->items.begin() + static_cast<std::ptrdiff_t>(to));
                  out[key] = std::move(shown);
                  out["total"] = total;
                  out["offset"] = from;
                } else {
                  out[key] = std::move(g->items);
                }
                res->Respond(JsonResponse(std::move(out)));
              });
    }
  }

  // The infra page: each user's `infra -o json` (an admin's page: every user's, each infra with
  // its "user").
  void Infra(const User& user, const Res& res) {
    GatherEveryUser(user, {"infra", "-o", "json"}, "infra", /*tag_user=*/true,
                    limits::kApiMaxBodyBytes, res);
  }

  // A cluster's GPUs now (`infra C -o json`: its nodes with GPUs free and in use) and its samples
  // of the retention window (the server's sampler took them), oldest first: {"cluster", "samples":
  // [[at_ms, gpus, in_use], ...], "interval_ms", "now_ms"}.
  void Gpus(const User& as, const std::string& cluster, const Res& res) {
    auto self = shared_from_this();
    Collect(as, {"infra", cluster, "-o", "json"}, limits::kApiMaxBodyBytes, res,
            [self, res, cluster](Result<Output> o) {
              if (!o.ok()) return res->Respond(ErrorResponse(o.status()));
              if (o->exit_code != 0)
                return res->Respond(ErrorResponse(CommandFailed(o->exit_code, o->err)));
              auto v = ParseOutput(o->out);
              if (!v.ok()) return res->Respond(ErrorResponse(v.status()));
              boost::json::value now;
              if (v->is_array()) {
                for (const auto& item : v->as_array()) {
                  const auto* io = item.if_object();
                  const auto* cl = io ? io->if_contains("clusters") : nullptr;
                  if (!cl || !cl->is_array()) continue;
                  for (const auto& c : cl->as_array()) {
                    const auto* co = c.if_object();
                    const auto* n = co ? co->if_contains("name") : nullptr;
                    if (n && n->is_string() && n->as_string() == cluster) now = c;
                  }
                }
              }
              const int64_t now_ms = self->host_.now_ms();
              auto samples = self->host_.store->ListGpuSamples(
                  cluster, now_ms - Ms(limits::kDashboardGpuSampleRetention));
              if (!samples.ok()) return res->Respond(ErrorResponse(samples.status()));
              boost::json::array arr;
              arr.reserve(samples->size());
              for (const auto& s : *samples)
                arr.push_back(boost::json::array{s.at_ms, s.gpus, s.in_use});
              res->Respond(JsonResponse(
                  boost::json::object{{"cluster", std::move(now)},
                                      {"samples", std::move(arr)},
                                      {"interval_ms", Ms(limits::kDashboardGpuSampleInterval)},
                                      {"now_ms", now_ms}}));
            });
  }

  // Whom a cluster's commands run as: the session's user, or for an admin the cluster's owner.
  User RunAs(const User& user, const std::string& cluster) {
    if (user.role != Role::kAdmin) return user;
    auto owner = host_.store->OwnerOf(NameKind::kCluster, cluster);
    if (!owner.ok() || *owner == user.name) return user;
    auto u = host_.store->GetUser(*owner);
    return u.ok() ? *u : user;
  }

  void ClusterRoute(const User& user, const HttpRequest& req, const Target& t, const Res& res) {
    const std::string& m = req.method;
    const std::string cluster = t.segments[3];
    if (auto s = api_http::ValidateClusterNameField("cluster", cluster); !s.ok()) {
      return res->Respond(ErrorResponse(s));
    }
    const User as = RunAs(user, cluster);
    std::vector<std::string> cap;
    if (t.segments.size() == 4 && m == "GET") {
      // One cluster's `status` (the cluster page asks for its own, not for every cluster's); for
      // an admin with its "user", as the clusters route gives it.
      const std::string owner = user.role == Role::kAdmin ? as.name : "";
      return Collect(as, {"status", cluster, "-o", "json"}, limits::kApiMaxBodyBytes, res,
                     [res, cluster, owner](Result<Output> o) {
                       if (!o.ok()) return res->Respond(ErrorResponse(o.status()));
                       if (o->exit_code != 0)
                         return res->Respond(ErrorResponse(CommandFailed(o->exit_code, o->err)));
                       auto v = ParseOutput(o->out);
                       if (!v.ok()) return res->Respond(ErrorResponse(v.status()));
                       if (!v->is_array() || v->as_array().empty()) {
                         return res->Respond(
                             ErrorResponse(NotFound("cluster " + cluster + " does not exist")));
                       }
                       boost::json::value c = v->as_array()[0];
                       if (!owner.empty() && c.is_object()) c.as_object()["user"] = owner;
                       res->Respond(JsonResponse(c));
                     });
    }
    if (t.Match({"dashboard", "api", "clusters", ":c", "gpus"}) && m == "GET") {
      return Gpus(as, cluster, res);
    }
    if (t.Match({"dashboard", "api", "clusters", ":c", "jobs"}) && m == "GET") {
      return JsonCommand(as, {"queue", cluster, "-o", "json"}, res);
    }
    if (t.Match({"dashboard", "api", "clusters", ":c", "nodes"}) && m == "GET") {
      return JsonCommand(as, {"nodes", cluster, "-o", "json"}, res);
    }
    for (const char* verb : {"stop", "start", "down"}) {
      if (t.Match({"dashboard", "api", "clusters", ":c", verb}) && m == "POST") {
        return Action(user, as, {verb, cluster, "-y"}, cluster, res);
      }
    }
    if (t.segments.size() >= 7 && t.segments[4] == "jobs") {
      auto job = api_http::ParseId("job", t.segments[5]);
      if (!job.ok()) return res->Respond(ErrorResponse(job.status()));
      const std::string id = std::to_string(*job);
      const std::string what = t.segments[6];
      if (t.segments.size() == 7 && what == "cancel" && m == "POST") {
        return Action(user, as, {"cancel", cluster, id, "-y"}, cluster, res);
      }
      if (t.segments.size() == 7 && m == "GET") {
        uint64_t offset = 0;
        if (auto o = t.Query("offset")) {
          auto n = api_http::ParseId("offset", *o);
          if (!n.ok()) return res->Respond(ErrorResponse(n.status()));
          offset = static_cast<uint64_t>(*n);
        }
        if (what == "log") return LogWindow(as, cluster, id, offset, res);
        if (what == "events") return LogEvents(as, cluster, id, offset, req, res);
        if (what == "download") return LogDownload(as, cluster, id, res);
      }
    }
    res->Respond(ErrorResponse(NotFound("no route " + m + " " + req.target)));
  }

  void LogWindow(const User& as, const std::string& cluster, const std::string& id, uint64_t offset,
                 const Res& res) {
    Collect(as, {"logs", cluster, id, "--no-follow", "--offset", std::to_string(offset)},
            limits::kDashboardLogWindowBytes, res, [res, offset](Result<Output> o) {
              if (!o.ok()) return res->Respond(ErrorResponse(o.status()));
              // A window cut short stopped the command: its exit code says nothing then.
              if (!o->truncated && !IsJobOutcome(o->exit_code)) {
                return res->Respond(ErrorResponse(CommandFailed(o->exit_code, o->err)));
              }
              res->Respond(JsonResponse(boost::json::object{{"offset", offset},
                                                            {"next_offset", offset + o->out.size()},
                                                            {"text", o->out},
                                                            {"more", o->truncated}}));
            });
  }

  // The log from `offset` on, as it grows, in server-sent events. A reconnecting EventSource
  // sends the last id it got (the offset after it) as Last-Event-ID: it goes on from there.
  void LogEvents(const User& as, const std::string& cluster, const std::string& id, uint64_t offset,
                 const HttpRequest& req, const Res& res) {
    if (auto last = req.headers.Get("Last-Event-ID")) {
      if (auto n = api_http::ParseId("Last-Event-ID", *last); n.ok()) {
        offset = static_cast<uint64_t>(*n);
      }
    }
    api_http::Headers h;
    AddSecurityHeaders(h);
    res->StartStream(200, "text/event-stream; charset=utf-8", std::move(h));
    res->Write("retry: 2000\n\n");
    struct Follow {
      std::mutex mu;
      uint64_t offset = 0;
      std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
    };
    auto f = std::make_shared<Follow>();
    f->offset = offset;
    auto sink =
        CommandSink::Make({[res, f](FrameTag tag, std::string_view bytes) {
                             std::lock_guard<std::mutex> l(f->mu);
                             const auto now = std::chrono::steady_clock::now();
                             if (tag == FrameTag::kStderr) {
                               if (!bytes.empty()) {
                                 res->Write("event: note\ndata: " + JsonString(bytes) + "\n\n");
                                 f->last_write = now;
                               }
                               return !res->Closed();
                             }
                             if (bytes.empty()) {  // the stream's heartbeat
                               if (now - f->last_write >= limits::kDashboardSsePing) {
                                 res->Write(": ping\n\n");
                                 f->last_write = now;
                               }
                               return !res->Closed();
                             }
                             f->offset += bytes.size();
                             f->last_write = now;
                             return res->Write("id: " + std::to_string(f->offset) +
                                               "\nevent: log\ndata: " + JsonString(bytes) + "\n\n");
                           },
                           [res](Result<int> code) {
                             boost::json::object o;
                             if (code.ok()) {
                               o["exit_code"] = *code;
                             } else {
                               o["error"] = code.status().message();
                             }
                             res->Write("event: end\ndata: " + boost::json::serialize(o) + "\n\n");
                             res->End();
                           }},
                          res);
    HttpRequest run;
    run.method = "POST";
    run.target = "/api/v1/run";
    run.body = boost::json::serialize(boost::json::object{
        {"args", boost::json::array{"logs", boost::json::string(cluster), boost::json::string(id),
                                    "--offset", boost::json::string(std::to_string(offset))}}});
    host_.run(as, std::move(run), sink);
  }

  // The whole log, streamed as it is read (never held whole here or in the page).
  void LogDownload(const User& as, const std::string& cluster, const std::string& id,
                   const Res& res) {
    auto started = std::make_shared<std::atomic<bool>>(false);
    auto start = [res, started, cluster, id] {
      if (started->exchange(true)) return;
      api_http::Headers h;
      AddSecurityHeaders(h);
      h.Set("Content-Disposition", "attachment; filename=\"" + cluster + "-job-" + id + ".log\"");
      res->StartStream(200, "text/plain; charset=utf-8", std::move(h));
    };
    auto err = std::make_shared<std::string>();
    auto sink =
        CommandSink::Make({[res, start, err](FrameTag tag, std::string_view bytes) {
                             if (tag == FrameTag::kStderr && err->size() < 64 * 1024)
                               err->append(bytes);
                             if (tag != FrameTag::kStdout || bytes.empty()) return true;
                             start();
                             return res->Write(std::string(bytes));
                           },
                           [res, start, started, err](Result<int> code) {
                             if (!started->load()) {
                               if (!code.ok()) return res->Respond(ErrorResponse(code.status()));
                               if (!IsJobOutcome(*code)) {
                                 return res->Respond(ErrorResponse(CommandFailed(*code, *err)));
                               }
                             }
                             start();
                             res->End();
                           }},
                          res);
    HttpRequest run;
    run.method = "POST";
    run.target = "/api/v1/run";
    run.body = boost::json::serialize(
        boost::json::object{{"args", boost::json::array{"logs", boost::json::string(cluster),
                                                        boost::json::string(id), "--no-follow"}}});
    host_.run(as, std::move(run), sink);
  }

  DashboardHost host_;
};

Dashboard::Dashboard(DashboardHost host) : impl_(std::make_shared<Impl>(std::move(host))) {}
Dashboard::~Dashboard() = default;

bool Dashboard::Owns(const Target& target) {
  return !target.segments.empty() && target.segments[0] == "dashboard";
}

void Dashboard::Handle(HttpRequest request, Res responder) {
  impl_->Handle(std::move(request), responder);
}

Result<boost::json::value> Dashboard::IssueLoginCode(const User& user, const std::string& body) {
  return impl_->IssueLoginCode(user, body);
}

SessionTable& Dashboard::sessions() { return impl_->sessions; }

}  // namespace herd::server::dashboard
