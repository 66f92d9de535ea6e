// ReadCoalescer (read_coalescer.hpp): reads of one key that arrive while one runs share the next
// run, never the running one; rounds after the first start through the executor; a run that could
// not be done reaches every read of its round; keys are independent. The runs are functions of
// the test that block on a promise, so each case decides exactly when a run ends.
#include "controller/server/read_coalescer.hpp"

#include <doctest/doctest.h>

#include <deque>
#include <functional>
#include <future>
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

// The executor of the tests: tasks wait in a queue until the test runs them.
struct QueueExecutor {
  std::deque<std::function<void()>> tasks;
  ReadCoalescer::Executor fn() {
    return [this](std::function<void()> f) { tasks.push_back(std::move(f)); };
  }
  void RunOne() {
    REQUIRE(!tasks.empty());
    auto f = std::move(tasks.front());
    tasks.pop_front();
    f();
  }
};

TEST_CASE("a read with nothing running runs at once, on the calling thread") {
  QueueExecutor ex;
  ReadCoalescer c(ex.fn());
  Seen a;
  c.Join(ReadKey("ann", {"status"}), Prints("one\n", 0), Into(a));
  CHECK(a.out == "one\n");
  CHECK(a.code == 0);
  CHECK(ex.tasks.empty());
  CHECK(c.active() == 0);
  CHECK(c.runs() == 1);
  // The next read of the same words runs again: nothing is cached.
  Seen b;
  c.Join(ReadKey("ann", {"status"}), Prints("two\n", 0), Into(b));
  CHECK(b.out == "two\n");
  CHECK(c.runs() == 2);
}

TEST_CASE("reads arriving during a run share the next run, not the running one") {
  QueueExecutor ex;
  ReadCoalescer c(ex.fn());
  const std::string key = ReadKey("ann", {"queue", "c1"});
  std::promise<void> started, release;
  auto release_f = release.get_future().share();
  Seen first;
  std::thread leader([&] {
    c.Join(
        key,
        [&](const ReadCoalescer::OutputFn& out) -> Result<int> {
          out(FrameTag::kStdout, "old ");
          started.set_value();
          release_f.wait();
          out(FrameTag::kStdout, "state\n");
          return 3;
        },
        Into(first));
  });
  started.get_future().wait();
  // Two reads arrive while the first runs: Join returns at once, they see nothing yet.
  Seen b, d;
  int second_runs = 0;
  c.Join(key, Prints("new state\n", 0, &second_runs), Into(b));
  c.Join(key, Prints("never run\n", 7), Into(d));
  CHECK(b.code == -1);
  CHECK(d.code == -1);
  CHECK(c.active() == 1);
  release.set_value();
  leader.join();
  CHECK(first.out == "old state\n");
  CHECK(first.code == 3);
  // Their round is queued on the executor, not run on the leader's thread; nothing of the first
  // run reached them.
  CHECK(b.out.empty());
  REQUIRE(ex.tasks.size() == 1);
  // A read arriving before the queued round starts joins it.
  Seen e;
  c.Join(key, Prints("never run either\n", 8), Into(e));
  CHECK(ex.tasks.size() == 1);
  ex.RunOne();
  CHECK(second_runs == 1);  // one run for the three of them, the first waiter's
  for (Seen* s : {&b, &d, &e}) {
    CHECK(s->out == "new state\n");
    CHECK(s->code == 0);
  }
  CHECK(c.runs() == 2);
  CHECK(c.active() == 0);
  CHECK(ex.tasks.empty());
}

TEST_CASE("a read that could not run tells every read of its round") {
  QueueExecutor ex;
  ReadCoalescer c(ex.fn());
  const std::string key = ReadKey("bob", {"status"});
  std::promise<void> started, release;
  auto release_f = release.get_future().share();
  Seen first;
  std::thread leader([&] {
    c.Join(
        key,
        [&](const ReadCoalescer::OutputFn&) -> Result<int> {
          started.set_value();
          release_f.wait();
          return Unavailable("every worker busy");
        },
        Into(first));
  });
  started.get_future().wait();
  Seen b, d;
  c.Join(
      key, [](const ReadCoalescer::OutputFn&) -> Result<int> { return Unavailable("busy"); },
      Into(b));
  c.Join(key, Prints("unused\n", 0), Into(d));
  release.set_value();
  leader.join();
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
  std::promise<void> started, release;
  auto release_f = release.get_future().share();
  Seen first;
  std::thread leader([&] {
    c.Join(
        ReadKey("ann", {"status"}),
        [&](const ReadCoalescer::OutputFn&) -> Result<int> {
          started.set_value();
          release_f.wait();
          return 0;
        },
        Into(first));
  });
  started.get_future().wait();
  Seen other_user, other_words;
  c.Join(ReadKey("bob", {"status"}), Prints("bob's\n", 0), Into(other_user));
  c.Join(ReadKey("ann", {"status", "-o", "json"}), Prints("{}\n", 0), Into(other_words));
  // Each ran at once on this thread while ann's status still runs.
  CHECK(other_user.out == "bob's\n");
  CHECK(other_words.out == "{}\n");
  release.set_value();
  leader.join();
  CHECK(ex.tasks.empty());
  CHECK(c.runs() == 3);
}

TEST_CASE("keys: the user and each word, so that words cannot run into each other") {
  CHECK(ReadKey("ann", {"logs", "c", "1"}) != ReadKey("ann", {"logs", "c1"}));
  CHECK(ReadKey("ann", {"status"}) != ReadKey("an", {"nstatus"}));
  CHECK(ReadKey("ann", {"status"}) == ReadKey("ann", {"status"}));
}

}  // namespace
}  // namespace herd::server
