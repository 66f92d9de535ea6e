// What a task asks of each node, and whether a cluster could ever hold it: the head's scheduler
// (agent/sched/scheduler.hpp) places jobs by it, and the head refuses at submit a task that no set
// of its nodes could ever hold, with the reason it gives here.
//
// Rules:
// - A job is a gang of `num_nodes` ranks, each on a DISTINCT node.
// - A node can hold a rank when it has the per-node CPUs and GPUs and, when the task names an
//   accelerator, one of the node's GPU names contains it case-insensitively ("L4" matches
//   "NVIDIA L4"). GPU demand may be fractional (T4:0.5).
// - Feasible = enough nodes could hold a rank when idle. Every node given counts, alive or not: a
//   node that dropped out for a moment does not make a job infeasible; it only keeps it waiting.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "herd/v1/common.pb.h"

namespace herd::sched {

struct JobDemand {
  int64_t job_id = 0;
  int num_nodes = 1;
  double cpus_per_node = 0;  // 0 => limits::kDefaultTaskCpus
  double gpus_per_node = 0;
  std::string accelerator;  // empty: any node (GPU or not)
};

// The per-node demand of a task: CPUs default to limits::kDefaultTaskCpus, a named accelerator
// without a count means one of it, num_nodes below 1 means 1.
JobDemand DemandOf(int64_t job_id, const herd::v1::TaskSpec& spec);

// The demand as the rules apply it (defaults filled in even if the caller did not use DemandOf).
JobDemand Normalized(JobDemand d);

// Whether one rank of the normalized demand `d` fits `node` given its free CPUs and GPUs (the
// total free GPU amount; which GPU indices is the head's business, agent/sched/scheduler.hpp).
bool RankFits(const JobDemand& d, const herd::v1::NodeInfo& node, double free_cpus,
              double free_gpus);

// nullopt when enough of `nodes` could each hold a rank of `d` when idle; otherwise the reason in
// words: what the task asks and what every node has ("lost" for a node with lost[i] true).
// `lost` may be empty (no node lost).
std::optional<std::string> WhyInfeasible(const JobDemand& d,
                                         const std::vector<herd::v1::NodeInfo>& nodes,
                                         const std::vector<bool>& lost = {});

}  // namespace herd::sched
