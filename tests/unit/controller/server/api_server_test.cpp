// The API server (api_server.hpp) end to end on 127.0.0.1 in plain HTTP, driven by the real
// client (http/http_client.hpp), with SQLite in a temporary home and a fake `herd`: a shell
// script that prints its arguments, environment and working directory, writes to stderr and
// exits with the code it is told ("exit=N"), sleeps ("sleep=S") or lists a directory ("ls=D").
#include "controller/server/api_server.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "controller/server/http/http_client.hpp"
#include "controller/server/store/api_store.hpp"
#include "controller/server/stream_frames.hpp"
#include "shared/common/unix_time.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::server {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;
using api_http::ApiClient;
using api_http::ClientResponse;
using herd::testing::ReadAll;
using herd::testing::TempDir;

// A bound on waits for what happens at once when the code works (never a timing assertion).
constexpr auto kWait = 20s;

constexpr char kFakeHerd[] = R"SH(#!/bin/sh
echo "args:$*"
echo "HOME=$HOME"
echo "HERD_HOME=$HERD_HOME"
echo "USER=$USER"
echo "HERD_API_SERVER=$HERD_API_SERVER"
echo "HERD_MANAGED_CLUSTER_TAG=$HERD_MANAGED_CLUSTER_TAG"
echo "HERD_AUTOSTOP_BY_SERVER=$HERD_AUTOSTOP_BY_SERVER"
echo "PWD=$(pwd)"
echo "to stderr" >&2
code=0
for a in "$@"; do
  case "$a" in
    exit=*) code=${a#exit=} ;;
    # In the background, waited for, with SIGINT trapped: a SIGINT to the group between the echo
    # and the shell's fork of a foreground sleep could be lost (sh lives on, sleep never gets it).
    sleep=*)
      trap 'kill $! 2>/dev/null; exit 130' INT
      echo sleeping; sleep ${a#sleep=} & wait $!
      trap - INT ;;
    ls=*) ls -R "${a#ls=}"; cat "${a#ls=}/a.txt" ;;
  esac
done
echo "last words $code" >&2
exit $code
)SH";

// A port free now, for a server started twice on it.
uint16_t FreePort() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

json::value Parse(const ClientResponse& r) {
  boost::system::error_code ec;
  json::value v = json::parse(r.body, ec);
  INFO(r.body);
  REQUIRE_FALSE(ec);
  return v;
}

std::string Str(const json::value& v, std::string_view key) {
  const auto* p = v.as_object().if_contains(key);
  return p && p->is_string() ? std::string(p->as_string()) : std::string();
}

std::string ErrorCode(const ClientResponse& r) { return Str(Parse(r), "code"); }
std::string ErrorText(const ClientResponse& r) { return Str(Parse(r), "error"); }

// One command's run as the client sees it.
struct RunResult {
  int status = 0;
  std::string body;  // a refused run's error
  std::string tags;  // the tags of non-empty frames in order, runs of one tag as one
  std::string request_id, out, err;
  int exit_code = -1;
  int frames_after_exit = 0;
};

class Server {
 public:
  explicit Server(uint16_t port = 0) {
    std::filesystem::create_directories(home);
    herd = dir.Write("bin/herd", kFakeHerd);
    std::filesystem::permissions(herd, std::filesystem::perms::owner_all);
    Start(port);
  }
  ~Server() { Stop(); }

  void Start(uint16_t port) {
    ApiServerOptions o;
    o.home = home;
    o.host = "127.0.0.1";
    o.port = port;
    o.plain_http = true;
    o.herd_binary = herd;
    o.version = "test";
    io.restart();
    auto s = ApiServer::Start(io, o);
    REQUIRE_MESSAGE(s.ok(), s.status().message());
    server = std::move(*s);
    work.emplace(io.get_executor());
    for (int i = 0; i < 2; ++i) threads.emplace_back([this] { io.run(); });
    admin_token = Trim(ReadAll(home + "/admin.token"));
    REQUIRE_FALSE(admin_token.empty());
  }

  void Stop() {
    if (server) server->Stop();
    server.reset();
    work.reset();
    io.stop();
    for (auto& t : threads) t.join();
    threads.clear();
  }

  std::unique_ptr<ApiClient> Client(const std::string& token) {
    auto c = ApiClient::Create({server->endpoint(), "", token});
    REQUIRE(c.ok());
    return std::move(*c);
  }
  ApiClient& Admin() {
    if (!admin_) admin_ = Client(admin_token);
    return *admin_;
  }

  // The store, opened beside the server (or after it stopped).
  std::unique_ptr<ApiStore> Store() {
    auto s = ApiStore::Open("sqlite:" + home + "/api.db", home + "/secrets.key");
    REQUIRE_MESSAGE(s.ok(), s.status().message());
    return std::move(*s);
  }

  // Adds a user through the API; its token.
  std::string AddUser(const std::string& name) {
    auto r =
        Admin().Request("POST", "/api/v1/users", json::serialize(json::object{{"name", name}}));
    REQUIRE(r.ok());
    INFO(r->body);
    REQUIRE(r->status == 200);
    std::string token = Str(Parse(*r), "token");
    REQUIRE_FALSE(token.empty());
    return token;
  }

  TempDir dir{"herd-api-server"};
  std::string home = dir / "home";
  std::string herd;
  boost::asio::io_context io;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  std::unique_ptr<ApiServer> server;
  std::string admin_token;

 private:
  std::unique_ptr<ApiClient> admin_;
};

ClientResponse Call(ApiClient& c, std::string_view method, std::string_view path,
                    std::string_view body = {}) {
  auto r = c.Request(method, path, body);
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  return *r;
}

RunResult Run(ApiClient& c, const json::object& body) {
  RunResult res;
  FrameDecoder decoder([&](FrameTag tag, std::string_view payload) {
    if (tag == FrameTag::kStdout && payload.empty()) return;  // a heartbeat
    if (res.exit_code >= 0) ++res.frames_after_exit;
    const char t = static_cast<char>(tag);
    if (res.tags.empty() || res.tags.back() != t) res.tags += t;
    switch (tag) {
      case FrameTag::kRequestId:
        res.request_id = std::string(payload);
        break;
      case FrameTag::kStdout:
        res.out += payload;
        break;
      case FrameTag::kStderr:
        res.err += payload;
        break;
      case FrameTag::kExit:
        res.exit_code = std::stoi(std::string(payload));
        break;
    }
  });
  Status feed = Status::Ok();
  auto r = c.Stream("POST", "/api/v1/run", json::serialize(body), [&](std::string_view chunk) {
    if (feed.ok()) feed = decoder.Feed(chunk);
    return feed.ok();
  });
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  REQUIRE_MESSAGE(feed.ok(), feed.message());
  res.status = r->status;
  res.body = r->body;
  if (r->ok()) CHECK(decoder.pending() == 0);
  return res;
}

json::array Args(std::initializer_list<std::string_view> args) {
  json::array a;
  for (auto s : args) a.emplace_back(json::string(s));
  return a;
}

// Waits (bounded) for request `id` to end; its JSON.
json::value WaitEnded(ApiClient& c, const std::string& id) {
  const auto until = std::chrono::steady_clock::now() + kWait;
  while (true) {
    json::value v = Parse(Call(c, "GET", "/api/v1/requests/" + id));
    const std::string state = Str(v, "state");
    if (state != "PENDING" && state != "RUNNING") return v;
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < until,
                    (std::string("request ") + id + " did not end"));
    std::this_thread::sleep_for(50ms);
  }
}

std::size_t AuditCount(Server& s) {
  auto r = Call(s.Admin(), "GET", "/api/v1/audit");
  REQUIRE(r.status == 200);
  return Parse(r).as_array().size();
}

// ---- authentication ----------------------------------------------------------------------------

TEST_CASE("the health check needs no token; everything else does") {
  Server s;
  auto anon = s.Client("");
  auto h = Call(*anon, "GET", "/api/v1/health");
  CHECK(h.status == 200);
  CHECK(Str(Parse(h), "status") == "ok");
  CHECK(Str(Parse(h), "version") == "test");
  for (auto path : {"/api/v1/whoami", "/api/v1/requests", "/api/v1/users", "/api/v1/audit"}) {
    CAPTURE(std::string(path));
    auto r = Call(*anon, "GET", path);
    CHECK(r.status == 401);
    CHECK(ErrorCode(r) == "UNAUTHENTICATED");
    CHECK(r.headers.Has("WWW-Authenticate"));
  }
  auto run = Run(*anon, {{"args", Args({"status"})}});
  CHECK(run.status == 401);
}

TEST_CASE("the first admin's token file is 0600 and its token works") {
  Server s;
  struct stat st {};
  REQUIRE(::stat((s.home + "/admin.token").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  auto r = Call(s.Admin(), "GET", "/api/v1/whoami");
  REQUIRE(r.status == 200);
  CHECK(Str(Parse(r), "name") == "admin");
  CHECK(Str(Parse(r), "role") == "admin");
}

TEST_CASE("malformed, unknown, expired, revoked and deleted users' tokens are 401") {
  Server s;
  const std::string alice = s.AddUser("alice");
  const std::string bob = s.AddUser("bob");
  // A token that works, from users add.
  auto who = Call(*s.Client(alice), "GET", "/api/v1/whoami");
  REQUIRE(who.status == 200);
  CHECK(Str(Parse(who), "name") == "alice");
  CHECK(Str(Parse(who), "role") == "user");

  // Expired: made by the store with a clock in the past.
  std::string expired;
  {
    auto store = s.Store();
    const int64_t now = NowUnixMs();
    auto t = store->CreateToken("alice", now - 1000, now - 60000);
    REQUIRE(t.ok());
    expired = t->token;
  }
  // Revoked: a second token of alice's, revoked through the API.
  auto made = Call(*s.Client(alice), "POST", "/api/v1/tokens", "{}");
  REQUIRE(made.status == 200);
  const std::string revoked = Str(Parse(made), "token");
  auto rv = Call(*s.Client(alice), "POST", "/api/v1/tokens/" + Str(Parse(made), "id") + "/revoke");
  REQUIRE(rv.status == 200);
  // Deleted user.
  REQUIRE(Call(s.Admin(), "DELETE", "/api/v1/users/bob").status == 200);

  std::string unknown = alice;
  unknown[5] = unknown[5] == '0' ? '1' : '0';  // another id
  for (const std::string& token :
       {std::string("abc"), std::string("herd_"), unknown, expired, revoked, bob}) {
    CAPTURE(token);
    auto r = Call(*s.Client(token), "GET", "/api/v1/whoami");
    CHECK(r.status == 401);
    CHECK(ErrorCode(r) == "UNAUTHENTICATED");
  }
  // alice's first token still works.
  CHECK(Call(*s.Client(alice), "GET", "/api/v1/whoami").status == 200);
}

TEST_CASE("admin-only routes are 403 for a user, and change nothing") {
  Server s;
  auto alice = s.Client(s.AddUser("alice"));
  const std::size_t audit = AuditCount(s);
  struct Route {
    std::string method, path, body;
  };
  for (const Route& r :
       {Route{"GET", "/api/v1/users", ""}, Route{"POST", "/api/v1/users", R"({"name": "mallory"})"},
        Route{"DELETE", "/api/v1/users/admin", ""}, Route{"GET", "/api/v1/audit", ""},
        Route{"GET", "/api/v1/requests?all=1", ""}, Route{"GET", "/api/v1/tokens?all=1", ""},
        Route{"GET", "/api/v1/tokens?user=admin", ""},
        Route{"POST", "/api/v1/tokens", R"({"user": "admin"})"}}) {
    CAPTURE(r.method);
    CAPTURE(r.path);
    auto got = Call(*alice, r.method, r.path, r.body);
    CHECK(got.status == 403);
    CHECK(ErrorCode(got) == "PERMISSION_DENIED");
  }
  auto users = Parse(Call(s.Admin(), "GET", "/api/v1/users")).as_array();
  CHECK(users.size() == 2);  // admin, alice: no mallory, admin not deleted
  // Refused attempts at admin work are audited as such, and nothing else is.
  auto entries = Parse(Call(s.Admin(), "GET", "/api/v1/audit")).as_array();
  CHECK(entries.size() >= audit);
  for (const auto& e : entries) {
    if (Str(e, "user") == "alice") CHECK(Str(e, "result") != "ok");
  }
}

TEST_CASE("tokens: expiry bounds, and another user's token is not found") {
  Server s;
  auto alice = s.Client(s.AddUser("alice"));
  auto bob = s.Client(s.AddUser("bob"));
  const int64_t before = NowUnixMs();
  auto hour = Call(*alice, "POST", "/api/v1/tokens", R"({"expires_in_s": 3600})");
  REQUIRE(hour.status == 200);
  const int64_t expires = Parse(hour).as_object().at("expires_at_ms").to_number<int64_t>();
  CHECK(expires >= before + 3600 * 1000);
  CHECK(expires <= NowUnixMs() + 3600 * 1000);
  CHECK(Call(*s.Client(Str(Parse(hour), "token")), "GET", "/api/v1/whoami").status == 200);
  const std::size_t tokens = Parse(Call(*alice, "GET", "/api/v1/tokens")).as_array().size();
  CHECK(tokens == 2);
  for (auto body : {R"({"expires_in_s": -1})", R"({"expires_in_s": 9223372036854775807})",
                    R"({"expires_in_s": 9223372036854775})", R"({"expires_in_s": 1e3})",
                    R"({"expires_in_s": "60"})"}) {
    CAPTURE(std::string(body));
    auto got = Call(*alice, "POST", "/api/v1/tokens", body);
    CHECK(got.status == 400);
    CHECK(ErrorCode(got) == "INVALID_ARGUMENT");
  }
  CHECK(Parse(Call(*alice, "GET", "/api/v1/tokens")).as_array().size() == tokens);
  // bob cannot revoke (or learn of) alice's token.
  auto revoke = Call(*bob, "POST", "/api/v1/tokens/" + Str(Parse(hour), "id") + "/revoke");
  CHECK(revoke.status == 404);
  CHECK(Call(*s.Client(Str(Parse(hour), "token")), "GET", "/api/v1/whoami").status == 200);
}

// ---- running commands --------------------------------------------------------------------------

TEST_CASE("a mutating verb streams R, O/E, X and runs with the user's home and name") {
  Server s;
  auto alice = s.Client(s.AddUser("alice"));
  RunResult r = Run(*alice, {{"args", Args({"exec", "echo", "hi", "exit=0"})}});
  REQUIRE(r.status == 200);
  REQUIRE(r.tags.size() >= 3);
  CHECK(r.tags.front() == 'R');
  CHECK(r.tags.back() == 'X');
  CHECK(r.tags.find('R', 1) == std::string::npos);
  CHECK(r.tags.find('O') != std::string::npos);
  CHECK(r.tags.find('E') != std::string::npos);
  CHECK(r.frames_after_exit == 0);
  CHECK(r.exit_code == 0);
  CHECK(r.request_id.rfind("req-", 0) == 0);
  CHECK(r.out.find("args:exec echo hi exit=0\n") != std::string::npos);
  CHECK(r.out.find("HOME=" + s.home + "/users/alice\n") != std::string::npos);
  CHECK(r.out.find("HERD_HOME=" + s.home + "/users/alice/herd\n") != std::string::npos);
  CHECK(r.out.find("USER=alice\n") != std::string::npos);
  CHECK(r.out.find("HERD_API_SERVER=local\n") != std::string::npos);
  CHECK(r.err == "to stderr\nlast words 0\n");

  // The request ended before the client got the exit code: no wait.
  auto req = Parse(Call(*alice, "GET", "/api/v1/requests/" + r.request_id));
  CHECK(Str(req, "state") == "SUCCEEDED");
  CHECK(Str(req, "user") == "alice");
  CHECK(Str(req, "verb") == "exec");

  RunResult failed = Run(*alice, {{"args", Args({"exec", "exit=3"})}});
  CHECK(failed.exit_code == 3);
  auto freq = Parse(Call(*alice, "GET", "/api/v1/requests/" + failed.request_id));
  CHECK(Str(freq, "state") == "FAILED");
  CHECK(freq.as_object().at("exit_code").to_number<int64_t>() == 3);
  CHECK(Str(freq, "message") == "last words 3");
}

TEST_CASE("a read verb streams O/E, X and is no request") {
  Server s;
  auto alice = s.Client(s.AddUser("alice"));
  RunResult r = Run(*alice, {{"args", Args({"status", "exit=2"})}});
  REQUIRE(r.status == 200);
  CHECK(r.tags.find('R') == std::string::npos);
  CHECK(r.tags.back() == 'X');
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("USER=alice\n") != std::string::npos);
  CHECK(r.err.find("to stderr") != std::string::npos);
  CHECK(Parse(Call(*alice, "GET", "/api/v1/requests")).as_array().empty());
}

TEST_CASE("bad runs are 400 naming what is wrong, and leave no request or audit entry") {
  Server s;
  auto alice = s.Client(s.AddUser("alice"));
  const std::size_t audit = AuditCount(s);
  struct Bad {
    std::string body, names;
  };
  const std::vector<Bad> bad = {
      {R"({"args": ["rm", "-rf", "/"]})", "rm"},
      {R"({"args": ["jobs"]})", "jobs"},
      {R"({"args": ["jobs", "rm"]})", "jobs.rm"},
      {R"({"args": []})", "args"},
      {R"({})", "args"},
      {R"({"args": "exec"})", "args"},
      {R"({"args": ["exec", 1]})", "args"},
      {R"({"args": ["exec", "a\u0000b"]})", "args"},
      {R"({"args": ["exec"], "bogus": 1})", "bogus"},
      {R"({"args": ["exec"], "async": "yes"})", "async"},
      {R"({"args": ["status"], "async": true})", "async"},
      {R"({"args": ["launch"], "cluster": "a'b"})", "cluster"},
      {R"({"args": ["launch"], "cluster": "a;b"})", "cluster"},
      {R"({"args": ["launch"], "cluster": "../x"})", "cluster"},
      {R"({"args": ["launch"], "cluster": "a\u0000b"})", "cluster"},
      {R"({"args": ["exec"], "cluster": "a\"b"})", "cluster"},
      {R"({"args": ["exec"], "uploads": {"../etc": "up-1"}})", "uploads"},
      {R"({"args": ["exec"], "uploads": {"mounts/x": "up-1"}})", "uploads"},
      {R"({"args": ["exec"], "uploads": {"workdir": "../up"}})", "uploads"},
      {R"({"args": ["exec"], "uploads": {"workdir": 5}})", "uploads"},
      {"not json", ""},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.body);
    auto got = Call(*alice, "POST", "/api/v1/run", b.body);
    CHECK(got.status == 400);
    CHECK(ErrorCode(got) == "INVALID_ARGUMENT");
    CHECK(ErrorText(got).find(b.names) != std::string::npos);
  }
  CHECK(Parse(Call(*alice, "GET", "/api/v1/requests")).as_array().empty());
  CHECK(AuditCount(s) == audit);
}

TEST_CASE("bad user names are 400 naming the field, and add no user and no audit entry") {
  Server s;
  const std::size_t audit = AuditCount(s);
  for (std::string body :
       {R"({"name": "a'b"})", R"({"name": "x;rm"})", R"({"name": "../evil"})",
        R"({"name": "a\u0000b"})", R"({"name": "a b"})", R"({"name": ""})",
        R"({"name": "ok", "role": "root"})", R"({"name": 5})", R"({"name": "ok", "extra": 1})"}) {
    CAPTURE(body);
    auto got = Call(s.Admin(), "POST", "/api/v1/users", body);
    CHECK(got.status == 400);
    CHECK(ErrorCode(got) == "INVALID_ARGUMENT");
  }
  auto named = Call(s.Admin(), "POST", "/api/v1/users", R"({"name": "a;b"})");
  CHECK(ErrorText(named).find("name") != std::string::npos);
  CHECK(Parse(Call(s.Admin(), "GET", "/api/v1/users")).as_array().size() == 1);
  CHECK(AuditCount(s) == audit);
  CHECK_FALSE(std::filesystem::exists(s.home + "/users/ok"));
  CHECK(Call(s.Admin(), "DELETE", "/api/v1/users/a%3Bb").status == 400);
  CHECK(Call(s.Admin(), "DELETE", "/api/v1/users/nobody").status == 404);
}

TEST_CASE("async runs: a request id at once, the end by exit code, the user's own list, the log") {
  Server s;
  auto alice = s.Client(s.AddUser("alice"));
  auto bob = s.Client(s.AddUser("bob"));
  auto ok =
      Call(*alice, "POST", "/api/v1/run",
           json::serialize(json::object{{"args", Args({"exec", "exit=0"})}, {"async", true}}));
  REQUIRE(ok.status == 200);
  const std::string ok_id = Str(Parse(ok), "request_id");
  auto bad =
      Call(*alice, "POST", "/api/v1/run",
           json::serialize(json::object{{"args", Args({"exec", "exit=4"})}, {"async", true}}));
  REQUIRE(bad.status == 200);
  const std::string bad_id = Str(Parse(bad), "request_id");
  REQUIRE(ok_id != bad_id);

  CHECK(Str(WaitEnded(*alice, ok_id), "state") == "SUCCEEDED");
  auto b = WaitEnded(*alice, bad_id);
  CHECK(Str(b, "state") == "FAILED");
  CHECK(b.as_object().at("exit_code").to_number<int64_t>() == 4);

  auto mine = Parse(Call(*alice, "GET", "/api/v1/requests")).as_array();
  REQUIRE(mine.size() == 2);
  CHECK(Str(mine[0], "id") == bad_id);  // newest first
  CHECK(Str(mine[1], "id") == ok_id);
  CHECK(Parse(Call(*bob, "GET", "/api/v1/requests")).as_array().empty());
  CHECK(Call(*bob, "GET", "/api/v1/requests/" + ok_id).status == 404);
  CHECK(Call(*bob, "GET", "/api/v1/requests/" + ok_id + "/log").status == 404);
  CHECK(Call(*bob, "POST", "/api/v1/requests/" + ok_id + "/cancel").status == 404);
  CHECK(Parse(Call(s.Admin(), "GET", "/api/v1/requests?all=1")).as_array().size() == 2);

  auto log = Call(*alice, "GET", "/api/v1/requests/" + bad_id + "/log");
  REQUIRE(log.status == 200);
  CHECK(log.body.find("args:exec exit=4\n") != std::string::npos);
  CHECK(log.body.find("to stderr\n") != std::string::npos);
  CHECK(log.body.find("last words 4\n") != std::string::npos);
  // Ended: cancelling is refused.
  CHECK(Call(*alice, "POST", "/api/v1/requests/" + ok_id + "/cancel").status == 409);
}

TEST_CASE("cancelling a running request interrupts its command: CANCELLED") {
  Server s;
  auto alice = s.Client(s.AddUser("alice"));
  auto started =
      Call(*alice, "POST", "/api/v1/run",
           json::serialize(json::object{{"args", Args({"exec", "sleep=120"})}, {"async", true}}));
  REQUIRE(started.status == 200);
  const std::string id = Str(Parse(started), "request_id");
  // Wait until the command runs (it printed), so the interrupt reaches the script.
  const auto until = std::chrono::steady_clock::now() + kWait;
  while (Call(*alice, "GET", "/api/v1/requests/" + id + "/log").body.find("sleeping") ==
         std::string::npos) {
    REQUIRE(std::chrono::steady_clock::now() < until);
    std::this_thread::sleep_for(50ms);
  }
  auto c = Call(*alice, "POST", "/api/v1/requests/" + id + "/cancel");
  REQUIRE(c.status == 200);
  auto ended = WaitEnded(*alice, id);
  CHECK(Str(ended, "state") == "CANCELLED");
  CHECK(ended.as_object().at("cancel_requested").as_bool());
}

TEST_CASE("a streamed run whose client goes away is interrupted") {
  Server s;
  auto alice = s.Client(s.AddUser("alice"));
  std::string id;
  FrameDecoder decoder([&](FrameTag tag, std::string_view payload) {
    if (tag == FrameTag::kRequestId) id = std::string(payload);
  });
  std::string seen;
  auto r = alice->Stream("POST", "/api/v1/run",
                         json::serialize(json::object{{"args", Args({"exec", "sleep=120"})}}),
                         [&](std::string_view chunk) {
                           REQUIRE(decoder.Feed(chunk).ok());
                           seen.append(chunk);
                           return seen.find("sleeping") == std::string::npos;  // then hang up
                         });
  REQUIRE(r.ok());
  REQUIRE_FALSE(id.empty());
  auto ended = WaitEnded(*alice, id);
  CHECK(Str(ended, "state") == "FAILED");  // an interrupt nobody asked for through the API
  CHECK(ended.as_object().at("exit_code").to_number<int64_t>() == 130);
}

TEST_CASE("a cluster launched by one user is 409 for another's launch and 404 for the rest") {
  Server s;
  auto alice = s.Client(s.AddUser("alice"));
  auto bob = s.Client(s.AddUser("bob"));
  RunResult made = Run(*alice, {{"args", Args({"launch", "-c", "c1"})}, {"cluster", "c1"}});
  REQUIRE(made.status == 200);
  CHECK(made.exit_code == 0);

  auto taken = Call(
      *bob, "POST", "/api/v1/run",
      json::serialize(json::object{{"args", Args({"launch", "-c", "c1"})}, {"cluster", "c1"}}));
  CHECK(taken.status == 409);
  for (auto verb : {"status", "exec", "down", "logs"}) {
    CAPTURE(std::string(verb));
    auto got =
        Call(*bob, "POST", "/api/v1/run",
             json::serialize(json::object{{"args", Args({verb, "-c", "c1"})}, {"cluster", "c1"}}));
    CHECK(got.status == 404);
    CHECK(ErrorText(got).find("c1") != std::string::npos);
  }
  CHECK(Run(*alice, {{"args", Args({"status", "-c", "c1"})}, {"cluster", "c1"}}).exit_code == 0);

  // A launch that failed and made nothing leaves the name free again.
  RunResult failed =
      Run(*alice, {{"args", Args({"launch", "-c", "c2", "exit=1"})}, {"cluster", "c2"}});
  CHECK(failed.exit_code == 1);
  CHECK(Run(*bob, {{"args", Args({"launch", "-c", "c2"})}, {"cluster", "c2"}}).status == 200);
}

TEST_CASE("a launch claims the cluster its arguments name, whatever the body says") {
  Server s;
  auto alice = s.Client(s.AddUser("alice"));
  auto bob = s.Client(s.AddUser("bob"));
  REQUIRE(Run(*alice, {{"args", Args({"launch", "-c", "c5"})}, {"cluster", "c5"}}).exit_code == 0);
  // bob names alice's cluster in his arguments and another (or none) in the body: refused, and
  // his command never runs.
  for (const json::object& body :
       {json::object{{"args", Args({"launch", "-c", "c5"})}},
        json::object{{"args", Args({"launch", "-c", "c5"})}, {"cluster", "c6"}},
        json::object{{"args", Args({"launch", "--cluster=c5"})}},
        json::object{{"args", Args({"launch", "-cc5"})}}}) {
    CAPTURE(json::serialize(body));
    auto got = Call(*bob, "POST", "/api/v1/run", json::serialize(body));
    CHECK((got.status == 409 || got.status == 400));
  }
  auto unnamed = Call(*bob, "POST", "/api/v1/run",
                      json::serialize(json::object{{"args", Args({"launch", "--", "true"})}}));
  CHECK(unnamed.status == 400);
  CHECK(ErrorText(unnamed).find("-c NAME") != std::string::npos);
  // Each user's commands get a tag of their own for managed jobs' cluster names.
  const std::string a = Run(*alice, {{"args", Args({"status"})}}).out;
  const std::string b = Run(*bob, {{"args", Args({"status"})}}).out;
  auto tag = [](const std::string& out) {
    const auto at = out.find("HERD_MANAGED_CLUSTER_TAG=");
    return at == std::string::npos ? std::string()
                                   : out.substr(at + 25, out.find('\n', at) - at - 25);
  };
  CHECK(tag(a).size() == 6);
  CHECK(tag(b).size() == 6);
  CHECK(tag(a) != tag(b));
  // The server carries out its users' cloud autostop: their commands say so to the head.
  CHECK(a.find("HERD_AUTOSTOP_BY_SERVER=1\n") != std::string::npos);
}

TEST_CASE("a refused launch claims no cluster name") {
  Server s;
  auto alice = s.Client(s.AddUser("alice"));
  auto bob = s.Client(s.AddUser("bob"));
  // An upload place that does not exist, and an upload that does not exist.
  auto place = Call(*alice, "POST", "/api/v1/run",
                    json::serialize(json::object{{"args", Args({"launch", "-c", "c3"})},
                                                 {"cluster", "c3"},
                                                 {"uploads", {{"elsewhere", "up-00"}}}}));
  CHECK(place.status == 400);
  auto missing = Call(*alice, "POST", "/api/v1/run",
                      json::serialize(json::object{{"args", Args({"launch", "-c", "c4"})},
                                                   {"cluster", "c4"},
                                                   {"uploads", {{"workdir", "up-00"}}}}));
  CHECK(missing.status == 404);
  for (auto name : {"c3", "c4"}) {
    CAPTURE(std::string(name));
    CHECK(Run(*bob, {{"args", Args({"status", "-c", name})}, {"cluster", name}}).status == 200);
  }
}

TEST_CASE("an upload round trip: the command's working directory has the files") {
  Server s;
  auto alice = s.Client(s.AddUser("alice"));
  TempDir src("herd-api-upload");
  src.Write("a.txt", "hello upload\n");
  src.Write("sub/b.txt", "b\n");
  const std::string tar = s.dir / "wd.tar";
  REQUIRE(std::system(("tar -cf " + tar + " -C " + src.path() + " .").c_str()) == 0);
  auto up = Call(*alice, "POST", "/api/v1/uploads", ReadAll(tar));
  REQUIRE(up.status == 201);
  const std::string id = Str(Parse(up), "id");
  REQUIRE_FALSE(id.empty());

  RunResult r =
      Run(*alice, {{"args", Args({"exec", "ls=workdir"})}, {"uploads", {{"workdir", id}}}});
  REQUIRE(r.status == 200);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("a.txt") != std::string::npos);
  CHECK(r.out.find("b.txt") != std::string::npos);
  CHECK(r.out.find("hello upload\n") != std::string::npos);
  // The upload was used up.
  auto again =
      Call(*alice, "POST", "/api/v1/run",
           json::serialize(json::object{{"args", Args({"exec"})}, {"uploads", {{"workdir", id}}}}));
  CHECK(again.status == 404);

  // mounts/N is a place too; anything else is refused.
  auto up2 = Call(*alice, "POST", "/api/v1/uploads", ReadAll(tar));
  REQUIRE(up2.status == 201);
  const std::string id2 = Str(Parse(up2), "id");
  for (auto bad : {"mounts", "mounts/", "mounts/1/x", "workdir2", "/tmp", "mounts/../x"}) {
    CAPTURE(std::string(bad));
    auto got =
        Call(*alice, "POST", "/api/v1/run",
             json::serialize(json::object{{"args", Args({"exec"})}, {"uploads", {{bad, id2}}}}));
    CHECK(got.status == 400);
    CHECK(ErrorText(got).find("uploads") != std::string::npos);
  }
  RunResult m =
      Run(*alice, {{"args", Args({"exec", "ls=mounts/1"})}, {"uploads", {{"mounts/1", id2}}}});
  CHECK(m.exit_code == 0);
  CHECK(m.out.find("hello upload\n") != std::string::npos);

  // An upload of another user is not found.
  auto bob = s.Client(s.AddUser("bob"));
  auto up3 = Call(*alice, "POST", "/api/v1/uploads", ReadAll(tar));
  auto theirs =
      Call(*bob, "POST", "/api/v1/run",
           json::serialize(json::object{{"args", Args({"exec"})},
                                        {"uploads", {{"workdir", Str(Parse(up3), "id")}}}}));
  CHECK(theirs.status == 404);
}

TEST_CASE("an upload cannot write outside the command's directory") {
  Server s;
  auto alice = s.Client(s.AddUser("alice"));
  TempDir src("herd-api-upload");
  const std::string outside = s.dir / "outside";
  std::filesystem::create_directories(outside);
  std::filesystem::create_directories(src / "b/link");
  src.Write("b/link/evil", "evil\n");
  std::filesystem::create_directories(src / "a");
  std::filesystem::create_directory_symlink(outside, src / "a/link");
  // A symlink to a directory outside, then a file through it; and a member named "../x".
  const std::string tar = s.dir / "evil.tar";
  REQUIRE(std::system(("tar -cf " + tar + " -C " + src / "a" + " link && tar -rf " + tar + " -C " +
                       src / "b" + " link/evil && tar -rf " + tar + " -C " + src / "b" +
                       " --transform 's,^,../,' link/evil")
                          .c_str()) == 0);
  auto up = Call(*alice, "POST", "/api/v1/uploads", ReadAll(tar));
  REQUIRE(up.status == 201);
  auto got = Call(*alice, "POST", "/api/v1/run",
                  json::serialize(json::object{{"args", Args({"exec"})},
                                               {"uploads", {{"workdir", Str(Parse(up), "id")}}}}));
  CHECK(got.status == 400);
  CHECK(std::filesystem::is_empty(outside));
  CHECK_FALSE(std::filesystem::exists(s.home + "/requests/link"));
  // Not a tar archive at all.
  auto junk = Call(*alice, "POST", "/api/v1/uploads", "not a tar archive");
  REQUIRE(junk.status == 201);
  auto bad =
      Call(*alice, "POST", "/api/v1/run",
           json::serialize(json::object{{"args", Args({"exec"})},
                                        {"uploads", {{"workdir", Str(Parse(junk), "id")}}}}));
  CHECK(bad.status == 400);
  CHECK(Call(*alice, "POST", "/api/v1/uploads", "").status == 400);
}

TEST_CASE("a request's log followed until it ends; bad listing parameters are 400") {
  Server s;
  auto alice = s.Client(s.AddUser("alice"));
  auto started = Call(*alice, "POST", "/api/v1/run",
                      json::serialize(json::object{{"args", Args({"exec", "sleep=1", "exit=5"})},
                                                   {"async", true}}));
  REQUIRE(started.status == 200);
  const std::string id = Str(Parse(started), "request_id");
  auto log = Call(*alice, "GET", "/api/v1/requests/" + id + "/log?follow=1");
  REQUIRE(log.status == 200);
  // Followed to the end: the last words, written after the sleep, are in.
  CHECK(log.body.find("sleeping\n") != std::string::npos);
  CHECK(log.body.find("last words 5\n") != std::string::npos);
  CHECK(Str(Parse(Call(*alice, "GET", "/api/v1/requests/" + id)), "state") == "FAILED");
  for (auto path : {"/api/v1/requests?limit=x", "/api/v1/requests?limit=-1",
                    "/api/v1/requests/..%2Fx", "/api/v1/requests/a%3Bb/log"}) {
    CAPTURE(std::string(path));
    CHECK(Call(*alice, "GET", path).status == 400);
  }
  CHECK(Call(*alice, "GET", "/api/v1/requests/req-0000000000000000").status == 404);
  CHECK(Call(*alice, "GET", "/api/v1/nothing").status == 404);
}

// ---- restarts and the audit --------------------------------------------------------------------

TEST_CASE("Stop cancels running requests; a restart fails what was left RUNNING") {
  const uint16_t port = FreePort();
  Server s(port);
  auto alice = s.Client(s.AddUser("alice"));
  auto started =
      Call(*alice, "POST", "/api/v1/run",
           json::serialize(json::object{{"args", Args({"exec", "sleep=120"})}, {"async", true}}));
  REQUIRE(started.status == 200);
  const std::string running = Str(Parse(started), "request_id");
  REQUIRE(Str(Parse(Call(*alice, "GET", "/api/v1/requests/" + running)), "state") == "RUNNING");
  s.Stop();
  std::string orphan;
  {
    auto store = s.Store();
    auto r = store->GetRequest(running);
    REQUIRE(r.ok());
    CHECK(RequestStateName(r->state) == "CANCELLED");
    // What a server killed mid-command leaves behind.
    const std::string holder = "127.0.0.1:" + std::to_string(port);
    auto id = store->CreateRequest("alice", "exec", "", NowUnixMs(), holder);
    REQUIRE(id.ok());
    REQUIRE(store->SetRequestRunning(*id, holder, NowUnixMs()).ok());
    orphan = *id;
  }
  s.Start(port);
  REQUIRE(s.server->port() == port);
  auto client = s.Client(s.admin_token);
  auto r = Parse(Call(*client, "GET", "/api/v1/requests/" + orphan));
  CHECK(Str(r, "state") == "FAILED");
  CHECK(Str(r, "message").find("server stopped") != std::string::npos);
  CHECK(Str(Parse(Call(*client, "GET", "/api/v1/requests/" + running)), "state") == "CANCELLED");
}

TEST_CASE("the audit lists mutating calls with user, verb, target and result") {
  Server s;
  auto alice = s.Client(s.AddUser("alice"));
  REQUIRE(Run(*alice, {{"args", Args({"launch", "-c", "c1"})}, {"cluster", "c1"}}).exit_code == 0);
  REQUIRE(
      Run(*alice, {{"args", Args({"exec", "-c", "c1", "exit=2"})}, {"cluster", "c1"}}).exit_code ==
      2);
  REQUIRE(Run(*alice, {{"args", Args({"status", "-c", "c1"})}, {"cluster", "c1"}}).exit_code == 0);
  auto entries = Parse(Call(s.Admin(), "GET", "/api/v1/audit")).as_array();
  bool add = false, launch_ok = false, exec_failed = false, status = false;
  for (const auto& e : entries) {
    const std::string user = Str(e, "user"), verb = Str(e, "verb"), target = Str(e, "target"),
                      result = Str(e, "result");
    add =
        add || (user == "admin" && verb == "api.users.add" && target == "alice" && result == "ok");
    launch_ok =
        launch_ok || (user == "alice" && verb == "launch" && target == "c1" && result == "ok");
    exec_failed = exec_failed || (user == "alice" && verb == "exec" && target == "c1" &&
                                  result.rfind("exit 2", 0) == 0);
    status = status || verb == "status";
  }
  CHECK(add);
  CHECK(launch_ok);
  CHECK(exec_failed);
  CHECK_FALSE(status);  // reading changes nothing and is not audited
}

}  // namespace
}  // namespace herd::server
