// Autostop (agent/head/autostop) on simulated time: the command runs once, after idle_minutes
// with no active job counted from the last busy check or the setting; a busy head never stops;
// the setting survives a restart of the head; a setting without a command is refused.
#include "agent/head/autostop.hpp"

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "tests/fakes/fake_clock.hpp"
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

herd::v1::SetAutostop Setting(int idle_minutes, std::string command = "herd down c1 --yes") {
  herd::v1::SetAutostop s;
  s.set_idle_minutes(idle_minutes);
  s.set_command(std::move(command));
  return s;
}

TEST_CASE("off until set: an idle head does nothing however long") {
  testing::TempDir dir("autostop");
  testing::FakeClock clock;
  FakeSpawner spawner;
  Autostop autostop(clock, spawner, dir.path());
  autostop.Load();  // nothing saved
  CHECK(autostop.setting().idle_minutes() < 0);
  clock.Advance(std::chrono::hours(24 * 30));
  CHECK_FALSE(autostop.Check(false));
  CHECK(spawner.commands.empty());
}

TEST_CASE("the command runs once, idle_minutes after the setting") {
  testing::TempDir dir("autostop");
  testing::FakeClock clock;
  FakeSpawner spawner;
  Autostop autostop(clock, spawner, dir.path());
  autostop.Load();
  clock.Advance(10min);  // idle before the setting does not count
  REQUIRE(autostop.Set(Setting(2)).ok());
  clock.Advance(2min - 1ms);
  CHECK_FALSE(autostop.Check(false));
  clock.Advance(1ms);
  CHECK(autostop.Check(false));
  REQUIRE(spawner.commands.size() == 1);
  CHECK(spawner.commands[0] == "herd down c1 --yes");
  CHECK(spawner.logs[0] == dir / "autostop.log");
  CHECK(autostop.fired());
  clock.Advance(1h);
  CHECK_FALSE(autostop.Check(false));  // once
  CHECK(spawner.commands.size() == 1);
}

TEST_CASE("a busy head is not idle: the time counts from the last busy check") {
  testing::TempDir dir("autostop");
  testing::FakeClock clock;
  FakeSpawner spawner;
  Autostop autostop(clock, spawner, dir.path());
  REQUIRE(autostop.Set(Setting(5)).ok());
  for (int i = 0; i < 100; ++i) {  // a job runs for 100 minutes
    clock.Advance(1min);
    CHECK_FALSE(autostop.Check(true));
  }
  clock.Advance(5min - 1ms);
  CHECK_FALSE(autostop.Check(false));
  clock.Advance(1ms);
  CHECK(autostop.Check(false));
  CHECK(spawner.commands.size() == 1);
}

TEST_CASE("a new setting re-arms it and restarts the idle time; off stops it") {
  testing::TempDir dir("autostop");
  testing::FakeClock clock;
  FakeSpawner spawner;
  Autostop autostop(clock, spawner, dir.path());
  REQUIRE(autostop.Set(Setting(0, "herd stop c1 --yes")).ok());
  CHECK(autostop.Check(false));  // 0 minutes: at the first idle check
  REQUIRE(autostop.Set(Setting(3)).ok());
  CHECK_FALSE(autostop.fired());
  clock.Advance(2min);
  REQUIRE(autostop.Set(Setting(3)).ok());  // counts from now again
  clock.Advance(2min);
  CHECK_FALSE(autostop.Check(false));
  clock.Advance(1min);
  CHECK(autostop.Check(false));
  CHECK(spawner.commands == std::vector<std::string>{"herd stop c1 --yes", "herd down c1 --yes"});

  REQUIRE(autostop.Set(Setting(-1, "")).ok());  // off needs no command
  clock.Advance(24h);
  CHECK_FALSE(autostop.Check(false));
  CHECK(spawner.commands.size() == 2);
}

TEST_CASE("a setting without a command is refused and changes nothing") {
  testing::TempDir dir("autostop");
  testing::FakeClock clock;
  FakeSpawner spawner;
  Autostop autostop(clock, spawner, dir.path());
  REQUIRE(autostop.Set(Setting(1)).ok());
  const Status s = autostop.Set(Setting(5, ""));
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(autostop.setting().idle_minutes() == 1);
  Autostop restarted(clock, spawner, dir.path());
  restarted.Load();
  CHECK(restarted.setting().idle_minutes() == 1);  // the saved one is still the old setting
}

TEST_CASE("the setting survives a restart of the head; its idle time counts from the restart") {
  testing::TempDir dir("autostop");
  testing::FakeClock clock;
  FakeSpawner spawner;
  {
    Autostop autostop(clock, spawner, dir.path());
    REQUIRE(autostop.Set(Setting(10)).ok());
    clock.Advance(9min);
  }
  Autostop restarted(clock, spawner, dir.path());
  restarted.Load();
  CHECK(restarted.setting().idle_minutes() == 10);
  CHECK(restarted.setting().command() == "herd down c1 --yes");
  clock.Advance(9min);
  CHECK_FALSE(restarted.Check(false));
  clock.Advance(1min);
  CHECK(restarted.Check(false));
  CHECK(spawner.commands.size() == 1);
}

TEST_CASE("server_stops: the head runs nothing and only reports due while idle long enough") {
  testing::TempDir dir("autostop");
  testing::FakeClock clock;
  FakeSpawner spawner;
  Autostop autostop(clock, spawner, dir.path());
  herd::v1::SetAutostop setting;
  setting.set_idle_minutes(2);
  setting.set_down(true);
  setting.set_server_stops(true);
  REQUIRE(autostop.Set(setting).ok());
  CHECK_FALSE(fs::exists(dir / "autostop-cloud.key"));
  clock.Advance(2min - 1ms);
  CHECK_FALSE(autostop.Check(false));
  CHECK_FALSE(autostop.due());
  clock.Advance(1ms);
  CHECK_FALSE(autostop.Check(false));  // nothing ran
  CHECK(autostop.due());
  clock.Advance(1h);
  CHECK_FALSE(autostop.Check(false));
  CHECK(autostop.due());  // still, for as long as it stays idle
  CHECK(spawner.commands.empty());
  // A job (the server has not stopped it yet): not due, and the idle time counts again.
  autostop.Check(true);
  CHECK_FALSE(autostop.due());
  clock.Advance(1min);
  autostop.Check(false);
  CHECK_FALSE(autostop.due());
  clock.Advance(1min);
  autostop.Check(false);
  CHECK(autostop.due());
  // Saved without anything to run; a restarted head reports it again after its idle time.
  Autostop restarted(clock, spawner, dir.path());
  restarted.Load();
  CHECK(restarted.setting().server_stops());
  CHECK(restarted.setting().down());
  restarted.Check(false);
  CHECK_FALSE(restarted.due());
  clock.Advance(2min);
  restarted.Check(false);
  CHECK(restarted.due());
  // Off: never due.
  herd::v1::SetAutostop off;
  off.set_idle_minutes(-1);
  REQUIRE(autostop.Set(off).ok());
  clock.Advance(1h);
  autostop.Check(false);
  CHECK_FALSE(autostop.due());
  CHECK(spawner.commands.empty());
  // server_stops beside a command or a cloud key is refused.
  setting.set_command("herd stop c1");
  CHECK(autostop.Set(setting).code() == Code::kInvalidArgument);
}

TEST_CASE("the shell spawner runs the command detached, its output in the log") {
  testing::TempDir dir("autostop");
  ShellSpawner spawner;
  const std::string log = dir / "autostop.log";
  REQUIRE(spawner.SpawnDetached("echo stopping; echo oops >&2", log).ok());
  // The command is not waited for (it outlives the head); poll for its output, bounded.
  std::string text;
  for (int i = 0; i < 500 && text != "stopping\noops\n"; ++i) {
    std::this_thread::sleep_for(10ms);
    std::ifstream in(log);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  CHECK(text == "stopping\noops\n");
  ::waitpid(-1, nullptr, 0);  // the shell, this test's only child
}

}  // namespace
}  // namespace herd::agent
