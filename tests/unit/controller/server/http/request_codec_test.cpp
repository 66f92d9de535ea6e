// Request decoding of the API server: JSON bodies against a schema, names, targets, errors.
#include "controller/server/http/request_codec.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

namespace herd::api_http {
namespace {

const FieldSpec kLaunch[] = {
    {"cluster", FieldType::kString, true}, {"num_nodes", FieldType::kInt},
    {"detach", FieldType::kBool},          {"args", FieldType::kStringList},
    {"env", FieldType::kStringMap},        {"task", FieldType::kObject},
};

Status Refusal(std::string_view body) {
  auto decoded = DecodeBody(body, kLaunch);
  REQUIRE_FALSE(decoded.ok());
  CHECK(decoded.status().code() == Code::kInvalidArgument);
  return decoded.status();
}

bool Mentions(const Status& s, std::string_view text) {
  return s.message().find(text) != std::string::npos;
}

TEST_CASE("a body of declared fields decodes into typed values") {
  auto body = DecodeBody(R"({"cluster":"demo","num_nodes":2,"detach":true,"args":["a","b"],
                             "env":{"K":"V"},"task":{"run":"echo hi","n":[1,2]}})",
                         kLaunch);
  REQUIRE_MESSAGE(body.ok(), body.status().ToString());
  CHECK(body->String("cluster") == "demo");
  CHECK(body->Int("num_nodes") == 2);
  CHECK(body->Bool("detach"));
  CHECK(body->StringList("args") == std::vector<std::string>{"a", "b"});
  CHECK(body->StringMap("env") == std::map<std::string, std::string>{{"K", "V"}});
  REQUIRE(body->Object("task") != nullptr);
  CHECK(body->Object("task")->at("run") == "echo hi");

  // Optional fields absent or null: the defaults.
  auto minimal = DecodeBody(R"({"cluster":"demo","num_nodes":null})", kLaunch);
  REQUIRE(minimal.ok());
  CHECK_FALSE(minimal->Has("num_nodes"));
  CHECK(minimal->Int("num_nodes", 1) == 1);
  CHECK_FALSE(minimal->Bool("detach"));
  CHECK(minimal->StringList("args").empty());
  CHECK(minimal->Object("task") == nullptr);
  CHECK(minimal->String("missing", "dflt") == "dflt");
  // Asking for a declared field as another type gives the default.
  CHECK(minimal->Int("cluster", 7) == 7);

  // An empty body is an empty object.
  const FieldSpec none[] = {{"all", FieldType::kBool}};
  CHECK(DecodeBody("", none).ok());
  CHECK(DecodeBody(" \r\n", none).ok());
  CHECK(DecodeBody("{}", {{"all", FieldType::kBool}}).ok());
  CHECK(DecodeBody("-9223372036854775808", none).status().code() == Code::kInvalidArgument);
}

TEST_CASE("every refusal names its field") {
  CHECK(Mentions(Refusal(R"({"cluster":"d","colour":"red"})"), "unknown field 'colour'"));
  CHECK(Mentions(Refusal(R"({})"), "missing field 'cluster'"));
  CHECK(Mentions(Refusal(R"({"cluster":null})"), "missing field 'cluster'"));
  CHECK(Mentions(Refusal(R"({"cluster":5})"), "field 'cluster' must be a string"));
  CHECK(Mentions(Refusal(R"({"cluster":"d","num_nodes":"2"})"), "'num_nodes' must be an integer"));
  CHECK(Mentions(Refusal(R"({"cluster":"d","num_nodes":2.5})"), "'num_nodes' must be an integer"));
  CHECK(Mentions(Refusal(R"({"cluster":"d","num_nodes":1e3})"), "'num_nodes' must be an integer"));
  CHECK(Mentions(Refusal(R"({"cluster":"d","num_nodes":99999999999999999999})"), "num_nodes"));
  CHECK(Mentions(Refusal(R"({"cluster":"d","num_nodes":18446744073709551615})"), "out of range"));
  CHECK(Mentions(Refusal(R"({"cluster":"d","detach":1})"), "'detach' must be true or false"));
  CHECK(Mentions(Refusal(R"({"cluster":"d","args":"a"})"), "'args' must be a list of strings"));
  CHECK(Mentions(Refusal(R"({"cluster":"d","args":["a",1]})"), "item 1 is not a string"));
  CHECK(Mentions(Refusal(R"({"cluster":"d","env":{"K":1}})"), "the value of 'K' is not a string"));
  CHECK(Mentions(Refusal(R"({"cluster":"d","env":["K"]})"), "'env' must be an object of strings"));
  CHECK(Mentions(Refusal(R"({"cluster":"d","task":[]})"), "'task' must be an object"));
  // NUL bytes, escaped or raw, in values and names, at any depth.
  CHECK(Mentions(Refusal(R"({"cluster":"a\u0000b"})"), "field 'cluster' holds a NUL byte"));
  CHECK(Mentions(Refusal(R"({"cluster":"d","args":["ok","x\u0000"]})"), "'args[1]' holds a NUL"));
  CHECK(Mentions(Refusal(R"({"cluster":"d","env":{"K\u0000":"v"}})"), "(its name)"));
  CHECK(Mentions(Refusal(R"({"cluster":"d","task":{"a":{"b":["\u0000"]}}})"), "task.a.b[0]"));
  CHECK(Mentions(Refusal(std::string("{\"cluster\":\"a\0b\"}", 17)), "not JSON"));
  // Not an object, not JSON, too deep, trailing bytes.
  CHECK(Mentions(Refusal("[1,2]"), "must be a JSON object"));
  CHECK(Mentions(Refusal("\"x\""), "must be a JSON object"));
  CHECK(Mentions(Refusal("{"), "not JSON"));
  CHECK(Mentions(Refusal(R"({"cluster":"d"} {})"), "not JSON"));
  std::string deep =
      R"({"cluster":"d","task":)" + std::string(40, '[') + std::string(40, ']') + "}";
  CHECK(Mentions(Refusal(deep), "not JSON"));
  // An unknown field's name is shown printable and cut.
  Status s = Refusal("{\"cluster\":\"d\",\"\\u0001" + std::string(100, 'z') + "\":1}");
  CHECK(Mentions(s, "\\x01zzz"));
  CHECK(s.message().size() < 120);
}

TEST_CASE("an oversized body is refused before it is parsed") {
  std::string body = R"({"cluster":")" + std::string(100, 'a') + "\"}";
  auto decoded = DecodeBody(body, kLaunch, 64);
  REQUIRE_FALSE(decoded.ok());
  CHECK(Mentions(decoded.status(), "over the limit of 64"));
  CHECK(DecodeBody(body, kLaunch, body.size()).ok());
}

TEST_CASE("names: letters, digits, '-', '_', '.'; nothing a path, a shell or a log would misread") {
  const std::string longest(limits::kApiMaxNameBytes, 'n');
  for (std::string_view ok :
       {std::string_view("a"), std::string_view("demo"), std::string_view("Job_1.final"),
        std::string_view("x-y"), std::string_view("7"), std::string_view(longest)}) {
    CHECK_MESSAGE(ValidateName("job name", ok).ok(), ok);
  }
  struct Case {
    std::string value;
    std::string says;
  };
  const Case refused[] = {
      {"", "it is empty"},
      {std::string(64, 'a'), "it has 64 characters"},
      {"a b", "a space"},
      {"a\tb", "whitespace"},
      {"a\nb", "whitespace"},
      {std::string("a\0b", 3), "a NUL byte"},
      {"a\"b", "a quote"},
      {"a'b", "a quote"},
      {"a`b", "a quote"},
      {"a;b", "';'"},
      {"a/b", "'/'"},
      {"a..b", "'..'"},
      {"..", "starts with '.'"},
      {".hidden", "starts with '.'"},
      {"-rf", "starts with '-'"},
      {"a$b", "'$'"},
      {"a\x7f", "control or non-ASCII"},
      {"caf\xc3\xa9", "control or non-ASCII"},
  };
  for (const Case& c : refused) {
    Status s = ValidateName("job name", c.value);
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK_MESSAGE(Mentions(s, "invalid job name"), s.message());
    CHECK_MESSAGE(Mentions(s, c.says), s.message());
    // The value never reaches the message raw.
    for (char ch : s.message()) CHECK(static_cast<unsigned char>(ch) >= 0x20);
  }

  CHECK(ValidateClusterNameField("cluster", "demo-1").ok());
  Status upper = ValidateClusterNameField("cluster", "Demo");
  CHECK(upper.code() == Code::kInvalidArgument);
  CHECK(Mentions(upper, "cluster: invalid cluster name 'Demo'"));
  CHECK(ValidateClusterNameField("cluster", "a/b").code() == Code::kInvalidArgument);
  CHECK(ValidateClusterNameField("cluster", std::string(41, 'a')).code() == Code::kInvalidArgument);
}

TEST_CASE("targets split into decoded segments and query parameters") {
  auto t = ParseTarget("/api/v1/clusters/a%2Db/jobs/7?follow=1&tail=10&q=a+b%26c&flag");
  REQUIRE_MESSAGE(t.ok(), t.status().ToString());
  CHECK(t->segments == std::vector<std::string>{"api", "v1", "clusters", "a-b", "jobs", "7"});
  CHECK(t->Query("follow") == "1");
  CHECK(t->Query("tail") == "10");
  CHECK(t->Query("q") == "a b&c");
  CHECK(t->Query("flag") == "");
  CHECK_FALSE(t->Query("none").has_value());

  std::vector<std::string> captures;
  CHECK(t->Match({"api", "v1", "clusters", ":name", "jobs", ":id"}, &captures));
  CHECK(captures == std::vector<std::string>{"a-b", "7"});
  CHECK_FALSE(t->Match({"api", "v1", "clusters", ":name"}));
  CHECK_FALSE(t->Match({"api", "v2", "clusters", ":name", "jobs", ":id"}));
  CHECK(ParseId("job id", captures[1]).value() == 7);

  CHECK(ParseTarget("/").value().segments.empty());
  CHECK(ParseTarget("/api/v1/clusters/").value().segments.size() == 3);
  CHECK(ParseTarget("/x?").value().query.empty());
  CHECK(ParseTarget("/x?a=1&&b=2").value().query.size() == 2);
  CHECK(ParseTarget("/%E2%9C%93").value().segments[0] == "\xE2\x9C\x93");
}

TEST_CASE("targets with traversal, NUL, bad escapes or no leading slash are refused") {
  struct Case {
    std::string target;
    std::string says;
  };
  const Case refused[] = {
      {"", "does not start with '/'"},
      {"api/v1", "does not start with '/'"},
      {"http://h/api", "does not start with '/'"},
      {"/api/../etc", "'..' segment"},
      {"/api/%2E%2E/etc", "'..' segment"},
      {"/api/%2e%2E", "'..' segment"},
      {"/api/./x", "'.' segment"},
      {"/api//x", "empty segment"},
      {"/api/x//", "empty segment"},
      {"/api/a%2Fb", "encoded '/'"},
      {"/api/a%00b", "encoded NUL"},
      {"/api?x=%00", "encoded NUL"},
      {"/api?%00=1", "encoded NUL"},
      {"/api/%zz", "bad percent escape"},
      {"/api/%2", "bad percent escape"},
      {"/api/%", "bad percent escape"},
      {"/api?x=%4", "bad percent escape"},
      {"/api#frag", "fragment"},
      {"/a b", "space or control"},
      {std::string("/a\0b", 4), "space or control"},
      {"/a\x01", "space or control"},
      {"/x?=1", "without a name"},
  };
  for (const Case& c : refused) {
    auto t = ParseTarget(c.target);
    REQUIRE_FALSE_MESSAGE(t.ok(), c.target);
    CHECK(t.status().code() == Code::kInvalidArgument);
    std::string context = c.target + " -> " + t.status().message();
    CHECK_MESSAGE(Mentions(t.status(), c.says), context);
  }
  for (std::string_view bad : {"", "-1", "+1", "1.5", "x", "99999999999999999999", "1 "}) {
    auto id = ParseId("job id", bad);
    CHECK_FALSE(id.ok());
    CHECK(Mentions(id.status(), "invalid job id"));
  }
  CHECK(ParseId("job id", "0").value() == 0);
}

TEST_CASE("herd Status codes map onto HTTP statuses with a JSON error body, and back") {
  struct Case {
    Status status;
    int http;
    std::string code;
  };
  const Case cases[] = {
      {InvalidArgument("bad"), 400, "INVALID_ARGUMENT"},
      {Unauthenticated("no token"), 401, "UNAUTHENTICATED"},
      {PermissionDenied("not yours"), 403, "PERMISSION_DENIED"},
      {NotFound("gone"), 404, "NOT_FOUND"},
      {AlreadyExists("taken"), 409, "ALREADY_EXISTS"},
      {FailedPrecondition("busy"), 409, "FAILED_PRECONDITION"},
      {Unavailable("down"), 503, "UNAVAILABLE"},
      {DeadlineExceeded("slow"), 504, "DEADLINE_EXCEEDED"},
      {IoError("disk"), 500, "IO"},
      {Internal("bug"), 500, "INTERNAL"},
      {Cancelled("stop"), 500, "CANCELLED"},
  };
  for (const Case& c : cases) {
    HttpResponse r = HttpError(c.status);
    CHECK(r.status == c.http);
    CHECK(r.content_type == "application/json");
    boost::json::value body = boost::json::parse(r.body);
    CHECK(body.at("code") == c.code.c_str());
    CHECK(body.at("error") == c.status.message().c_str());
    CHECK(r.headers.Has("WWW-Authenticate") == (c.http == 401));
    // The client gets the same Status back.
    Status back = StatusFromResponse(r.status, r.body);
    CHECK(back.code() == c.status.code());
    CHECK(back.message() == c.status.message());
  }
  CHECK(Mentions(Unauthenticated("x"), "unauthenticated: x"));
  // A body that is not herd's JSON: the code from the HTTP status, the text from the body.
  Status plain = StatusFromResponse(502, "Bad Gateway\nfrom the proxy");
  CHECK(plain.code() == Code::kInternal);
  CHECK(plain.message() == "HTTP 502: Bad Gateway");
  CHECK(StatusFromResponse(404, "").code() == Code::kNotFound);
  CHECK(StatusFromResponse(413, "{}").code() == Code::kInvalidArgument);
  CHECK(StatusFromResponse(503, R"({"code":"OK","error":"?"})").code() == Code::kUnavailable);
  CHECK(StatusFromResponse(401, R"({"code":"UNAUTHENTICATED","error":"x"})").code() ==
        Code::kPermissionDenied);
}

TEST_CASE("headers: case-insensitive lookup, Set replaces, bearer tokens") {
  Headers h{{"Content-Type", "a"}, {"X-Two", "1"}, {"x-two", "2"}};
  CHECK(h.Get("content-type") == "a");
  CHECK(h.Get("X-TWO") == "1");
  h.Set("X-two", "3");
  CHECK(h.Get("x-two") == "3");
  CHECK(h.fields().size() == 2);
  CHECK_FALSE(h.Get("missing").has_value());

  auto token = [](std::string value) { return BearerToken(Headers{{"Authorization", value}}); };
  CHECK(token("Bearer abc") == "abc");
  CHECK(token("bearer   abc  ") == "abc");
  CHECK_FALSE(token("Basic abc").has_value());
  CHECK_FALSE(token("Bearer").has_value());
  CHECK_FALSE(token("Bearer ").has_value());
  CHECK_FALSE(token("Bearerabc").has_value());
  CHECK_FALSE(BearerToken(Headers{}).has_value());
}

}  // namespace
}  // namespace herd::api_http
