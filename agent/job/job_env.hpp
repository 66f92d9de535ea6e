// The environment of a job's setup and run processes: SkyPilot's SKYPILOT_* variables (scripts
// written for SkyPilot run unchanged), their HERD_* twins, and the task's own envs and secrets.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "herd/v1/common.pb.h"

namespace herd::agent {

// What the head knows about one job when it starts its processes.
struct JobEnvContext {
  std::string cluster_name;
  std::string cloud = "local";
  std::string region, zone;  // "" -> null in SKYPILOT_CLUSTER_INFO
  int64_t job_id = 0;
  std::string task_id;  // MakeTaskId(...), or the one a managed job keeps across attempts
  int32_t attempt = 1;  // HERD_ATTEMPT: which attempt of a managed job this is (1 otherwise)
  std::string user;
  const herd::v1::TaskSpec* spec = nullptr;  // nullptr: no envs, secrets or accelerators
  std::vector<std::string> gang_ips;         // the job's nodes in rank order
  std::vector<std::string> cluster_ips;      // every node of the cluster, cluster order (setup)
  // Per rank: the GPU indices the scheduler gave it on its node (agent/sched/scheduler.hpp);
  // empty (or shorter than gang_ips) for a job that asks for no GPUs.
  std::vector<std::vector<int>> gang_gpus;
  // A job of an array (JobInfo's array_* fields): SKYPILOT_JOB_RANK = array_rank,
  // SKYPILOT_NUM_JOBS = array_size, HERD_ARRAY_INDEX = array_index, HERD_ARRAY_JOB_ID = array_id.
  // array_size 0: not an array job, none of them is set.
  int64_t array_id = 0;
  int32_t array_rank = 0;
  int32_t array_index = 0;
  int32_t array_size = 0;
};

// "sky-2026-12-02-15-06-26-123456_<cluster>_<job_id>": the submit time in UTC with microseconds.
std::string MakeTaskId(std::chrono::system_clock::time_point submitted, std::string_view cluster,
                       int64_t job_id);

// GPUs a node of the task gets: the accelerator count rounded up (T4:0.5 -> 1); 0, negative or
// NaN -> 0.
int GpusPerNode(double accelerator_count);

// SKYPILOT_CLUSTER_INFO: {"cluster_name":..,"cloud":..,"region":..,"zone":..}, empty -> null.
std::string ClusterInfoJson(const JobEnvContext& ctx);

// The environment of the run process of `rank` (0-based index into ctx.gang_ips, so a job on a
// subset of the cluster is renumbered 0..k-1 in the order given). Precedence, lowest first:
//   the task's envs < the task's secrets
//   < herd's identity variables SKYPILOT_NODE_RANK, _NODE_IPS, _NUM_NODES, _NUM_GPUS_PER_NODE,
//     _TASK_ID, _CLUSTER_INFO, _USER and their HERD_* twins, HERD_ATTEMPT (SkyPilot has no
//     name for it), an array job's SKYPILOT_JOB_RANK, _NUM_JOBS, HERD_ARRAY_INDEX and
//     HERD_ARRAY_JOB_ID, and CUDA_VISIBLE_DEVICES = the rank's
//     GPU indices joined by ',' when the job was given GPUs ("0,1,2,3").
// Identity variables win because a stray user env named SKYPILOT_NODE_RANK would otherwise give
// two nodes the same rank and hang the rendezvous; CUDA_VISIBLE_DEVICES wins so that two jobs never
// share a GPU unasked. A job without GPUs gets no CUDA_VISIBLE_DEVICES from herd: it keeps what the
// agent's environment has (as Ray leaves it for a task with num_gpus=0).
std::map<std::string, std::string> RunEnv(const JobEnvContext& ctx, int rank);

// The environment of the setup process on the cluster node `setup_rank` (index into
// ctx.cluster_ips). Setup runs on every node of the cluster, so SKYPILOT_NUM_NODES is the number
// of cluster nodes here (as SkyPilot). Same precedence as RunEnv.
// PYTHONUNBUFFERED is not set here: a job's stdout is a pty (agent/process/step.hpp), on which
// Python line-buffers, writing each line whole; only where the supervisor falls back to a pipe
// does it default PYTHONUNBUFFERED=1 (SkyPilot's behaviour).
std::map<std::string, std::string> SetupEnv(const JobEnvContext& ctx, int setup_rank);

// Variables removed from the setup process's environment: setup sees every GPU of the node.
std::vector<std::string> SetupUnsetEnv();

}  // namespace herd::agent
