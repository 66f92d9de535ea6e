// The web dashboard's server side without a network: the login codes and sessions (with the
// time given, so expiry needs no sleep), the cookie and same-origin rules, the embedded pages,
// and the Dashboard's routes with a real SQLite store and a fake command path standing in for
// the server's (what it is asked to run, and as whom).
#include "controller/server/dashboard/dashboard.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <boost/json.hpp>
#include <condition_variable>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "controller/server/dashboard/sessions.hpp"
#include "controller/server/dashboard/web_assets.hpp"
#include "controller/server/dashboard/web_security.hpp"
#include "controller/server/store/api_store.hpp"
#include "controller/server/stream_frames.hpp"
#include "shared/common/unix_time.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::server::dashboard {
namespace {

using api_http::Headers;
using api_http::HttpRequest;
using api_http::HttpResponse;
using herd::testing::TempDir;

constexpr int64_t kMinute = 60 * 1000;

// A store of the sessions' own (SQLite in a temporary directory), opened again by OpenAgain: a
// second server on the same database.
struct SessionStore {
  TempDir dir;
  std::unique_ptr<ApiStore> store = OpenAgain();
  std::unique_ptr<ApiStore> OpenAgain() {
    auto s = ApiStore::Open("sqlite:" + dir / "api.db", dir / "secrets.key");
    REQUIRE(s.ok());
    return std::move(*s);
  }
};

TEST_CASE("a login code works once, within its TTL, and opens a session of the asked length") {
  SessionStore db;
  SessionTable t(*db.store);
  const int64_t now = 1'000'000;
  auto code = t.IssueCode("alice", 10 * kMinute, now);
  REQUIRE(code.ok());
  CHECK(code->code.size() == 64);
  auto s = t.Redeem(code->code, now + 1000);
  REQUIRE(s.ok());
  CHECK(s->session.user == "alice");
  CHECK(s->session.expires_at_ms == now + 1000 + 10 * kMinute);
  CHECK(s->id != code->code);
  // Spent.
  auto again = t.Redeem(code->code, now + 2000);
  CHECK(again.status().code() == Code::kPermissionDenied);
  // The session lives until its expiry, not a moment later.
  CHECK(t.Find(s->id, now + 10 * kMinute).ok());
  CHECK(t.Find(s->id, now + 1000 + 10 * kMinute).status().code() == Code::kPermissionDenied);
  CHECK(t.Find(s->id, now + 11 * kMinute).status().message() == "the session expired");
}

TEST_CASE("a code not used within its TTL is refused, and spent by the try") {
  SessionStore db;
  SessionTable t(*db.store);
  auto code = t.IssueCode("alice", 0, 0);
  REQUIRE(code.ok());
  const int64_t ttl =
      std::chrono::duration_cast<std::chrono::milliseconds>(limits::kDashboardLoginCodeTtl).count();
  CHECK(code->expires_at_ms == ttl);
  CHECK(t.Redeem(code->code, ttl).status().code() == Code::kPermissionDenied);
  CHECK(t.Redeem("not-a-code", 0).status().code() == Code::kPermissionDenied);
  // The default session length, and the bounds.
  auto d = t.IssueCode("bob", 0, 0);
  REQUIRE(d.ok());
  auto s = t.Redeem(d->code, 0);
  REQUIRE(s.ok());
  CHECK(
      s->session.expires_at_ms ==
      std::chrono::duration_cast<std::chrono::milliseconds>(limits::kDashboardSessionTtl).count());
  CHECK(t.IssueCode("bob", -1, 0).status().code() == Code::kInvalidArgument);
  CHECK(t.IssueCode("bob", limits::kDashboardSessionMaxTtl.count() + 1, 0).status().code() ==
        Code::kInvalidArgument);
}

TEST_CASE("logout and a user's removal end sessions; the tables stay bounded") {
  SessionStore db;
  SessionTable t(*db.store, 2, 2);
  auto open = [&](const std::string& user) {
    auto c = t.IssueCode(user, kMinute, 0);
    REQUIRE(c.ok());
    auto s = t.Redeem(c->code, 0);
    REQUIRE(s.ok());
    return s->id;
  };
  const std::string a = open("alice"), b = open("bob");
  CHECK(t.End(a).ok());
  CHECK_FALSE(t.Find(a, 1).ok());
  CHECK(t.Find(b, 1).ok());
  CHECK(t.EndUser("bob").ok());
  CHECK_FALSE(t.Find(b, 1).ok());
  open("x");
  open("y");
  open("z");
  CHECK(t.sessions().value() == 2);
  // Codes too: the oldest goes when a third is issued.
  auto c1 = t.IssueCode("u", kMinute, 0);
  auto c2 = t.IssueCode("u", kMinute, 1);
  auto c3 = t.IssueCode("u", kMinute, 2);
  REQUIRE((c1.ok() && c2.ok() && c3.ok()));
  CHECK_FALSE(t.Redeem(c1->code, 3).ok());
  CHECK(t.Redeem(c3->code, 3).ok());
}

TEST_CASE("a code issued by one server opens a session on another; logout there ends it here") {
  // Two servers on one database (behind a load balancer): each has its own store connection
  // and its own SessionTable.
  SessionStore db;
  auto other = db.OpenAgain();
  SessionTable a(*db.store), b(*other);
  auto code = a.IssueCode("alice", kMinute, 0);
  REQUIRE(code.ok());
  auto s = b.Redeem(code->code, 1);
  REQUIRE(s.ok());
  CHECK(s->session.user == "alice");
  // Spent for both.
  CHECK(a.Redeem(code->code, 2).status().code() == Code::kPermissionDenied);
  auto seen = a.Find(s->id, 2);
  REQUIRE(seen.ok());
  CHECK(seen->user == "alice");
  CHECK(seen->expires_at_ms == 1 + kMinute);
  CHECK(b.End(s->id).ok());
  CHECK(a.Find(s->id, 3).status().code() == Code::kPermissionDenied);
  // The database keeps no secret: neither the code nor the session id is in its files.
  for (const char* file : {"api.db", "api.db-wal"}) {
    std::ifstream f(db.dir / file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    CHECK(bytes.find(code->code) == std::string::npos);
    CHECK(bytes.find(s->id) == std::string::npos);
  }
}

TEST_CASE("a deleted user's sessions end with them") {
  SessionStore db;
  REQUIRE(db.store->AddUser("carol", Role::kUser, 1).ok());
  SessionTable t(*db.store);
  auto code = t.IssueCode("carol", kMinute, 0);
  REQUIRE(code.ok());
  auto s = t.Redeem(code->code, 0);
  REQUIRE(s.ok());
  auto pending = t.IssueCode("carol", kMinute, 0);
  REQUIRE(pending.ok());
  REQUIRE(db.store->DeleteUser("carol").ok());
  CHECK_FALSE(t.Find(s->id, 1).ok());
  CHECK_FALSE(t.Redeem(pending->code, 1).ok());
  CHECK(t.sessions().value() == 0);
}

TEST_CASE("the session cookie is HttpOnly, SameSite=Strict, for /dashboard, Secure on TLS") {
  const std::string c = SessionCookie("abc", 3600, true);
  CHECK(c.rfind("herd_session=abc;", 0) == 0);
  for (const char* attr :
       {"; HttpOnly", "; SameSite=Strict", "; Secure", "; Path=/dashboard", "; Max-Age=3600"}) {
    CHECK_MESSAGE(c.find(attr) != std::string::npos, attr);
  }
  CHECK(SessionCookie("abc", 1, false).find("Secure") == std::string::npos);
  CHECK(ClearedSessionCookie(true).find("Max-Age=0") != std::string::npos);

  Headers h{{"Cookie", "a=1; herd_session=s3cret ; b=2"}, {"cookie", "c=3"}};
  CHECK(CookieValue(h, "herd_session") == "s3cret");
  CHECK(CookieValue(h, "c") == "3");
  CHECK_FALSE(CookieValue(h, "herd").has_value());
}

TEST_CASE("only the server's own origin may change something") {
  Headers same{{"Host", "127.0.191.1:8443"}, {"Origin", "https://127.0.191.1:8443"}};
  CHECK(CheckSameOrigin(same, true).ok());
  CHECK_FALSE(CheckSameOrigin(same, false).ok());  // scheme differs
  Headers other{{"Host", "127.0.191.1:8443"}, {"Origin", "https://evil.example"}};
  CHECK(CheckSameOrigin(other, true).code() == Code::kPermissionDenied);
  Headers none{{"Host", "127.0.191.1:8443"}};
  CHECK_FALSE(CheckSameOrigin(none, true).ok());
  Headers cross{{"Host", "127.0.191.1:8443"},
                {"Origin", "https://127.0.191.1:8443"},
                {"Sec-Fetch-Site", "cross-site"}};
  CHECK_FALSE(CheckSameOrigin(cross, true).ok());
}

TEST_CASE("the pages are built in, self-contained, and never write HTML from strings") {
  for (const char* name : {"index.html", "app.js", "style.css"}) {
    const WebAsset* a = FindWebAsset(name);
    REQUIRE_MESSAGE(a != nullptr, name);
    CHECK(a->body.size() > 100);
    CHECK(a->sha256.size() == 64);
    // Nothing from another host (no CDN): the only absolute URL is SVG's namespace name.
    std::string body(a->body);
    const std::string ns = "http://www.w3.org/2000/svg";
    for (auto p = body.find(ns); p != std::string::npos; p = body.find(ns))
      body.erase(p, ns.size());
    CHECK_MESSAGE(body.find("http://") == std::string::npos, name);
    CHECK_MESSAGE(body.find("https://") == std::string::npos, name);
    for (const char* sink : {"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                             "eval(", "new Function"}) {
      CHECK_MESSAGE(body.find(sink) == std::string::npos, name << " uses " << sink);
    }
  }
  CHECK(FindWebAsset("app.js")->content_type.rfind("text/javascript", 0) == 0);
  CHECK(FindWebAsset("../api.db") == nullptr);
}

// A Responder that keeps what it was told.
class FakeResponder final : public api_http::Responder {
 public:
  void Respond(HttpResponse r) override {
    std::lock_guard<std::mutex> l(mu);
    response = std::move(r);
    done = true;
    cv.notify_all();
  }
  void StartStream(int status, std::string content_type, Headers headers) override {
    std::lock_guard<std::mutex> l(mu);
    response.status = status;
    response.content_type = std::move(content_type);
    response.headers = std::move(headers);
  }
  bool Write(std::string chunk) override {
    std::lock_guard<std::mutex> l(mu);
    response.body += chunk;
    return true;
  }
  void End() override {
    std::lock_guard<std::mutex> l(mu);
    done = true;
    cv.notify_all();
  }
  bool Closed() const override { return false; }
  void OnClose(std::function<void()>) override {}
  std::size_t queued_bytes() const override { return 0; }

  HttpResponse Wait() {
    std::unique_lock<std::mutex> l(mu);
    REQUIRE(cv.wait_for(l, std::chrono::seconds(20), [&] { return done; }));
    return response;
  }

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  HttpResponse response;
};

struct Ran {
  std::string user;
  std::vector<std::string> args;
};

class Fixture {
 public:
  Fixture() {
    auto s = ApiStore::Open("sqlite:" + dir / "api.db", dir / "secrets.key");
    REQUIRE(s.ok());
    store = std::move(*s);
    REQUIRE(store->AddUser("admin", Role::kAdmin, 1).ok());
    REQUIRE(store->AddUser("alice", Role::kUser, 1).ok());
    REQUIRE(store->AddUser("bob", Role::kUser, 1).ok());
    dash = std::make_unique<Dashboard>(DashboardHost{
        store.get(), true,
        [this](const User& user, HttpRequest req, std::shared_ptr<api_http::Responder> res) {
          auto body = boost::json::parse(req.body).as_object();
          Ran r{user.name, {}};
          for (const auto& a : body.at("args").as_array()) {
            r.args.emplace_back(a.as_string());
          }
          {
            std::lock_guard<std::mutex> l(mu);
            ran.push_back(r);
          }
          res->StartStream(200, "application/x-herd-frames", {});
          // In pieces, as the server's command path sends a long output.
          for (std::size_t at = 0; at < reply.size(); at += 64 * 1024) {
            res->Write(
                EncodeFrame(FrameTag::kStdout, std::string_view(reply).substr(at, 64 * 1024)));
          }
          if (!reply_err.empty()) res->Write(EncodeFrame(FrameTag::kStderr, reply_err));
          res->Write(EncodeFrame(FrameTag::kExit, std::to_string(reply_code)));
          res->End();
        },
        [this] { return now.load(); }});
  }

  HttpResponse Call(const std::string& method, const std::string& target,
                    const std::string& cookie = "", bool same_origin = true) {
    HttpRequest req;
    req.method = method;
    req.target = target;
    req.headers.Add("Host", "127.0.191.1:9000");
    if (!cookie.empty()) req.headers.Add("Cookie", "herd_session=" + cookie);
    if (same_origin) req.headers.Add("Origin", "https://127.0.191.1:9000");
    auto res = std::make_shared<FakeResponder>();
    dash->Handle(req, res);
    return res->Wait();
  }

  // Logs `user` in as a browser would: a code, then the link.
  std::string Login(const std::string& user) {
    auto u = store->GetUser(user);
    REQUIRE(u.ok());
    auto code = dash->IssueLoginCode(*u, "{}");
    REQUIRE(code.ok());
    const std::string path(code->as_object().at("path").as_string());
    HttpResponse r = Call("GET", path);
    REQUIRE(r.status == 303);
    CHECK(r.headers.Get("Location") == "/dashboard/");
    const std::string set(*r.headers.Get("Set-Cookie"));
    CHECK(set.find("HttpOnly") != std::string::npos);
    auto id = CookieValue(Headers{{"Cookie", set.substr(0, set.find(';'))}}, kSessionCookie);
    REQUIRE(id.has_value());
    return *id;
  }

  std::vector<std::string> AuditVerbs() {
    auto entries = store->ListAudit(100, 0);
    REQUIRE(entries.ok());
    std::vector<std::string> verbs;
    for (const auto& e : *entries) {
      verbs.push_back(e.user + " " + e.verb + (e.target.empty() ? "" : " " + e.target) + " " +
                      e.result);
    }
    return verbs;
  }

  static bool Has(const std::vector<std::string>& v, const std::string& s) {
    for (const auto& x : v) {
      if (x.find(s) != std::string::npos) return true;
    }
    return false;
  }

  TempDir dir{"herd-dash"};
  std::unique_ptr<ApiStore> store;
  std::unique_ptr<Dashboard> dash;
  std::atomic<int64_t> now{NowUnixMs()};
  std::mutex mu;
  std::vector<Ran> ran;
  std::string reply = "[]", reply_err;
  int reply_code = 0;
};

TEST_CASE("a login link sets the session; the pages' routes need it; logout ends it") {
  Fixture f;
  // Without a session: 401, the cookie cleared.
  HttpResponse r = f.Call("GET", "/dashboard/api/me");
  CHECK(r.status == 401);
  CHECK(r.headers.Get("Set-Cookie")->find("Max-Age=0") != std::string::npos);
  // The page itself is served to anyone (it asks /api/me), with its CSP.
  r = f.Call("GET", "/dashboard/");
  CHECK(r.status == 200);
  CHECK(r.content_type.rfind("text/html", 0) == 0);
  CHECK(r.headers.Get("Content-Security-Policy")->find("script-src 'self'") != std::string::npos);

  const std::string s = f.Login("alice");
  r = f.Call("GET", "/dashboard/api/me", s);
  REQUIRE(r.status == 200);
  auto me = boost::json::parse(r.body).as_object();
  CHECK(me.at("name").as_string() == "alice");
  CHECK(me.at("role").as_string() == "user");

  // A used link is refused.
  auto alice = f.store->GetUser("alice");
  auto code = f.dash->IssueLoginCode(*alice, "{}");
  REQUIRE(code.ok());
  const std::string path(code->as_object().at("path").as_string());
  CHECK(f.Call("GET", path).status == 303);
  CHECK(f.Call("GET", path).status == 401);

  // Logout needs the same origin, then ends the session.
  CHECK(f.Call("POST", "/dashboard/logout", s, false).status == 403);
  CHECK(f.Call("GET", "/dashboard/api/me", s).status == 200);
  r = f.Call("POST", "/dashboard/logout", s);
  CHECK(r.status == 200);
  CHECK(f.Call("GET", "/dashboard/api/me", s).status == 401);
  auto audit = f.AuditVerbs();
  CHECK(Fixture::Has(audit, "alice dashboard.login ok"));
  CHECK(Fixture::Has(audit, "alice dashboard.logout ok"));
  CHECK(Fixture::Has(audit, "alice dashboard.refused"));
}

TEST_CASE("an expired session and a deleted user act on nothing") {
  Fixture f;
  auto alice = f.store->GetUser("alice");
  auto code = f.dash->IssueLoginCode(*alice, R"({"session_ttl_s": 1})");
  REQUIRE(code.ok());
  const std::string path(code->as_object().at("path").as_string());
  HttpResponse r = f.Call("GET", path);
  REQUIRE(r.status == 303);
  CHECK(r.headers.Get("Set-Cookie")->find("Max-Age=1") != std::string::npos);
  const std::string set(*r.headers.Get("Set-Cookie"));
  const std::string s = set.substr(13, set.find(';') - 13);
  CHECK(f.Call("GET", "/dashboard/api/me", s).status == 200);
  f.now += 1000;  // the session's second is over
  r = f.Call("POST", "/dashboard/api/clusters/c1/jobs/3/cancel", s);
  CHECK(r.status == 401);
  CHECK(r.body.find("the session expired") != std::string::npos);
  CHECK(f.ran.empty());

  const std::string b = f.Login("bob");
  REQUIRE(f.store->DeleteUser("bob").ok());
  CHECK(f.Call("GET", "/dashboard/api/me", b).status == 401);
  CHECK(f.dash->IssueLoginCode(*alice, R"({"session_ttl_s": -5})").status().code() ==
        Code::kInvalidArgument);
}

TEST_CASE("actions run the CLI's command as the user, and cross-origin ones are refused") {
  Fixture f;
  const std::string s = f.Login("alice");
  // No Origin: refused before anything runs.
  HttpResponse r = f.Call("POST", "/dashboard/api/clusters/c1/jobs/3/cancel", s, false);
  CHECK(r.status == 403);
  CHECK(f.ran.empty());
  f.reply = "Cancelling job(s): 3\n";
  r = f.Call("POST", "/dashboard/api/clusters/c1/jobs/3/cancel", s);
  CHECK(r.status == 200);
  REQUIRE(f.ran.size() == 1);
  CHECK(f.ran[0].user == "alice");
  CHECK(f.ran[0].args == std::vector<std::string>{"cancel", "c1", "3", "-y"});
  CHECK(Fixture::Has(f.AuditVerbs(), "alice dashboard.cancel c1 ok"));

  r = f.Call("POST", "/dashboard/api/managed/5/cancel", s);
  CHECK(r.status == 200);
  CHECK(f.ran.back().args == std::vector<std::string>{"jobs", "cancel", "5", "-y"});
  CHECK(Fixture::Has(f.AuditVerbs(), "alice dashboard.jobs.cancel managed job 5 ok"));
  CHECK(f.Call("POST", "/dashboard/api/managed/x/cancel", s).status == 400);

  for (const char* verb : {"stop", "start", "down"}) {
    r = f.Call("POST", std::string("/dashboard/api/clusters/c1/") + verb, s);
    CHECK(r.status == 200);
    CHECK(f.ran.back().args == std::vector<std::string>{verb, "c1", "-y"});
  }
  // A command that fails is an error the page shows: 102 is "not found".
  f.reply = "";
  f.reply_err = "herd: cluster c9 does not exist\n";
  f.reply_code = 102;
  r = f.Call("POST", "/dashboard/api/clusters/c9/jobs/1/cancel", s);
  CHECK(r.status == 404);
  CHECK(r.body.find("cluster c9 does not exist") != std::string::npos);
  // Bad names never reach a command.
  const auto before = f.ran.size();
  CHECK(f.Call("GET", "/dashboard/api/clusters/a;b/jobs", s).status == 400);
  CHECK(f.Call("GET", "/dashboard/api/clusters/c1/jobs/x/log", s).status == 400);
  CHECK(f.ran.size() == before);
}

TEST_CASE("reads: JSON of the CLI's -o json, log windows, and the admin's view") {
  Fixture f;
  REQUIRE(f.store->ClaimName(NameKind::kCluster, "bobs", "bob", 1).ok());
  const std::string alice = f.Login("alice");
  f.reply = R"([{"id": 1, "name": "<script>x</script>", "status": "RUNNING"}])";
  HttpResponse r = f.Call("GET", "/dashboard/api/clusters/c1/jobs", alice);
  REQUIRE(r.status == 200);
  CHECK(boost::json::parse(r.body).as_array().size() == 1);
  CHECK(f.ran.back().args == std::vector<std::string>{"queue", "c1", "-o", "json"});
  // Every cluster's jobs in one request: one `herd queue` without a cluster.
  f.reply = R"([{"id": 1, "cluster": "c1"}, {"id": 4, "cluster": "c2"}])";
  r = f.Call("GET", "/dashboard/api/jobs", alice);
  REQUIRE(r.status == 200);
  CHECK(boost::json::parse(r.body).as_object().at("jobs").as_array().size() == 2);
  CHECK(f.ran.back().args == std::vector<std::string>{"queue", "-o", "json"});
  CHECK(f.ran.back().user == "alice");
  // A page of them, newest first, with the total.
  f.reply = R"([{"id": 1, "cluster": "c1", "submitted_at_ms": 10},
                {"id": 2, "cluster": "c1", "submitted_at_ms": 30},
                {"id": 4, "cluster": "c2", "submitted_at_ms": 20}])";
  r = f.Call("GET", "/dashboard/api/jobs?offset=1&limit=1", alice);
  REQUIRE(r.status == 200);
  auto page = boost::json::parse(r.body).as_object();
  CHECK(page.at("total").as_int64() == 3);
  CHECK(page.at("offset").as_int64() == 1);
  REQUIRE(page.at("jobs").as_array().size() == 1);
  CHECK(page.at("jobs").as_array()[0].at("id").as_int64() == 4);
  page = boost::json::parse(f.Call("GET", "/dashboard/api/jobs?offset=9", alice).body).as_object();
  CHECK(page.at("jobs").as_array().empty());
  CHECK(page.at("offset").as_int64() == 3);
  CHECK(f.Call("GET", "/dashboard/api/jobs?limit=-1", alice).status == 400);
  // Another user's cluster runs as the session's user (the server then says "not found").
  f.Call("GET", "/dashboard/api/clusters/bobs/jobs", alice);
  CHECK(f.ran.back().user == "alice");
  CHECK(f.Call("GET", "/dashboard/api/users", alice).status == 403);

  f.reply = "line one\nline two\n";
  r = f.Call("GET", "/dashboard/api/clusters/c1/jobs/2/log?offset=7", alice);
  REQUIRE(r.status == 200);
  auto w = boost::json::parse(r.body).as_object();
  CHECK(w.at("offset").as_int64() == 7);
  CHECK(w.at("next_offset").as_int64() == 7 + 18);
  CHECK(w.at("text").as_string() == "line one\nline two\n");
  CHECK(w.at("more").as_bool() == false);
  CHECK(f.ran.back().args ==
        std::vector<std::string>{"logs", "c1", "2", "--no-follow", "--offset", "7"});

  // A window never holds more than its limit.
  f.reply = std::string(limits::kDashboardLogWindowBytes + 10, 'x');
  r = f.Call("GET", "/dashboard/api/clusters/c1/jobs/2/log", alice);
  w = boost::json::parse(r.body).as_object();
  CHECK(w.at("text").as_string().size() == limits::kDashboardLogWindowBytes);
  CHECK(w.at("more").as_bool());

  // The admin: every user's clusters (each user's status run as that user), bob's cluster as bob.
  const std::string admin = f.Login("admin");
  f.reply = R"([{"name": "c"}])";
  f.ran.clear();
  r = f.Call("GET", "/dashboard/api/clusters", admin);
  REQUIRE(r.status == 200);
  auto all = boost::json::parse(r.body).as_object();
  CHECK(all.at("clusters").as_array().size() == 3);
  CHECK(f.ran.size() == 3);
  // ... and every user's jobs, each user's queue run as that user.
  f.reply = R"([{"id": 1}])";
  f.ran.clear();
  r = f.Call("GET", "/dashboard/api/jobs", admin);
  REQUIRE(r.status == 200);
  CHECK(boost::json::parse(r.body).as_object().at("jobs").as_array().size() == 3);
  REQUIRE(f.ran.size() == 3);
  std::set<std::string> as;
  for (const auto& run : f.ran) as.insert(run.user);
  CHECK(as == std::set<std::string>{"admin", "alice", "bob"});
  f.Call("GET", "/dashboard/api/clusters/bobs/jobs", admin);
  CHECK(f.ran.back().user == "bob");
  f.reply = "ok";
  f.Call("POST", "/dashboard/api/clusters/bobs/stop", admin);
  CHECK(f.ran.back().user == "bob");
  CHECK(Fixture::Has(f.AuditVerbs(), "admin dashboard.stop bobs ok (as bob)"));
  r = f.Call("GET", "/dashboard/api/users", admin);
  REQUIRE(r.status == 200);
  CHECK(boost::json::parse(r.body).as_array().size() == 3);
}

TEST_CASE("a live log arrives as server-sent events with the byte offset as the id") {
  Fixture f;
  const std::string s = f.Login("alice");
  f.reply = "rank0: hello\n";
  HttpResponse r = f.Call("GET", "/dashboard/api/clusters/c1/jobs/4/events?offset=100", s);
  CHECK(r.status == 200);
  CHECK(r.content_type.rfind("text/event-stream", 0) == 0);
  CHECK(r.body.find("id: 113\nevent: log\ndata: \"rank0: hello\\n\"\n\n") != std::string::npos);
  CHECK(r.body.find("event: end\ndata: {\"exit_code\":0}") != std::string::npos);
  CHECK(f.ran.back().args == std::vector<std::string>{"logs", "c1", "4", "--offset", "100"});
}

// What `herd infra -o json` prints for one cluster: its head answered, `in_use` of 8 GPUs held.
std::string InfraReply(const std::string& cluster, int in_use, bool known = true) {
  return R"([{"infra": "local", "kind": "local", "usable": true, "reason": "",
               "gpus": 8, "gpus_in_use": )" +
         std::to_string(in_use) + R"(, "nodes": 2, "clusters": [{"name": ")" + cluster +
         R"(", "infra": "local", "status": "UP", "gpus": 8, "gpus_in_use": )" +
         std::to_string(in_use) + R"(, "gpus_known": )" + (known ? "true" : "false") +
         R"(, "nodes": [{"node_id": "n1", "gpus": 4, "gpus_in_use": )" + std::to_string(in_use) +
         R"(}, {"node_id": "n2", "gpus": 4, "gpus_in_use": 0}]}]}])";
}

TEST_CASE("infra: each user's `herd infra` and the admin's view of all; no GPU sample") {
  Fixture f;
  const std::string alice = f.Login("alice");
  f.reply = InfraReply("c1", 3);
  HttpResponse r = f.Call("GET", "/dashboard/api/infra", alice);
  REQUIRE(r.status == 200);
  auto o = boost::json::parse(r.body).as_object();
  REQUIRE(o.at("infra").as_array().size() == 1);
  CHECK(o.at("infra").as_array()[0].at("user").as_string() == "alice");
  CHECK(o.at("errors").as_array().empty());
  CHECK(f.ran.back().args == std::vector<std::string>{"infra", "-o", "json"});
  CHECK(f.ran.back().user == "alice");
  // The samples are the server's sampler's (gpu_sampler.hpp): a page's read writes none.
  CHECK(f.store->ListGpuSamples("c1", 0).value().empty());
  // The admin: every user's, each as that user.
  const std::string admin = f.Login("admin");
  f.ran.clear();
  f.reply = InfraReply("c3", 1);
  r = f.Call("GET", "/dashboard/api/infra", admin);
  REQUIRE(r.status == 200);
  CHECK(boost::json::parse(r.body).as_object().at("infra").as_array().size() == 3);
  std::set<std::string> as;
  for (const auto& run : f.ran) as.insert(run.user);
  CHECK(as == std::set<std::string>{"admin", "alice", "bob"});
  // A user's command that fails is named, the others are shown.
  f.reply = "";
  f.reply_err = "herd: no\n";
  f.reply_code = 1;
  o = boost::json::parse(f.Call("GET", "/dashboard/api/infra", alice).body).as_object();
  CHECK(o.at("infra").as_array().empty());
  CHECK(o.at("errors").as_array().size() == 1);
  CHECK(f.Call("GET", "/dashboard/api/infra").status == 401);
}

TEST_CASE("a cluster's GPUs: now, and the samples the store kept; a read records none") {
  Fixture f;
  REQUIRE(f.store->ClaimName(NameKind::kCluster, "bobs", "bob", 1).ok());
  const std::string alice = f.Login("alice");
  const int64_t interval =
      std::chrono::duration_cast<std::chrono::milliseconds>(limits::kDashboardGpuSampleInterval)
          .count();
  const int64_t t0 = f.now.load();
  for (int i = 0; i < 3; ++i) {
    REQUIRE(f.store->RecordGpuSample("c1", 8, i * 2, t0 + i * interval).value());
  }
  f.now = t0 + 2 * interval + interval / 2;
  f.reply = InfraReply("c1", 7);
  HttpResponse r = f.Call("GET", "/dashboard/api/clusters/c1/gpus", alice);
  REQUIRE(r.status == 200);
  CHECK(f.ran.back().args == std::vector<std::string>{"infra", "c1", "-o", "json"});
  auto o = boost::json::parse(r.body).as_object();
  CHECK(o.at("cluster").at("name").as_string() == "c1");
  CHECK(o.at("cluster").at("gpus_in_use").as_int64() == 7);
  CHECK(o.at("interval_ms").as_int64() == interval);
  CHECK(o.at("now_ms").as_int64() == f.now.load());
  const auto& samples = o.at("samples").as_array();
  REQUIRE(samples.size() == 3);
  CHECK(samples[0].as_array()[0].as_int64() == t0);
  CHECK(samples[2].as_array()[0].as_int64() == t0 + 2 * interval);
  CHECK(samples[2].as_array()[1].as_int64() == 8);
  CHECK(samples[2].as_array()[2].as_int64() == 4);
  // A whole interval later the read still writes nothing.
  f.now += interval;
  REQUIRE(f.Call("GET", "/dashboard/api/clusters/c1/gpus", alice).status == 200);
  CHECK(f.store->ListGpuSamples("c1", 0).value().size() == 3);
  // Another user's cluster: the command runs as alice (the server says it does not exist).
  f.reply = "";
  f.reply_err = "herd: cluster bobs does not exist\n";
  f.reply_code = 102;
  CHECK(f.Call("GET", "/dashboard/api/clusters/bobs/gpus", alice).status == 404);
  CHECK(f.ran.back().user == "alice");
  // Script in a name never reaches a command.
  const auto before = f.ran.size();
  CHECK(f.Call("GET", "/dashboard/api/clusters/%3Cscript%3E/gpus", alice).status == 400);
  CHECK(f.ran.size() == before);
}

TEST_CASE("one cluster's state: `status C`, and a cluster not listed is not found") {
  Fixture f;
  const std::string alice = f.Login("alice");
  f.reply = R"([{"name": "c1", "status": "UP"}])";
  HttpResponse r = f.Call("GET", "/dashboard/api/clusters/c1", alice);
  REQUIRE(r.status == 200);
  CHECK(boost::json::parse(r.body).at("status").as_string() == "UP");
  CHECK(f.ran.back().args == std::vector<std::string>{"status", "c1", "-o", "json"});
  CHECK_FALSE(boost::json::parse(r.body).as_object().contains("user"));
  f.reply = "[]";
  CHECK(f.Call("GET", "/dashboard/api/clusters/c2", alice).status == 404);
  // The admin sees another user's cluster as its owner's, with the owner named.
  REQUIRE(f.store->ClaimName(NameKind::kCluster, "bobs", "bob", 1).ok());
  const std::string admin = f.Login("admin");
  f.reply = R"([{"name": "bobs", "status": "UP"}])";
  r = f.Call("GET", "/dashboard/api/clusters/bobs", admin);
  REQUIRE(r.status == 200);
  CHECK(f.ran.back().user == "bob");
  CHECK(boost::json::parse(r.body).at("user").as_string() == "bob");
}

}  // namespace
}  // namespace herd::server::dashboard
