#include "shared/proto/frame.hpp"

#include <doctest/doctest.h>

#include <random>

namespace herd::proto {
namespace {

using herd::v1::AgentToHead;
using herd::v1::ClientToHead;

TEST_CASE("a frame round-trips") {
  AgentToHead msg;
  msg.mutable_heartbeat()->set_incarnation(7);
  auto decoded = Decode<AgentToHead>(Encode(msg));
  REQUIRE(decoded.ok());
  CHECK(decoded->heartbeat().incarnation() == 7);
}

TEST_CASE("garbage, truncated, empty, versionless and oversized frames are rejected") {
  AgentToHead msg;
  msg.mutable_output()->set_data(std::string(1000, 'x'));
  msg.mutable_output()->mutable_key()->set_job_id(3);
  std::string good = Encode(msg);

  SUBCASE("truncated") {
    auto r = Decode<AgentToHead>(std::string_view(good).substr(0, good.size() - 10));
    CHECK_FALSE(r.ok());
    CHECK(r.status().message().find("malformed AgentToHead") != std::string::npos);
  }
  SUBCASE("empty envelope") {
    auto r = Decode<AgentToHead>("");
    CHECK_FALSE(r.ok());
  }
  SUBCASE("no version") {
    AgentToHead raw;
    raw.mutable_heartbeat()->set_incarnation(1);
    auto r = Decode<AgentToHead>(raw.SerializeAsString());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("protocol version 0") != std::string::npos);
  }
  SUBCASE("oversized") {
    std::string big(limits::kMaxFrameBytes + 1, '\0');
    auto r = Decode<ClientToHead>(big);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("exceeds") != std::string::npos);
  }
  SUBCASE("a string field that is not UTF-8 is refused with protobuf's reason, not on stderr") {
    // A Register whose node id is replaced on the wire by bytes that are not UTF-8.
    AgentToHead reg;
    reg.set_version(herd::v1::PROTOCOL_VERSION_1);
    reg.mutable_register_()->mutable_node()->set_node_id("ZZZZ");
    std::string wire = reg.SerializeAsString();
    auto at = wire.find("ZZZZ");
    REQUIRE(at != std::string::npos);
    wire.replace(at, 4, "\xff\xfe\xff\xfe");
    auto r = Decode<AgentToHead>(wire);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("malformed AgentToHead") != std::string::npos);
    // The lite runtime (no descriptors) does not name the field.
    CHECK(r.status().message().find("UTF-8") != std::string::npos);
  }
  SUBCASE("random garbage never crashes and never yields a message without a version") {
    std::mt19937 rng(42);
    int accepted = 0;
    for (int i = 0; i < 2000; ++i) {
      std::string junk(rng() % 64, '\0');
      for (auto& c : junk) c = static_cast<char>(rng());
      auto r = Decode<ClientToHead>(junk);
      if (r.ok()) {
        ++accepted;
        CHECK(r->version() == herd::v1::PROTOCOL_VERSION_1);
        CHECK(r->msg_case() != 0);
      }
    }
    CHECK(accepted < 2000);
  }
}

}  // namespace
}  // namespace herd::proto
