// The cluster operations with fake parts: a fake provider, an SSH runner that records commands, a
// fake head per cluster, a fake clock, and a real cluster store in a temporary HERD_HOME.
#include "controller/ops/cluster_ops.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <mutex>

#include "controller/state/api_config.hpp"
#include "controller/state/cluster_lock.hpp"
#include "controller/state/cluster_store.hpp"
#include "controller/state/herd_home.hpp"
#include "shared/tls/certs.hpp"
#include "tests/fakes/fake_clock.hpp"
#include "tests/fakes/fake_head.hpp"
#include "tests/fakes/fake_provider.hpp"
#include "tests/fakes/fake_ssh_runner.hpp"
#include "tests/unit/test_support.hpp"

namespace herd {
namespace {

namespace fs = std::filesystem;
using controller::ClusterRecord;
using controller::ClusterStatus;
using controller::ClusterStore;
using controller::NodeRecord;
using testing::FakeClock;
using testing::FakeHeadConnector;
using testing::FakeProvider;
using testing::FakeProviderState;
using testing::RecordingSshRunner;

struct World {
  testing::TempHome home{"herd-ops"};
  std::shared_ptr<FakeProviderState> provider = std::make_shared<FakeProviderState>();
  std::mutex infras_mu;  // Refresh asks the providers from threads of its own
  std::vector<std::string> infras_asked;
  std::shared_ptr<RecordingSshRunner> ssh = std::make_shared<RecordingSshRunner>();
  std::shared_ptr<FakeHeadConnector> heads = std::make_shared<FakeHeadConnector>();
  std::shared_ptr<FakeClock> clock = std::make_shared<FakeClock>();
  ops::ClusterOps ops{Parts()};

  ops::ClusterOpsParts Parts() {
    ops::ClusterOpsParts p;
    p.providers = [this](const std::string& infra,
                         const task::Resources*) -> Result<std::unique_ptr<controller::Provider>> {
      {
        std::lock_guard<std::mutex> l(infras_mu);
        infras_asked.push_back(infra);
      }
      if (infra != "local" && !infra.starts_with("ssh/") && infra != "cloud") {
        return InvalidArgument("infra '" + infra + "' is not available");
      }
      return std::unique_ptr<controller::Provider>(new FakeProvider(provider));
    };
    p.ssh = ssh;
    p.open_store = ops::OwnConnectionTo([] { return controller::StateDbPath(); });
    p.heads = heads;
    p.clock = clock;
    p.user = "alice";
    return p;
  }

  // A cluster record as a launch leaves it: UP, its nodes on 127.0.50.x.
  ClusterRecord Put(const std::string& name, int nodes, const std::string& provider_name,
                    ClusterStatus status = ClusterStatus::kUp) {
    ClusterRecord c;
    c.name = name;
    c.infra = provider_name == "ssh" ? "ssh/pool" : provider_name;
    c.provider = provider_name;
    c.status = status;
    c.state_dir = controller::ClusterDir(name);
    c.certs_dir = c.state_dir + "/certs";
    c.control_dir = c.state_dir + "/cm";
    c.launched_unix_ms = 1;
    for (int i = 0; i < nodes; ++i) {
      NodeRecord n;
      n.name = name + (i == 0 ? "-head" : "-worker" + std::to_string(i));
      n.ip = "127.0.50." + std::to_string(10 + i);
      n.is_head = i == 0;
      c.nodes.push_back(n);
    }
    REQUIRE(controller::EnsureDir(c.state_dir).ok());
    auto store = ClusterStore::Open(controller::StateDbPath());
    REQUIRE(store.ok());
    REQUIRE((*store)->Put(c).ok());
    return c;
  }

  std::optional<ClusterRecord> Stored(const std::string& name) {
    auto store = ClusterStore::Open(controller::StateDbPath());
    REQUIRE(store.ok());
    auto c = (*store)->Get(name);
    REQUIRE(c.ok());
    return *c;
  }
};

task::Task Command(const std::string& run) {
  task::Task t;
  t.run = run;
  t.name = "t";
  return t;
}

TEST_CASE("an unknown cluster is not found, with the command that makes it, for every operation") {
  World w;
  for (Status s : {w.ops.Get("ghost").status(), w.ops.Queue("ghost", false).status(),
                   w.ops.Cancel("ghost", {1}, false).status(), w.ops.Nodes("ghost").status(),
                   w.ops.Stop("ghost"), w.ops.Down("ghost"), w.ops.SetAutostop("ghost", 5, false),
                   w.ops.Exec("ghost", Command("true"), {}).status()}) {
    CHECK(s.code() == Code::kNotFound);
    CHECK(s.message().find("herd launch -c ghost") != std::string::npos);
  }
  CHECK(w.ssh->Calls().empty());
  CHECK(w.provider->calls.empty());
}

TEST_CASE("exec syncs the workdir to every node and submits the run, without setup, as the user") {
  World w;
  w.Put("demo", 2, "local");
  testing::TempDir workdir("herd-ops-wd");
  workdir.Write("train.py", "print(1)\n");
  task::Task t = Command("python train.py");
  t.setup = "pip install x";
  t.workdir = workdir.path();
  auto r = w.ops.Exec("demo", t, {});
  REQUIRE(r.ok());
  CHECK(r->job_id == 1);
  REQUIRE(r->head != nullptr);  // the connection it submitted through, for following
  auto head = w.heads->Head("demo");
  REQUIRE(head->submitted.size() == 1);
  CHECK(head->submitted[0].run() == "python train.py");
  CHECK(head->submitted[0].setup().empty());
  CHECK(head->submitted_by[0] == "alice");
  auto rsyncs = w.ssh->Calls("rsync");
  std::sort(rsyncs.begin(), rsyncs.end());
  CHECK(rsyncs ==
        std::vector<std::string>{
            "rsync 127.0.50.10: " + fs::absolute(workdir.path()).string() + "/ -> sky_workdir/",
            "rsync 127.0.50.11: " + fs::absolute(workdir.path()).string() + "/ -> sky_workdir/"});
}

TEST_CASE("exec on a cluster that is not UP is refused, naming herd start; nothing is submitted") {
  World w;
  w.Put("demo", 1, "local", ClusterStatus::kStopped);
  auto r = w.ops.Exec("demo", Command("true"), {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kFailedPrecondition);
  CHECK(r.status().message().find("herd start demo") != std::string::npos);
  CHECK(w.heads->Head("demo")->submitted.empty());
  CHECK(w.ssh->Calls().empty());
}

TEST_CASE("queue, cancel and nodes go to the head of the cluster named") {
  World w;
  w.Put("one", 1, "local");
  w.Put("two", 1, "local");
  REQUIRE(w.ops.Exec("two", Command("sleep 1"), {}).ok());
  auto q1 = w.ops.Queue("one", false);
  auto q2 = w.ops.Queue("two", false);
  REQUIRE(q1.ok());
  REQUIRE(q2.ok());
  CHECK(q1->empty());
  REQUIRE(q2->size() == 1);
  CHECK((*q2)[0].user() == "alice");
  REQUIRE(w.ops.Cancel("two", {1}, false).ok());
  CHECK(w.heads->Head("two")->cancelled == std::vector<std::vector<int64_t>>{{1}});
  CHECK(w.heads->Head("one")->cancelled.empty());
  w.heads->Head("two")->nodes = {{"two-head", true}};
  auto nodes = w.ops.Nodes("two");
  REQUIRE(nodes.ok());
  REQUIRE(nodes->nodes_size() == 1);
  CHECK(nodes->nodes(0).node_id() == "two-head");
}

TEST_CASE("a stopped cluster's head is not dialled") {
  World w;
  ClusterRecord c = w.Put("demo", 1, "local", ClusterStatus::kStopped);
  auto client = w.ops.ConnectHead(c);
  REQUIRE_FALSE(client.ok());
  CHECK(client.status().message().find("herd start demo") != std::string::npos);
  CHECK(w.heads->Head("demo")->connections == 0);
}

TEST_CASE("stop cancels the jobs, stops every agent, stops the machines and records STOPPED") {
  World w;
  w.Put("demo", 2, "local");
  REQUIRE(w.ops.Stop("demo").ok());
  CHECK(w.heads->Head("demo")->cancelled == std::vector<std::vector<int64_t>>{{}});
  CHECK(w.ssh->Calls("run 127.0.50.10").size() == 1);  // the stop script, once per node
  CHECK(w.ssh->Calls("run 127.0.50.11").size() == 1);
  CHECK(w.ssh->Calls("close").size() == 2);
  CHECK(w.provider->calls == std::vector<std::string>{"stop demo"});
  auto stored = w.Stored("demo");
  REQUIRE(stored.has_value());
  CHECK(stored->status == ClusterStatus::kStopped);
  // A second stop changes nothing.
  REQUIRE(w.ops.Stop("demo").ok());
  CHECK(w.provider->calls.size() == 1);
}

TEST_CASE("stop is refused before anything stops when the provider cannot stop") {
  World w;
  w.Put("demo", 1, "local");
  w.provider->stoppable = FailedPrecondition("these machines cannot be stopped");
  Status s = w.ops.Stop("demo");
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK(w.heads->Head("demo")->cancelled.empty());
  CHECK(w.ssh->Calls().empty());
  CHECK(w.Stored("demo")->status == ClusterStatus::kUp);
}

TEST_CASE("down of existing machines removes what herd installed, then the record and files") {
  World w;
  ClusterRecord c = w.Put("pool", 2, "ssh");
  REQUIRE(w.ops.Down("pool").ok());
  CHECK(w.heads->Head("pool")->cancelled == std::vector<std::vector<int64_t>>{{}});
  for (const std::string host : {"127.0.50.10", "127.0.50.11"}) {
    auto runs = w.ssh->Calls("run " + host);
    REQUIRE(runs.size() == 2);  // stop the agent, then remove its cgroups and files
    CHECK(runs[1].find("rm -rf") != std::string::npos);
  }
  CHECK(w.provider->calls == std::vector<std::string>{"teardown pool"});
  CHECK_FALSE(w.Stored("pool").has_value());
  CHECK_FALSE(fs::exists(c.state_dir));
}

TEST_CASE("down of local nodes removes them through the provider without commands on them") {
  World w;
  w.Put("demo", 2, "local");
  REQUIRE(w.ops.Down("demo").ok());
  CHECK(w.ssh->Calls("run").empty());
  CHECK(w.provider->calls == std::vector<std::string>{"teardown demo"});
  CHECK_FALSE(w.Stored("demo").has_value());
}

TEST_CASE("a fresh launch whose provisioning fails leaves an INIT record and no nodes") {
  World w;
  w.provider->fail_provision = Unavailable("no capacity");
  ops::LaunchOptions o;
  o.cluster = "fresh";
  auto r = w.ops.Launch(Command("true"), o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("no capacity") != std::string::npos);
  auto stored = w.Stored("fresh");
  REQUIRE(stored.has_value());
  CHECK(stored->status == ClusterStatus::kInit);
  CHECK(stored->nodes.empty());
  CHECK(stored->launched_unix_ms == w.clock->UnixMs());  // stamped with the injected clock
  CHECK(w.infras_asked == std::vector<std::string>{"local"});
}

TEST_CASE("a relaunch is refused when the infra differs or the task needs more nodes") {
  World w;
  w.Put("demo", 1, "local");
  ops::LaunchOptions o;
  o.cluster = "demo";
  o.infra = "ssh/pool";
  auto other = w.ops.Launch(Command("true"), o);
  REQUIRE_FALSE(other.ok());
  CHECK(other.status().message().find("runs on local, not ssh/pool") != std::string::npos);
  o.infra = "";
  o.num_nodes = 3;
  auto bigger = w.ops.Launch(Command("true"), o);
  REQUIRE_FALSE(bigger.ok());
  CHECK(bigger.status().message().find("has 1 node(s); the task needs 3") != std::string::npos);
  CHECK(w.provider->calls.empty());
  CHECK(w.heads->Head("demo")->submitted.empty());
}

TEST_CASE("a relaunch with repair_nodes provisions an UP cluster again, as it is") {
  // A managed job's worker was lost: the provider is asked for the same cluster (its Provision
  // makes again what is missing); its answer decides the launch before anything else runs.
  World w;
  w.Put("demo", 2, "local");
  w.provider->fail_provision = Unavailable("the lost node cannot be made again");
  ops::LaunchOptions o;
  o.cluster = "demo";
  o.num_nodes = 2;
  o.repair_nodes = true;
  auto r = w.ops.Launch(Command("true"), o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("cannot be made again") != std::string::npos);
  CHECK(w.provider->calls == std::vector<std::string>{"provision demo 2"});
  CHECK(w.heads->Head("demo")->submitted.empty());
}

TEST_CASE("autostop is set on the head of a local cluster and refused on existing machines") {
  World w;
  w.Put("demo", 1, "local");
  w.Put("pool", 1, "ssh");
  REQUIRE(w.ops.SetAutostop("demo", 10, false).ok());
  CHECK(w.heads->Head("demo")->autostop_minutes == 10);
  CHECK(w.heads->Head("demo")->autostop_command.find(" stop demo -y") != std::string::npos);
  CHECK(w.Stored("demo")->autostop_idle_minutes == 10);
  Status s = w.ops.SetAutostop("pool", 10, false);
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK(w.heads->Head("pool")->autostop_minutes == -2);
  REQUIRE(w.ops.SetAutostop("demo", -1, false).ok());
  CHECK(w.Stored("demo")->autostop_idle_minutes == -1);
  // The namespace anchor autostop started (a `sleep infinity` the head enters) goes with down.
  const std::string anchor_file = controller::ClusterDir("demo") + "/ns-anchor.pid";
  const int anchor = std::stoi(testing::ReadAll(anchor_file));
  // Running: its command line is sleep's (a zombie's or a gone process's is empty).
  auto runs = [&] {
    return testing::ReadAll("/proc/" + std::to_string(anchor) + "/cmdline").starts_with("sleep");
  };
  CHECK(runs());
  REQUIRE(w.ops.Down("demo").ok());
  for (int i = 0; i < 200 && runs(); ++i) ::usleep(10000);
  CHECK_FALSE(runs());
}

TEST_CASE("health names the nodes a head is without, and a head that does not answer") {
  World w;
  ClusterRecord up = w.Put("up", 2, "local");
  ClusterRecord half = w.Put("half", 2, "local");
  ClusterRecord mute = w.Put("mute", 1, "local");
  ClusterRecord stopped = w.Put("stopped", 1, "local", ClusterStatus::kStopped);
  w.heads->Head("up")->nodes = {{"up-head", true}, {"up-worker1", true}};
  w.heads->Head("half")->nodes = {{"half-head", true}, {"half-worker1", false}};
  w.heads->Head("mute")->refuse = Unavailable("connection refused");
  auto health = w.ops.Health({up, half, mute, stopped});
  CHECK(health.count("stopped") == 0);  // only UP clusters are asked
  REQUIRE(health.count("up") == 1);
  CHECK(health["up"].answered);
  CHECK(health["up"].down.empty());
  CHECK(health["half"].answered);
  CHECK(health["half"].down ==
        std::vector<std::pair<std::string, std::string>>{{"half-worker1", "lost"}});
  CHECK_FALSE(health["mute"].answered);
  CHECK(health["mute"].error.find("connection refused") != std::string::npos);
}

TEST_CASE("health asked in threads (a warm worker's way) answers as asked in processes") {
  World w;
  ClusterRecord up = w.Put("up", 2, "local");
  ClusterRecord half = w.Put("half", 2, "local");
  ClusterRecord mute = w.Put("mute", 1, "local");
  w.heads->Head("up")->nodes = {{"up-head", true}, {"up-worker1", true}};
  w.heads->Head("half")->nodes = {{"half-head", true}, {"half-worker1", false}};
  w.heads->Head("mute")->refuse = Unavailable("connection refused");
  auto in_processes = w.ops.Health({up, half, mute});
  ops::SetAskMode(ops::AskMode::kThread);
  auto in_threads = w.ops.Health({up, half, mute});
  ops::SetAskMode(ops::AskMode::kProcess);
  REQUIRE(in_threads.size() == 3);
  for (const auto& [name, h] : in_processes) {
    INFO(name);
    REQUIRE(in_threads.count(name) == 1);
    CHECK(in_threads[name].answered == h.answered);
    CHECK(in_threads[name].error == h.error);
    CHECK(in_threads[name].down == h.down);
  }
  CHECK(in_threads["half"].down ==
        std::vector<std::pair<std::string, std::string>>{{"half-worker1", "lost"}});
  CHECK(in_threads["mute"].error.find("connection refused") != std::string::npos);
}

TEST_CASE("a question in a thread not answered by the timeout is none; the others are kept") {
  World w;
  ClusterRecord fast = w.Put("fast", 1, "local");
  ClusterRecord slow = w.Put("slow", 1, "local");
  // The slow question waits until the test lets it go, after the call returned without it.
  auto release = std::make_shared<std::promise<void>>();
  std::shared_future<void> released = release->get_future().share();
  ops::SetAskMode(ops::AskMode::kThread);
  auto answers = w.ops.AskEachHead(
      {&fast, &slow},
      [released](const ClusterRecord& c) -> std::string {
        if (c.name == "slow") released.wait();
        return "answer of " + c.name;
      },
      std::chrono::milliseconds(100));
  ops::SetAskMode(ops::AskMode::kProcess);
  release->set_value();
  REQUIRE(answers.size() == 2);
  REQUIRE(answers["fast"].has_value());
  CHECK(*answers["fast"] == "answer of fast");
  CHECK_FALSE(answers["slow"].has_value());
}

TEST_CASE("a cloud cluster's head gets the provider's scoped key for autostop, not a command") {
  World w;
  w.provider->grant = controller::AutostopGrant{
      "aws", "us-east-1", "https://ec2.us-east-1.amazonaws.com", {"i-0a", "i-0b"}, "AKIAX", "sec"};
  w.Put("cl", 2, "cloud");
  REQUIRE(w.ops.SetAutostop("cl", 5, true).ok());
  const herd::v1::SetAutostop s = w.heads->Head("cl")->autostop_setting;
  CHECK(s.idle_minutes() == 5);
  CHECK(s.down());
  CHECK(s.command().empty());
  CHECK(s.cloud().provider() == "aws");
  CHECK(s.cloud().region() == "us-east-1");
  CHECK(s.cloud().instance_ids_size() == 2);
  CHECK(s.cloud().access_key_id() == "AKIAX");
  CHECK(s.cloud().secret_access_key() == "sec");
  CHECK(w.Stored("cl")->autostop_down);
  // A stop (not --down) of machines that cannot stop (spot) is refused before the head hears.
  w.provider->stoppable = FailedPrecondition("spot instances cannot stop");
  CHECK(w.ops.SetAutostop("cl", 5, false).code() == Code::kFailedPrecondition);
  CHECK(w.heads->Head("cl")->autostop_setting.down());
  // Cancelled: no key goes to the head.
  REQUIRE(w.ops.SetAutostop("cl", -1, false).ok());
  CHECK_FALSE(w.heads->Head("cl")->autostop_setting.has_cloud());
  CHECK(w.Stored("cl")->autostop_idle_minutes == -1);
}

// A World whose commands run as a team server's, on a cloud whose provider would grant the head
// an autostop key (which must then not be asked for).
struct ServerWorld : World {
  testing::ScopedEnv by_server{controller::kAutostopByServerEnv, "1"};
  ServerWorld() {
    provider->grant = controller::AutostopGrant{
        "aws", "us-east-1", "https://ec2.us-east-1.amazonaws.com", {"i-0a"}, "AKIAX", "sec"};
  }
};

TEST_CASE("under a team server a cloud cluster's head gets no key; the sweep stops it when due") {
  ServerWorld w;
  w.Put("cl", 1, "cloud");
  w.Put("gone", 1, "cloud");
  w.Put("silent", 1, "cloud");
  w.Put("plain", 1, "cloud");  // no autostop: never asked
  REQUIRE(w.ops.SetAutostop("cl", 5, false).ok());
  REQUIRE(w.ops.SetAutostop("gone", 0, true).ok());
  REQUIRE(w.ops.SetAutostop("silent", 5, false).ok());
  const herd::v1::SetAutostop s = w.heads->Head("cl")->autostop_setting;
  CHECK(s.idle_minutes() == 5);
  CHECK(s.server_stops());
  CHECK_FALSE(s.has_cloud());
  CHECK(s.command().empty());
  CHECK(w.heads->Head("gone")->autostop_setting.down());
  for (const auto& call : w.provider->calls) CHECK_FALSE(call.starts_with("grant "));
  CHECK(std::count(w.provider->calls.begin(), w.provider->calls.end(), "check-autostop cl") == 1);

  // Nothing due: nothing stopped.
  CHECK(w.ops.SweepAutostop().empty());
  w.heads->Head("plain")->autostop_due = true;  // not set: not the server's to stop
  CHECK(w.ops.SweepAutostop().empty());
  // A head that does not answer is not stopped on a guess.
  w.heads->Head("silent")->autostop_due = true;
  w.heads->Head("silent")->refuse = Unavailable("no route to host");
  CHECK(w.ops.SweepAutostop().empty());

  w.heads->Head("cl")->autostop_due = true;
  w.heads->Head("gone")->autostop_due = true;
  const std::vector<ops::AutostopOutcome> done = w.ops.SweepAutostop();
  REQUIRE(done.size() == 2);
  for (const auto& o : done) {
    INFO(o.cluster, ": ", o.status.message());
    CHECK(o.status.ok());
    CHECK(o.down == (o.cluster == "gone"));
  }
  CHECK(w.Stored("cl")->status == ClusterStatus::kStopped);
  CHECK_FALSE(w.Stored("gone").has_value());
  CHECK(w.Stored("silent")->status == ClusterStatus::kUp);
  CHECK(w.Stored("plain")->status == ClusterStatus::kUp);
  const auto& calls = w.provider->calls;
  CHECK(std::count(calls.begin(), calls.end(), "stop cl") == 1);
  CHECK(std::count(calls.begin(), calls.end(), "teardown gone") == 1);
  CHECK(std::count(calls.begin(), calls.end(), "stop silent") == 0);
  CHECK(std::count(calls.begin(), calls.end(), "stop plain") == 0);
}

TEST_CASE("the server's autostop asks the head again under the lock and leaves a busy cluster") {
  ServerWorld w;
  w.Put("cl", 1, "cloud");
  REQUIRE(w.ops.SetAutostop("cl", 1, false).ok());
  // A job came since the sweep's question: the head no longer says due.
  CHECK(w.ops.AutostopNow("cl").code() == Code::kFailedPrecondition);
  // A command holds the cluster's lock: using it, so not idle; the next sweep looks again.
  {
    auto held = controller::ClusterLock::Acquire("cl", std::chrono::milliseconds(0), "herd exec");
    REQUIRE(held.ok());
    w.heads->Head("cl")->autostop_due = true;
    CHECK(w.ops.AutostopNow("cl").code() == Code::kUnavailable);
  }
  CHECK(w.Stored("cl")->status == ClusterStatus::kUp);
  // A provider whose machines herd does not stop (an ssh pool, Slurm) is refused under a team
  // server too, before the head hears; the setting made before stays.
  w.provider->grant.reset();
  CHECK(w.ops.SetAutostop("cl", 5, false).code() == Code::kFailedPrecondition);
  CHECK(w.heads->Head("cl")->autostop_setting.idle_minutes() == 1);
  // Free again, and still due: stopped.
  REQUIRE(w.ops.AutostopNow("cl").ok());
  CHECK(w.Stored("cl")->status == ClusterStatus::kStopped);
}

TEST_CASE(
    "a server's autostop stop that failed is finished by the next sweep, head silent or not") {
  ServerWorld w;
  w.Put("cl", 1, "cloud");
  REQUIRE(w.ops.SetAutostop("cl", 1, false).ok());
  w.heads->Head("cl")->autostop_due = true;
  w.provider->fail_stop = Unavailable("EC2 StopInstances: connection refused");
  std::vector<ops::AutostopOutcome> done = w.ops.SweepAutostop();
  REQUIRE(done.size() == 1);
  CHECK(done[0].status.code() == Code::kUnavailable);
  CHECK(w.Stored("cl")->status == ClusterStatus::kUp);
  // The agents were stopped before EC2 failed: the head no longer answers.
  w.heads->Head("cl")->refuse = Unavailable("connection refused");
  w.provider->fail_stop = Status::Ok();
  done = w.ops.SweepAutostop();
  REQUIRE(done.size() == 1);
  CHECK(done[0].status.ok());
  CHECK(w.Stored("cl")->status == ClusterStatus::kStopped);
  CHECK(std::count(w.provider->calls.begin(), w.provider->calls.end(), "stop cl") == 2);
  CHECK(w.ops.SweepAutostop().empty());  // STOPPED: nothing more

  // A failed stop of a cluster whose head answers again, not due (the user started it again):
  // nothing is stopped, and what was left to finish is dropped.
  w.Put("again", 1, "cloud");
  REQUIRE(w.ops.SetAutostop("again", 1, false).ok());
  w.heads->Head("again")->autostop_due = true;
  w.provider->fail_stop = Unavailable("EC2 StopInstances: connection refused");
  REQUIRE(w.ops.SweepAutostop().size() == 1);
  w.provider->fail_stop = Status::Ok();
  w.heads->Head("again")->autostop_due = false;
  done = w.ops.SweepAutostop();
  REQUIRE(done.size() == 1);
  CHECK(done[0].status.code() == Code::kFailedPrecondition);
  CHECK(w.ops.SweepAutostop().empty());
  CHECK(w.Stored("again")->status == ClusterStatus::kUp);
  CHECK(std::count(w.provider->calls.begin(), w.provider->calls.end(), "stop again") == 1);
}

TEST_CASE("status refresh: stopping shows AUTOSTOPPING, stopped is recorded, gone is torn down") {
  World w;
  ClusterRecord c = w.Put("cl", 1, "cloud");
  c.autostop_idle_minutes = 1;
  REQUIRE((*ClusterStore::Open(controller::StateDbPath()))->Put(c).ok());
  w.Put("plain", 1, "cloud");  // no autostop: asked only with -r
  auto list = [&] { return *w.ops.List(); };

  w.provider->machines = {controller::MachinesState::kRunning, "i-0a running"};
  auto r = w.ops.Refresh(list(), false);
  CHECK(r.shown.empty());
  CHECK(w.provider->calls == std::vector<std::string>{"machines cl"});

  w.provider->machines = {controller::MachinesState::kStopping, "i-0a stopping"};
  r = w.ops.Refresh(list(), false);
  CHECK(r.shown == std::map<std::string, std::string>{{"cl", "AUTOSTOPPING"}});
  CHECK(w.Stored("cl")->status == ClusterStatus::kUp);

  w.provider->machines = {controller::MachinesState::kStopped, "i-0a stopped"};
  w.provider->calls.clear();
  // -r: both clusters, their providers asked at once (each call waits for the other).
  w.provider->machines_together = 2;
  r = w.ops.Refresh(list(), true);
  w.provider->machines_together = 0;
  CHECK(w.provider->machines_max_inside == 2);
  std::sort(w.provider->calls.begin(), w.provider->calls.end());
  CHECK(w.provider->calls == std::vector<std::string>{"machines cl", "machines plain"});
  CHECK(r.shown.empty());
  CHECK(w.Stored("cl")->status == ClusterStatus::kStopped);
  CHECK(w.Stored("plain")->status == ClusterStatus::kStopped);

  w.provider->machines = {controller::MachinesState::kGone, "i-0a terminated"};
  w.provider->calls.clear();
  r = w.ops.Refresh(list(), false);  // STOPPED clusters are asked only with -r
  CHECK(w.provider->calls.empty());
  r = w.ops.Refresh(list(), true);
  CHECK_FALSE(w.Stored("cl").has_value());
  CHECK_FALSE(w.Stored("plain").has_value());
  CHECK(std::count(w.provider->calls.begin(), w.provider->calls.end(), "teardown cl") == 1);
  REQUIRE(r.notes.size() == 2);
  CHECK(r.notes[0] ==
        "Cluster cl: its machines are gone (i-0a terminated); its record is removed.");
}

}  // namespace
}  // namespace herd
