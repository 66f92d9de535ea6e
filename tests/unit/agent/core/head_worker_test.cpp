// The head and two workers in one process, over the real TLS transport on 127.0.0.1, with a fake
// ProcessLauncher per node: the test decides when each "process" prints and exits, and checks the
// head's decisions (setup barrier, fail fast, exit codes, prefixes) as a client sees them.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include "agent/core/head.hpp"
#include "agent/core/worker.hpp"
#include "agent/gpu/system_gpu_probe.hpp"
#include "agent/store/job_store.hpp"
#include "controller/core/head_client.hpp"
#include "shared/common/limits.hpp"
#include "shared/tls/certs.hpp"
#include "tests/fakes/fake_gpu_probe.hpp"
#include "tests/fakes/fake_process_launcher.hpp"

namespace herd::agent {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

using testing::FakeGpus;
using testing::FakeLauncher;

struct Cluster {
  fs::path dir;
  boost::asio::io_context io;
  std::unique_ptr<Head> head;
  std::vector<std::unique_ptr<FakeLauncher>> launchers;
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<AgentConfig> configs;
  FakeGpus gpus;
  std::thread thread;
  uint16_t port = 0;

  // subscriber_lag_bytes: how far a following client may fall behind before it is served from
  // run.log (Head::Options; 0 keeps the default).
  // max_queued_bytes: what a client may have queued before the head drops it (0: the default).
  explicit Cluster(int gpus_per_node = 0, std::size_t subscriber_lag_bytes = 0,
                   std::size_t max_queued_bytes = 0)
      : gpus(gpus_per_node) {
    char tmpl[] = "/tmp/herd-head-worker-XXXXXX";
    dir = ::mkdtemp(tmpl);
    REQUIRE(tls::InitClusterCerts((dir / "certs").string(), "unit").ok());
    Head::Options o;
    o.cluster = "unit";
    o.state_dir = (dir / "head-state").string();
    REQUIRE(tls::IssueAgentCerts((dir / "certs").string(), "unit-head", {"127.0.0.1"},
                                 (dir / "n0").string())
                .ok());
    o.tls = {(dir / "n0/ca.crt").string(), (dir / "n0/agent.crt").string(),
             (dir / "n0/agent.key").string()};
    o.expected_nodes = 2;
    if (subscriber_lag_bytes > 0) o.subscriber_lag_bytes = subscriber_lag_bytes;
    if (max_queued_bytes > 0) o.max_queued_bytes_per_peer = max_queued_bytes;
    head = std::make_unique<Head>(io, o);
    REQUIRE(head->Start().ok());
    port = head->port();
    for (int i = 0; i < 2; ++i) {
      std::string name = i == 0 ? "unit-head" : "unit-worker1";
      std::string certs = (dir / ("n" + std::to_string(i))).string();
      if (i > 0) REQUIRE(tls::IssueAgentCerts((dir / "certs").string(), name, {}, certs).ok());
      AgentConfig c;
      c.role = i == 0 ? AgentConfig::Role::kHead : AgentConfig::Role::kWorker;
      c.cluster = "unit";
      c.node_id = name;
      c.head_node = "unit-head";
      c.address = "127.0.0.1";
      c.head = {"127.0.0.1", port};
      c.certs_dir = certs;
      c.state_dir = (dir / ("state" + std::to_string(i))).string();
      c.cpus = 4;
      configs.push_back(c);
      launchers.push_back(std::make_unique<FakeLauncher>(io));
      workers.push_back(std::make_unique<Worker>(io, c, *launchers.back(), gpus, i == 0));
      REQUIRE(workers.back()->Start().ok());
    }
    thread = std::thread([this] {
      auto guard = boost::asio::make_work_guard(io);
      io.run();
    });
  }
  ~Cluster() {
    boost::asio::post(io, [this] {
      for (auto& w : workers) w->Stop();
      head->Stop();
    });
    std::this_thread::sleep_for(200ms);
    io.stop();
    thread.join();
    workers.clear();
    head.reset();
    fs::remove_all(dir);
  }
  // Runs fn on the io thread and waits for it.
  void OnIo(std::function<void()> fn) {
    std::promise<void> done;
    boost::asio::post(io, [&] {
      fn();
      done.set_value();
    });
    done.get_future().wait();
  }
  // Worker i's agent process ends and a new one (a new incarnation, with a new launcher) starts.
  void RestartWorker(int i) {
    OnIo([&] {
      workers[i].reset();
      launchers[i] = std::make_unique<FakeLauncher>(io);
      workers[i] = std::make_unique<Worker>(io, configs[i], *launchers[i], gpus, i == 0);
      REQUIRE(workers[i]->Start().ok());
    });
  }
  // A client, once the head has both agents: the cluster as each test starts from.
  std::unique_ptr<controller::HeadClient> Client() {
    auto c = Connect();
    int alive = 0;
    for (int i = 0; i < 100 && alive < 2; ++i) {
      if (i > 0) std::this_thread::sleep_for(50ms);
      auto nodes = c->Nodes();
      REQUIRE_MESSAGE(nodes.ok(), nodes.status().ToString());
      alive = 0;
      for (bool a : nodes->alive()) alive += a;
    }
    REQUIRE_MESSAGE(alive == 2, "the head saw " << alive << " of 2 agents within 5 s");
    return c;
  }
  // A client of the cluster as it is now (a node may be gone).
  std::unique_ptr<controller::HeadClient> Connect() {
    auto c = controller::HeadClient::Connect({"127.0.0.1", port, (dir / "certs").string()});
    REQUIRE(c.ok());
    return std::move(*c);
  }
};

herd::v1::TaskSpec TwoNodes(const std::string& setup, const std::string& run) {
  herd::v1::TaskSpec t;
  t.set_name("t");
  t.set_num_nodes(2);
  t.set_setup(setup);
  t.set_run(run);
  return t;
}

// Streams the job to its end on another thread; the test drives the fakes meanwhile.
struct Follow {
  std::string log;
  herd::v1::JobInfo last;
  std::thread thread;
  Follow(Cluster& c, int64_t job) {
    thread = std::thread([this, &c, job] {
      auto client = c.Connect();
      controller::HeadClient::StreamCallbacks cb;
      cb.on_data = [this](std::string_view d) { log += d; };
      auto r = client->Stream(job, 0, true, cb);
      if (r.ok()) last = *r;
    });
  }
  void Join() { thread.join(); }
};

TEST_CASE("setup on every node, a barrier, then run; fail fast kills the other rank") {
  Cluster c;
  auto client = c.Client();
  auto job = client->Submit(TwoNodes("echo setup", "echo run"), "alice");
  REQUIRE(job.ok());
  Follow follow(c, *job);
  REQUIRE(c.launchers[0]->WaitSpawns(1));
  REQUIRE(c.launchers[1]->WaitSpawns(1));
  CHECK(c.launchers[0]->script(0) == "echo setup");
  CHECK(c.launchers[1]->env(0, "SKYPILOT_SETUP_NODE_RANK") == "1");
  c.launchers[0]->Exit(0, 0);
  std::this_thread::sleep_for(300ms);
  CHECK(c.launchers[0]->spawns() == 1);  // the barrier: run waits for every setup
  c.launchers[1]->Print(0, "setup done\n");
  c.launchers[1]->Exit(0, 0);
  REQUIRE(c.launchers[0]->WaitSpawns(2));
  REQUIRE(c.launchers[1]->WaitSpawns(2));
  CHECK(c.launchers[1]->env(1, "SKYPILOT_NODE_RANK") == "1");
  c.launchers[0]->Print(1, "10%\r20%\rhalf");  // progress bar, then a line with no newline
  c.launchers[1]->Exit(1, 3);                  // rank 1 fails: rank 0 is killed
  follow.Join();
  CHECK(follow.last.state() == herd::v1::JOB_STATE_FAILED);
  REQUIRE(follow.last.exits_size() == 2);
  CHECK(follow.last.exits(0).exit_code() == 137);
  CHECK(follow.last.exits(1).exit_code() == 3);
  CHECK(follow.last.first_failed_rank() == 1);
  CHECK(follow.last.first_failed_node() == "unit-worker1");
  CHECK(c.launchers[0]->kills() == std::vector<std::string>{JobGroupName(*job, 1)});
  CHECK(follow.log.find("(setup pid=1001, ip=127.0.0.1) setup done\n") != std::string::npos);
  CHECK(follow.log.find("(head, rank=0, pid=1002) 10%\r(head, rank=0, pid=1002) 20%\r"
                        "(head, rank=0, pid=1002) half\n") != std::string::npos);
  CHECK(follow.log.find("ERROR: Job 1 failed with return code list: [137, 3]") !=
        std::string::npos);
}

TEST_CASE("a node that cannot store its output fails the job FAILED_DRIVER, naming it") {
  Cluster c;
  auto client = c.Client();
  auto job = client->Submit(TwoNodes("", "yes"), "erin");
  REQUIRE(job.ok());
  Follow follow(c, *job);
  REQUIRE(c.launchers[0]->WaitSpawns(1));
  REQUIRE(c.launchers[1]->WaitSpawns(1));
  c.launchers[1]->Print(0, "y\ny\n");
  c.launchers[1]->StoppedOnFullDisk(0);  // the other rank is killed (fail fast)
  follow.Join();
  CHECK(follow.last.state() == herd::v1::JOB_STATE_FAILED_DRIVER);
  CHECK(follow.last.first_failed_node() == "unit-worker1");
  CHECK(follow.last.first_failed_rank() == 1);
  CHECK(c.launchers[0]->kills() == std::vector<std::string>{JobGroupName(*job, 1)});
  const std::string why =
      "ERROR: Job 1 failed: node unit-worker1 (rank 1) could not store its "
      "output and was stopped: cannot write ";
  CHECK(follow.last.message().rfind(why, 0) == 0);
  CHECK(follow.last.message().find(": No space left on device") != std::string::npos);
  CHECK(follow.log.find("y\n(worker1, rank=1, pid=1001, ip=127.0.0.1) herd: cannot write " +
                        (c.dir / "state1/logs/1-t/tasks/1-unit-worker1.log").string() +
                        ": No space left on device\n") != std::string::npos);
  CHECK(follow.log.find(why) != std::string::npos);
}

TEST_CASE("a failing setup never starts run") {
  Cluster c;
  auto client = c.Client();
  auto job = client->Submit(TwoNodes("exit 7", "echo run"), "bob");
  REQUIRE(job.ok());
  Follow follow(c, *job);
  REQUIRE(c.launchers[0]->WaitSpawns(1));
  REQUIRE(c.launchers[1]->WaitSpawns(1));
  c.launchers[1]->Exit(0, 7);
  follow.Join();
  CHECK(follow.last.state() == herd::v1::JOB_STATE_FAILED_SETUP);
  CHECK(c.launchers[0]->spawns() == 1);
  CHECK(c.launchers[1]->spawns() == 1);
  CHECK(follow.log.find("ERROR: Job 1's setup failed with return code list: [137, 7]") !=
        std::string::npos);
}

TEST_CASE("a restarted worker adopts its process: no failure, every byte once") {
  Cluster c;
  auto client = c.Client();
  auto job = client->Submit(TwoNodes("", "echo run"), "carol");
  REQUIRE(job.ok());
  Follow follow(c, *job);
  REQUIRE(c.launchers[0]->WaitSpawns(1));
  REQUIRE(c.launchers[1]->WaitSpawns(1));
  c.launchers[1]->Print(0, "before\npart");
  std::this_thread::sleep_for(300ms);
  c.RestartWorker(1);
  REQUIRE(c.launchers[1]->WaitSpawns(1));  // adopted from the persisted table, not spawned
  CHECK(c.launchers[1]->adopted_pid(0) == 1001);
  c.launchers[1]->Print(0, "ial\nafter\n");
  c.launchers[1]->Exit(0, 0);
  c.launchers[0]->Exit(0, 0);
  follow.Join();
  CHECK(follow.last.state() == herd::v1::JOB_STATE_SUCCEEDED);
  CHECK(follow.log.find("(worker1, rank=1, pid=1001, ip=127.0.0.1) before\n"
                        "(worker1, rank=1, pid=1001, ip=127.0.0.1) partial\n"
                        "(worker1, rank=1, pid=1001, ip=127.0.0.1) after\n") != std::string::npos);
}

// Rank 1's numbered lines "L000000 yyy...\n" (1000 bytes each) in `log`: how many, in order.
std::pair<int, bool> NumberedLines(const std::string& log) {
  const std::string prefix = "(worker1, rank=1, pid=1001, ip=127.0.0.1) L";
  int next = 0;
  bool in_order = true;
  for (std::size_t pos = 0; (pos = log.find(prefix, pos)) != std::string::npos;
       pos += prefix.size()) {
    if (std::atoi(log.c_str() + pos + prefix.size()) != next) in_order = false;
    ++next;
  }
  return {next, in_order};
}

// Rank 1 (a fake launcher's process 0) prints `lines` numbered lines of 1000 bytes, in 100 KB
// writes: "L000000 yyy...y\n", "L000001 ...".
void PrintNumberedLines(FakeLauncher& launcher, int lines) {
  std::string chunk;
  for (int i = 0; i < lines; ++i) {
    char head[16];
    std::snprintf(head, sizeof head, "L%06d ", i);
    chunk += head + std::string(1000 - 9, 'y') + "\n";
    if (chunk.size() >= 100000) {
      launcher.Print(0, std::move(chunk));
      chunk.clear();
    }
  }
  launcher.Print(0, std::move(chunk));
}

TEST_CASE("a client that falls behind a flood of output gets every line once, in order") {
  // 256 KiB of lag allowed: a client stalled while 20 MB arrive is served from run.log.
  Cluster c(0, 256u << 10);
  auto client = c.Client();
  auto job = client->Submit(TwoNodes("", "flood"), "erin");
  REQUIRE(job.ok());
  std::string log;
  herd::v1::JobInfo last;
  bool stalled = false;
  std::thread follower([&] {
    auto reader = c.Connect();
    controller::HeadClient::StreamCallbacks cb;
    cb.on_data = [&](std::string_view d) {
      if (!stalled) {  // a terminal that stops reading for a while (scrolling, a slow pipe)
        stalled = true;
        std::this_thread::sleep_for(1500ms);
      }
      log += d;
    };
    auto r = reader->Stream(*job, 0, true, cb);
    if (r.ok()) last = *r;
  });
  REQUIRE(c.launchers[0]->WaitSpawns(1));
  REQUIRE(c.launchers[1]->WaitSpawns(1));
  c.launchers[0]->Print(0, "first\n");
  const int kLines = 20000;  // of 1000 bytes: 20 MB from rank 1
  PrintNumberedLines(*c.launchers[1], kLines);
  c.launchers[0]->Exit(0, 0);
  c.launchers[1]->Exit(0, 0);
  follower.join();
  CHECK(stalled);
  CHECK(last.state() == herd::v1::JOB_STATE_SUCCEEDED);
  // Every line of rank 1 exactly once and in order, the head's line too.
  CHECK(NumberedLines(log) == std::pair<int, bool>{kLines, true});
  CHECK(log.find("(head, rank=0, pid=1001) first\n") != std::string::npos);
}

TEST_CASE(
    "a log larger than a client's queue bound reaches a late follower and `herd logs` whole") {
  // A client with more than 2 MiB queued is dropped; the job's log is 8 MB. Each replay must be
  // paced (it was queued whole: dropped, resubscribed, dropped again, until the client gave up).
  Cluster c(0, 256u << 10, 2u << 20);
  auto client = c.Client();
  auto job = client->Submit(TwoNodes("", "flood"), "frank");
  REQUIRE(job.ok());
  REQUIRE(c.launchers[0]->WaitSpawns(1));
  REQUIRE(c.launchers[1]->WaitSpawns(1));
  const int kLines = 8000;
  PrintNumberedLines(*c.launchers[1], kLines);
  // The head has it all in run.log before anyone follows.
  const fs::path run_log =
      c.dir / "head-state" / "logs" / (std::to_string(*job) + "-t") / "run.log";
  for (int i = 0; i < 200; ++i) {
    std::error_code ec;
    if (fs::file_size(run_log, ec) >= std::uintmax_t{kLines} * 1000) break;
    std::this_thread::sleep_for(50ms);
  }
  REQUIRE(fs::file_size(run_log) >= std::uintmax_t{kLines} * 1000);

  Follow late(c, *job);  // follows the running job from offset 0
  std::this_thread::sleep_for(300ms);
  c.launchers[0]->Exit(0, 0);
  c.launchers[1]->Exit(0, 0);
  late.Join();
  CHECK(late.last.state() == herd::v1::JOB_STATE_SUCCEEDED);
  CHECK(NumberedLines(late.log) == std::pair<int, bool>{kLines, true});

  // `herd logs` of the finished job: the whole of run.log, then its final state.
  std::string replayed;
  controller::HeadClient::StreamCallbacks cb;
  cb.on_data = [&](std::string_view d) { replayed += d; };
  auto reader = c.Connect();
  auto done = reader->Stream(*job, 0, false, cb);
  REQUIRE_MESSAGE(done.ok(), done.status().ToString());
  CHECK(done->state() == herd::v1::JOB_STATE_SUCCEEDED);
  CHECK(NumberedLines(replayed) == std::pair<int, bool>{kLines, true});
  CHECK(replayed.size() == fs::file_size(run_log));
}

TEST_CASE(
    "a silent node fails its job FAILED, naming node and rank, and the other rank is killed") {
  Cluster c;
  auto client = c.Client();
  auto job = client->Submit(TwoNodes("", "echo run"), "dave");
  REQUIRE(job.ok());
  Follow follow(c, *job);
  REQUIRE(c.launchers[0]->WaitSpawns(1));
  REQUIRE(c.launchers[1]->WaitSpawns(1));
  auto t0 = std::chrono::steady_clock::now();
  c.OnIo([&] { c.workers[1]->Stop(); });  // the node goes away and does not come back
  follow.Join();
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= limits::kNodeLostAfter - 500ms);
  CHECK(took < limits::kNodeLossReportedWithin);
  CHECK(follow.last.state() == herd::v1::JOB_STATE_FAILED);
  CHECK(follow.last.first_failed_rank() == 1);
  CHECK(follow.last.first_failed_node() == "unit-worker1");
  CHECK(follow.log.find("ERROR: Job 1 failed: node unit-worker1 (rank 1) was lost") !=
        std::string::npos);
  // The KillJob reaches worker 0 after the client saw the job end (two connections): wait for it.
  auto until = std::chrono::steady_clock::now() + 2s;
  while (c.launchers[0]->kills().empty() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  CHECK(c.launchers[0]->kills() == std::vector<std::string>{JobGroupName(*job, 1)});
}

herd::v1::TaskSpec GpuJob(int nodes, double gpus) {
  herd::v1::TaskSpec t;
  t.set_name("gpu");
  t.set_num_nodes(nodes);
  t.set_run("train");
  t.mutable_resources()->set_accelerator("H200");
  t.mutable_resources()->set_accelerator_count(gpus);
  return t;
}

herd::v1::JobState StateOf(controller::HeadClient& client, int64_t job) {
  auto queue = client.Queue(false);
  REQUIRE(queue.ok());
  for (const auto& j : *queue) {
    if (j.job_id() == job) return j.state();
  }
  return herd::v1::JOB_STATE_UNKNOWN;
}

TEST_CASE("8 GPUs per node: two 4-GPU jobs run at once on disjoint GPUs, an 8-GPU job waits") {
  Cluster c(8);
  auto client = c.Client();
  auto a = client->Submit(GpuJob(2, 4), "alice");
  auto b = client->Submit(GpuJob(2, 4), "bob");
  auto big = client->Submit(GpuJob(2, 8), "carol");
  REQUIRE((a.ok() && b.ok() && big.ok()));
  for (auto& l : c.launchers) REQUIRE(l->WaitSpawns(2));
  for (auto& l : c.launchers) {
    CHECK(l->group(0) == JobGroupName(*a, 1));
    CHECK(l->env(0, "CUDA_VISIBLE_DEVICES") == "0,1,2,3");
    CHECK(l->env(0, "SKYPILOT_NUM_GPUS_PER_NODE") == "4");
    CHECK(l->group(1) == JobGroupName(*b, 1));
    CHECK(l->env(1, "CUDA_VISIBLE_DEVICES") == "4,5,6,7");
  }
  CHECK(StateOf(*client, *a) == herd::v1::JOB_STATE_RUNNING);
  CHECK(StateOf(*client, *b) == herd::v1::JOB_STATE_RUNNING);
  CHECK(StateOf(*client, *big) == herd::v1::JOB_STATE_PENDING);
  // The assignment is in the job's record (jobs.db), in rank order.
  auto queue = client->Queue(false);
  REQUIRE(queue.ok());
  for (const auto& j : *queue) {
    if (j.job_id() != *b) continue;
    CHECK(j.resources() == "2x(gpus=H200:4)");  // as `herd status` and `herd check` show it
    REQUIRE(j.rank_gpus_size() == 2);
    CHECK(std::vector<int>(j.rank_gpus(1).indices().begin(), j.rank_gpus(1).indices().end()) ==
          std::vector<int>{4, 5, 6, 7});
  }

  for (auto& l : c.launchers) l->Exit(0, 0);  // a ends: 4 GPUs free per node, big needs 8
  std::this_thread::sleep_for(300ms);
  CHECK(StateOf(*client, *a) == herd::v1::JOB_STATE_SUCCEEDED);
  CHECK(StateOf(*client, *big) == herd::v1::JOB_STATE_PENDING);
  for (auto& l : c.launchers) CHECK(l->spawns() == 2);

  for (auto& l : c.launchers) l->Exit(1, 0);  // b ends: big gets all 8 on both nodes
  for (auto& l : c.launchers) {
    REQUIRE(l->WaitSpawns(3));
    CHECK(l->env(2, "CUDA_VISIBLE_DEVICES") == "0,1,2,3,4,5,6,7");
    CHECK(l->env(2, "SKYPILOT_NUM_GPUS_PER_NODE") == "8");
    l->Exit(2, 0);
  }
  Follow follow(c, *big);
  follow.Join();
  CHECK(follow.last.state() == herd::v1::JOB_STATE_SUCCEEDED);
}

TEST_CASE("fractional GPUs: two H200:0.5 jobs share GPU 0, setup sees no CUDA_VISIBLE_DEVICES") {
  Cluster c(2);
  auto client = c.Client();
  herd::v1::TaskSpec half = GpuJob(1, 0.5);
  half.set_setup("prepare");
  auto a = client->Submit(half, "alice");
  auto b = client->Submit(half, "bob");
  REQUIRE((a.ok() && b.ok()));
  // Setup runs on both nodes of the cluster for each job; run on the job's one node (the head).
  REQUIRE(c.launchers[0]->WaitSpawns(2));
  REQUIRE(c.launchers[1]->WaitSpawns(2));
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(c.launchers[0]->script(i) == "prepare");
    CHECK(c.launchers[0]->env(i, "CUDA_VISIBLE_DEVICES").empty());
    CHECK(c.launchers[0]->unset_env(i) == std::vector<std::string>{"CUDA_VISIBLE_DEVICES"});
    c.launchers[0]->Exit(i, 0);
    c.launchers[1]->Exit(i, 0);
  }
  REQUIRE(c.launchers[0]->WaitSpawns(4));
  CHECK(c.launchers[0]->script(2) == "train");
  CHECK(c.launchers[0]->env(2, "CUDA_VISIBLE_DEVICES") == "0");
  CHECK(c.launchers[0]->env(3, "CUDA_VISIBLE_DEVICES") == "0");
  CHECK(c.launchers[0]->env(3, "SKYPILOT_NUM_GPUS_PER_NODE") == "1");
  c.launchers[0]->Exit(2, 0);
  c.launchers[0]->Exit(3, 0);
}

// A launch starts every agent at once; a worker that came up before its head must not sit out a
// long backoff once the head listens (limits::kFirstRegisterFastRedialFor).
herd::v1::NodeHealth HealthOfNode(controller::HeadClient& client, const std::string& node) {
  auto nodes = client.Nodes();
  REQUIRE_MESSAGE(nodes.ok(), nodes.status().ToString());
  REQUIRE(nodes->health_size() == nodes->nodes_size());
  for (int i = 0; i < nodes->nodes_size(); ++i) {
    if (nodes->nodes(i).node_id() == node) return nodes->health(i);
  }
  FAIL("no node " << node);
  return {};
}

// Polls until `node` is in `condition` (or `within` passed); true when it is.
bool WaitCondition(controller::HeadClient& client, const std::string& node,
                   herd::v1::NodeCondition condition, std::chrono::milliseconds within) {
  auto until = std::chrono::steady_clock::now() + within;
  while (HealthOfNode(client, node).condition() != condition) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

herd::v1::TaskSpec OneNode(const std::string& run) {
  herd::v1::TaskSpec t = TwoNodes("", run);
  t.set_num_nodes(1);
  return t;
}

TEST_CASE("a lost node: a 2-node submit is refused naming it and the restart; 1 node still runs") {
  Cluster c;
  auto client = c.Client();
  c.OnIo([&] { c.workers[1]->Stop(); });  // its agent is gone and does not come back
  REQUIRE(WaitCondition(*client, "unit-worker1", herd::v1::NODE_CONDITION_LOST,
                        limits::kNodeLossReportedWithin));
  CHECK(HealthOfNode(*client, "unit-worker1").silent_ms() >= limits::kNodeLostAfter.count());
  auto refused = client->Submit(TwoNodes("", "echo run"), "gina");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == Code::kUnavailable);
  const std::string& why = refused.status().message();
  CHECK_MESSAGE(
      why.find("it needs 2 nodes and only 1 of those that could hold it is up; "
               "unit-worker1 is lost (no message from its agent for ") != std::string::npos,
      why);
  CHECK_MESSAGE(why.find("Start its agent again with `herd start unit`, or run on 1 node "
                         "(--num-nodes 1)") != std::string::npos,
                why);
  auto queue = client->Queue(false);
  REQUIRE(queue.ok());
  CHECK(queue->empty());  // nothing was queued

  auto one = client->Submit(OneNode("echo one"), "gina");
  REQUIRE_MESSAGE(one.ok(), one.status().ToString());
  Follow follow(c, *one);
  REQUIRE(c.launchers[0]->WaitSpawns(1));
  c.launchers[0]->Exit(0, 0);
  follow.Join();
  CHECK(follow.last.state() == herd::v1::JOB_STATE_SUCCEEDED);
}

herd::v1::JobInfo InfoOf(controller::HeadClient& client, int64_t job) {
  auto queue = client.Queue(false);
  REQUIRE(queue.ok());
  for (const auto& j : *queue) {
    if (j.job_id() == job) return j;
  }
  FAIL("no job " << job);
  return {};
}

TEST_CASE(
    "a node only reconnecting fails no submit; lost later, the queued job says why and runs once "
    "it is back") {
  Cluster c;
  auto client = c.Client();
  c.OnIo([&] { c.workers[1]->Stop(); });
  REQUIRE(WaitCondition(*client, "unit-worker1", herd::v1::NODE_CONDITION_RECONNECTING, 2s));
  auto job = client->Submit(TwoNodes("", "echo run"), "hal");
  REQUIRE_MESSAGE(job.ok(), job.status().ToString());
  CHECK(StateOf(*client, *job) == herd::v1::JOB_STATE_PENDING);
  Follow follow(c, *job);
  // Lost now: the job stays queued, and its message (and log) say what it waits for.
  REQUIRE(WaitCondition(*client, "unit-worker1", herd::v1::NODE_CONDITION_LOST,
                        limits::kNodeLossReportedWithin));
  const std::string waiting =
      "Job 1 is waiting: it needs 2 nodes and only 1 of those that could "
      "hold it is up; unit-worker1 is lost";
  auto until = std::chrono::steady_clock::now() + 2s;
  while (InfoOf(*client, *job).message().find(waiting) == std::string::npos &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(20ms);
  }
  const herd::v1::JobInfo info = InfoOf(*client, *job);
  CHECK(info.state() == herd::v1::JOB_STATE_PENDING);
  CHECK_MESSAGE(info.message().find(waiting) != std::string::npos, info.message());
  CHECK_MESSAGE(
      info.message().find("Start its agent again with `herd start unit`") != std::string::npos,
      info.message());
  c.RestartWorker(1);  // its agent is back (a new incarnation)
  REQUIRE(c.launchers[0]->WaitSpawns(1));
  REQUIRE(c.launchers[1]->WaitSpawns(1));
  c.launchers[0]->Exit(0, 0);
  c.launchers[1]->Exit(0, 0);
  follow.Join();
  CHECK(follow.last.state() == herd::v1::JOB_STATE_SUCCEEDED);
  CHECK(follow.last.message().empty());
  CHECK(follow.log.find(waiting) != std::string::npos);
}

TEST_CASE("an agent that leaves is STOPPED with its reason until a new agent registers") {
  Cluster c;
  auto client = c.Client();
  std::promise<void> left;
  const auto t0 = std::chrono::steady_clock::now();
  c.OnIo([&] {
    c.workers[1]->Leave("herdlet (pid 4242) received SIGTERM", [&] { left.set_value(); });
  });
  REQUIRE(left.get_future().wait_for(limits::kAgentLeaveTimeout * 2) == std::future_status::ready);
  // Done when the close went out, not when the leave timer ran out.
  CHECK(std::chrono::steady_clock::now() - t0 < limits::kAgentLeaveTimeout);
  REQUIRE(WaitCondition(*client, "unit-worker1", herd::v1::NODE_CONDITION_STOPPED, 2s));
  auto h = HealthOfNode(*client, "unit-worker1");
  CHECK(h.stopped_reason() == "herdlet (pid 4242) received SIGTERM");
  CHECK(h.stopped_unix_ms() > 0);
  // Past the lost window it stays STOPPED (the more precise word), and submits needing it are
  // refused with that reason.
  std::this_thread::sleep_for(limits::kNodeLostAfter + limits::kNodeCheckInterval * 2);
  CHECK(HealthOfNode(*client, "unit-worker1").condition() == herd::v1::NODE_CONDITION_STOPPED);
  auto refused = client->Submit(TwoNodes("", "echo run"), "ivy");
  REQUIRE_FALSE(refused.ok());
  CHECK_MESSAGE(refused.status().message().find(
                    "unit-worker1 is stopped (herdlet (pid 4242) received SIGTERM, no message "
                    "from its agent for ") != std::string::npos,
                refused.status().message());
  c.RestartWorker(1);
  CHECK(WaitCondition(*client, "unit-worker1", herd::v1::NODE_CONDITION_UP, 5s));
  CHECK(HealthOfNode(*client, "unit-worker1").stopped_reason().empty());
}

TEST_CASE("an agent whose head is gone leaves at once: nothing waits on the head") {
  Cluster c;
  auto client = c.Client();
  client.reset();
  c.OnIo([&] { c.head->Stop(); });  // the head goes first (herd stop / down stop every agent)
  std::promise<void> left;
  const auto t0 = std::chrono::steady_clock::now();
  c.OnIo(
      [&] { c.workers[1]->Leave("herdlet (pid 1) received SIGTERM", [&] { left.set_value(); }); });
  REQUIRE(left.get_future().wait_for(limits::kAgentLeaveTimeout * 2) == std::future_status::ready);
  CHECK(std::chrono::steady_clock::now() - t0 <= limits::kAgentLeaveTimeout + 200ms);
}

TEST_CASE("a worker started before its head registers soon after the head listens") {
  char tmpl[] = "/tmp/herd-head-worker-XXXXXX";
  fs::path dir = ::mkdtemp(tmpl);
  REQUIRE(tls::InitClusterCerts((dir / "certs").string(), "unit").ok());
  REQUIRE(tls::IssueAgentCerts((dir / "certs").string(), "unit-head", {"127.0.0.1"},
                               (dir / "n0").string())
              .ok());
  REQUIRE(tls::IssueAgentCerts((dir / "certs").string(), "unit-worker1", {}, (dir / "n1").string())
              .ok());
  // A port nobody listens on yet: the worker's dials are refused until the head takes it.
  uint16_t port = 0;
  {
    boost::asio::io_context probe_io;
    boost::asio::ip::tcp::acceptor a(probe_io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }
  boost::asio::io_context io;
  FakeLauncher launcher(io);
  FakeGpus gpus(0);
  AgentConfig c;
  c.role = AgentConfig::Role::kWorker;
  c.cluster = "unit";
  c.node_id = "unit-worker1";
  c.address = "127.0.0.1";
  c.head = {"127.0.0.1", port};
  c.certs_dir = (dir / "n1").string();
  c.state_dir = (dir / "state1").string();
  c.cpus = 4;
  Worker worker(io, c, launcher, gpus, false);
  REQUIRE(worker.Start().ok());
  std::thread thread([&] {
    auto guard = boost::asio::make_work_guard(io);
    io.run();
  });
  // With the plain doubling backoff the worker would dial at 0, 0.1, 0.3, 0.7, 1.5 and 3.1 s:
  // a head that listens from 1.6 s would see it 1.5 s later.
  std::this_thread::sleep_for(1600ms);
  Head::Options o;
  o.cluster = "unit";
  o.state_dir = (dir / "head-state").string();
  o.tls = {(dir / "n0/ca.crt").string(), (dir / "n0/agent.crt").string(),
           (dir / "n0/agent.key").string()};
  o.listen_port = port;
  o.expected_nodes = 1;
  std::unique_ptr<Head> head;
  std::promise<Status> started;
  boost::asio::post(io, [&] {
    head = std::make_unique<Head>(io, o);
    started.set_value(head->Start());
  });
  Status s = started.get_future().get();
  const auto head_up = std::chrono::steady_clock::now();
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  auto client = controller::HeadClient::Connect({"127.0.0.1", port, (dir / "certs").string()});
  REQUIRE(client.ok());
  bool registered = false;
  for (int i = 0; i < 100 && !registered; ++i) {
    auto nodes = (*client)->Nodes();
    REQUIRE_MESSAGE(nodes.ok(), nodes.status().ToString());
    for (bool a : nodes->alive()) registered = registered || a;
    if (!registered) std::this_thread::sleep_for(20ms);
  }
  const auto waited = std::chrono::steady_clock::now() - head_up;
  CHECK(registered);
  CHECK_MESSAGE(
      waited < 800ms, "registered "
                          << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()
                          << " ms after the head listened");
  client->reset();
  std::promise<void> stopped;
  boost::asio::post(io, [&] {
    worker.Stop();
    head->Stop();
    stopped.set_value();
  });
  stopped.get_future().wait();
  std::this_thread::sleep_for(200ms);
  io.stop();
  thread.join();
  head.reset();
  fs::remove_all(dir);
}

// Waits until `pred` holds (checked on the io thread), for at most 10 s.
bool WaitOnIo(Cluster& c, const std::function<bool()>& pred) {
  for (int i = 0; i < 200; ++i) {
    bool done = false;
    c.OnIo([&] { done = pred(); });
    if (done) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

TEST_CASE("an agent registers only as the node its certificate proves") {
  Cluster c;
  auto client = c.Client();
  // Worker 1's certificate (readable by anyone who holds that node) with a forged config: it
  // claims to be the head node, or a node that does not exist, with an incarnation from the far
  // future (which, if accepted, would lock the real agent out as stale).
  std::string node_id;
  SUBCASE("as the head node") { node_id = "unit-head"; }
  SUBCASE("as a node that does not exist") { node_id = "unit-phantom"; }
  AgentConfig forged = c.configs[1];
  forged.node_id = node_id;
  forged.address = "127.0.0.9";
  forged.state_dir = (c.dir / "forged-state").string();
  fs::create_directories(forged.state_dir);
  std::ofstream(forged.state_dir + "/incarnation") << "9000000000000000000\n";
  FakeLauncher forged_launcher(c.io);
  std::unique_ptr<Worker> impostor;
  c.OnIo([&] {
    impostor = std::make_unique<Worker>(c.io, forged, forged_launcher, c.gpus, false);
    REQUIRE(impostor->Start().ok());
  });
  // The head refuses it, and the refused agent stops.
  CHECK(WaitOnIo(c, [&] { return impostor->state() == Worker::State::kTerminating; }));

  auto nodes = client->Nodes();
  REQUIRE(nodes.ok());
  REQUIRE(nodes->nodes_size() == 2);
  for (int i = 0; i < 2; ++i) {
    CHECK(nodes->nodes(i).node_id() != "unit-phantom");
    CHECK(nodes->nodes(i).addresses(0) == "127.0.0.1");
    CHECK(nodes->alive(i));
  }
  // The real head-node agent restarts (a new incarnation, lower than the forged one) and is still
  // accepted; jobs run on the real nodes, never on the impostor.
  c.RestartWorker(0);
  client = c.Client();
  auto job = client->Submit(TwoNodes("", "echo run"), "alice");
  REQUIRE(job.ok());
  Follow follow(c, *job);
  REQUIRE(c.launchers[0]->WaitSpawns(1));
  REQUIRE(c.launchers[1]->WaitSpawns(1));
  c.launchers[0]->Exit(0, 0);
  c.launchers[1]->Exit(0, 0);
  follow.Join();
  CHECK(follow.last.state() == herd::v1::JOB_STATE_SUCCEEDED);
  CHECK(forged_launcher.spawns() == 0);
  c.OnIo([&] { impostor.reset(); });
}

TEST_CASE(
    "a cancel while a node's agent is away ends CANCELLED; the agent kills the rank on return") {
  Cluster c;
  auto client = c.Client();
  auto job = client->Submit(TwoNodes("", "sleep 600"), "dave");
  REQUIRE(job.ok());
  Follow follow(c, *job);
  REQUIRE(c.launchers[0]->WaitSpawns(1));
  REQUIRE(c.launchers[1]->WaitSpawns(1));
  // Worker 1's agent goes away (its process keeps running, as a real agent's would).
  c.OnIo([&] { c.workers[1]->Stop(); });
  bool away = false;
  for (int i = 0; i < 100 && !away; ++i) {
    auto nodes = client->Nodes();
    REQUIRE(nodes.ok());
    away = !nodes->alive(1);
    if (!away) std::this_thread::sleep_for(20ms);
  }
  REQUIRE(away);
  const auto cancelled_at = std::chrono::steady_clock::now();
  auto cancelled = client->Cancel({*job}, false);
  REQUIRE(cancelled.ok());
  CHECK(*cancelled == std::vector<int64_t>{*job});
  follow.Join();
  // CANCELLED at once, not FAILED once the node is declared lost.
  CHECK(follow.last.state() == herd::v1::JOB_STATE_CANCELLED);
  CHECK(std::chrono::steady_clock::now() - cancelled_at < limits::kNodeLostAfter);
  CHECK(c.launchers[0]->kills() == std::vector<std::string>{JobGroupName(*job, 1)});
  // The agent returns (a new incarnation adopting the running rank) and is told to kill it.
  c.RestartWorker(1);
  REQUIRE(c.launchers[1]->WaitSpawns(1));
  CHECK(WaitOnIo(c, [&] { return !c.launchers[1]->kills().empty(); }));
  CHECK(c.launchers[1]->kills() == std::vector<std::string>{JobGroupName(*job, 1)});
}

// Finished jobs written straight into the head's job store, as any herd may have left them (an
// older one bounded no name); their ids, oldest first.
std::vector<int64_t> StoreFinishedJobs(Cluster& c, int count, std::size_t name_bytes) {
  auto store = JobStore::Open((c.dir / "head-state" / "jobs.db").string());
  REQUIRE(store.ok());
  std::vector<int64_t> ids;
  for (int i = 0; i < count; ++i) {
    JobRecord r;
    r.info.set_name(std::string(name_bytes, static_cast<char>('a' + i % 26)));
    r.info.set_user("old");
    r.info.set_state(herd::v1::JOB_STATE_SUCCEEDED);
    r.spec.set_name(r.info.name());
    r.spec.set_num_nodes(1);
    auto id = (*store)->AddJob(r);
    REQUIRE(id.ok());
    ids.push_back(*id);
  }
  return ids;
}

TEST_CASE("a queue larger than a frame lists the newest jobs that fit and counts the others") {
  Cluster c;
  // 40 jobs of a 256 KiB name: 10 MB of records, of which a 4 MiB frame holds 15.
  const std::vector<int64_t> ids = StoreFinishedJobs(c, 40, 256u << 10);
  auto client = c.Client();
  int64_t left_out = -1;
  auto queue = client->Queue(false, &left_out);
  REQUIRE_MESSAGE(queue.ok(), queue.status().ToString());
  REQUIRE(queue->size() == 15);
  CHECK(left_out == 25);
  for (std::size_t i = 0; i < queue->size(); ++i) {
    CHECK((*queue)[i].job_id() == ids[ids.size() - 1 - i]);  // newest first
    CHECK((*queue)[i].name() == std::string(256u << 10, static_cast<char>('a' + (39 - i) % 26)));
  }
}

TEST_CASE("a job record over a frame reaches a client with its strings cut") {
  Cluster c;
  const int64_t id = StoreFinishedJobs(c, 1, limits::kMaxFrameBytes + 1000).front();
  auto client = c.Client();
  controller::HeadClient::StreamCallbacks none;
  auto status = client->Stream(id, UINT64_MAX, false, none);
  REQUIRE_MESSAGE(status.ok(), status.status().ToString());
  CHECK(status->state() == herd::v1::JOB_STATE_SUCCEEDED);
  CHECK(status->name().size() <= limits::kMaxJobRecordTextBytes);
  CHECK(status->name().rfind(std::string(100, 'a'), 0) == 0);
  int64_t left_out = -1;
  auto queue = client->Queue(false, &left_out);
  REQUIRE_MESSAGE(queue.ok(), queue.status().ToString());
  REQUIRE(queue->size() == 1);
  CHECK(queue->front().name() == status->name());
  CHECK(left_out == 0);
}

}  // namespace
}  // namespace herd::agent
