// ReadCoalescer (read_coalescer.hpp): reads of one key that arrive while one runs share the next
// run, never the running one; every round starts through the executor (a queue the test runs);
// a run that could not be done reaches every read of its round; keys are independent. The runs
// are functions of the test that block on a promise, so each case decides when a run ends.
#include "controller/server/read_coalescer.hpp"

#include <doctest/doctest.h>

#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace herd::server {
namespace {

// What one read saw: its output in order and how it ended (-1 while it has not).
struct Seen {
  std::string out;
  int code = -1;
  std::string error;
};

ReadCoalescer::Waiter Into(Seen& seen) {
  return {[&seen](FrameTag, std::string_view bytes) { seen.out += bytes; },
          [&seen](Result<int> code) {
            if (code.ok()) {
              seen.code = *code;
            } else {
              seen.code = 99;
              seen.error = code.status().message();
            }
          }};
}

// A run that prints `text` and exits with `code`.
ReadCoalescer::RunFn Prints(std::string text, int code, int* runs = nullptr) {
  return [text, code, runs](const ReadCoalescer::OutputFn& out) -> Result<int> {
    if (runs) ++*runs;
    out(FrameTag::kStdout, text);
    return code;
  };
}

// The executor of the tests: tasks wait in a queue until the test takes and runs them.
struct QueueExecutor {
  std::mutex mu;
  std::deque<std::function<void()>> tasks;
  ReadCoalescer::Executor fn() {
    return [this](std::function<void()> f) {
      std::lock_guard<std::mutex> l(mu);
      tasks.push_back(std::move(f));
    };
  }
  std::size_t size() {
    std::lock_guard<std::mutex> l(mu);
    return tasks.size();
  }
  std::function<void()> Take() {
    std::lock_guard<std::mutex> l(mu);
    REQUIRE(!tasks.empty());
    auto f = std::move(tasks.front());
    tasks.pop_front();
    return f;
  }
  void RunOne() { Take()(); }
};

// A run that prints "old ", says it started, waits for the test, prints "state\n", exits 3 (or
// ends Unavailable).
struct BlockingRun {
  std::promise<void> started, release;
  std::shared_future<void> release_f = release.get_future().share();
  bool unavailable = false;
  ReadCoalescer::RunFn fn() {
    return [this](const ReadCoalescer::OutputFn& out) -> Result<int> {
      if (!unavailable) out(FrameTag::kStdout, "old ");
      started.set_value();
      release_f.wait();
      if (unavailable) return Unavailable("every worker busy");
      out(FrameTag::kStdout, "state\n");
      return 3;
    };
  }
};

TEST_CASE("a read with nothing running gets a round of its own, on the executor") {
  QueueExecutor ex;
  ReadCoalescer c(ex.fn());
  Seen a;
  c.Join(ReadKey("ann", {"status"}), Prints("one\n", 0), Into(a));
  CHECK(a.code == -1);  // Join never runs the read on the caller's thread
  CHECK(c.active() == 1);
  ex.RunOne();
  CHECK(a.out == "one\n");
  CHECK(a.code == 0);
  CHECK(ex.size() == 0);
  CHECK(c.active() == 0);
  CHECK(c.runs() == 1);
  // The next read of the same words runs again: nothing is cached.
  Seen b;
  c.Join(ReadKey("ann", {"status"}), Prints("two\n", 0), Into(b));
  ex.RunOne();
  CHECK(b.out == "two\n");
  CHECK(c.runs() == 2);
}

TEST_CASE("reads arriving before a queued round starts join it") {
  QueueExecutor ex;
  ReadCoalescer c(ex.fn());
  int runs = 0;
  Seen a, b;
  c.Join(ReadKey("ann", {"status"}), Prints("s\n", 0, &runs), Into(a));
  c.Join(ReadKey("ann", {"status"}), Prints("unused\n", 5), Into(b));
  CHECK(ex.size() == 1);
  ex.RunOne();
  CHECK(runs == 1);
  CHECK(a.out == "s\n");
  CHECK(b.out == "s\n");
  CHECK(b.code == 0);
  CHECK(c.runs() == 1);
}

TEST_CASE("reads arriving during a run share the next run, not the running one") {
  QueueExecutor ex;
  ReadCoalescer c(ex.fn());
  const std::string key = ReadKey("ann", {"queue", "c1"});
  BlockingRun blocking;
  Seen first;
  c.Join(key, blocking.fn(), Into(first));
  std::thread runner(ex.Take());
  blocking.started.get_future().wait();
  // Two reads arrive while the first runs: Join returns at once, they see nothing yet.
  Seen b, d;
  int second_runs = 0;
  c.Join(key, Prints("new state\n", 0, &second_runs), Into(b));
  c.Join(key, Prints("never run\n", 7), Into(d));
  CHECK(b.code == -1);
  CHECK(d.code == -1);
  CHECK(ex.size() == 0);  // no round of theirs yet: the running one queues it when it ends
  blocking.release.set_value();
  runner.join();
  CHECK(first.out == "old state\n");
  CHECK(first.code == 3);
  // Nothing of the first run reached them; their round is queued.
  CHECK(b.out.empty());
  REQUIRE(ex.size() == 1);
  // A read arriving before the queued round starts joins it.
  Seen e;
  c.Join(key, Prints("never run either\n", 8), Into(e));
  CHECK(ex.size() == 1);
  ex.RunOne();
  CHECK(second_runs == 1);  // one run for the three of them, the first waiter's
  for (Seen* s : {&b, &d, &e}) {
    CHECK(s->out == "new state\n");
    CHECK(s->code == 0);
  }
  CHECK(c.runs() == 2);
  CHECK(c.active() == 0);
  CHECK(ex.size() == 0);
}

TEST_CASE("a read that could not run tells every read of its round") {
  QueueExecutor ex;
  ReadCoalescer c(ex.fn());
  const std::string key = ReadKey("bob", {"status"});
  BlockingRun blocking;
  blocking.unavailable = true;
  Seen first;
  c.Join(key, blocking.fn(), Into(first));
  std::thread runner(ex.Take());
  blocking.started.get_future().wait();
  Seen b, d;
  c.Join(
      key, [](const ReadCoalescer::OutputFn&) -> Result<int> { return Unavailable("busy"); },
      Into(b));
  c.Join(key, Prints("unused\n", 0), Into(d));
  blocking.release.set_value();
  runner.join();
  CHECK(first.code == 99);
  CHECK(first.error == "every worker busy");
  ex.RunOne();
  CHECK(b.code == 99);
  CHECK(d.code == 99);
  CHECK(b.error == "busy");
  CHECK(d.out.empty());
}

TEST_CASE("other words and other users do not share a run") {
  QueueExecutor ex;
  ReadCoalescer c(ex.fn());
  BlockingRun blocking;
  Seen first;
  c.Join(ReadKey("ann", {"status"}), blocking.fn(), Into(first));
  std::thread runner(ex.Take());
  blocking.started.get_future().wait();
  Seen other_user, other_words;
  c.Join(ReadKey("bob", {"status"}), Prints("bob's\n", 0), Into(other_user));
  c.Join(ReadKey("ann", {"status", "-o", "json"}), Prints("{}\n", 0), Into(other_words));
  // Each has a round of its own, queued now, while ann's status still runs.
  CHECK(ex.size() == 2);
  ex.RunOne();
  ex.RunOne();
  CHECK(other_user.out == "bob's\n");
  CHECK(other_words.out == "{}\n");
  CHECK(first.code == -1);
  blocking.release.set_value();
  runner.join();
  CHECK(first.code == 3);
  CHECK(ex.size() == 0);
  CHECK(c.runs() == 3);
}

TEST_CASE("keys: the user and each word, so that words cannot run into each other") {
  CHECK(ReadKey("ann", {"logs", "c", "1"}) != ReadKey("ann", {"logs", "c1"}));
  CHECK(ReadKey("ann", {"status"}) != ReadKey("an", {"nstatus"}));
  CHECK(ReadKey("ann", {"status"}) == ReadKey("ann", {"status"}));
}

}  // namespace
}  // namespace herd::server
