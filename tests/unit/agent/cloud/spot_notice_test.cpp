// The spot interruption notice poller against a fake metadata service, on a fake clock.
#include "agent/cloud/spot_notice.hpp"

#include <doctest/doctest.h>

#include <deque>
#include <vector>

#include "shared/common/limits.hpp"
#include "tests/fakes/fake_clock.hpp"

namespace herd::agent {
namespace {

// Answers as EC2's IMDSv2 does: a token for PUT /latest/api/token with a TTL header, 401 for a
// GET without the current token, then `action` (404 while empty).
class FakeMetadata final : public MetadataHttp {
 public:
  Result<MetadataReply> Send(const std::string& method, const std::string& path,
                             const std::map<std::string, std::string>& headers) override {
    calls.push_back(method + " " + path);
    if (down) return Unavailable("no answer");
    if (method == "PUT" && path == "/latest/api/token") {
      auto ttl = headers.find("X-aws-ec2-metadata-token-ttl-seconds");
      if (ttl == headers.end()) return MetadataReply{400, ""};
      ttl_seen = ttl->second;
      token = "tok" + std::to_string(++tokens);
      return MetadataReply{200, token};
    }
    if (method == "GET" && path == "/latest/meta-data/spot/instance-action") {
      auto t = headers.find("X-aws-ec2-metadata-token");
      if (t == headers.end() || t->second != token) return MetadataReply{401, ""};
      if (action.empty()) return MetadataReply{404, "Not Found"};
      return MetadataReply{200, action};
    }
    return MetadataReply{404, ""};
  }
  std::vector<std::string> calls;
  std::string token, action, ttl_seen;
  int tokens = 0;
  bool down = false;
};

TEST_CASE("no notice is 404; a scheduled one is parsed, with its time") {
  FakeMetadata md;
  testing::FakeClock clock;
  SpotNoticePoller poller(md, clock);
  auto none = poller.Poll();
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());
  CHECK(md.calls == std::vector<std::string>{"PUT /latest/api/token",
                                             "GET /latest/meta-data/spot/instance-action"});
  CHECK(md.ttl_seen == "21600");
  md.action = R"({"action": "terminate", "time": "2026-12-05T22:40:00Z"})";
  auto got = poller.Poll();
  REQUIRE(got.ok());
  REQUIRE(got->has_value());
  CHECK((*got)->action == "terminate");
  CHECK((*got)->time == "2026-12-05T22:40:00Z");
  CHECK((*got)->time_unix_ms == 1796510400000);
  CHECK(md.tokens == 1);  // the token is kept between polls
}

TEST_CASE("the token is renewed before it runs out, and at once when refused") {
  FakeMetadata md;
  testing::FakeClock clock;
  SpotNoticePoller poller(md, clock);
  REQUIRE(poller.Poll().ok());
  clock.Advance(std::chrono::duration_cast<std::chrono::milliseconds>(
      limits::kSpotMetadataTokenRenew - std::chrono::seconds(1)));
  REQUIRE(poller.Poll().ok());
  CHECK(md.tokens == 1);
  clock.Advance(std::chrono::seconds(1));
  REQUIRE(poller.Poll().ok());
  CHECK(md.tokens == 2);
  md.token = "restarted";  // the service forgot the token: 401, a new one, the GET again
  auto got = poller.Poll();
  REQUIRE(got.ok());
  CHECK_FALSE(got->has_value());
  CHECK(md.tokens == 3);
}

TEST_CASE("what the service should not say is an error, not a notice") {
  FakeMetadata md;
  testing::FakeClock clock;
  SpotNoticePoller poller(md, clock);
  md.action = "<html>not json</html>";
  auto bad = poller.Poll();
  CHECK(bad.status().code() == Code::kInvalidArgument);
  md.action = R"({"action": "terminate"})";
  CHECK_FALSE(poller.Poll().ok());
  md.down = true;
  CHECK(poller.Poll().status().code() == Code::kUnavailable);
}

TEST_CASE("ISO 8601 UTC times") {
  CHECK(ParseIsoUtcMs("1970-01-01T00:00:00Z") == 0);
  CHECK(ParseIsoUtcMs("2026-12-05T22:40:00.250Z") == 1796510400250);
  CHECK_FALSE(ParseIsoUtcMs("2026-12-05 22:40:00").has_value());
  CHECK_FALSE(ParseIsoUtcMs("2026-12-05T22:40:00+01:00").has_value());
  CHECK_FALSE(ParseIsoUtcMs("2026-13-05T22:40:00Z").has_value());
  // A time that does not parse still makes a notice (the cloud's word is shown as it is).
  auto n = ParseInstanceAction(R"({"action":"stop","time":"soon"})");
  REQUIRE(n.ok());
  CHECK(n->time_unix_ms == 0);
}

TEST_CASE("the metadata endpoint must be http://HOST[:PORT]") {
  CHECK(MakeBeastMetadataHttp("http://169.254.169.254").ok());
  CHECK(MakeBeastMetadataHttp("http://127.0.230.1:8080/").ok());
  for (const char* bad : {"https://169.254.169.254", "169.254.169.254", "http://", "http://h:0",
                          "http://h:99999", "http://h/x", "http://h:8a"}) {
    CAPTURE(bad);
    CHECK(MakeBeastMetadataHttp(bad).status().code() == Code::kInvalidArgument);
  }
}

}  // namespace
}  // namespace herd::agent
