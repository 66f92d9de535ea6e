#include "agent/sched/scheduler.hpp"

#include <algorithm>
#include <cmath>

namespace herd::agent {
namespace {

// GPU shares are sums of user-given decimals (0.1 + 0.2 ...); compare with a little slack so that
// 0.7 free fits a 0.7 demand.
constexpr double kEpsilon = 1e-9;

bool Fractional(double gpus_per_node) { return gpus_per_node < 1 - kEpsilon; }

// Whole GPUs a demand of n >= 1 takes: n rounded up (as SKYPILOT_NUM_GPUS_PER_NODE).
std::size_t WholeGpus(double gpus_per_node) {
  return static_cast<std::size_t>(std::ceil(gpus_per_node - kEpsilon));
}

double UsedOf(const std::vector<double>& used, int index) {
  return static_cast<std::size_t>(index) < used.size() ? used[index] : 0.0;
}

double FreeGpus(const std::vector<double>& used, int gpu_count) {
  double free = 0;
  for (int i = 0; i < gpu_count; ++i) free += std::max(0.0, 1.0 - UsedOf(used, i));
  return free;
}

}  // namespace

std::optional<std::vector<int>> AssignGpus(const std::vector<double>& used, int gpu_count,
                                           double gpus_per_node) {
  if (!(gpus_per_node > kEpsilon)) return std::vector<int>{};  // also NaN
  if (Fractional(gpus_per_node)) {
    // Best fit: the fullest GPU that still has room for the share; lowest index on a tie.
    int best = -1;
    for (int i = 0; i < gpu_count; ++i) {
      if (1.0 - UsedOf(used, i) + kEpsilon < gpus_per_node) continue;
      if (best < 0 || UsedOf(used, i) > UsedOf(used, best) + kEpsilon) best = i;
    }
    if (best < 0) return std::nullopt;
    return std::vector<int>{best};
  }
  const std::size_t want = WholeGpus(gpus_per_node);
  std::vector<int> out;
  for (int i = 0; i < gpu_count && out.size() < want; ++i) {
    if (UsedOf(used, i) <= kEpsilon) out.push_back(i);
  }
  if (out.size() < want) return std::nullopt;
  return out;
}

void TakeGpus(std::vector<double>& used, const std::vector<int>& indices, double gpus_per_node) {
  const double share = Fractional(gpus_per_node) ? gpus_per_node : 1.0;
  for (int i : indices) {
    if (i < 0) continue;
    if (used.size() <= static_cast<std::size_t>(i)) used.resize(static_cast<std::size_t>(i) + 1);
    used[static_cast<std::size_t>(i)] += share;
  }
}

void Reserve(std::vector<NodeState>& nodes, const JobDemand& demand,
             const herd::v1::JobInfo& info) {
  const JobDemand d = sched::Normalized(demand);
  for (int rank = 0; rank < info.node_ids_size(); ++rank) {
    auto node = std::find_if(nodes.begin(), nodes.end(), [&](const NodeState& n) {
      return n.info.node_id() == info.node_ids(rank);
    });
    if (node == nodes.end()) continue;
    node->cpus_used += d.cpus_per_node;
    if (!(d.gpus_per_node > kEpsilon)) continue;
    std::vector<int> indices;
    if (rank < info.rank_gpus_size()) {
      indices.assign(info.rank_gpus(rank).indices().begin(), info.rank_gpus(rank).indices().end());
    } else if (auto given = AssignGpus(node->gpu_used, node->info.gpu_count(), d.gpus_per_node)) {
      indices = std::move(*given);
    } else {
      // Recorded without indices and more than is free: count it on the first GPUs rather than
      // forget that it holds them.
      const std::size_t n = Fractional(d.gpus_per_node) ? 1 : WholeGpus(d.gpus_per_node);
      for (std::size_t i = 0; i < n; ++i) indices.push_back(static_cast<int>(i));
    }
    TakeGpus(node->gpu_used, indices, d.gpus_per_node);
  }
}

ScheduleResult Schedule(const std::vector<JobDemand>& fifo, const std::vector<NodeState>& nodes) {
  ScheduleResult result;
  std::vector<double> free_cpus(nodes.size());
  std::vector<std::vector<double>> gpu_used(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    free_cpus[i] = nodes[i].info.cpus() - nodes[i].cpus_used;
    gpu_used[i] = nodes[i].gpu_used;
  }
  // Copies of every node's info for WhyInfeasible, made only for a job that does not fit now: a
  // job that fits what is free now fits the idle cluster (RankFits and AssignGpus only need more
  // of what is free), so the feasibility check, O(nodes) copies, is skipped for it.
  std::vector<herd::v1::NodeInfo> infos;
  std::vector<bool> lost;
  auto why_infeasible = [&](const JobDemand& d) {
    if (infos.size() != nodes.size()) {
      infos.clear();
      lost.clear();
      for (const NodeState& n : nodes) {
        infos.push_back(n.info);
        lost.push_back(!n.alive);
      }
    }
    // Could it ever run? Every known node counts, alive or not.
    return sched::WhyInfeasible(d, infos, lost);
  };

  bool blocked = false;
  for (const JobDemand& raw : fifo) {
    const JobDemand d = sched::Normalized(raw);
    std::vector<std::pair<std::size_t, std::vector<int>>> chosen;  // node, its GPU indices
    for (std::size_t i = 0;
         !blocked && i < nodes.size() && static_cast<int>(chosen.size()) < d.num_nodes; ++i) {
      const herd::v1::NodeInfo& info = nodes[i].info;
      if (!nodes[i].alive ||
          !sched::RankFits(d, info, free_cpus[i], FreeGpus(gpu_used[i], info.gpu_count()))) {
        continue;
      }
      auto gpus = AssignGpus(gpu_used[i], info.gpu_count(), d.gpus_per_node);
      if (gpus) chosen.emplace_back(i, std::move(*gpus));
    }
    if (blocked || static_cast<int>(chosen.size()) < d.num_nodes) {
      if (auto why = why_infeasible(d)) {
        result.infeasible.push_back({d.job_id, std::move(*why)});
        continue;  // reported wherever it is in the queue; it blocks nothing
      }
      blocked = true;  // head-of-line: it waits, and so does everything behind it
      continue;
    }
    Placement placement{d.job_id, {}, {}};
    for (auto& [i, gpus] : chosen) {
      free_cpus[i] -= d.cpus_per_node;
      TakeGpus(gpu_used[i], gpus, d.gpus_per_node);
      placement.node_ids.push_back(nodes[i].info.node_id());
      placement.gpus.push_back(std::move(gpus));
    }
    result.start.push_back(std::move(placement));
  }
  return result;
}

}  // namespace herd::agent
