// Autostop of a cloud cluster from its head (agent/head/cloud_autostop, agent/head/autostop): the
// setting is checked field by field so nothing of it reaches the shell unchecked; the key is kept
// 0600 in the state dir and never in autostop.pb nor on the command line; the EC2 call is
// StopInstances (TerminateInstances with down) for every instance, signed by curl for the
// region; a head still idle kCloudAutostopRefire after the call asks again, a busy one does not;
// turning autostop off removes the key.
#include "agent/head/cloud_autostop.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "agent/head/autostop.hpp"
#include "shared/common/limits.hpp"
#include "tests/fakes/fake_clock.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::agent {
namespace {

using namespace std::chrono_literals;

constexpr const char* kSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

struct FakeSpawner : CommandSpawner {
  Status SpawnDetached(const std::string& command, const std::string&) override {
    commands.push_back(command);
    return Status::Ok();
  }
  std::vector<std::string> commands;
};

herd::v1::CloudAutostop Cloud() {
  herd::v1::CloudAutostop c;
  c.set_provider("aws");
  c.set_region("us-east-1");
  c.set_endpoint("https://ec2.us-east-1.amazonaws.com");
  c.add_instance_ids("i-0abc123");
  c.add_instance_ids("i-0def456");
  c.set_access_key_id("AKIAHERDSCOPED000001");
  c.set_secret_access_key(kSecret);
  return c;
}

herd::v1::SetAutostop Setting(int idle_minutes, bool down) {
  herd::v1::SetAutostop s;
  s.set_idle_minutes(idle_minutes);
  s.set_down(down);
  *s.mutable_cloud() = Cloud();
  return s;
}

int ModeOf(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return static_cast<int>(st.st_mode & 0777);
}

TEST_CASE("a cloud setting is checked field by field") {
  CHECK(ValidateCloudAutostop(Cloud()).ok());
  auto bad = [](auto change) {
    herd::v1::CloudAutostop c = Cloud();
    change(c);
    Status s = ValidateCloudAutostop(c);
    CHECK(s.code() == Code::kInvalidArgument);
    return s.message();
  };
  CHECK(bad([](auto& c) { c.set_provider("gcp"); }).find("provider 'gcp'") != std::string::npos);
  CHECK(bad([](auto& c) { c.set_region("us-east-1'; rm -rf /"); }).find("region") !=
        std::string::npos);
  CHECK(bad([](auto& c) { c.set_endpoint("ftp://x"); }).find("endpoint") != std::string::npos);
  CHECK(bad([](auto& c) { c.set_endpoint("https://x' y"); }).find("endpoint") != std::string::npos);
  CHECK(bad([](auto& c) { c.clear_instance_ids(); }).find("no instances") != std::string::npos);
  CHECK(bad([](auto& c) { c.add_instance_ids("i-1;reboot"); }).find("instance id") !=
        std::string::npos);
  CHECK(bad([](auto& c) { c.set_access_key_id("AKIA X"); }).find("key id") != std::string::npos);
  CHECK(bad([](auto& c) { c.set_secret_access_key("a\"b"); }).find("secret") != std::string::npos);
  CHECK(bad([](auto& c) { c.set_secret_access_key(""); }).find("secret") != std::string::npos);
}

TEST_CASE("the EC2 call: every instance, the region's signature, the key by file only") {
  const std::string stop = CloudStopCommand(Cloud(), false, "/d/state/autostop-cloud.key");
  CHECK(stop.find("'Action=StopInstances&Version=2016-11-15&InstanceId.1=i-0abc123&"
                  "InstanceId.2=i-0def456'") != std::string::npos);
  CHECK(stop.find("--aws-sigv4 'aws:amz:us-east-1:ec2'") != std::string::npos);
  CHECK(stop.find("-K '/d/state/autostop-cloud.key'") != std::string::npos);
  CHECK(stop.find("'https://ec2.us-east-1.amazonaws.com/'") != std::string::npos);
  CHECK(stop.find("--retry " + std::to_string(limits::kCloudAutostopRetries)) != std::string::npos);
  CHECK(stop.find(kSecret) == std::string::npos);
  CHECK(stop.find("AKIAHERDSCOPED000001") == std::string::npos);
  const std::string down = CloudStopCommand(Cloud(), true, "/k");
  CHECK(down.find("Action=TerminateInstances&") != std::string::npos);
  CHECK(down.find("StopInstances") == std::string::npos);
}

TEST_CASE("the key is kept 0600 apart; autostop.pb never holds the secret") {
  testing::TempDir dir("cloud-autostop");
  testing::FakeClock clock;
  FakeSpawner spawner;
  Autostop autostop(clock, spawner, dir.path());
  autostop.Load();
  REQUIRE(autostop.Set(Setting(5, false)).ok());
  const std::string key = CloudCredentialsPath(dir.path());
  CHECK(testing::ReadAll(key) == std::string("user = \"AKIAHERDSCOPED000001:") + kSecret + "\"\n");
  CHECK(ModeOf(key) == 0600);
  CHECK(testing::ReadAll(dir.path() + "/autostop.pb").find(kSecret) == std::string::npos);
  CHECK(autostop.setting().cloud().secret_access_key().empty());
  // A refused setting changes nothing.
  auto bad = Setting(5, true);
  bad.mutable_cloud()->set_region("");
  CHECK(autostop.Set(bad).code() == Code::kInvalidArgument);
  CHECK_FALSE(autostop.setting().down());
  // Off: the key goes.
  herd::v1::SetAutostop off;
  off.set_idle_minutes(-1);
  REQUIRE(autostop.Set(off).ok());
  CHECK(::access(key.c_str(), F_OK) != 0);
}

TEST_CASE("idle past the limit: the call; still idle kCloudAutostopRefire later: again") {
  testing::TempDir dir("cloud-autostop");
  testing::FakeClock clock;
  FakeSpawner spawner;
  {
    Autostop first(clock, spawner, dir.path());
    first.Load();
    REQUIRE(first.Set(Setting(1, true)).ok());
  }
  // A head restart: the saved setting and the key file are what it has.
  Autostop autostop(clock, spawner, dir.path());
  autostop.Load();
  REQUIRE(autostop.setting().has_cloud());
  clock.Advance(1min - 1ms);
  CHECK_FALSE(autostop.Check(false));
  clock.Advance(1ms);
  REQUIRE(autostop.Check(false));
  REQUIRE(spawner.commands.size() == 1);
  CHECK(spawner.commands[0] == CloudStopCommand(Cloud(), true, CloudCredentialsPath(dir.path())));
  clock.Advance(limits::kCloudAutostopRefire - 1ms);
  CHECK_FALSE(autostop.Check(false));
  clock.Advance(1ms);
  CHECK(autostop.Check(true) == false);  // a job came meanwhile: the cluster stays
  CHECK(spawner.commands.size() == 1);
  clock.Advance(limits::kCloudAutostopRefire);
  CHECK(autostop.Check(false));  // idle again, and long since the last call
  CHECK(spawner.commands.size() == 2);
}

}  // namespace
}  // namespace herd::agent
