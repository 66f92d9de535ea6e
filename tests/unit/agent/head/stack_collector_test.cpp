// Stack captures on the head (agent/head/stack_collector): gathering the ranks' reports until all
// came or the deadline passed, and telling from faulthandler's and eu-stack's text where each rank
// stands and which ranks differ from the rest.
#include "agent/head/stack_collector.hpp"

#include <doctest/doctest.h>

#include <optional>

namespace herd::agent {
namespace {

using std::chrono::seconds;

std::chrono::steady_clock::time_point At(int s) {
  return std::chrono::steady_clock::time_point(seconds(1000 + s));
}

// What the agent sends for a rank waiting in all_reduce (faulthandler: other threads first, the
// main thread last) and for one asleep in its own code.
const char* kWaiting =
    "== pid 101 (python3): python3 train.py\n"
    "-- Python (faulthandler)\n"
    "Thread 0x00007f0000000700 (most recent call first):\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 320 in wait\n"
    "\n"
    "Current thread 0x00007f0000000100 (most recent call first):\n"
    "  File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 1536 "
    "in all_reduce\n"
    "  File \"/root/sky_workdir/train.py\", line 9 in <module>\n"
    "-- native (eu-stack)\n"
    "PID 101 - process\n"
    "TID 101:\n"
    "#0  0x00007f1c2b8e3d46 __poll\n";
const char* kSleeping =
    "== pid 202 (python3): python3 train.py\n"
    "-- Python (faulthandler)\n"
    "Current thread 0x00007f0000000200 (most recent call first):\n"
    "  File \"/root/sky_workdir/train.py\", line 7 in <module>\n"
    "-- native (eu-stack)\n"
    "#0  0x00007f1c2b8b1234 clock_nanosleep\n";

TEST_CASE("a capture finishes when every rank reported, with each rank's text") {
  StackCollector c;
  std::optional<StackCollector::Result> got;
  uint64_t id = c.Begin(3, {{0, "job3.a1.run.r0"}, {1, "job3.a1.run.r1"}}, At(30),
                        [&](const StackCollector::Result& r) { got = r; });
  CHECK(c.Capturing(3));
  c.Report(id, "job3.a1.run.r1", kSleeping);
  c.Report(id + 1, "job3.a1.run.r0", "stale capture");
  c.Report(id, "job3.a1.run.r9", "unknown key");
  CHECK_FALSE(got);
  c.Report(id, "job3.a1.run.r0", kWaiting);
  REQUIRE(got);
  CHECK(got->job_id == 3);
  CHECK(got->texts.size() == 2);
  CHECK(got->missing.empty());
  CHECK_FALSE(c.Capturing(3));
  c.Report(id, "job3.a1.run.r0", "late");  // dropped: the capture is over
}

TEST_CASE("a capture past its deadline, or of a job that ended, finishes with what came") {
  StackCollector c;
  std::optional<StackCollector::Result> got;
  uint64_t id = c.Begin(4, {{0, "a"}, {1, "b"}, {2, "c"}}, At(30),
                        [&](const StackCollector::Result& r) { got = r; });
  c.Report(id, "b", "x");
  c.Expire(At(29));
  CHECK_FALSE(got);
  c.Expire(At(30));
  REQUIRE(got);
  CHECK(got->missing == std::vector<int>{0, 2});

  got.reset();
  c.Begin(5, {{0, "a"}}, At(30), [&](const StackCollector::Result& r) { got = r; });
  c.FinishJob(5);
  REQUIRE(got);
  CHECK(got->missing == std::vector<int>{0});

  got.reset();
  c.Begin(6, {}, At(30), [&](const StackCollector::Result& r) { got = r; });
  CHECK(got);  // nothing to wait for
}

TEST_CASE("a rank's signature is its main thread's innermost Python frame") {
  CHECK(StackSignature(kWaiting) == "all_reduce (distributed_c10d.py:1536)");
  CHECK(StackSignature(kSleeping) == "<module> (train.py:7)");
  // Without Python frames: the innermost native frame of each process.
  CHECK(StackSignature("== pid 5 (bash): bash -c x\n#0  0x00007f00 in __wait4 (pid=...) from "
                       "/lib/libc.so.6\n== pid 6 (sleep): sleep 100\n#0  0x00007f11 "
                       "clock_nanosleep\n") == "__wait4 | clock_nanosleep");
  CHECK(StackSignature("") == "no frames captured");
}

TEST_CASE("the ranks that differ from the rest are named; a collective wins a tie") {
  StackComparison two = CompareStacks({{0, kWaiting}, {1, kSleeping}});
  CHECK(two.majority == "all_reduce (distributed_c10d.py:1536)");
  CHECK(two.differing == std::vector<int>{1});
  CHECK(DescribeComparison(two) ==
        "rank 0 waits in all_reduce (distributed_c10d.py:1536); rank 1 differs: <module> "
        "(train.py:7)");

  StackComparison four =
      CompareStacks({{0, kWaiting}, {1, kWaiting}, {2, kSleeping}, {3, kWaiting}});
  CHECK(four.differing == std::vector<int>{2});
  CHECK(DescribeComparison(four) ==
        "ranks 0, 1, 3 wait in all_reduce (distributed_c10d.py:1536); rank 2 differs: <module> "
        "(train.py:7)");

  StackComparison same = CompareStacks({{0, kWaiting}, {1, kWaiting}});
  CHECK(same.differing.empty());
  CHECK(DescribeComparison(same) == "every rank waits in all_reduce (distributed_c10d.py:1536)");
  CHECK(DescribeComparison(CompareStacks({})) == "no rank reported its stacks");
}

TEST_CASE("every line of a report gets the rank's prefix") {
  CHECK(PrefixLines("(rank=1) ", "a\nb") == "(rank=1) a\n(rank=1) b\n");
  CHECK(PrefixLines("P ", "a\n\nb\n") == "P a\nP \nP b\n");
  CHECK(PrefixLines("P ", "") == "");
  CHECK(RankList({0, 2, 3}) == "0, 2, 3");
}

}  // namespace
}  // namespace herd::agent
