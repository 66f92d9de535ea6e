// The head's gang scheduler: pure functions from (queue, nodes) to the jobs to start now, and the
// GPU indices each of their ranks gets.
//
// Policy (SkyPilot's FIFO with head-of-line blocking):
// - The queue is walked in FIFO order (job id ascending).
// - A job is a gang of `num_nodes` ranks with strict spread: every rank on a DISTINCT alive node
//   that can hold it (agent/sched/feasibility.hpp: CPUs, GPUs, accelerator name), with what
//   running jobs use subtracted.
// - GPUs are assigned, not only counted: a node's GPUs are its indices 0..gpu_count-1 (NVML's
//   order) and a rank gets concrete indices, which the head puts into CUDA_VISIBLE_DEVICES.
//   A demand of n >= 1 GPUs (a non-integer one rounded up, as SKYPILOT_NUM_GPUS_PER_NODE is) takes
//   ceil(n) whole GPUs that no other job uses, lowest indices first. A fractional demand f < 1
//   (T4:0.5) takes a share f of ONE GPU: two T4:0.5 jobs share index 0 and both see
//   CUDA_VISIBLE_DEVICES=0. A share goes to the fullest GPU that still has room (best fit), so
//   fractional jobs pack together and leave whole GPUs free for whole-GPU jobs.
// - A job that fits now takes the first fitting nodes in cluster order (that is its rank order),
//   and their resources are reserved before the next job in the queue is considered.
// - The first job that does not fit now, but would fit on the idle cluster, blocks every job behind
//   it: nothing after it is started, even if it would fit (no backfilling, so a big job is never
//   starved by a stream of small ones).
// - A job that cannot fit even on the idle cluster is reported Infeasible with a reason in words
//   (sched::WhyInfeasible), wherever it is in the queue, and does not block the jobs behind it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/sched/feasibility.hpp"
#include "herd/v1/common.pb.h"

namespace herd::agent {

// The demand rules are the controller's too.
using sched::DemandOf;
using sched::JobDemand;

struct NodeState {
  herd::v1::NodeInfo info;
  bool alive = true;
  double cpus_used = 0;
  // Share in use of each GPU index (0..1); indices past the end are free.
  std::vector<double> gpu_used;
};

struct Placement {
  int64_t job_id = 0;
  std::vector<std::string> node_ids;   // rank order (= cluster order)
  std::vector<std::vector<int>> gpus;  // per rank: its GPU indices on its node (empty: no GPUs)
};

struct Infeasible {
  int64_t job_id = 0;
  std::string reason;
};

struct ScheduleResult {
  std::vector<Placement> start;
  std::vector<Infeasible> infeasible;
};

// The GPU indices one rank demanding `gpus_per_node` gets on a node with `gpu_count` GPUs whose
// indices are in use as `used` says (see the policy above); nullopt when they are not free now.
// A demand of 0 gets no index.
std::optional<std::vector<int>> AssignGpus(const std::vector<double>& used, int gpu_count,
                                           double gpus_per_node);

// Marks `indices` as taken by one rank demanding `gpus_per_node` (a share of it for f < 1, whole
// GPUs otherwise).
void TakeGpus(std::vector<double>& used, const std::vector<int>& indices, double gpus_per_node);

// Adds what a started job holds to `nodes` (found by id; unknown ids are skipped): its CPUs on each
// node of `info.node_ids`, and the GPU indices of `info.rank_gpus` (what the head persisted in
// jobs.db). A job recorded without indices (by an older head) is given indices here, in rank order,
// so that what it holds is never handed out twice.
void Reserve(std::vector<NodeState>& nodes, const JobDemand& demand, const herd::v1::JobInfo& info);

// `fifo` is the queue of waiting jobs in FIFO order; `nodes` are in cluster order, with what the
// already running jobs use. See the policy at the top of this file.
ScheduleResult Schedule(const std::vector<JobDemand>& fifo, const std::vector<NodeState>& nodes);

}  // namespace herd::agent
