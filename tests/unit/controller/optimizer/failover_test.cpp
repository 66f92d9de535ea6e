// Failover decisions (controller/optimizer/failover.hpp) with a fake launcher: which block each
// error causes, the order of the next picks, the stop on credentials and -r's passes.
#include "controller/optimizer/failover.hpp"

#include <doctest/doctest.h>

#include <map>

#include "shared/common/limits.hpp"
#include "tests/fakes/fake_clock.hpp"

namespace herd::optimizer {
namespace {

Candidate Aws(const std::string& infra, const std::string& type, double cost, bool spot = false) {
  Candidate c;
  c.infra = infra;
  c.group = "aws";
  c.instance_type = type;
  c.spot = spot;
  c.cost = cost;
  c.node_price = cost;
  return c;
}

Plan MakePlan(std::vector<Candidate> cs) {
  Plan p;
  p.alternatives = {task::Resources{}};
  p.candidates = std::move(cs);
  return p;
}

Status Ec2(const std::string& region, const std::string& code, Code status = Code::kUnavailable) {
  return Status(status,
                "EC2 RunInstances in " + region + ": " + code + ": the message (request id r-1)");
}

// The provider's message when every zone of a region refused.
Status NoZoneHasCapacity(const std::string& region) {
  return Unavailable("EC2 RunInstances in " + region +
                     ": InsufficientInstanceCapacity: no capacity for 1x m6i.2xlarge in any "
                     "zone: tried " +
                     region + "a (InsufficientInstanceCapacity)");
}

struct FakeCloud {
  std::map<std::string, Status> errors;  // infra -> what its launch returns (absent = comes up)
  std::vector<std::string> launched, cleaned;
  std::vector<std::string> notes;
  std::vector<std::chrono::milliseconds> sleeps;

  AttemptFn Attempt() {
    return [this](const task::Task& t, const Candidate& c) {
      CHECK(t.resources.infra == c.infra);
      launched.push_back(c.infra + " " + c.instance_type);
      auto it = errors.find(c.infra);
      return it == errors.end() ? Status::Ok() : it->second;
    };
  }
  CleanupFn Cleanup() {
    return [this](const Candidate& c) { cleaned.push_back(c.infra); };
  }
  FailoverOptions Options(bool retry = false) {
    FailoverOptions o;
    o.retry_until_up = retry;
    o.note = [this](const std::string& l) { notes.push_back(l); };
    o.sleep = [this](std::chrono::milliseconds d) {
      sleeps.push_back(d);
      return true;
    };
    return o;
  }
};

task::Task AnyTask() {
  task::Task t;
  t.num_nodes = 1;
  return t;
}

}  // namespace

TEST_CASE("capacity blocks the zone or the region for that instance type, quota the region") {
  Candidate zoned = Aws("aws/us-east-1/us-east-1a", "p4d.24xlarge", 20);
  auto f = ClassifyLaunchFailure(Ec2("us-east-1", "InsufficientInstanceCapacity"), zoned);
  CHECK(f.scope == BlockScope::kZone);
  CHECK(f.code == "InsufficientInstanceCapacity");
  CHECK(f.block.infra == "aws/us-east-1/us-east-1a");
  CHECK(f.block.instance_type == "p4d.24xlarge");
  CHECK(f.block.Covers(zoned));
  CHECK_FALSE(f.block.Covers(Aws("aws/us-east-1/us-east-1b", "p4d.24xlarge", 20)));
  CHECK_FALSE(f.block.Covers(Aws("aws/us-east-1/us-east-1a", "p5.48xlarge", 40)));
  CHECK_FALSE(f.block.Covers(Aws("aws/us-east-1/us-east-1a", "p4d.24xlarge", 9, true)));

  Candidate region = Aws("aws/us-east-1", "m6i.2xlarge", 0.38);
  f = ClassifyLaunchFailure(NoZoneHasCapacity("us-east-1"), region);
  CHECK(f.scope == BlockScope::kRegion);
  CHECK(f.block.infra == "aws/us-east-1");
  CHECK(f.block.Covers(Aws("aws/us-east-1/us-east-1c", "m6i.2xlarge", 0.38)));
  CHECK_FALSE(f.block.Covers(Aws("aws/us-east-2", "m6i.2xlarge", 0.38)));
  CHECK_FALSE(f.block.Covers(Aws("aws/us-east-10", "m6i.2xlarge", 0.38)));

  // Spot capacity is a capacity error of the spot market only.
  Candidate spot = Aws("aws/us-west-2", "g5.xlarge", 0.4, true);
  f = ClassifyLaunchFailure(Ec2("us-west-2", "SpotMaxPriceTooLow"), spot);
  CHECK(f.scope == BlockScope::kRegion);
  CHECK(f.block.Covers(spot));
  CHECK_FALSE(f.block.Covers(Aws("aws/us-west-2", "g5.xlarge", 1.0, false)));

  f = ClassifyLaunchFailure(Ec2("us-east-1", "VcpuLimitExceeded"), zoned);
  CHECK(f.scope == BlockScope::kRegion);
  CHECK(f.block.infra == "aws/us-east-1");
  CHECK(f.block.instance_type.empty());
  CHECK(f.block.Covers(Aws("aws/us-east-1/us-east-1b", "g5.xlarge", 1)));
  CHECK(f.block.Describe() == "region aws/us-east-1");
}

TEST_CASE("credential errors block the cloud; other errors block nothing") {
  Candidate c = Aws("aws/us-east-1", "m6i.2xlarge", 0.38);
  auto f = ClassifyLaunchFailure(Ec2("us-east-1", "AuthFailure", Code::kPermissionDenied), c);
  CHECK(f.scope == BlockScope::kCloud);
  CHECK(f.block.Covers(Aws("aws/eu-west-1", "g5.xlarge", 1)));
  CHECK(f.block.Describe() == "cloud aws");
  f = ClassifyLaunchFailure(NotFound("no AWS credentials: set AWS_ACCESS_KEY_ID and ..."), c);
  CHECK(f.scope == BlockScope::kCloud);
  CHECK(ClassifyLaunchFailure(Ec2("us-east-1", "InvalidAMIID.NotFound"), c).scope ==
        BlockScope::kNone);
  CHECK(ClassifyLaunchFailure(Unavailable("node-0: no SSH banner within 300 s"), c).scope ==
        BlockScope::kNone);
  Candidate local;
  local.infra = "local";
  local.group = "local";
  CHECK(ClassifyLaunchFailure(Ec2("us-east-1", "InsufficientInstanceCapacity"), local).scope ==
        BlockScope::kNone);
}

TEST_CASE("an EC2 error is found in a message with context before it") {
  auto e = FindEc2Error("launch: EC2 RunInstances in eu-west-1: InstanceLimitExceeded: You have");
  REQUIRE(e.has_value());
  CHECK(e->action == "RunInstances");
  CHECK(e->region == "eu-west-1");
  CHECK(e->code == "InstanceLimitExceeded");
  CHECK_FALSE(FindEc2Error("EC2 lists no available zone in us-east-1").has_value());
  CHECK_FALSE(FindEc2Error("nothing here").has_value());
}

TEST_CASE("a capacity error moves to the next cheapest region, and each attempt is printed") {
  FakeCloud cloud;
  Plan plan = MakePlan(
      {Aws("aws/us-east-1", "m6i.2xlarge", 0.38), Aws("aws/us-east-1", "m7i.2xlarge", 0.40),
       Aws("aws/us-east-2", "m6i.2xlarge", 0.38), Aws("aws/us-west-2", "m6i.2xlarge", 0.38)});
  cloud.errors["aws/us-east-1"] = NoZoneHasCapacity("us-east-1");
  auto got = LaunchWithFailover(AnyTask(), plan, cloud.Attempt(), cloud.Cleanup(), cloud.Options());
  REQUIRE(got.ok());
  CHECK(got->infra == "aws/us-east-2");
  // Capacity is per type: the region's other type is tried before the next region.
  CHECK(cloud.launched == std::vector<std::string>{"aws/us-east-1 m6i.2xlarge",
                                                   "aws/us-east-1 m7i.2xlarge",
                                                   "aws/us-east-2 m6i.2xlarge"});
  CHECK(cloud.cleaned == std::vector<std::string>{"aws/us-east-1", "aws/us-east-1"});
  REQUIRE(cloud.notes.size() >= 4);
  CHECK(cloud.notes[0].find("Attempt 1 failed: aws/us-east-1 m6i.2xlarge ($0.38/hr): EC2 "
                            "RunInstances in us-east-1: InsufficientInstanceCapacity") == 0);
  CHECK(
      cloud.notes[1] ==
      "  blocked region aws/us-east-1 for m6i.2xlarge (on-demand) (InsufficientInstanceCapacity)");
  CHECK(cloud.notes[2] == "Trying aws/us-east-1 m7i.2xlarge ($0.40/hr)");
}

TEST_CASE("quota blocks every type of the region") {
  FakeCloud cloud;
  Plan plan = MakePlan({Aws("aws/us-east-1", "m6i.2xlarge", 0.38),
                        Aws("aws/us-east-1", "m7i.2xlarge", 0.40),
                        Aws("aws/eu-west-1", "m6i.2xlarge", 0.42)});
  cloud.errors["aws/us-east-1"] = Ec2("us-east-1", "VcpuLimitExceeded");
  auto got = LaunchWithFailover(AnyTask(), plan, cloud.Attempt(), cloud.Cleanup(), cloud.Options());
  REQUIRE(got.ok());
  CHECK(got->infra == "aws/eu-west-1");
  CHECK(cloud.launched.size() == 2);
}

TEST_CASE("a credential error stops at once; any other error is returned as it was") {
  FakeCloud cloud;
  Plan plan = MakePlan(
      {Aws("aws/us-east-1", "m6i.2xlarge", 0.38), Aws("aws/us-east-2", "m6i.2xlarge", 0.38)});
  cloud.errors["aws/us-east-1"] = Ec2("us-east-1", "AuthFailure", Code::kPermissionDenied);
  auto got = LaunchWithFailover(AnyTask(), plan, cloud.Attempt(), cloud.Cleanup(),
                                cloud.Options(/*retry=*/true));
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kPermissionDenied);
  CHECK(cloud.launched.size() == 1);
  CHECK(cloud.sleeps.empty());

  FakeCloud other;
  other.errors["aws/us-east-1"] = Ec2("us-east-1", "InvalidAMIID.NotFound", Code::kInvalidArgument);
  got = LaunchWithFailover(AnyTask(), plan, other.Attempt(), other.Cleanup(), other.Options());
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kInvalidArgument);
  CHECK(other.launched.size() == 1);
  CHECK(other.cleaned.empty());
  CHECK(cloud.cleaned.empty());
}

TEST_CASE("with every candidate out of capacity: one line naming each attempt, or -r's passes") {
  Plan plan = MakePlan(
      {Aws("aws/us-east-1", "m6i.2xlarge", 0.38), Aws("aws/us-east-2", "m6i.2xlarge", 0.38)});
  FakeCloud cloud;
  cloud.errors["aws/us-east-1"] = NoZoneHasCapacity("us-east-1");
  cloud.errors["aws/us-east-2"] = NoZoneHasCapacity("us-east-2");
  auto got = LaunchWithFailover(AnyTask(), plan, cloud.Attempt(), cloud.Cleanup(), cloud.Options());
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kUnavailable);
  CHECK(got.status().message() ==
        "no candidate could be launched (2 attempt(s): aws/us-east-1 m6i.2xlarge ($0.38/hr): "
        "InsufficientInstanceCapacity; aws/us-east-2 m6i.2xlarge ($0.38/hr): "
        "InsufficientInstanceCapacity); -r/--retry-until-up keeps trying, or ask for other "
        "resources");

  // -r: the fake starts accepting during the third pass's wait; the waits double.
  FakeCloud retry;
  retry.errors = cloud.errors;
  FailoverOptions o = retry.Options(true);
  o.sleep = [&](std::chrono::milliseconds d) {
    retry.sleeps.push_back(d);
    if (retry.sleeps.size() == 2) retry.errors.erase("aws/us-east-2");
    return true;
  };
  got = LaunchWithFailover(AnyTask(), plan, retry.Attempt(), retry.Cleanup(), o);
  REQUIRE(got.ok());
  CHECK(got->infra == "aws/us-east-2");
  REQUIRE(retry.sleeps.size() == 2);
  CHECK(retry.sleeps[0] == limits::kRetryUntilUpBackoffInitial);
  CHECK(retry.sleeps[1] == limits::kRetryUntilUpBackoffInitial * 2);
  CHECK(retry.launched.size() == 6);  // 2 + 2 + us-east-1, us-east-2 in the third pass

  // An interrupted wait ends it.
  FakeCloud stop;
  stop.errors = cloud.errors;
  FailoverOptions so = stop.Options(true);
  so.sleep = [](std::chrono::milliseconds) { return false; };
  got = LaunchWithFailover(AnyTask(), plan, stop.Attempt(), stop.Cleanup(), so);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kCancelled);
}

TEST_CASE("-r on simulated time: the waits double up to their maximum; an interrupt ends a wait") {
  using std::chrono::milliseconds;
  Plan plan = MakePlan(
      {Aws("aws/us-east-1", "m6i.2xlarge", 0.38), Aws("aws/us-east-2", "m6i.2xlarge", 0.38)});
  testing::FakeClock clock;
  // When each pass began (its first attempt), on the clock; the tenth pass comes up.
  std::vector<std::chrono::steady_clock::time_point> passes;
  AttemptFn attempt = [&](const task::Task&, const Candidate& c) -> Status {
    if (c.infra == "aws/us-east-1") passes.push_back(clock.Now());
    if (passes.size() == 10) return Status::Ok();
    return NoZoneHasCapacity(RegionOf(c.infra).substr(4));
  };
  FailoverOptions o;
  o.retry_until_up = true;
  o.sleep = InterruptibleSleep(clock, [] { return false; });
  auto got = LaunchWithFailover(
      AnyTask(), plan, attempt, [](const Candidate&) {}, o);
  REQUIRE(got.ok());
  CHECK(got->infra == "aws/us-east-1");
  REQUIRE(passes.size() == 10);
  const milliseconds initial = limits::kRetryUntilUpBackoffInitial;
  const milliseconds max = limits::kRetryUntilUpBackoffMax;
  milliseconds expected = initial;
  for (std::size_t i = 1; i < passes.size(); ++i) {
    CAPTURE(i);
    CHECK(std::chrono::duration_cast<milliseconds>(passes[i] - passes[i - 1]) == expected);
    expected = std::min(expected * 2, max);
  }
  // The last waits are at the maximum: 5 s doubles past 300 s within the nine waits.
  CHECK(std::chrono::duration_cast<milliseconds>(passes[9] - passes[8]) == max);

  // An interrupt during the second wait ends it within a slice of the wait (100 ms), not at its
  // end, and the launch with it (Cancelled); no third pass.
  testing::FakeClock stop_clock;
  passes.clear();
  const auto start = stop_clock.Now();
  const auto interrupt_at = start + initial + initial;  // halfway through the second wait
  AttemptFn refused = [&](const task::Task&, const Candidate& c) -> Status {
    if (c.infra == "aws/us-east-1") passes.push_back(stop_clock.Now());
    return NoZoneHasCapacity(RegionOf(c.infra).substr(4));
  };
  FailoverOptions so;
  so.retry_until_up = true;
  so.sleep = InterruptibleSleep(stop_clock, [&] { return stop_clock.Now() >= interrupt_at; });
  got = LaunchWithFailover(
      AnyTask(), plan, refused, [](const Candidate&) {}, so);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kCancelled);
  CHECK(passes.size() == 2);
  CHECK(stop_clock.Now() >= interrupt_at);
  CHECK(stop_clock.Now() - interrupt_at < milliseconds(100));
}

TEST_CASE("preferences reorder a pass: preferred first, avoided last, unusable left out") {
  Plan plan = MakePlan({Aws("aws/us-east-1", "m6i.2xlarge", 0.38),
                        Aws("aws/us-east-2", "m6i.2xlarge", 0.38),
                        Aws("aws/us-west-2/us-west-2a", "m6i.2xlarge", 0.40),
                        Aws("aws/eu-west-1", "m6i.2xlarge", 0.42)});
  plan.candidates[3].usable = false;
  CHECK(PassOrder(plan, {}) == std::vector<std::size_t>{0, 1, 2});
  CHECK(PassOrder(plan, {{}, {"aws/us-east-1"}}) == std::vector<std::size_t>{1, 2, 0});
  CHECK(PassOrder(plan, {{"aws/us-west-2"}, {}}) == std::vector<std::size_t>{2, 0, 1});

  // EAGER_NEXT_REGION: the avoided region is still tried when nothing else comes up.
  FakeCloud cloud;
  cloud.errors["aws/us-east-2"] = NoZoneHasCapacity("us-east-2");
  cloud.errors["aws/us-west-2/us-west-2a"] = Ec2("us-west-2", "InsufficientInstanceCapacity");
  FailoverOptions o = cloud.Options();
  o.preference.avoid = {"aws/us-east-1"};
  auto got = LaunchWithFailover(AnyTask(), plan, cloud.Attempt(), cloud.Cleanup(), o);
  REQUIRE(got.ok());
  CHECK(got->infra == "aws/us-east-1");
  CHECK(cloud.launched.size() == 3);

  Blocklist b;
  b.Add({"aws/us-east-2", "", std::nullopt});
  std::vector<std::size_t> order = PassOrder(plan, {});
  auto next = NextCandidate(plan, order, 1, b, {});
  REQUIRE(next.has_value());
  CHECK(order[*next] == 2);
  CHECK_FALSE(NextCandidate(plan, order, 0, b, {0, 2}).has_value());
}

TEST_CASE("a pass stops after the attempt limit") {
  std::vector<Candidate> cs;
  for (int i = 0; i < 5; ++i) cs.push_back(Aws("aws/r-" + std::to_string(i), "m6i.2xlarge", 1));
  Plan plan = MakePlan(cs);
  FakeCloud cloud;
  for (const auto& c : cs) cloud.errors[c.infra] = NoZoneHasCapacity(c.infra.substr(4));
  FailoverOptions o = cloud.Options();
  o.max_attempts_per_pass = 3;
  auto got = LaunchWithFailover(AnyTask(), plan, cloud.Attempt(), cloud.Cleanup(), o);
  REQUIRE_FALSE(got.ok());
  CHECK(cloud.launched.size() == 3);
  CHECK(got.status().message().find("stopped after 3 attempts") != std::string::npos);
}

}  // namespace herd::optimizer
