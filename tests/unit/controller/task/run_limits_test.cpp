// Run limits (controller/task/run_limits): durations, Slurm's time limit forms, --signal specs,
// grace and hang timeouts, the bad inputs refused at submit, and config.herd in a task file.
#include "controller/task/run_limits.hpp"

#include <doctest/doctest.h>

#include <csignal>

#include "controller/task/task.hpp"
#include "shared/common/limits.hpp"

namespace herd::task {
namespace {

using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

TEST_CASE("durations take units, and a bare number in the unit given") {
  CHECK(*ParseDuration("90s", seconds(1)) == seconds(90));
  CHECK(*ParseDuration("10m", seconds(1)) == minutes(10));
  CHECK(*ParseDuration("1h30m", seconds(1)) == minutes(90));
  CHECK(*ParseDuration("2d", seconds(1)) == std::chrono::hours(48));
  CHECK(*ParseDuration("500ms", seconds(1)) == milliseconds(500));
  CHECK(*ParseDuration("45", seconds(1)) == seconds(45));
  CHECK(*ParseDuration("45", minutes(1)) == minutes(45));
  CHECK_FALSE(ParseDuration("", seconds(1)).ok());
  CHECK_FALSE(ParseDuration("10 parsecs", seconds(1)).ok());
  CHECK_FALSE(ParseDuration("m", seconds(1)).ok());
  CHECK(ParseDuration("-5s", seconds(1)).status().message() ==
        "a duration cannot be negative, got '-5s'");
}

TEST_CASE("time limits take Slurm's forms and durations") {
  CHECK(*ParseTimeLimit("30") == minutes(30));
  CHECK(*ParseTimeLimit("01:30") == seconds(90));
  CHECK(*ParseTimeLimit("1:00:00") == std::chrono::hours(1));
  CHECK(*ParseTimeLimit("2-0") == std::chrono::hours(48));
  CHECK(*ParseTimeLimit("1-02:03") == std::chrono::hours(26) + minutes(3));
  CHECK(*ParseTimeLimit("1-00:00:10") == std::chrono::hours(24) + seconds(10));
  CHECK(*ParseTimeLimit("90m") == minutes(90));
  CHECK(*ParseTimeLimit("20s") == seconds(20));
  CHECK_FALSE(ParseTimeLimit("1:2:3:4").ok());
  CHECK_FALSE(ParseTimeLimit("soon").ok());
  CHECK(ParseTimeLimit("0").status().message() == "the time limit must be positive, got '0'");
  CHECK_FALSE(ParseTimeLimit("400d").ok());  // over kMaxTimeLimit
}

TEST_CASE("a hang timeout must be positive; a grace may be 0 but not negative") {
  CHECK(*ParseHangTimeout("10m") == minutes(10));
  CHECK(*ParseHangTimeout("30") == seconds(30));
  CHECK(ParseHangTimeout("0").status().message() == "the hang timeout must be positive, got '0'");
  CHECK(ParseHangTimeout("0s").status().code() == Code::kInvalidArgument);
  CHECK_FALSE(ParseHangTimeout("-1").ok());
  CHECK(*ParseGrace("0") == milliseconds(0));
  CHECK(*ParseGrace("45") == seconds(45));
  CHECK(*ParseGrace("2m") == minutes(2));
  CHECK(ParseGrace("-3").status().message() ==
        "bad grace period: a duration cannot be negative, got '-3'");
  CHECK_FALSE(ParseGrace("2h").ok());  // over kMaxStopGrace
}

TEST_CASE("--signal takes a name or number and seconds before the limit") {
  auto s = ParseSignalSpec("USR1@300");
  REQUIRE(s.ok());
  CHECK(s->signal == SIGUSR1);
  CHECK(s->before == seconds(300));
  CHECK(ParseSignalSpec("SIGUSR2@5")->signal == SIGUSR2);
  CHECK(ParseSignalSpec("usr2@5")->signal == SIGUSR2);
  CHECK(ParseSignalSpec("B:USR1@10")->before == seconds(10));
  CHECK(ParseSignalSpec("10")->signal == 10);
  CHECK(ParseSignalSpec("TERM")->before == limits::kDefaultLimitSignalBefore);
  for (const char* bad :
       {"", "@5", "USR1@", "USR1@x", "USR1@0", "NOPE@5", "99@5", "KILL@5", "USR1@-5"}) {
    CAPTURE(bad);
    auto r = ParseSignalSpec(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().rfind("bad --signal", 0) == 0);
  }
  CHECK(SignalName(SIGUSR1) == "SIGUSR1");
}

TEST_CASE("a signal needs a time limit it comes before") {
  RunLimits l;
  l.limit_signal = SIGUSR1;
  l.limit_signal_before = seconds(60);
  CHECK(CheckRunLimits(l).message() ==
        "--signal SIGUSR1 is sent before the time limit: give --time-limit too");
  l.time_limit = seconds(30);
  CHECK(CheckRunLimits(l).message() ==
        "--signal SIGUSR1@60 comes before the job starts: the time limit is only 30s");
  l.time_limit = minutes(5);
  CHECK(CheckRunLimits(l).ok());
  herd::v1::TaskSpec spec;
  l.grace = seconds(0);
  l.hang_timeout = minutes(10);
  SetSpecLimits(l, spec);
  CHECK(spec.time_limit_ms() == 300000);
  CHECK(spec.limit_signal() == SIGUSR1);
  CHECK(spec.limit_signal_before_ms() == 60000);
  CHECK(spec.grace_ms() == 1);  // an explicit 0: SIGKILL at once (0 in the spec is the default)
  CHECK(spec.hang_timeout_ms() == 600000);
}

TEST_CASE("config.herd in a task file sets the run limits; other sections are noted") {
  auto t = ParseTaskYaml(
      "config:\n  herd:\n    hang_timeout: 10m\n    time_limit: 2h\n    signal: USR1@300\n"
      "    grace: 90\nrun: python train.py\n",
      "t.yaml");
  REQUIRE(t.ok());
  CHECK(t->run_limits.hang_timeout == minutes(10));
  CHECK(t->run_limits.time_limit == std::chrono::hours(2));
  CHECK(t->run_limits.limit_signal == SIGUSR1);
  CHECK(*t->run_limits.grace == seconds(90));
  CHECK(t->notes.empty());
  CHECK(ToSpec(*t).hang_timeout_ms() == 600000);

  auto k = ParseTaskYaml("config:\n  kubernetes: {}\n  herd: {hang_timeout: 30}\n", "t.yaml");
  REQUIRE(k.ok());
  CHECK(k->run_limits.hang_timeout == seconds(30));
  REQUIRE(k->notes.size() == 1);
  CHECK(k->notes[0] ==
        "t.yaml:1:1: config: accepted for SkyPilot compatibility; herd does not act on it");
}

TEST_CASE("bad config.herd values are refused at their place") {
  auto err = [](const char* yaml) { return ParseTaskYaml(yaml, "t.yaml").status().message(); };
  CHECK(err("config: {herd: {hang_timeout: 0}}\n") ==
        "t.yaml:1:31: config.herd.hang_timeout: the hang timeout must be positive, got '0'");
  CHECK(err("config: {herd: {grace: -5}}\n").find("config.herd.grace: bad grace period") !=
        std::string::npos);
  CHECK(err("config: {herd: {signal: USR1@}}\n").find("config.herd.signal: bad --signal") !=
        std::string::npos);
  CHECK(err("config: {herd: {hang_timout: 5m}}\n").find("did you mean 'hang_timeout'") !=
        std::string::npos);
  CHECK(err("config: {herd: {signal: USR1@60}}\n").find("give --time-limit too") !=
        std::string::npos);
  CHECK(err("config: {herd: [1]}\n").find("config.herd: expected a mapping") != std::string::npos);
}

}  // namespace
}  // namespace herd::task
