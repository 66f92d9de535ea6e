#include "agent/sched/scheduler.hpp"

namespace herd::agent {

ScheduleResult Schedule(const std::vector<JobDemand>& fifo, const std::vector<NodeState>& nodes) {
  ScheduleResult result;
  std::vector<double> free_cpus(nodes.size());
  std::vector<double> free_gpus(nodes.size());
  std::vector<herd::v1::NodeInfo> infos;
  std::vector<bool> lost;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    free_cpus[i] = nodes[i].info.cpus() - nodes[i].cpus_used;
    free_gpus[i] = nodes[i].info.gpu_count() - nodes[i].gpus_used;
    infos.push_back(nodes[i].info);
    lost.push_back(!nodes[i].alive);
  }

  bool blocked = false;
  for (const JobDemand& raw : fifo) {
    const JobDemand d = sched::Normalized(raw);
    // Could it ever run? Every known node counts, alive or not.
    if (auto why = sched::WhyInfeasible(d, infos, lost)) {
      result.infeasible.push_back({d.job_id, std::move(*why)});
      continue;
    }
    if (blocked) continue;

    std::vector<std::size_t> chosen;
    for (std::size_t i = 0; i < nodes.size() && static_cast<int>(chosen.size()) < d.num_nodes;
         ++i) {
      if (nodes[i].alive && sched::RankFits(d, nodes[i].info, free_cpus[i], free_gpus[i])) {
        chosen.push_back(i);
      }
    }
    if (static_cast<int>(chosen.size()) < d.num_nodes) {
      blocked = true;  // head-of-line: it waits, and so does everything behind it
      continue;
    }
    Placement placement{d.job_id, {}};
    for (std::size_t i : chosen) {
      free_cpus[i] -= d.cpus_per_node;
      free_gpus[i] -= d.gpus_per_node;
      placement.node_ids.push_back(nodes[i].info.node_id());
    }
    result.start.push_back(std::move(placement));
  }
  return result;
}

}  // namespace herd::agent
