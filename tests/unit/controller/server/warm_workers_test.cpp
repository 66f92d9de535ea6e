// WarmWorkers (warm_workers.hpp) with a fake worker: a small Python program that speaks the warm
// protocol (warm_protocol.hpp) on its stdin and does what the command's words ask (answer with
// its pid, block until a file exists, end before answering or midway). Reuse, the per-user limit
// with its queue, replacement of a worker that is gone, Close; and the protocol's own coding.
#include "controller/server/warm_workers.hpp"

#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>

#include "controller/server/warm_protocol.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::server {
namespace {

using namespace std::chrono_literals;
using herd::testing::TempDir;

// The fake worker. `status` answers its pid on stdout and "note" on stderr, exit 3; `queue die`
// exits without a word; `queue half` sends part of its output, then exits; `nodes wait F` answers
// once file F exists; `jobs queue bye` answers, then exits (as an idle worker does).
constexpr const char* kFakeWorker = R"(
import json, os, sys, time
fd = 0
def frame(tag, b):
    os.write(fd, tag.encode() + b" " + str(len(b)).encode() + b"\n" + b)
buf = b""
while True:
    chunk = os.read(fd, 65536)
    if not chunk:
        sys.exit(0)
    buf += chunk
    while b"\n" in buf:
        line, buf = buf.split(b"\n", 1)
        args = json.loads(line)["args"]
        if args == ["queue", "die"]:
            sys.exit(0)
        if args == ["queue", "half"]:
            frame("O", b"partial")
            sys.exit(0)
        if args[:2] == ["nodes", "wait"]:
            while not os.path.exists(args[2]):
                time.sleep(0.01)
        frame("O", str(os.getpid()).encode())
        frame("E", b"note")
        frame("X", b"3" if args == ["status"] else b"0")
        if args == ["jobs", "queue", "bye"]:
            sys.exit(0)
)";

struct Fixture {
  TempDir dir{"herd-warm"};
  std::string script = dir.path() + "/worker.py";
  Fixture() { std::ofstream(script) << kFakeWorker; }
  WarmWorkers::Spawn spawn() const {
    return {{"/usr/bin/python3", script}, {"PATH=/usr/bin:/bin"}, dir.path()};
  }
};

struct Got {
  std::mutex mu;
  std::string out, err;
  WarmWorkers::OutputFn fn() {
    return [this](FrameTag tag, std::string_view bytes) {
      std::lock_guard<std::mutex> l(mu);
      (tag == FrameTag::kStderr ? err : out) += bytes;
    };
  }
};

TEST_CASE("a user's reads go to one worker, kept between them") {
  Fixture f;
  WarmWorkers warm;
  Got a, b;
  auto first = warm.Run("ann", f.spawn(), {"status"}, a.fn());
  REQUIRE(first.ok());
  CHECK(*first == 3);
  CHECK(a.err == "note");
  auto second = warm.Run("ann", f.spawn(), {"queue", "c1"}, b.fn());
  REQUIRE(second.ok());
  CHECK(*second == 0);
  CHECK(b.out == a.out);  // the same process answered both
  CHECK(warm.size() == 1);
  Got c;
  REQUIRE(warm.Run("bob", f.spawn(), {"status"}, c.fn()).ok());
  CHECK(c.out != a.out);  // another user: a worker of its own
  CHECK(warm.size() == 2);
}

TEST_CASE("only reads are sent to a worker") {
  Fixture f;
  WarmWorkers warm;
  Got g;
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"launch", "-c", "x"}, {"logs", "x"}, {"queue", "x", "--", "id"}, {"jobs"}, {}}) {
    auto r = warm.Run("ann", f.spawn(), args, g.fn());
    CHECK(r.status().code() == Code::kInvalidArgument);
  }
  CHECK(g.out.empty());
  CHECK(warm.size() == 0);
}

TEST_CASE("a busy user's read waits, then is refused when no worker frees in time") {
  Fixture f;
  WarmWorkers warm({/*per_user=*/1, /*max_total=*/8, /*queue_wait=*/50ms});
  const std::string flag = f.dir.path() + "/go";
  // Started from this thread: a worker dies with the thread that started it (PR_SET_PDEATHSIG).
  Got first;
  REQUIRE(warm.Run("ann", f.spawn(), {"status"}, first.fn()).ok());
  Got slow, refused, other;
  auto busy = std::async(std::launch::async, [&] {
    return warm.Run("ann", f.spawn(), {"nodes", "wait", flag}, slow.fn());
  });
  while (warm.busy() == 0) std::this_thread::sleep_for(1ms);
  // The worker is taken (the file does not exist yet): ann's next read finds none free.
  auto r = warm.Run("ann", f.spawn(), {"status"}, refused.fn());
  CHECK(r.status().code() == Code::kUnavailable);
  CHECK(refused.out.empty());
  CHECK(warm.Run("bob", f.spawn(), {"status"}, other.fn()).ok());  // bob has his own
  std::ofstream(flag) << "";
  auto done = busy.get();
  REQUIRE(done.ok());
  CHECK(*done == 0);
  // Free again: the next read gets the same worker.
  Got again;
  REQUIRE(warm.Run("ann", f.spawn(), {"status"}, again.fn()).ok());
  CHECK(again.out == slow.out);
}

TEST_CASE("a read queued behind a busy worker runs when it is free") {
  Fixture f;
  WarmWorkers warm({1, 8, 20s});
  const std::string flag = f.dir.path() + "/go";
  Got first;
  REQUIRE(warm.Run("ann", f.spawn(), {"status"}, first.fn()).ok());
  Got slow, queued;
  auto busy = std::async(std::launch::async, [&] {
    return warm.Run("ann", f.spawn(), {"nodes", "wait", flag}, slow.fn());
  });
  while (warm.busy() == 0) std::this_thread::sleep_for(1ms);
  auto waiting = std::async(std::launch::async,
                            [&] { return warm.Run("ann", f.spawn(), {"status"}, queued.fn()); });
  std::ofstream(flag) << "";
  REQUIRE(busy.get().ok());
  auto r = waiting.get();
  REQUIRE(r.ok());
  CHECK(*r == 3);
  CHECK(queued.out == slow.out);
  CHECK(warm.size() == 1);
}

TEST_CASE("a worker that is gone is replaced; one gone midway ends the command") {
  Fixture f;
  WarmWorkers warm;
  Got a, b, c, d;
  REQUIRE(warm.Run("ann", f.spawn(), {"jobs", "queue", "bye"}, a.fn()).ok());
  // It exited after answering (as an idle one does): the next read gets a new one.
  auto r = warm.Run("ann", f.spawn(), {"status"}, b.fn());
  REQUIRE(r.ok());
  CHECK(b.out != a.out);
  // Ending before answering, twice (it and its replacement): nothing said, the caller runs it.
  r = warm.Run("ann", f.spawn(), {"queue", "die"}, c.fn());
  CHECK(r.status().code() == Code::kUnavailable);
  CHECK(c.out.empty());
  CHECK(c.err.empty());
  r = warm.Run("ann", f.spawn(), {"queue", "half"}, d.fn());
  REQUIRE(r.ok());
  CHECK(*r == 1);
  CHECK(d.out == "partial");
  CHECK(d.err.find("ended before the command did") != std::string::npos);
  CHECK(warm.size() == 0);
}

TEST_CASE("a worker that cannot start is Unavailable") {
  Fixture f;
  WarmWorkers warm;
  Got g;
  auto r = warm.Run("ann", {{"/nonexistent/herd", "_serve"}, {}, f.dir.path()}, {"status"}, g.fn());
  CHECK(r.status().code() == Code::kUnavailable);
  CHECK(warm.size() == 0);
}

TEST_CASE("Close ends every worker and refuses reads after") {
  Fixture f;
  WarmWorkers warm;
  Got a, b;
  REQUIRE(warm.Run("ann", f.spawn(), {"status"}, a.fn()).ok());
  REQUIRE(warm.Run("bob", f.spawn(), {"status"}, b.fn()).ok());
  const int pid = std::stoi(a.out);
  warm.Close();
  CHECK(warm.size() == 0);
  CHECK(::kill(pid, 0) != 0);  // ended and reaped
  Got c;
  CHECK(warm.Run("ann", f.spawn(), {"status"}, c.fn()).status().code() == Code::kUnavailable);
}

TEST_CASE("warm requests: encoded on one line, decoded back, anything else refused") {
  const std::vector<std::string> args = {"queue", "c\n1", "-o", "json"};
  const std::string line = EncodeWarmRequest(args);
  REQUIRE(line.back() == '\n');
  CHECK(line.find('\n') == line.size() - 1);
  auto back = DecodeWarmRequest(std::string_view(line).substr(0, line.size() - 1));
  REQUIRE(back.ok());
  CHECK(*back == args);
  for (const char* bad :
       {"", "[]", "{\"args\": \"status\"}", "{\"args\": [1]}", "{\"args\": [\"status\"], \"x\": 1}",
        "{\"args\": [\"down\", \"c\"]}", "{\"args\": [\"status\", \"--\", \"id\"]}"}) {
    CAPTURE(bad);
    CHECK(DecodeWarmRequest(bad).status().code() == Code::kInvalidArgument);
  }
  CHECK(IsWarmRead({"jobs", "queue"}));
  CHECK_FALSE(IsWarmRead({"jobs", "launch"}));
  CHECK(IsWarmRead({"nodes", "c"}));
  CHECK(IsWarmRead({"infra", "-o", "json"}));
  CHECK(IsWarmRead({"logs", "c", "1", "--no-follow"}));
  CHECK_FALSE(IsWarmRead({"logs", "c", "1"}));  // a follow may last: a child of its own
}

}  // namespace
}  // namespace herd::server
