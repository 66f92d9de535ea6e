#include "agent/job/job_env.hpp"

#include <time.h>

#include <boost/json.hpp>
#include <cmath>
#include <cstdio>

namespace herd::agent {
namespace {

using EnvMap = std::map<std::string, std::string>;

// Every injected variable exists under both names; herd's own name keeps working if SkyPilot
// compatibility is ever dropped, and scripts can tell the two systems apart.
void SetBoth(EnvMap& env, std::string_view suffix, std::string value) {
  env["HERD_" + std::string(suffix)] = value;
  env["SKYPILOT_" + std::string(suffix)] = std::move(value);
}

std::string JoinLines(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += '\n';
    out += items[i];
  }
  return out;
}

// The task's envs, then its secrets (a secret of the same name wins: it is the one the user marked
// as sensitive, so it is the value they meant).
void AddTaskEnvs(const JobEnvContext& ctx, EnvMap& env) {
  if (ctx.spec == nullptr) return;
  for (const auto& [k, v] : ctx.spec->envs()) env[k] = v;
  for (const auto& [k, v] : ctx.spec->secrets()) env[k] = v;
}

int TaskGpus(const JobEnvContext& ctx) {
  return ctx.spec == nullptr ? 0 : GpusPerNode(ctx.spec->resources().accelerator_count());
}

// Variables both setup and run get, set last so that they override the task's envs.
void AddCommon(const JobEnvContext& ctx, EnvMap& env) {
  SetBoth(env, "TASK_ID", ctx.task_id);
  SetBoth(env, "CLUSTER_INFO", ClusterInfoJson(ctx));
  SetBoth(env, "USER", ctx.user);
  env["HERD_ATTEMPT"] = std::to_string(ctx.attempt);
  if (ctx.array_size > 0) {
    // SkyPilot's names for a job's place among several (`--num-jobs`), and Slurm-like twins.
    SetBoth(env, "JOB_RANK", std::to_string(ctx.array_rank));
    SetBoth(env, "NUM_JOBS", std::to_string(ctx.array_size));
    env["HERD_ARRAY_INDEX"] = std::to_string(ctx.array_index);
    env["HERD_ARRAY_JOB_ID"] = std::to_string(ctx.array_id);
  }
}

}  // namespace

std::string MakeTaskId(std::chrono::system_clock::time_point submitted, std::string_view cluster,
                       int64_t job_id) {
  // floor, not truncation, so that times before the epoch still give microseconds in [0, 1e6).
  const auto secs = std::chrono::floor<std::chrono::seconds>(submitted);
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(submitted - secs).count();
  const time_t t = static_cast<time_t>(secs.time_since_epoch().count());
  struct tm utc {};
  gmtime_r(&t, &utc);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "sky-%04d-%02d-%02d-%02d-%02d-%02d-%06lld", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<long long>(micros));
  std::string id = buf;
  id += '_';
  id += cluster;
  id += '_';
  id += std::to_string(job_id);
  return id;
}

int GpusPerNode(double accelerator_count) {
  if (!(accelerator_count > 0)) return 0;  // also NaN
  // A count that went through YAML/protobuf as 4.0000000001 must still be 4.
  return static_cast<int>(std::ceil(accelerator_count - 1e-9));
}

std::string ClusterInfoJson(const JobEnvContext& ctx) {
  auto str_or_null = [](const std::string& s) -> boost::json::value {
    if (s.empty()) return nullptr;
    return boost::json::string(s);
  };
  boost::json::object o;
  o["cluster_name"] = ctx.cluster_name;
  o["cloud"] = str_or_null(ctx.cloud);
  o["region"] = str_or_null(ctx.region);
  o["zone"] = str_or_null(ctx.zone);
  return boost::json::serialize(o);
}

std::map<std::string, std::string> RunEnv(const JobEnvContext& ctx, int rank) {
  EnvMap env;
  AddTaskEnvs(ctx, env);
  SetBoth(env, "NODE_RANK", std::to_string(rank));
  SetBoth(env, "NODE_IPS", JoinLines(ctx.gang_ips));
  SetBoth(env, "NUM_NODES", std::to_string(ctx.gang_ips.size()));
  SetBoth(env, "NUM_GPUS_PER_NODE", std::to_string(TaskGpus(ctx)));
  if (rank >= 0 && static_cast<std::size_t>(rank) < ctx.gang_gpus.size() &&
      !ctx.gang_gpus[static_cast<std::size_t>(rank)].empty()) {
    std::string devices;
    for (int i : ctx.gang_gpus[static_cast<std::size_t>(rank)]) {
      devices += (devices.empty() ? "" : ",") + std::to_string(i);
    }
    env["CUDA_VISIBLE_DEVICES"] = devices;
  }
  AddCommon(ctx, env);
  return env;
}

std::map<std::string, std::string> SetupEnv(const JobEnvContext& ctx, int setup_rank) {
  EnvMap env;
  AddTaskEnvs(ctx, env);
  SetBoth(env, "SETUP_NODE_RANK", std::to_string(setup_rank));
  SetBoth(env, "SETUP_NODE_IPS", JoinLines(ctx.cluster_ips));
  SetBoth(env, "SETUP_NUM_GPUS_PER_NODE", std::to_string(TaskGpus(ctx)));
  SetBoth(env, "NUM_NODES", std::to_string(ctx.cluster_ips.size()));
  AddCommon(ctx, env);
  return env;
}

std::vector<std::string> SetupUnsetEnv() { return {"CUDA_VISIBLE_DEVICES"}; }

}  // namespace herd::agent
