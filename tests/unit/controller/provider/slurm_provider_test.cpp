// The slurm provider without a Slurm: ~/.slurm/config parsing, infra names, sinfo/squeue/scontrol
// parsing, the sbatch command and batch script, and Provision/StartAgents/Allocation/Teardown
// against a scripted login node (a fake SshRunner that answers each Slurm command).
#include "controller/provider/slurm_provider.hpp"
#include "controller/ssh/ssh_command.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <mutex>
#include <regex>
#include <sstream>

#include "shared/common/file_util.hpp"
#include "tests/unit/test_support.hpp"

namespace fs = std::filesystem;
using namespace herd;
using namespace herd::controller;

namespace {

// A login node whose Slurm answers from the fields below; every command is recorded.
class FakeLogin : public SshRunner {
 public:
  bool answers = true;
  std::string sinfo = "gpu*|infinite|gpu:L4:2(S:0)\ncpu|1-00:00:00|(null)\n";
  int sbatch_exit = 0;
  std::string sbatch_out = "42\n", sbatch_err;
  std::vector<std::string> states = {"PENDING|Resources|", "RUNNING|None|n[1-2]"};
  std::size_t polls = 0;
  std::string cancelled;  // the job scancel was given: squeue says CANCELLED of it
  std::string sbatch_stdin;
  std::vector<std::string> calls;

  Result<ProcResult> Run(const SshTarget& t, const std::string& cmd, std::chrono::milliseconds,
                         std::string_view stdin_data) override {
    calls.push_back(cmd);
    if (!answers) return Unavailable("ssh: connect to host " + t.host + ": No route to host");
    ProcResult r;
    r.exit_code = 0;
    if (cmd.starts_with("sinfo")) {
      r.out = sinfo;
    } else if (cmd.starts_with("sbatch")) {
      sbatch_stdin = std::string(stdin_data);
      r.exit_code = sbatch_exit;
      r.out = sbatch_out;
      r.err = sbatch_err;
    } else if (cmd.starts_with("squeue")) {
      if (!cancelled.empty() && cmd.find(" -j " + cancelled + " ") != std::string::npos) {
        r.out = "CANCELLED|None|n[1-2]\n";
      } else {
        r.out = states[std::min(polls, states.size() - 1)] + "\n";
        ++polls;
      }
    } else if (cmd.starts_with("scontrol show hostnames")) {
      r.out = "n1\nn2\n";
    } else if (cmd.starts_with("scontrol show node")) {
      r.out =
          "NodeName=n2 Arch=x86_64 NodeAddr=10.0.0.12 NodeHostName=n2 State=ALLOCATED\n"
          "NodeName=n1 Arch=x86_64 NodeAddr=10.0.0.11 NodeHostName=n1 State=ALLOCATED\n";
    } else if (cmd.starts_with("scancel")) {
      cancelled = cmd.substr(8, cmd.find(' ', 8) - 8);  // "scancel JOB ..."
    }
    return r;
  }
  Status Rsync(const SshTarget&, const std::string& src, const std::string& dst, bool,
               std::chrono::milliseconds) override {
    calls.push_back("rsync " + src + " -> " + dst);
    return Status::Ok();
  }
  Status WaitReady(const SshTarget&, std::chrono::milliseconds) override { return Status::Ok(); }
  Result<int> ForwardLocalPort(const SshTarget&, const std::string&, int) override {
    return Unavailable("no forwards here");
  }
  Status CloseMaster(const SshTarget&) override { return Status::Ok(); }

  int Count(std::string_view prefix) const {
    return static_cast<int>(
        std::count_if(calls.begin(), calls.end(), [&](auto& c) { return c.starts_with(prefix); }));
  }
};

struct Fixture {
  herd::testing::TempDir dir;
  std::string config = dir.path() + "/slurm_config";
  std::string state = dir.path() + "/provider";
  std::shared_ptr<FakeLogin> login = std::make_shared<FakeLogin>();

  Fixture() {
    REQUIRE(WriteFileAtomic(config,
                            "Host mycluster\n  HostName 10.0.0.1\n  User alice\n"
                            "  IdentityFile /keys/id\n",
                            0600)
                .ok());
  }
  SlurmProvider Make(const std::string& infra, SlurmDemand d = {}) {
    return SlurmProvider(infra, d, login, config);
  }
};

}  // namespace

TEST_CASE("~/.slurm/config: hosts, keys in any case, Key=value, defaults from Host *") {
  auto c = ParseSlurmConfig(
      "# clusters\n"
      "Host a100-cluster h100\n"
      "  HostName login.example.com\n"
      "  user=alice\n"
      "  PORT 2222\n"
      "\n"
      "Host h100\n"
      "  HostName h100-login\n"
      "  ProxyJump bastion\n"
      "Host *\n"
      "  User bob\n"
      "  IdentityFile ~/.ssh/id_slurm\n",
      "cfg");
  REQUIRE(c.ok());
  REQUIRE(c->size() == 2);
  CHECK((*c)[0].name == "a100-cluster");
  CHECK((*c)[0].hostname == "login.example.com");
  CHECK((*c)[0].user == "alice");
  CHECK((*c)[0].port == 2222);
  CHECK((*c)[0].identity_file.ends_with("/.ssh/id_slurm"));
  CHECK((*c)[0].identity_file[0] == '/');
  CHECK((*c)[0].location == "cfg:2");
  // The first value among the matching blocks wins: h100 takes the first block's HostName.
  CHECK((*c)[1].name == "h100");
  CHECK((*c)[1].hostname == "login.example.com");
  CHECK((*c)[1].user == "alice");
  // The jump host takes what the blocks matching it say (Host *), and the cluster's key otherwise.
  CHECK((*c)[1].jump == SshJump{"bastion", 22, "bob", (*c)[0].identity_file});
}

TEST_CASE("~/.slurm/config: ProxyJump as user@host:port, or naming a Host entry (not a cluster)") {
  auto c = ParseSlurmConfig(
      "Host gpu\n"
      "  HostName 10.0.0.5\n"
      "  User alice\n"
      "  IdentityFile /keys/alice\n"
      "  ProxyJump gate\n"
      "Host cpu\n"
      "  HostName 10.0.0.6\n"
      "  IdentityFile /keys/alice\n"
      "  ProxyJump jo@[fd00::1]:2200\n"
      "Host direct\n"
      "  HostName 10.0.0.7\n"
      "  ProxyJump none\n"
      "Host gate\n"
      "  HostName bastion.example.com\n"
      "  User gatekeeper\n"
      "  Port 2022\n"
      "  IdentityFile /keys/gate\n",
      "cfg");
  REQUIRE_MESSAGE(c.ok(), c.status().ToString());
  REQUIRE(c->size() == 3);  // gate is gpu's bastion, not a cluster
  CHECK((*c)[0].jump == SshJump{"bastion.example.com", 2022, "gatekeeper", "/keys/gate"});
  CHECK((*c)[1].jump == SshJump{"fd00::1", 2200, "jo", "/keys/alice"});
  CHECK((*c)[2].name == "direct");
  CHECK((*c)[2].jump.empty());

  for (const char* bad : {"-oProxyCommand=x", "h:0", "h:99999", "h:", "@h", "[::1", "a b", "a,,b",
                          "a,", ",a", "a,h:0"}) {
    auto r = ParseSlurmConfig(std::string("Host a\n  ProxyJump ") + bad + "\n", "cfg");
    CHECK_MESSAGE(!r.ok(), bad);
  }
}

TEST_CASE("~/.slurm/config: a Host without HostName is its own address") {
  auto c = ParseSlurmConfig("Host login1\n", "cfg");
  REQUIRE(c.ok());
  REQUIRE(c->size() == 1);
  CHECK((*c)[0].hostname == "login1");
  CHECK((*c)[0].port == 22);
  CHECK((*c)[0].user.empty());
}

TEST_CASE("~/.slurm/config: mistakes name file and line") {
  auto bad_port = ParseSlurmConfig("Host a\n  Port ssh\n", "cfg");
  REQUIRE_FALSE(bad_port.ok());
  CHECK(bad_port.status().message() == "cfg:2: Port: expected a number from 1 to 65535, got 'ssh'");
  auto orphan = ParseSlurmConfig("User alice\nHost a\n", "cfg");
  REQUIRE_FALSE(orphan.ok());
  CHECK(orphan.status().message() == "cfg:1: User comes before any Host line");
  auto no_value = ParseSlurmConfig("Host a\n  HostName\n", "cfg");
  REQUIRE_FALSE(no_value.ok());
  CHECK(no_value.status().message() == "cfg:2: HostName: expected a value");
  auto missing = LoadSlurmConfig("/nonexistent/slurm/config");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == Code::kNotFound);
  CHECK(missing.status().message().find("/nonexistent/slurm/config does not exist") !=
        std::string::npos);
}

TEST_CASE("slurm infra names") {
  CHECK(IsSlurmInfra("slurm"));
  CHECK(IsSlurmInfra("slurm/c/p"));
  CHECK_FALSE(IsSlurmInfra("slurmx"));
  auto a = ParseSlurmInfra("slurm");
  REQUIRE(a.ok());
  CHECK(a->cluster.empty());
  auto b = ParseSlurmInfra("slurm/mycluster/gpu");
  REQUIRE(b.ok());
  CHECK(b->cluster == "mycluster");
  CHECK(b->partition == "gpu");
  CHECK_FALSE(ParseSlurmInfra("slurm/").ok());
  CHECK_FALSE(ParseSlurmInfra("slurm/a/").ok());
  CHECK_FALSE(ParseSlurmInfra("slurm/a/b/c").ok());
  std::vector<SlurmClusterConfig> cs{{"one", "h1", "", 22, "", {}, ""},
                                     {"two", "h2", "", 22, "", {}, ""}};
  CHECK(FindSlurmCluster(cs, "", "cfg")->name == "one");
  auto none = FindSlurmCluster(cs, "three", "cfg");
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().message() == "no Slurm cluster three in cfg (clusters: one, two)");
}

TEST_CASE("sinfo partitions, GRES for a demand") {
  auto parts = ParseSinfoPartitions(
      "gpu*|infinite|gpu:L4:2(S:0-1),gpu:a100:4(S:0)\ngpu*|infinite|gpu:L4:4\ncpu|2:00:00|(null)"
      "\n");
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].name == "gpu");
  CHECK(parts[0].is_default);
  CHECK(parts[0].gres == std::vector<std::string>{"gpu:L4:2", "gpu:a100:4", "gpu:L4:4"});
  CHECK(parts[1].name == "cpu");
  CHECK_FALSE(parts[1].is_default);
  CHECK(parts[1].time_limit == "2:00:00");
  CHECK(parts[1].gres.empty());

  CHECK(*GresFor(parts[0], {"l4", 3, 0, 0}, "c") == "gpu:L4:3");
  CHECK(*GresFor(parts[0], {"A100", 0.5, 0, 0}, "c") == "gpu:a100:1");
  CHECK(GresFor(parts[0], {}, "c")->empty());
  auto lacks = GresFor(parts[0], {"H100", 1, 0, 0}, "c");
  REQUIRE_FALSE(lacks.ok());
  CHECK(lacks.status().message() ==
        "partition gpu of Slurm cluster c has no GPU H100 (its GRES: gpu:L4:2, gpu:a100:4, "
        "gpu:L4:4)");
  auto few = GresFor(parts[0], {"A100", 8, 0, 0}, "c");
  REQUIRE_FALSE(few.ok());
  CHECK(few.status().message() ==
        "partition gpu of Slurm cluster c has at most 4 a100 per node; the task asks for 8");
  auto cpu_only = GresFor(parts[1], {"L4", 1, 0, 0}, "c");
  REQUIRE_FALSE(cpu_only.ok());
  CHECK(cpu_only.status().message().ends_with("(its GRES: none)"));
}

TEST_CASE("the sbatch command and the batch script") {
  SbatchRequest r;
  r.job_name = "herd-demo";
  r.nodes = 2;
  r.partition = "gpu";
  r.gres = "gpu:L4:2";
  r.cpus_per_task = 4;
  r.mem_mb = 16384;
  r.time_limit = "1-00:00:00";
  CHECK(SbatchCommand(r) ==
        "sbatch --parsable --job-name='herd-demo' --nodes=2 --ntasks-per-node=1 "
        "--partition='gpu' --gres='gpu:L4:2' --cpus-per-task=4 --mem=16384M "
        "--time='1-00:00:00' --wait-all-nodes=1 --no-requeue --no-kill --output=/dev/null");
  SbatchRequest plain;
  plain.job_name = "herd-x";
  CHECK(SbatchCommand(plain) ==
        "sbatch --parsable --job-name='herd-x' --nodes=1 --ntasks-per-node=1 "
        "--wait-all-nodes=1 --no-requeue --no-kill --output=/dev/null");
  std::string script = BatchScript("/tmp/herd-demo-$SLURM_JOB_ID");
  CHECK(script.starts_with("#!/bin/bash\n"));
  CHECK(script.find("export HERD_SLURM_PREFIX=\"/tmp/herd-demo-$SLURM_JOB_ID\"") !=
        std::string::npos);
  CHECK(script.find("exec srun --ntasks-per-node=1 --kill-on-bad-exit=0") != std::string::npos);
  CHECK(script.find("cd \"$P/$SLURMD_NODENAME\"") != std::string::npos);
  // The step's script sits in single quotes: it must hold none of its own.
  std::string step = script.substr(script.find("-c '") + 4);
  step.pop_back();  // the final newline
  CHECK(step.back() == '\'');
  step.pop_back();
  CHECK(step.find('\'') == std::string::npos);
}

TEST_CASE("squeue and scontrol output") {
  auto s = ParseSqueueLine("RUNNING|None|n[1-2]\n");
  CHECK(s.state == "RUNNING");
  CHECK(s.reason == "None");
  CHECK(s.nodelist == "n[1-2]");
  CHECK(ParseSqueueLine("").state.empty());
  CHECK(SlurmJobActive("PENDING"));
  CHECK(SlurmJobActive("COMPLETING"));
  CHECK_FALSE(SlurmJobActive("TIMEOUT"));
  CHECK_FALSE(SlurmJobActive(""));
  auto nodes = ParseScontrolNodes("NodeName=a NodeAddr=10.1.1.1 State=IDLE\nNodeName=b State=X\n");
  REQUIRE(nodes.size() == 2);
  CHECK(nodes[0] == std::pair<std::string, std::string>{"a", "10.1.1.1"});
  CHECK(nodes[1] == std::pair<std::string, std::string>{"b", "b"});
}

TEST_CASE("Provision submits one allocation and returns its nodes in Slurm's order") {
  Fixture f;
  auto p = f.Make("slurm/mycluster/gpu", {"L4", 2, 2, 0});
  auto nodes = p.Provision({"demo", 2, f.state, "ssh-ed25519 AAAA"});
  REQUIRE_MESSAGE(nodes.ok(), nodes.status().message());
  REQUIRE(nodes->size() == 2);
  CHECK((*nodes)[0].name == "demo-head");
  CHECK((*nodes)[0].ip == "10.0.0.1");  // reached through the login node
  CHECK((*nodes)[0].ssh_user == "alice");
  CHECK((*nodes)[0].identity_file == "/keys/id");
  CHECK((*nodes)[0].internal_ip == "10.0.0.11");
  CHECK((*nodes)[1].name == "demo-worker1");
  CHECK((*nodes)[1].internal_ip == "10.0.0.12");
  REQUIRE(f.login->Count("sbatch") == 1);
  auto sbatch = *std::find_if(f.login->calls.begin(), f.login->calls.end(),
                              [](auto& c) { return c.starts_with("sbatch"); });
  CHECK(sbatch ==
        "sbatch --parsable --job-name='herd-demo' --nodes=2 --ntasks-per-node=1 "
        "--partition='gpu' --gres='gpu:L4:2' --cpus-per-task=2 --wait-all-nodes=1 --no-requeue "
        "--no-kill --output=/dev/null");
  CHECK(f.login->sbatch_stdin == BatchScript("/tmp/herd-demo-$SLURM_JOB_ID"));
  CHECK(f.login->polls == 2);  // PENDING, then RUNNING

  // Again while it runs: kept, nothing submitted.
  auto again = p.Provision({"demo", 2, f.state, ""});
  REQUIRE(again.ok());
  CHECK(f.login->Count("sbatch") == 1);

  // A record of a herd whose batch script took one set of agent files only (no generation
  // line): its allocation cannot take new agents, so it is cancelled and submitted again.
  auto text = ReadFile(f.state + "/slurm.state");
  REQUIRE(text.ok());
  std::string old_record;
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("generation=")) old_record += line + "\n";
  }
  REQUIRE(old_record.size() < text->size());
  REQUIRE(WriteFileAtomic(f.state + "/slurm.state", old_record, 0600).ok());
  f.login->sbatch_out = "43\n";
  auto replaced = p.Provision({"demo", 2, f.state, ""});
  REQUIRE_MESSAGE(replaced.ok(), replaced.status().message());
  CHECK(f.login->Count("scancel 42") == 1);
  CHECK(f.login->Count("sbatch") == 2);

  auto a = p.Allocation("demo", f.state);
  REQUIRE(a.ok());
  CHECK(a->known);
  CHECK(a->alive);
  CHECK(a->state == "RUNNING");
}

TEST_CASE("StartAgents sends the files to the login node and sbcasts them, the marker last") {
  Fixture f;
  auto p = f.Make("slurm/mycluster", {"L4", 1, 0, 0});
  REQUIRE(p.Provision({"demo", 2, f.state, ""}).ok());
  std::string certs = f.dir.path() + "/certs";
  fs::create_directories(certs);
  for (const char* n : {"ca.crt", "agent.crt", "agent.key"}) {
    REQUIRE(WriteFileAtomic(certs + "/" + n, n, 0600).ok());
  }
  std::string herdlet = f.dir.path() + "/herdlet";
  REQUIRE(WriteFileAtomic(herdlet, "binary", 0700).ok());
  REQUIRE(p.StartAgents(
               "demo", f.state, herdlet,
               {{"demo-head", "role: head\n", certs}, {"demo-worker1", "role: worker\n", certs}})
              .ok());
  auto& calls = f.login->calls;
  auto at = [&](std::string_view prefix) {
    return std::find_if(calls.begin(), calls.end(),
                        [&](auto& c) { return c.starts_with(prefix); }) -
           calls.begin();
  };
  CHECK(at("mkdir -p '.herd/slurm/demo-42'") < at("rsync"));
  CHECK(f.login->Count("rsync " + herdlet + " -> .herd/slurm/demo-42/herdlet") == 1);
  CHECK(f.login->Count("rsync " + f.state + "/agent-files.tar -> .herd/slurm/demo-42/agent.tar") ==
        1);
  std::string sbcast = calls[at("sbcast")];
  CHECK(sbcast ==
        "sbcast -f -p --jobid=42 '.herd/slurm/demo-42/herdlet' '/tmp/herd-demo-42.g1.herdlet' && "
        "sbcast -f --jobid=42 '.herd/slurm/demo-42/agent.tar' '/tmp/herd-demo-42.g1.tar' && "
        "sbcast -f --jobid=42 '.herd/slurm/demo-42/ready' '/tmp/herd-demo-42.g1.ready'");
  CHECK(f.login->Count("srun") == 0);  // the first agents: nothing to stop
  // Local staging files are gone once sent.
  CHECK_FALSE(fs::exists(f.state + "/agent-files.tar"));
  CHECK_FALSE(fs::exists(f.state + "/agent-files"));

  // Agents started again in the same allocation (another herdlet, a head that did not answer):
  // the next generation of files, then the earlier agents are stopped on every node.
  calls.clear();
  REQUIRE(p.StartAgents(
               "demo", f.state, herdlet,
               {{"demo-head", "role: head\n", certs}, {"demo-worker1", "role: worker\n", certs}})
              .ok());
  CHECK(calls[at("sbcast")].find("'/tmp/herd-demo-42.g2.herdlet'") != std::string::npos);
  CHECK(calls[at("sbcast")].find("'/tmp/herd-demo-42.g2.ready'") != std::string::npos);
  REQUIRE(at("srun") < static_cast<long>(calls.size()));
  CHECK(at("sbcast") < at("srun"));
  CHECK(calls[at("srun")] ==
        "srun --overlap --jobid=42 --nodes=2 --ntasks-per-node=1 --mem=0 --gres=none "
        "--kill-on-bad-exit=0 /bin/bash -c " +
            ShellQuote(StopEarlierAgentsScript("/tmp/herd-demo-42", 2)));
}

TEST_CASE("the earlier agents' pattern names only the generations before") {
  const std::string s = StopEarlierAgentsScript("/tmp/herd-demo-42", 3);
  CHECK(s.starts_with("pat='^/tmp/herd-demo-42\\.g(1|2)\\.herdlet( |$)'; pkill -TERM -f "));
  CHECK(s.find("exit 1") != std::string::npos);
  // The pattern as pgrep reads it (an extended regular expression), against command lines.
  std::regex pat("^/tmp/herd-demo-42\\.g(1|2)\\.herdlet( |$)", std::regex::extended);
  CHECK(std::regex_search("/tmp/herd-demo-42.g1.herdlet --config herdlet.yaml", pat));
  CHECK(std::regex_search("/tmp/herd-demo-42.g2.herdlet", pat));
  CHECK_FALSE(std::regex_search("/tmp/herd-demo-42.g3.herdlet --config herdlet.yaml", pat));
  CHECK_FALSE(std::regex_search("/tmp/herd-demo-42.g12.herdlet --config herdlet.yaml", pat));
  CHECK_FALSE(std::regex_search("/tmp/herd-demo-420.g1.herdlet --config herdlet.yaml", pat));
  CHECK_FALSE(std::regex_search("/bin/bash -c pat=/tmp/herd-demo-42.g1.herdlet", pat));
}

TEST_CASE("Teardown cancels the job, waits for it to end and removes the login node's files") {
  Fixture f;
  auto p = f.Make("slurm/mycluster");
  REQUIRE(p.Provision({"demo", 2, f.state, ""}).ok());
  REQUIRE(p.Teardown("demo", f.state).ok());
  CHECK(f.login->Count("scancel 42") == 1);
  CHECK(f.login->Count("rm -rf '.herd/slurm/demo-42'") == 1);
  CHECK_FALSE(fs::exists(f.state + "/slurm.state"));
  // Nothing recorded: nothing to do.
  f.login->calls.clear();
  REQUIRE(p.Teardown("demo", f.state).ok());
  CHECK(f.login->calls.empty());
}

TEST_CASE("Allocation says how an allocation ended") {
  Fixture f;
  auto p = f.Make("slurm/mycluster");
  REQUIRE(p.Provision({"demo", 2, f.state, ""}).ok());
  f.login->states = {"TIMEOUT|TimeLimit|n[1-2]"};
  f.login->polls = 0;
  auto a = p.Allocation("demo", f.state);
  REQUIRE(a.ok());
  CHECK_FALSE(a->alive);
  CHECK(a->state == "TIMEOUT");
  CHECK(a->detail ==
        "its Slurm allocation (job 42 on mycluster) is TIMEOUT: it hit its time limit");
  CHECK(p.CheckStoppable("demo", f.state).code() == Code::kFailedPrecondition);
}

TEST_CASE("bad input: each a one-line error naming the cause, nothing left allocated") {
  Fixture f;
  SUBCASE("a login node that does not answer") {
    f.login->answers = false;
    auto r = f.Make("slurm/mycluster").Provision({"demo", 1, f.state, ""});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kUnavailable);
    CHECK(r.status().message() ==
          "slurm cluster mycluster login node (10.0.0.1:22) does not answer: ssh: connect to "
          "host 10.0.0.1: No route to host");
  }
  SUBCASE("a partition the cluster lacks") {
    auto r = f.Make("slurm/mycluster/nope").Provision({"demo", 1, f.state, ""});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message() ==
          "Slurm cluster mycluster has no partition nope (partitions: gpu, cpu)");
    CHECK(f.login->Count("sbatch") == 0);
  }
  SUBCASE("a GRES the partition lacks") {
    auto r = f.Make("slurm/mycluster/cpu", {"L4", 1, 0, 0}).Provision({"demo", 1, f.state, ""});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() ==
          "partition cpu of Slurm cluster mycluster has no GPU L4 (its GRES: none)");
    CHECK(f.login->Count("sbatch") == 0);
  }
  SUBCASE("sbatch refuses (a QOS limit)") {
    f.login->sbatch_exit = 1;
    f.login->sbatch_out = "";
    f.login->sbatch_err =
        "sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission "
        "failed: Job violates accounting/QOS policy (job submit limit, user's size and/or time "
        "limits)\n";
    auto r = f.Make("slurm/mycluster").Provision({"demo", 1, f.state, ""});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message() ==
          "Slurm cluster mycluster refused the allocation (sbatch): QOSMaxSubmitJobPerUserLimit; "
          "Batch job submission failed: Job violates accounting/QOS policy (job submit limit, "
          "user's size and/or time limits)");
  }
  SUBCASE("a job that can never start is cancelled") {
    f.login->states = {"PENDING|PartitionNodeLimit|"};
    auto r = f.Make("slurm/mycluster").Provision({"demo", 4, f.state, ""});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() ==
          "Slurm cluster mycluster cannot run the allocation: job 42 is PENDING "
          "(PartitionNodeLimit)");
    CHECK(f.login->Count("scancel 42") == 1);
  }
  SUBCASE("an unknown cluster names the ones that exist") {
    auto r = f.Make("slurm/other").Provision({"demo", 1, f.state, ""});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kNotFound);
    CHECK(r.status().message() ==
          "no Slurm cluster other in " + f.config + " (clusters: mycluster)");
  }
  CHECK_FALSE(fs::exists(f.state + "/slurm.state"));
}

TEST_CASE(
    "~/.slurm/config: a chain of jump hosts, as a list or through a bastion's own ProxyJump") {
  // ProxyJump outer,inner: outer first, then inner from it, then the login node from inner. outer
  // is reached through its own ProxyJump (edge) first; inner's own ProxyJump is not used (ssh
  // takes the list's order for every hop after the first).
  auto c = ParseSlurmConfig(
      "Host listed\n"
      "  HostName 10.0.0.5\n"
      "  IdentityFile /keys/alice\n"
      "  ProxyJump outer,root@inner:2200\n"
      "Host nested\n"
      "  HostName 10.0.0.6\n"
      "  IdentityFile /keys/alice\n"
      "  ProxyJump inner\n"
      "Host outer\n"
      "  HostName 192.0.2.1\n"
      "  User gate\n"
      "  IdentityFile /keys/gate\n"
      "  ProxyJump edge.example:2022\n"
      "Host inner\n"
      "  HostName 192.0.2.2\n"
      "  User bob\n"
      "  ProxyJump outer\n",
      "cfg");
  REQUIRE_MESSAGE(c.ok(), c.status().ToString());
  REQUIRE(c->size() == 2);  // outer and inner are bastions
  const SshJump edge{"edge.example", 2022, "", "/keys/alice"};
  const SshJump outer{"192.0.2.1", 22, "gate", "/keys/gate"};
  CHECK((*c)[0].name == "listed");
  CHECK((*c)[0].jump == SshJump{"192.0.2.2", 2200, "root", "/keys/alice", {edge, outer}});
  // A bastion with a ProxyJump of its own is reached through it: nested -> inner -> outer ->
  // edge, flattened first to last.
  CHECK((*c)[1].name == "nested");
  CHECK((*c)[1].jump == SshJump{"192.0.2.2", 22, "bob", "/keys/alice", {edge, outer}});

  auto loop = ParseSlurmConfig(
      "Host a\n  ProxyJump b\nHost b\n  ProxyJump c\nHost c\n  ProxyJump b\n", "cfg");
  REQUIRE_FALSE(loop.ok());
  CHECK(loop.status().message() ==
        "cfg:1: Host a: ProxyJump: jump host b: ProxyJump: jump host c: ProxyJump: jump host b is "
        "reached through itself (a ProxyJump loop)");
  auto self = ParseSlurmConfig("Host a\n  ProxyJump a\n", "cfg");
  REQUIRE_FALSE(self.ok());
  CHECK(self.status().message() ==
        "cfg:1: Host a: ProxyJump: jump host a is reached through itself (a ProxyJump loop)");
}
