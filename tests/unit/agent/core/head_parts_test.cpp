// The head built from injected parts (HeadParts): the store it is given is the one it uses, its
// timers decide on the clock it is given (autostop fires after that clock's idle minutes, not the
// machine's), and the autostop command goes to the spawner it is given. The parts themselves are
// tested in tests/unit/agent/head.
#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "agent/core/head.hpp"
#include "shared/proto/frame.hpp"
#include "shared/tls/certs.hpp"
#include "tests/fakes/fake_clock.hpp"
#include "tests/fakes/fake_connection.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

struct FakeSpawner : CommandSpawner {
  Status SpawnDetached(const std::string& command, const std::string& log_path) override {
    commands.push_back(command);
    logs.push_back(log_path);
    return Status::Ok();
  }
  std::vector<std::string> commands;
  std::vector<std::string> logs;
};

TEST_CASE("a head on a fake clock runs autostop after that clock's idle minutes") {
  testing::TempDir dir("head-parts");
  REQUIRE(tls::InitClusterCerts(dir / "certs", "unit").ok());
  REQUIRE(tls::IssueAgentCerts(dir / "certs", "unit-head", {"127.0.0.1"}, dir / "n0").ok());
  boost::asio::io_context io;
  testing::FakeClock clock;
  FakeSpawner spawner;
  fs::create_directories(dir / "elsewhere");
  auto store = JobStore::Open(dir / "elsewhere/jobs.db");
  REQUIRE(store.ok());
  HeadParts parts;
  parts.clock = &clock;
  parts.spawner = &spawner;
  parts.store = std::move(*store);
  Head::Options o;
  o.cluster = "unit";
  o.state_dir = dir / "state";
  o.tls = {dir / "n0/ca.crt", dir / "n0/agent.crt", dir / "n0/agent.key"};
  Head head(io, o, std::move(parts));
  REQUIRE(head.Start().ok());
  CHECK_FALSE(fs::exists(dir / "state/jobs.db"));  // the store given is the one used

  auto client = std::make_shared<testing::FakeConnection>(transport::Role::kClient, "me", "");
  herd::v1::ClientToHead req;
  req.set_request_id(7);
  req.mutable_set_autostop()->set_idle_minutes(5);
  req.mutable_set_autostop()->set_command("herd stop unit --yes");
  head.InjectMessage(client, proto::Encode(req));
  REQUIRE(client->sent.size() == 1);
  auto reply = proto::Decode<herd::v1::HeadToClient>(client->sent[0]);
  REQUIRE(reply.ok());
  REQUIRE(reply->has_autostop_reply());
  CHECK(reply->autostop_reply().idle_minutes() == 5);

  // Each run_one is one node check (every kNodeCheckInterval of real time); the idle time is the
  // fake clock's.
  clock.Advance(5min - 1ms);
  io.run_one();
  CHECK(spawner.commands.empty());
  clock.Advance(1ms);
  for (int i = 0; i < 3 && spawner.commands.empty(); ++i) io.run_one();
  CHECK(spawner.commands == std::vector<std::string>{"herd stop unit --yes"});
  CHECK(spawner.logs == std::vector<std::string>{dir / "state/autostop.log"});
  clock.Advance(1h);
  io.run_one();
  CHECK(spawner.commands.size() == 1);  // once
}

}  // namespace
}  // namespace herd::agent
