// A rank's progress (agent/job/hang_watch) on made-up samples and times, and the process tree it
// is measured over (agent/job/proc_tree) from /proc/PID/stat lines.
#include "agent/job/hang_watch.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include "agent/job/proc_tree.hpp"

namespace herd::agent {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

HangWatch::TimePoint At(int s) { return HangWatch::TimePoint(seconds(1000 + s)); }

TEST_CASE("a rank without output or CPU time for its timeout is hung, once") {
  HangWatch w(100);
  w.Track("r0", seconds(10), At(0));
  for (int s = 1; s < 10; ++s) CHECK_FALSE(w.Observe("r0", 500, 3, At(s)));
  auto idle = w.Observe("r0", 500, 3, At(10));
  REQUIRE(idle);
  CHECK(*idle == seconds(10));
  CHECK_FALSE(w.Observe("r0", 500, 3, At(11)));  // reported once
}

TEST_CASE("output, CPU time and a changed set of processes are progress") {
  HangWatch w(100);
  w.Track("r", seconds(5), At(0));
  w.Observe("r", 100, 2, At(1));
  w.Output("r", At(4));
  CHECK_FALSE(w.Observe("r", 100, 2, At(8)));  // 4 s since the output
  // 2 ticks in 1 s at 100 ticks/s: 2 % of a CPU, busy.
  CHECK_FALSE(w.Observe("r", 102, 2, At(9)));
  CHECK_FALSE(w.Observe("r", 102, 2, At(13)));
  CHECK_FALSE(w.Observe("r", 102, 3, At(14)));  // a process started
  CHECK_FALSE(w.Observe("r", 102, 3, At(18)));
  CHECK(w.Observe("r", 102, 3, At(19)));
}

TEST_CASE("a poller waking for a tick now and then is not progress") {
  HangWatch w(100);
  w.Track("r", seconds(5), At(0));
  for (int s = 1; s < 5; ++s) CHECK_FALSE(w.Observe("r", 100 + s, 1, At(s)));
  CHECK(w.Observe("r", 105, 1, At(5)));
}

TEST_CASE("untracked and forgotten keys are never hung") {
  HangWatch w;
  CHECK_FALSE(w.Observe("x", 0, 1, At(100)));
  w.Track("y", seconds(1), At(0));
  CHECK(w.Keys() == std::vector<std::string>{"y"});
  w.Forget("y");
  CHECK_FALSE(w.Observe("y", 0, 1, At(100)));
  CHECK_FALSE(w.Tracks("y"));
}

TEST_CASE("/proc/PID/stat lines parse, with spaces and parentheses in the name") {
  ProcStat s;
  REQUIRE(ParseProcStat(
      "4242 (python3 (x) y) S 4000 4242 4000 0 -1 4194304 100 0 0 0 250 30 7 3 20 0 1 0", s));
  CHECK(s.pid == 4242);
  CHECK(s.ppid == 4000);
  CHECK(s.comm == "python3 (x) y");
  CHECK(s.cpu_ticks == 250 + 30 + 7 + 3);
  CHECK_FALSE(ParseProcStat("garbage", s));
  CHECK_FALSE(ParseProcStat("12 (x) S 1", s));
}

TEST_CASE("a tree is its root and every descendant") {
  std::vector<ProcStat> all = {{1, 0, "init", 0},  {10, 1, "bash", 1}, {11, 10, "torchrun", 2},
                               {13, 11, "py", 40}, {12, 11, "py", 30}, {20, 1, "other", 99}};
  auto tree = TreeOf(all, 10);
  REQUIRE(tree.size() == 4);
  CHECK(tree[0].pid == 10);
  CHECK(tree[1].pid == 11);
  CHECK(tree[2].pid == 12);
  CHECK(tree[3].pid == 13);
  CHECK(CpuTicks(tree) == 73);
  CHECK(TreeOf(all, 99).empty());
  // This test process is in the machine's /proc, with its own stat.
  auto mine = TreeOf(ReadAllProcStats(), static_cast<int>(::getpid()));
  REQUIRE_FALSE(mine.empty());
  CHECK(mine[0].pid == ::getpid());
}

}  // namespace
}  // namespace herd::agent
