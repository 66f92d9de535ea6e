// The head built from injected parts (HeadParts): the store it is given is the one it uses, its
// timers decide on the clock it is given (autostop fires after that clock's idle minutes, not the
// machine's; a --signal and a --time-limit fall due on it), and the autostop command goes to the
// spawner it is given. Run limits and stacks end to end through the head with a fake agent
// connection: the grace a cancel sends, a hung rank's capture and end. The parts themselves are
// tested in tests/unit/agent/head.
#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/core/head.hpp"
#include "shared/proto/frame.hpp"
#include "shared/tls/certs.hpp"
#include "tests/fakes/fake_clock.hpp"
#include "tests/fakes/fake_connection.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

struct FakeSpawner : CommandSpawner {
  Status SpawnDetached(const std::string& command, const std::string& log_path) override {
    commands.push_back(command);
    logs.push_back(log_path);
    return Status::Ok();
  }
  std::vector<std::string> commands;
  std::vector<std::string> logs;
};

TEST_CASE("a head on a fake clock runs autostop after that clock's idle minutes") {
  testing::TempDir dir("head-parts");
  REQUIRE(tls::InitClusterCerts(dir / "certs", "unit").ok());
  REQUIRE(tls::IssueAgentCerts(dir / "certs", "unit-head", {"127.0.0.1"}, dir / "n0").ok());
  boost::asio::io_context io;
  testing::FakeClock clock;
  FakeSpawner spawner;
  fs::create_directories(dir / "elsewhere");
  auto store = JobStore::Open(dir / "elsewhere/jobs.db");
  REQUIRE(store.ok());
  HeadParts parts;
  parts.clock = &clock;
  parts.spawner = &spawner;
  parts.store = std::move(*store);
  Head::Options o;
  o.cluster = "unit";
  o.state_dir = dir / "state";
  o.tls = {dir / "n0/ca.crt", dir / "n0/agent.crt", dir / "n0/agent.key"};
  Head head(io, o, std::move(parts));
  REQUIRE(head.Start().ok());
  CHECK_FALSE(fs::exists(dir / "state/jobs.db"));  // the store given is the one used

  auto client = std::make_shared<testing::FakeConnection>(transport::Role::kClient, "me", "");
  herd::v1::ClientToHead req;
  req.set_request_id(7);
  req.mutable_set_autostop()->set_idle_minutes(5);
  req.mutable_set_autostop()->set_command("herd stop unit --yes");
  head.InjectMessage(client, proto::Encode(req));
  REQUIRE(client->sent.size() == 1);
  auto reply = proto::Decode<herd::v1::HeadToClient>(client->sent[0]);
  REQUIRE(reply.ok());
  REQUIRE(reply->has_autostop_reply());
  CHECK(reply->autostop_reply().idle_minutes() == 5);

  // Each run_one is one node check (every kNodeCheckInterval of real time); the idle time is the
  // fake clock's.
  clock.Advance(5min - 1ms);
  io.run_one();
  CHECK(spawner.commands.empty());
  clock.Advance(1ms);
  for (int i = 0; i < 3 && spawner.commands.empty(); ++i) io.run_one();
  CHECK(spawner.commands == std::vector<std::string>{"herd stop unit --yes"});
  CHECK(spawner.logs == std::vector<std::string>{dir / "state/autostop.log"});
  clock.Advance(1h);
  io.run_one();
  CHECK(spawner.commands.size() == 1);  // once
}

// A head on a fake clock with one registered fake agent (node unit-head) and a client.
struct OneNodeHead {
  testing::TempDir dir{"head-limits"};
  boost::asio::io_context io;
  testing::FakeClock clock;
  FakeSpawner spawner;
  std::unique_ptr<Head> head;
  std::shared_ptr<testing::FakeConnection> agent =
      std::make_shared<testing::FakeConnection>(transport::Role::kAgent, "unit-head", "unit");
  std::shared_ptr<testing::FakeConnection> client =
      std::make_shared<testing::FakeConnection>(transport::Role::kClient, "me", "");
  uint64_t request = 0;

  OneNodeHead() {
    REQUIRE(tls::InitClusterCerts(dir / "certs", "unit").ok());
    REQUIRE(tls::IssueAgentCerts(dir / "certs", "unit-head", {"127.0.0.1"}, dir / "n0").ok());
    HeadParts parts;
    parts.clock = &clock;
    parts.spawner = &spawner;
    Head::Options o;
    o.cluster = "unit";
    o.state_dir = dir / "state";
    o.tls = {dir / "n0/ca.crt", dir / "n0/agent.crt", dir / "n0/agent.key"};
    head = std::make_unique<Head>(io, o, std::move(parts));
    REQUIRE(head->Start().ok());
    herd::v1::AgentToHead reg;
    reg.mutable_register_()->set_incarnation(1);
    auto* node = reg.mutable_register_()->mutable_node();
    node->set_node_id("unit-head");
    node->add_addresses("127.0.0.1");
    node->set_cpus(8);
    node->set_is_head(true);
    head->InjectMessage(agent, proto::Encode(reg));
  }
  void FromAgent(const herd::v1::AgentToHead& m) { head->InjectMessage(agent, proto::Encode(m)); }
  herd::v1::HeadToClient Ask(herd::v1::ClientToHead req) {
    req.set_request_id(++request);
    head->InjectMessage(client, proto::Encode(req));
    REQUIRE_FALSE(client->sent.empty());
    auto reply = proto::Decode<herd::v1::HeadToClient>(client->sent.back());
    REQUIRE(reply.ok());
    return *reply;
  }
  int64_t Submit(const herd::v1::TaskSpec& spec) {
    herd::v1::ClientToHead req;
    *req.mutable_submit()->mutable_task() = spec;
    return Ask(req).submit_reply().job_id();
  }
  // What the head sent the agent, decoded, in order.
  std::vector<herd::v1::HeadToAgent> ToAgent() {
    std::vector<herd::v1::HeadToAgent> out;
    for (const auto& m : agent->sent) {
      auto d = proto::Decode<herd::v1::HeadToAgent>(m);
      REQUIRE(d.ok());
      out.push_back(*d);
    }
    return out;
  }
  template <typename Pred>
  std::optional<herd::v1::HeadToAgent> Last(Pred pred) {
    std::optional<herd::v1::HeadToAgent> found;
    for (const auto& m : ToAgent()) {
      if (pred(m)) found = m;
    }
    return found;
  }
  // The run process the head started, reported started.
  herd::v1::ProcessKey Started() {
    auto start = Last([](const auto& m) { return m.has_start(); });
    REQUIRE(start);
    herd::v1::AgentToHead started;
    *started.mutable_started()->mutable_key() = start->start().key();
    started.mutable_started()->set_pid(4242);
    FromAgent(started);
    return start->start().key();
  }
  void Exited(const herd::v1::ProcessKey& key, int code) {
    herd::v1::AgentToHead exited;
    *exited.mutable_exited()->mutable_key() = key;
    exited.mutable_exited()->set_exit_code(code);
    FromAgent(exited);
  }
  // The fake clock moves on; the agent's heartbeat keeps its node alive; one node check runs
  // (each run_one is one, every kNodeCheckInterval of real time).
  void Advance(std::chrono::milliseconds d) {
    clock.Advance(d);
    herd::v1::AgentToHead hb;
    hb.mutable_heartbeat()->set_incarnation(1);
    FromAgent(hb);
    io.run_one();
  }
  herd::v1::JobInfo Job(int64_t id) {
    herd::v1::ClientToHead req;
    req.mutable_queue();
    const herd::v1::HeadToClient reply = Ask(req);
    for (const auto& j : reply.queue_reply().jobs()) {
      if (j.job_id() == id) return j;
    }
    FAIL("no job " << id);
    return {};
  }
  std::string RunLog(const herd::v1::JobInfo& j) {
    std::ifstream in(j.log_path());
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
};

herd::v1::TaskSpec Spec() {
  herd::v1::TaskSpec spec;
  spec.set_name("t");
  spec.set_num_nodes(1);
  spec.set_run("python train.py");
  return spec;
}

TEST_CASE("--signal and --time-limit fall due on the head's clock; the limit fails the job") {
  OneNodeHead h;
  herd::v1::TaskSpec spec = Spec();
  spec.set_time_limit_ms(60'000);
  spec.set_limit_signal(SIGUSR1);
  spec.set_limit_signal_before_ms(20'000);
  spec.set_grace_ms(5'000);
  const int64_t id = h.Submit(spec);
  const herd::v1::ProcessKey key = h.Started();
  auto signalled = [](const auto& m) { return m.has_signal(); };
  auto killed = [](const auto& m) { return m.has_kill(); };
  h.Advance(39s);
  CHECK_FALSE(h.Last(signalled));
  h.Advance(1s);
  auto sig = h.Last(signalled);
  REQUIRE(sig);
  CHECK(sig->signal().signal() == SIGUSR1);
  CHECK(sig->signal().job_id() == id);
  CHECK_FALSE(h.Last(killed));
  h.Advance(20s);
  auto kill = h.Last(killed);
  REQUIRE(kill);
  CHECK(kill->kill().grace_ms() == 5'000);
  h.Exited(key, 0);  // it saved and exited 0
  const herd::v1::JobInfo job = h.Job(id);
  CHECK(job.state() == herd::v1::JOB_STATE_FAILED);
  CHECK(job.end_reason() == herd::v1::JOB_END_REASON_TIME_LIMIT);
  CHECK(job.message() ==
        "ERROR: Job " + std::to_string(id) + " failed: it reached its time limit of 1m");
  const std::string log = h.RunLog(job);
  CHECK(log.find("herd: sending SIGUSR1 to every process of job " + std::to_string(id) +
                 ": its time limit (1m) is 20s away") < log.find("reached its time limit"));
}

TEST_CASE("a cancel's KillJob carries the request's grace, else the job's, else the default") {
  OneNodeHead h;
  auto cancel = [&](int64_t id, std::optional<int64_t> grace) {
    herd::v1::ClientToHead req;
    req.mutable_cancel()->add_job_ids(id);
    if (grace) req.mutable_cancel()->set_grace_ms(*grace);
    h.Ask(req);
    auto kill = h.Last([](const auto& m) { return m.has_kill(); });
    REQUIRE(kill);
    CHECK(kill->kill().job_id() == id);
    return kill->kill().grace_ms();
  };
  herd::v1::TaskSpec spec = Spec();
  int64_t id = h.Submit(spec);
  herd::v1::ProcessKey key = h.Started();
  CHECK(cancel(id, std::nullopt) == 30'000);  // limits::kDefaultStopGrace
  h.Exited(key, 0);
  CHECK(h.Job(id).state() == herd::v1::JOB_STATE_CANCELLED);

  spec.set_grace_ms(4'000);
  id = h.Submit(spec);
  key = h.Started();
  CHECK(cancel(id, std::nullopt) == 4'000);
  h.Exited(key, 143);
  CHECK(h.Job(id).state() == herd::v1::JOB_STATE_CANCELLED);

  id = h.Submit(spec);
  key = h.Started();
  CHECK(cancel(id, 7'000) == 7'000);
  h.Exited(key, 137);

  herd::v1::TaskSpec bad = Spec();
  bad.set_grace_ms(-1);
  herd::v1::ClientToHead req;
  *req.mutable_submit()->mutable_task() = bad;
  auto reply = h.Ask(req);
  REQUIRE(reply.has_error());
  CHECK(reply.error().message() == "the grace period cannot be negative");
}

TEST_CASE("a hung rank: every rank's stacks into run.log, then the job ends FAILED, hung") {
  OneNodeHead h;
  herd::v1::TaskSpec spec = Spec();
  spec.set_hang_timeout_ms(10'000);
  const int64_t id = h.Submit(spec);
  const herd::v1::ProcessKey key = h.Started();
  auto start = h.Last([](const auto& m) { return m.has_start(); });
  CHECK(start->start().hang_timeout_ms() == 10'000);

  // herd stack first: the stacks come back to the client; the job goes on.
  herd::v1::ClientToHead ask;
  ask.set_request_id(99);
  ask.mutable_stack()->set_job_id(id);
  h.head->InjectMessage(h.client, proto::Encode(ask));
  auto capture = h.Last([](const auto& m) { return m.has_capture_stacks(); });
  REQUIRE(capture);
  const char* report =
      "== pid 4242 (python3): python3 train.py\n"
      "Current thread 0x00007f0000000100 (most recent call first):\n"
      "  File \"/x/torch/distributed/distributed_c10d.py\", line 1536 in all_reduce\n";
  herd::v1::AgentToHead stacks;
  stacks.mutable_stacks()->set_capture_id(capture->capture_stacks().capture_id());
  *stacks.mutable_stacks()->mutable_key() = key;
  stacks.mutable_stacks()->set_text(report);
  h.FromAgent(stacks);
  auto reply = proto::Decode<herd::v1::HeadToClient>(h.client->sent.back());
  REQUIRE(reply.ok());
  REQUIRE(reply->has_stack_reply());
  CHECK(reply->request_id() == 99);
  CHECK(reply->stack_reply().text().find("(task, pid=4242)   File ") != std::string::npos);
  CHECK(reply->stack_reply().text().find(
            "herd: rank 0 waits in all_reduce (distributed_c10d.py:1536)") != std::string::npos);
  CHECK_FALSE(h.Last([](const auto& m) { return m.has_kill(); }));

  herd::v1::AgentToHead hung;
  *hung.mutable_hung()->mutable_key() = key;
  hung.mutable_hung()->set_idle_ms(10'000);
  h.FromAgent(hung);
  auto second = h.Last([](const auto& m) { return m.has_capture_stacks(); });
  REQUIRE(second);
  CHECK(second->capture_stacks().capture_id() != capture->capture_stacks().capture_id());
  CHECK_FALSE(h.Last([](const auto& m) { return m.has_kill(); }));  // not before the stacks
  stacks.mutable_stacks()->set_capture_id(second->capture_stacks().capture_id());
  h.FromAgent(stacks);
  auto kill = h.Last([](const auto& m) { return m.has_kill(); });
  REQUIRE(kill);
  CHECK(kill->kill().grace_ms() == 30'000);
  h.Exited(key, 143);
  const herd::v1::JobInfo job = h.Job(id);
  CHECK(job.state() == herd::v1::JOB_STATE_FAILED);
  CHECK(job.end_reason() == herd::v1::JOB_END_REASON_HUNG);
  CHECK(job.message().find("rank 0 on unit-head hung (no output and no CPU time for 10s)") !=
        std::string::npos);
  const std::string log = h.RunLog(job);
  CHECK(log.find("herd: rank 0 on unit-head made no progress (no output, no CPU time) for 10s: "
                 "capturing the stacks of every rank") != std::string::npos);
  CHECK(log.find("herd: stacks of job " + std::to_string(id) + " (rank 0 on unit-head hung)") !=
        std::string::npos);
}

TEST_CASE("a spot interruption notice stops the node's job with its grace, says so, drains") {
  OneNodeHead h;
  herd::v1::TaskSpec spec = Spec();
  spec.set_grace_ms(12'000);
  const int64_t id = h.Submit(spec);
  const herd::v1::ProcessKey key = h.Started();
  herd::v1::AgentToHead notice;
  notice.mutable_spot_notice()->set_action("terminate");
  notice.mutable_spot_notice()->set_time("2026-12-05T22:40:00Z");
  h.FromAgent(notice);
  auto kill = h.Last([](const auto& m) { return m.has_kill(); });
  REQUIRE(kill);
  CHECK(kill->kill().job_id() == id);
  CHECK(kill->kill().grace_ms() == 12'000);
  h.FromAgent(notice);  // told again (after a reconnect): nothing more
  h.Exited(key, 0);     // it saved on SIGTERM and exited 0
  const herd::v1::JobInfo job = h.Job(id);
  CHECK(job.state() == herd::v1::JOB_STATE_FAILED_DRIVER);  // its node went: a managed job recovers
  CHECK(job.message() == "ERROR: Job " + std::to_string(id) +
                             " failed: node unit-head got a spot interruption notice for "
                             "2026-12-05T22:40:00Z (terminate)");
  const std::string log = h.RunLog(job);
  const std::string line =
      "herd: node unit-head got a spot interruption notice for "
      "2026-12-05T22:40:00Z (terminate): SIGTERM to every process of job " +
      std::to_string(id) + ", SIGKILL after 12s\n";
  CHECK(log.find(line) != std::string::npos);
  CHECK(log.find(line) == log.rfind(line));  // one line, though told twice
  // Drained: the next job waits for a node the cloud is not taking back.
  const int64_t next = h.Submit(Spec());
  CHECK(h.Job(next).state() == herd::v1::JOB_STATE_PENDING);
}

TEST_CASE("a capture whose agent never answers ends at its deadline with what came") {
  OneNodeHead h;
  herd::v1::TaskSpec spec = Spec();
  spec.set_hang_timeout_ms(10'000);
  const int64_t id = h.Submit(spec);
  const herd::v1::ProcessKey key = h.Started();
  herd::v1::AgentToHead hung;
  *hung.mutable_hung()->mutable_key() = key;
  h.FromAgent(hung);
  h.Advance(29s);
  CHECK_FALSE(h.Last([](const auto& m) { return m.has_kill(); }));
  h.Advance(1s);
  REQUIRE(h.Last([](const auto& m) { return m.has_kill(); }));
  h.Exited(key, 143);
  const std::string log = h.RunLog(h.Job(id));
  CHECK(log.find("herd: no stacks from rank(s) 0 within 30s") != std::string::npos);
  CHECK(log.find("herd: no rank reported its stacks") != std::string::npos);
}

}  // namespace
}  // namespace herd::agent
