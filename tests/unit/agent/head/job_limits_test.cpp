// The head's run limits (agent/head/job_limits): when a --signal and a --time-limit fall due, on
// made-up time points, and the grace a stop gets.
#include "agent/head/job_limits.hpp"

#include <doctest/doctest.h>

#include <csignal>

#include "shared/common/limits.hpp"

namespace herd::agent {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Kind = JobDeadlines::Event::Kind;

std::chrono::steady_clock::time_point At(int s) {
  return std::chrono::steady_clock::time_point(seconds(1000 + s));
}

herd::v1::TaskSpec Spec(int64_t limit_ms, int signal = 0, int64_t before_ms = 0) {
  herd::v1::TaskSpec spec;
  spec.set_time_limit_ms(limit_ms);
  spec.set_limit_signal(signal);
  spec.set_limit_signal_before_ms(before_ms);
  return spec;
}

TEST_CASE("the signal falls due before the time limit, each once") {
  JobDeadlines d;
  d.Start(7, At(0), Spec(60'000, SIGUSR1, 20'000));
  CHECK(d.Due(At(39)).empty());
  auto due = d.Due(At(40));
  REQUIRE(due.size() == 1);
  CHECK(due[0] == JobDeadlines::Event{7, Kind::kSignal, SIGUSR1});
  CHECK(d.Due(At(50)).empty());  // sent once
  due = d.Due(At(60));
  REQUIRE(due.size() == 1);
  CHECK(due[0].kind == Kind::kTimeLimit);
  CHECK_FALSE(d.Tracks(7));
  CHECK(d.Due(At(1000)).empty());
}

TEST_CASE("a head that checks late sends the signal, then ends the job") {
  JobDeadlines d;
  d.Start(1, At(0), Spec(10'000, SIGUSR2, 5'000));
  auto due = d.Due(At(30));
  REQUIRE(due.size() == 2);
  CHECK(due[0].kind == Kind::kSignal);
  CHECK(due[1].kind == Kind::kTimeLimit);
}

TEST_CASE("jobs without a time limit, and forgotten ones, are not tracked") {
  JobDeadlines d;
  d.Start(1, At(0), Spec(0));
  CHECK_FALSE(d.Tracks(1));
  d.Start(2, At(0), Spec(5'000));
  d.Forget(2);
  CHECK(d.Due(At(100)).empty());
}

TEST_CASE("a stop's grace: the job's own, else the default; a cancel's own wins") {
  herd::v1::TaskSpec spec;
  CHECK(StopGrace(spec) == limits::kDefaultStopGrace);
  spec.set_grace_ms(5'000);
  CHECK(StopGrace(spec) == seconds(5));
  CHECK(CancelGrace(std::nullopt, spec) == seconds(5));
  CHECK(CancelGrace(int64_t{2'000}, spec) == seconds(2));
  CHECK(CancelGrace(int64_t{0}, spec) == milliseconds(0));
}

TEST_CASE("bad limits in a submitted spec are refused with the reason") {
  CHECK_FALSE(WhyBadLimits(Spec(60'000, SIGUSR1, 10'000)));
  auto bad = Spec(60'000);
  bad.set_grace_ms(-1);
  CHECK(*WhyBadLimits(bad) == "the grace period cannot be negative");
  bad = Spec(0);
  bad.set_hang_timeout_ms(-5);
  CHECK(*WhyBadLimits(bad) == "the hang timeout cannot be negative");
  CHECK(*WhyBadLimits(Spec(0, SIGUSR1, 1'000)) == "a limit signal needs a time limit");
  CHECK(*WhyBadLimits(Spec(10'000, SIGUSR1, 10'000)) ==
        "SIGUSR1 must come after the start and before the time limit");
  CHECK(*WhyBadLimits(Spec(10'000, 999, 1'000)) == "no signal has number 999");
}

TEST_CASE("durations and signals in words") {
  CHECK(DurationText(seconds(90)) == "1m30s");
  CHECK(DurationText(std::chrono::hours(26)) == "1d2h");
  CHECK(DurationText(milliseconds(1500)) == "1500ms");
  CHECK(SignalText(SIGTERM) == "SIGTERM");
}

}  // namespace
}  // namespace herd::agent
