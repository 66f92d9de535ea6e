// The head's gang scheduler: pure functions from (queue, nodes) to the jobs to start now.
//
// Policy (SkyPilot's FIFO with head-of-line blocking):
// - The queue is walked in FIFO order (job id ascending).
// - A job is a gang of `num_nodes` ranks with strict spread: every rank on a DISTINCT alive node.
//   A node can hold a rank when its free CPUs >= the per-node CPU demand, its free GPUs >= the
//   per-node GPU demand and, when the task names an accelerator, one of its GPU names contains it
//   case-insensitively ("L4" matches "NVIDIA L4"). Free = capacity - used; GPU demand may be
//   fractional (T4:0.5), so two such jobs share one GPU.
// - A job that fits now takes the first fitting nodes in cluster order (that is its rank order),
//   and their resources are reserved before the next job in the queue is considered.
// - The first job that does not fit now, but would fit on the idle cluster, blocks every job behind
//   it: nothing after it is started, even if it would fit (no backfilling, so a big job is never
//   starved by a stream of small ones).
// - A job that cannot fit even on the idle cluster (more nodes than the cluster has, more GPUs or
//   CPUs than any node has, a GPU type no node has) is reported Infeasible with a reason in words
//   (sched::WhyInfeasible), wherever it is in the queue, and does not block the jobs behind it.
//   "Idle cluster" means every known node, alive or not: a node that dropped out for a moment does
//   not make a queued job infeasible; it only keeps it waiting.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/v1/common.pb.h"
#include "shared/sched/feasibility.hpp"

namespace herd::agent {

// The demand and feasibility rules are the controller's too (shared/sched/feasibility.hpp).
using sched::DemandOf;
using sched::JobDemand;

struct NodeState {
  herd::v1::NodeInfo info;
  bool alive = true;
  double cpus_used = 0;
  double gpus_used = 0;
};

struct Placement {
  int64_t job_id = 0;
  std::vector<std::string> node_ids;  // rank order (= cluster order)
};

struct Infeasible {
  int64_t job_id = 0;
  std::string reason;
};

struct ScheduleResult {
  std::vector<Placement> start;
  std::vector<Infeasible> infeasible;
};

// `fifo` is the queue of waiting jobs in FIFO order; `nodes` are in cluster order, with what the
// already running jobs use. See the policy at the top of this file.
ScheduleResult Schedule(const std::vector<JobDemand>& fifo, const std::vector<NodeState>& nodes);

}  // namespace herd::agent
