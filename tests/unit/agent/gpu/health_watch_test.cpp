// The node health watch (agent/gpu/health_watch): GPU faults are sticky, the health check's last
// run decides, both on simulated time; NVML's faults read through the fake libnvidia-ml.so.1; the
// real health-check runner on /bin/sh.
#include "agent/gpu/health_watch.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <map>

#include "shared/common/limits.hpp"
#include "tests/fakes/fake_clock.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::agent {
namespace {

using namespace std::chrono_literals;
using herd::testing::FakeClock;
using herd::testing::ScopedEnv;
using herd::testing::TempDir;

class ScriptedFaults final : public GpuFaultSource {
 public:
  explicit ScriptedFaults(std::vector<std::vector<std::string>>* script, int* polls)
      : script_(script), polls_(polls) {}
  std::vector<std::string> Poll() override {
    ++*polls_;
    if (script_->empty()) return {};
    auto next = script_->front();
    script_->erase(script_->begin());
    return next;
  }

 private:
  std::vector<std::vector<std::string>>* script_;
  int* polls_;
};

TEST_CASE("a GPU fault makes the node unhealthy for good; polls follow the interval") {
  FakeClock clock;
  std::vector<std::vector<std::string>> script = {{},
                                                  {"GPU 1: XID 79 (GPU has fallen off the bus)"}};
  int polls = 0;
  HealthWatch watch(clock, {"", 60s, 5s}, std::make_unique<ScriptedFaults>(&script, &polls),
                    nullptr);
  CHECK(watch.watching());
  CHECK_FALSE(watch.Tick());  // healthy, as it started
  CHECK(watch.verdict().healthy);
  CHECK(polls == 1);
  clock.Advance(4s);
  CHECK_FALSE(watch.Tick());
  CHECK(polls == 1);  // not due yet
  CHECK(watch.NextDue() == clock.Now() + 1s);
  clock.Advance(1s);
  CHECK(watch.Tick());
  CHECK(polls == 2);
  CHECK_FALSE(watch.verdict().healthy);
  CHECK(watch.verdict().reason == "GPU 1: XID 79 (GPU has fallen off the bus)");
  clock.Advance(5s);
  CHECK_FALSE(watch.Tick());  // nothing new: still unhealthy, no change
  CHECK_FALSE(watch.verdict().healthy);
}

TEST_CASE("the health check: unhealthy while its last run fails, healthy when it passes again") {
  FakeClock clock;
  std::vector<std::optional<std::string>> results = {
      std::nullopt, "health check `chk` exited 1: disk", std::nullopt};
  std::vector<std::string> ran;
  HealthWatch watch(clock, {"chk", 30s, 5s}, nullptr, [&](const std::string& cmd) {
    ran.push_back(cmd);
    auto r = results.front();
    results.erase(results.begin());
    return r;
  });
  CHECK_FALSE(watch.Tick());
  CHECK(ran.size() == 1);
  clock.Advance(29s);
  CHECK_FALSE(watch.Tick());
  CHECK(ran.size() == 1);
  clock.Advance(1s);
  CHECK(watch.Tick());
  CHECK(watch.verdict() == HealthVerdict{false, "health check `chk` exited 1: disk"});
  clock.Advance(30s);
  CHECK(watch.Tick());
  CHECK(watch.verdict().healthy);
  CHECK(ran == std::vector<std::string>{"chk", "chk", "chk"});
}

TEST_CASE("nothing to watch: no GPUs and no check") {
  FakeClock clock;
  HealthWatch watch(clock, {"", 60s, 5s}, nullptr, nullptr);
  CHECK_FALSE(watch.watching());
  CHECK_FALSE(watch.Tick());
  CHECK(watch.NextDue() == std::chrono::steady_clock::time_point::max());
}

TEST_CASE("which XIDs drain a node") {
  CHECK(XidDrains(79));
  CHECK(XidDrains(48));
  CHECK(XidDrains(95));
  CHECK_FALSE(XidDrains(13));  // a graphics engine exception: usually the program's fault
  CHECK_FALSE(XidDrains(31));  // a page fault: the program's
  CHECK(DescribeXid(79) == "XID 79 (GPU has fallen off the bus)");
  CHECK(DescribeXid(13) == "XID 13");
}

TEST_CASE("NVML's faults through the fake libnvidia-ml.so.1: XID events, ECC, a lost GPU") {
  TempDir dir;
  const std::string faults = dir.path() + "/faults";
  std::ofstream(faults) << "";
  ScopedEnv gpus("FAKE_NVML_GPUS", "NVIDIA H200,NVIDIA H200,NVIDIA H200");
  ScopedEnv file("FAKE_NVML_FAULTS", faults);
  auto source = OpenNvmlFaults(FAKE_NVML_PATH);
  REQUIRE(source != nullptr);
  CHECK(source->Poll().empty());
  std::ofstream(faults) << "xid 2 13\nxid 1 79\n";  // 13: logged, not a fault
  CHECK(source->Poll() == std::vector<std::string>{"GPU 1: XID 79 (GPU has fallen off the bus)"});
  CHECK(source->Poll().empty());  // each event once
  std::ofstream(faults, std::ios::app) << "ecc 0 2\nlost 2\n";
  CHECK(source->Poll() == std::vector<std::string>{"GPU 0: 2 uncorrectable ECC error(s)",
                                                   "GPU 2: XID 79 (GPU has fallen off the bus)"});
  CHECK_FALSE(OpenNvmlFaults(dir.path() + "/no-libnvidia-ml.so.1"));
  ScopedEnv none("FAKE_NVML_GPUS", "");
  CHECK_FALSE(OpenNvmlFaults(FAKE_NVML_PATH));  // no GPU: nothing to watch
}

TEST_CASE("the real health-check runner: passes, or fails with its first line") {
  CHECK_FALSE(RunHealthCheckCommand("true").has_value());
  CHECK(RunHealthCheckCommand("echo 'disk /data is full'; echo more; exit 3").value() ==
        "health check `echo 'disk /data is full'; echo more; exit 3` exited 3: disk /data is full");
  CHECK(RunHealthCheckCommand("echo oops >&2; exit 1").value().ends_with("exited 1: oops"));
  CHECK(RunHealthCheckCommand("/nonexistent/check").value().find("exited 127") !=
        std::string::npos);
}

}  // namespace
}  // namespace herd::agent
