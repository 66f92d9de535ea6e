// The worker on simulated time (tests/fakes/fake_clock.hpp): its start window, in which a worker
// that never registered redials at the first interval, is measured on the injected clock, so the
// test moves past it without waiting for it. The dials fail at once (the node has no certificates
// yet), and the io_context's timers pace the redials as in herdlet.
#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>

#include "agent/core/worker.hpp"
#include "shared/common/limits.hpp"
#include "tests/fakes/fake_clock.hpp"
#include "tests/fakes/fake_gpu_probe.hpp"
#include "tests/fakes/fake_process_launcher.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::agent {
namespace {

using namespace std::chrono_literals;
using testing::FakeClock;

// Runs the io_context's handlers one at a time until the worker's next dial has failed (it is
// disconnected again, its redial scheduled). A dial fails within a redial interval; the bound only
// keeps a broken worker from hanging the test.
void NextFailedDial(boost::asio::io_context& io, const Worker& w) {
  const auto bound = std::chrono::steady_clock::now() + 10s;
  while (w.state() == Worker::State::kDisconnected && std::chrono::steady_clock::now() < bound) {
    io.run_one_for(50ms);
  }
  while (w.state() != Worker::State::kDisconnected && std::chrono::steady_clock::now() < bound) {
    io.run_one_for(50ms);
  }
  REQUIRE(w.state() == Worker::State::kDisconnected);
}

TEST_CASE(
    "a worker redials at the first interval for its start window of simulated time, then "
    "backs off") {
  herd::testing::TempDir dir("herd-worker-clock");
  boost::asio::io_context io;
  FakeClock clock;
  testing::FakeLauncher launcher(io);
  testing::FakeGpus gpus(0);
  AgentConfig c;
  c.role = AgentConfig::Role::kWorker;
  c.cluster = "unit";
  c.node_id = "unit-worker1";
  c.head_node = "unit-head";
  c.address = "127.0.236.1";
  c.head = {"127.0.236.1", 9};
  c.certs_dir = (std::filesystem::path(dir.path()) / "no-certs")
                    .string();  // none: every dial fails before connecting
  c.state_dir = (std::filesystem::path(dir.path()) / "state").string();
  c.cpus = 1;
  Worker w(io, c, launcher, gpus, false, &clock);
  REQUIRE(w.Start().ok());

  // Within the window (the clock has not moved): every failed dial keeps the first interval.
  for (int i = 0; i < 3; ++i) {
    NextFailedDial(io, w);
    CHECK(w.redial_backoff() == limits::kReconnectBackoffInitial);
  }
  // Just before its end, still the first interval.
  clock.Advance(
      std::chrono::duration_cast<std::chrono::milliseconds>(limits::kFirstRegisterFastRedialFor) -
      1ms);
  NextFailedDial(io, w);
  CHECK(w.redial_backoff() == limits::kReconnectBackoffInitial);
  // Past it: each failure doubles the wait (the next redials wait 2 and 4 times as long).
  clock.Advance(1ms);
  NextFailedDial(io, w);
  CHECK(w.redial_backoff() == 2 * limits::kReconnectBackoffInitial);
  NextFailedDial(io, w);
  CHECK(w.redial_backoff() == 4 * limits::kReconnectBackoffInitial);
  w.Stop();
}

}  // namespace
}  // namespace herd::agent
