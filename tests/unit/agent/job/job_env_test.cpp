#include "agent/job/job_env.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <regex>

namespace herd::agent {
namespace {

using namespace std::chrono_literals;
using Env = std::map<std::string, std::string>;

// A 4-node cluster; the job runs on 2 of them (the 2nd and 4th, in that order).
struct Fixture {
  herd::v1::TaskSpec spec;
  JobEnvContext ctx;
  Fixture() {
    spec.set_name("train");
    spec.set_num_nodes(2);
    spec.mutable_resources()->set_accelerator("L4");
    spec.mutable_resources()->set_accelerator_count(4);
    (*spec.mutable_envs())["MODEL"] = "gpt2";
    (*spec.mutable_envs())["SKYPILOT_NODE_RANK"] = "7";  // must not win
    (*spec.mutable_envs())["HERD_NUM_NODES"] = "99";     // must not win either
    (*spec.mutable_secrets())["HF_TOKEN"] = "hf_secret";
    ctx.cluster_name = "mycluster";
    ctx.region = "us-east-1";
    ctx.job_id = 3;
    ctx.task_id = "sky-2026-12-02-15-06-26-123456_mycluster_3";
    ctx.user = "alice";
    ctx.spec = &spec;
    ctx.gang_ips = {"10.0.0.2", "10.0.0.4"};
    ctx.cluster_ips = {"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"};
  }
};

const char* kInfo =
    R"({"cluster_name":"mycluster","cloud":"local","region":"us-east-1","zone":null})";

TEST_CASE("RunEnv of a 2-of-4-node job: every variable, exact values") {
  Fixture f;
  const Env want0 = {
      {"MODEL", "gpt2"},
      {"HF_TOKEN", "hf_secret"},
      {"SKYPILOT_NODE_RANK", "0"},
      {"HERD_NODE_RANK", "0"},
      {"SKYPILOT_NODE_IPS", "10.0.0.2\n10.0.0.4"},
      {"HERD_NODE_IPS", "10.0.0.2\n10.0.0.4"},
      {"SKYPILOT_NUM_NODES", "2"},
      {"HERD_NUM_NODES", "2"},
      {"SKYPILOT_NUM_GPUS_PER_NODE", "4"},
      {"HERD_NUM_GPUS_PER_NODE", "4"},
      {"SKYPILOT_TASK_ID", "sky-2026-12-02-15-06-26-123456_mycluster_3"},
      {"HERD_TASK_ID", "sky-2026-12-02-15-06-26-123456_mycluster_3"},
      {"SKYPILOT_CLUSTER_INFO", kInfo},
      {"HERD_CLUSTER_INFO", kInfo},
      {"SKYPILOT_USER", "alice"},
      {"HERD_USER", "alice"},
      {"HERD_ATTEMPT", "1"},
  };
  CHECK(RunEnv(f.ctx, 0) == want0);

  Env want1 = want0;
  want1["SKYPILOT_NODE_RANK"] = "1";
  want1["HERD_NODE_RANK"] = "1";
  CHECK(RunEnv(f.ctx, 1) == want1);
}

TEST_CASE("NODE_IPS has one line per node and NUM_NODES matches it") {
  Fixture f;
  for (std::size_t n : {1u, 2u, 5u}) {
    f.ctx.gang_ips.clear();
    for (std::size_t i = 0; i < n; ++i) f.ctx.gang_ips.push_back("192.168.1." + std::to_string(i));
    const Env env = RunEnv(f.ctx, 0);
    const std::string& ips = env.at("SKYPILOT_NODE_IPS");
    CHECK(ips.back() != '\n');
    CHECK(static_cast<std::size_t>(std::count(ips.begin(), ips.end(), '\n')) == n - 1);
    CHECK(ips.substr(0, ips.find('\n')) == "192.168.1.0");
    CHECK(env.at("SKYPILOT_NUM_NODES") == std::to_string(n));
  }
}

TEST_CASE("user envs and secrets cannot override herd's identity variables") {
  Fixture f;
  (*f.spec.mutable_secrets())["SKYPILOT_NODE_IPS"] = "1.2.3.4";
  (*f.spec.mutable_envs())["PYTHONUNBUFFERED"] = "0";  // the task's own setting is kept
  (*f.spec.mutable_envs())["HF_TOKEN"] = "plain";      // the secret of the same name wins
  for (int rank : {0, 1}) {
    const Env env = RunEnv(f.ctx, rank);
    CHECK(env.at("SKYPILOT_NODE_RANK") == std::to_string(rank));
    CHECK(env.at("HERD_NUM_NODES") == "2");
    CHECK(env.at("SKYPILOT_NODE_IPS") == "10.0.0.2\n10.0.0.4");
    CHECK(env.at("PYTHONUNBUFFERED") == "0");
    CHECK(env.at("HF_TOKEN") == "hf_secret");
  }
  const Env setup = SetupEnv(f.ctx, 2);
  CHECK(setup.at("SKYPILOT_NUM_NODES") == "4");
  CHECK(setup.at("HERD_NUM_NODES") == "4");
}

TEST_CASE("CUDA_VISIBLE_DEVICES: each rank's own GPU indices in run, never in setup") {
  Fixture f;
  f.ctx.gang_gpus = {{4, 5, 6, 7}, {0, 1, 2, 3}};
  (*f.spec.mutable_envs())["CUDA_VISIBLE_DEVICES"] = "0";  // the assignment wins
  CHECK(RunEnv(f.ctx, 0).at("CUDA_VISIBLE_DEVICES") == "4,5,6,7");
  CHECK(RunEnv(f.ctx, 1).at("CUDA_VISIBLE_DEVICES") == "0,1,2,3");
  CHECK(RunEnv(f.ctx, 0).at("SKYPILOT_NUM_GPUS_PER_NODE") == "4");
  // Setup sees every GPU: the task's value is exported, then the agent removes the variable.
  CHECK(SetupUnsetEnv() == std::vector<std::string>{"CUDA_VISIBLE_DEVICES"});

  // A fractional job shares one index.
  f.spec.mutable_resources()->set_accelerator_count(0.5);
  f.ctx.gang_gpus = {{2}, {0}};
  CHECK(RunEnv(f.ctx, 0).at("CUDA_VISIBLE_DEVICES") == "2");
  CHECK(RunEnv(f.ctx, 0).at("SKYPILOT_NUM_GPUS_PER_NODE") == "1");

  // No assignment (a job without GPUs): herd sets nothing, the agent's environment stays.
  f.spec.mutable_envs()->erase("CUDA_VISIBLE_DEVICES");
  f.ctx.gang_gpus.clear();
  CHECK(RunEnv(f.ctx, 0).count("CUDA_VISIBLE_DEVICES") == 0);
  f.ctx.gang_gpus = {{}, {}};
  CHECK(RunEnv(f.ctx, 1).count("CUDA_VISIBLE_DEVICES") == 0);
}

TEST_CASE("an array job gets its place in the array; other jobs get none of those variables") {
  Fixture f;
  const Env plain = RunEnv(f.ctx, 0);
  for (const char* k : {"SKYPILOT_JOB_RANK", "SKYPILOT_NUM_JOBS", "HERD_JOB_RANK", "HERD_NUM_JOBS",
                        "HERD_ARRAY_INDEX", "HERD_ARRAY_JOB_ID"}) {
    CHECK(plain.count(k) == 0);
  }
  f.ctx.array_id = 40;
  f.ctx.array_rank = 3;
  f.ctx.array_index = 15;  // --array 0-99:5: the 4th job has index 15
  f.ctx.array_size = 20;
  (*f.spec.mutable_envs())["SKYPILOT_JOB_RANK"] = "0";  // a user's env does not win
  for (int rank : {0, 1}) {
    const Env env = RunEnv(f.ctx, rank);
    CHECK(env.at("SKYPILOT_JOB_RANK") == "3");
    CHECK(env.at("HERD_JOB_RANK") == "3");
    CHECK(env.at("SKYPILOT_NUM_JOBS") == "20");
    CHECK(env.at("HERD_ARRAY_INDEX") == "15");
    CHECK(env.at("HERD_ARRAY_JOB_ID") == "40");
    CHECK(env.at("SKYPILOT_NODE_RANK") == std::to_string(rank));
  }
  CHECK(SetupEnv(f.ctx, 0).at("SKYPILOT_JOB_RANK") == "3");
}

TEST_CASE("GpusPerNode rounds up") {
  CHECK(GpusPerNode(0) == 0);
  CHECK(GpusPerNode(0.5) == 1);
  CHECK(GpusPerNode(0.25) == 1);
  CHECK(GpusPerNode(1) == 1);
  CHECK(GpusPerNode(1.5) == 2);
  CHECK(GpusPerNode(4) == 4);
  CHECK(GpusPerNode(8.0000000001) == 8);  // float noise from YAML/protobuf is not a 9th GPU
  CHECK(GpusPerNode(-1) == 0);
  CHECK(GpusPerNode(std::nan("")) == 0);

  Fixture f;
  f.spec.mutable_resources()->set_accelerator_count(0.5);
  CHECK(RunEnv(f.ctx, 0).at("SKYPILOT_NUM_GPUS_PER_NODE") == "1");
  CHECK(SetupEnv(f.ctx, 0).at("SKYPILOT_SETUP_NUM_GPUS_PER_NODE") == "1");
  f.spec.mutable_resources()->clear_accelerator_count();
  CHECK(RunEnv(f.ctx, 0).at("SKYPILOT_NUM_GPUS_PER_NODE") == "0");
}

TEST_CASE("MakeTaskId: UTC time with microseconds, cluster and job id") {
  // 2026-12-02 15:06:26.123456 UTC
  const std::chrono::system_clock::time_point t{std::chrono::seconds(1796223986) +
                                                std::chrono::microseconds(123456)};
  CHECK(MakeTaskId(t, "mycluster", 3) == "sky-2026-12-02-15-06-26-123456_mycluster_3");
  // Microseconds are zero-padded; sub-microsecond parts are dropped.
  CHECK(MakeTaskId(std::chrono::system_clock::time_point{} + 42us + 999ns, "c", 12) ==
        "sky-1970-01-01-00-00-00-000042_c_12");

  const std::regex re(R"(sky-\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}-\d{6}_my-cluster_1234)");
  CHECK(std::regex_match(MakeTaskId(std::chrono::system_clock::now(), "my-cluster", 1234), re));
}

TEST_CASE("CLUSTER_INFO is JSON with the 4 keys; empty region and zone are null") {
  Fixture f;
  f.ctx.zone = "us-east-1a";
  auto v = boost::json::parse(RunEnv(f.ctx, 0).at("SKYPILOT_CLUSTER_INFO"));
  const auto& o = v.as_object();
  CHECK(o.size() == 4);
  CHECK(o.at("cluster_name").as_string() == "mycluster");
  CHECK(o.at("cloud").as_string() == "local");
  CHECK(o.at("region").as_string() == "us-east-1");
  CHECK(o.at("zone").as_string() == "us-east-1a");

  f.ctx.region.clear();
  f.ctx.zone.clear();
  f.ctx.cluster_name = "quote\"and\\slash";  // escaped, still valid JSON
  auto v2 = boost::json::parse(SetupEnv(f.ctx, 0).at("HERD_CLUSTER_INFO"));
  CHECK(v2.at("cluster_name").as_string() == "quote\"and\\slash");
  CHECK(v2.at("region").is_null());
  CHECK(v2.at("zone").is_null());
}

TEST_CASE("SetupEnv: cluster-wide variables, exact values, and the unset list") {
  Fixture f;
  const Env want = {
      {"MODEL", "gpt2"},
      {"HF_TOKEN", "hf_secret"},
      {"SKYPILOT_NODE_RANK", "7"},  // setup has no NODE_RANK of its own: the task's value stays
      {"SKYPILOT_SETUP_NODE_RANK", "3"},
      {"HERD_SETUP_NODE_RANK", "3"},
      {"SKYPILOT_SETUP_NODE_IPS", "10.0.0.1\n10.0.0.2\n10.0.0.3\n10.0.0.4"},
      {"HERD_SETUP_NODE_IPS", "10.0.0.1\n10.0.0.2\n10.0.0.3\n10.0.0.4"},
      {"SKYPILOT_SETUP_NUM_GPUS_PER_NODE", "4"},
      {"HERD_SETUP_NUM_GPUS_PER_NODE", "4"},
      {"SKYPILOT_NUM_NODES", "4"},
      {"HERD_NUM_NODES", "4"},
      {"SKYPILOT_TASK_ID", "sky-2026-12-02-15-06-26-123456_mycluster_3"},
      {"HERD_TASK_ID", "sky-2026-12-02-15-06-26-123456_mycluster_3"},
      {"SKYPILOT_CLUSTER_INFO", kInfo},
      {"HERD_CLUSTER_INFO", kInfo},
      {"SKYPILOT_USER", "alice"},
      {"HERD_USER", "alice"},
      {"HERD_ATTEMPT", "1"},
  };
  CHECK(SetupEnv(f.ctx, 3) == want);
  CHECK(SetupUnsetEnv() == std::vector<std::string>{"CUDA_VISIBLE_DEVICES"});
}

TEST_CASE("a context without a spec still gives every herd variable") {
  JobEnvContext ctx;
  ctx.cluster_name = "c";
  ctx.gang_ips = {"127.0.0.1"};
  ctx.cluster_ips = {"127.0.0.1"};
  const Env env = RunEnv(ctx, 0);
  // 7 variables x 2 names + HERD_ATTEMPT (no PYTHONUNBUFFERED: stdout is a pty)
  CHECK(env.size() == 15);
  CHECK(env.at("HERD_ATTEMPT") == "1");
  CHECK(env.at("SKYPILOT_NUM_GPUS_PER_NODE") == "0");
  CHECK(env.at("SKYPILOT_NODE_IPS") == "127.0.0.1");
  CHECK(SetupEnv(ctx, 0).size() == 15);
  ctx.attempt = 3;  // a managed job's third attempt
  CHECK(RunEnv(ctx, 0).at("HERD_ATTEMPT") == "3");
}

}  // namespace
}  // namespace herd::agent
