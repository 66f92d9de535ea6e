// KeptForward: the head's port-forward recorded across commands, with a fake SshRunner that
// counts the forwards it makes and cancels.
#include "controller/ssh/kept_forward.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "tests/fakes/fake_ssh_runner.hpp"

namespace herd::controller {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

using testing::FakeForwarder;

struct Dir {
  Dir() {
    char tmpl[] = "/tmp/kept-forward-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~Dir() { fs::remove_all(path); }
  std::string path;
};

SshTarget Head() {
  SshTarget t;
  t.host = "10.9.9.1";
  t.port = 22;
  t.control_dir = "/unused";
  return t;
}

TEST_CASE("no record: Renew makes a forward and records it; Recorded reads it back") {
  Dir dir;
  FakeForwarder ssh;
  // The record's directory need not exist yet (a cluster's first command).
  KeptForward kept(ssh, Head(), "10.9.9.1", 46590, dir.path + "/cm/head.port");
  CHECK(kept.Recorded() == 0);
  auto port = kept.Renew(0);
  REQUIRE(port.ok());
  CHECK(*port == 40001);
  CHECK(kept.Recorded() == 40001);
  CHECK(ssh.forwarded == std::vector<std::string>{"10.9.9.1:46590"});
  CHECK(ssh.cancelled.empty());
  CHECK((fs::status(dir.path + "/cm").permissions() & fs::perms::all) == fs::perms::owner_all);
}

TEST_CASE("a stale record is cancelled and replaced") {
  Dir dir;
  FakeForwarder ssh;
  KeptForward kept(ssh, Head(), "10.9.9.1", 46590, dir.path + "/head.port");
  REQUIRE(kept.Renew(0).ok());
  auto renewed = kept.Renew(40001);
  REQUIRE(renewed.ok());
  CHECK(*renewed == 40002);
  CHECK(kept.Recorded() == 40002);
  CHECK(ssh.cancelled == std::vector<int>{40001});
  CHECK(ssh.forwarded.size() == 2);
}

TEST_CASE("a record renewed by another command meanwhile is used, not replaced") {
  Dir dir;
  FakeForwarder ssh;
  KeptForward kept(ssh, Head(), "10.9.9.1", 46590, dir.path + "/head.port");
  { std::ofstream(dir.path + "/head.port") << "45555\n"; }
  auto port = kept.Renew(40001);  // we failed on 40001; someone already made 45555
  REQUIRE(port.ok());
  CHECK(*port == 45555);
  CHECK(ssh.forwarded.empty());
  CHECK(ssh.cancelled.empty());
}

TEST_CASE("a damaged record reads as none") {
  Dir dir;
  FakeForwarder ssh;
  KeptForward kept(ssh, Head(), "10.9.9.1", 46590, dir.path + "/head.port");
  for (const char* text : {"", "abc\n", "0\n", "70000\n", "123x\n", "-5\n"}) {
    { std::ofstream(dir.path + "/head.port") << text; }
    CHECK_MESSAGE(kept.Recorded() == 0, text);
  }
  { std::ofstream(dir.path + "/head.port") << "4242\n"; }
  CHECK(kept.Recorded() == 4242);
}

TEST_CASE("a failed forward is reported and leaves the record alone") {
  Dir dir;
  FakeForwarder ssh;
  KeptForward kept(ssh, Head(), "10.9.9.1", 46590, dir.path + "/head.port");
  REQUIRE(kept.Renew(0).ok());
  ssh.fail = true;
  auto port = kept.Renew(40001);
  REQUIRE_FALSE(port.ok());
  CHECK(port.status().message().find("cannot forward") != std::string::npos);
  CHECK(kept.Recorded() == 40001);
}

TEST_CASE("commands renewing at once make one forward") {
  Dir dir;
  FakeForwarder ssh;
  ssh.delay = 100ms;  // the first holds the lock while the others arrive
  std::vector<std::thread> threads;
  std::vector<int> got(4, -1);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      // One KeptForward per "command": each opens its own lock descriptor.
      KeptForward kept(ssh, Head(), "10.9.9.1", 46590, dir.path + "/head.port");
      auto port = kept.Renew(0);
      got[i] = port.ok() ? *port : 0;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(ssh.forwarded.size() == 1);
  for (int p : got) CHECK(p == 40001);
}

}  // namespace
}  // namespace herd::controller
