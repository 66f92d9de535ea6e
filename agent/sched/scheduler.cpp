#include "agent/sched/scheduler.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "shared/common/limits.hpp"

namespace herd::agent {
namespace {

// Resource amounts are sums of user-given decimals (0.1 + 0.2 ...); compare with a little slack so
// that 0.3 free fits a 0.3 demand.
constexpr double kEpsilon = 1e-9;

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string Num(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// The demand as Schedule applies it (defaults filled in even if the caller did not use DemandOf).
JobDemand Normalized(JobDemand d) {
  if (d.cpus_per_node <= 0) d.cpus_per_node = limits::kDefaultTaskCpus;
  if (!d.accelerator.empty() && d.gpus_per_node <= 0) d.gpus_per_node = 1;
  if (d.gpus_per_node < 0) d.gpus_per_node = 0;
  return d;
}

bool HasAccelerator(const herd::v1::NodeInfo& node, const std::string& accelerator_lower) {
  return std::any_of(node.gpu_names().begin(), node.gpu_names().end(),
                     [&](const std::string& name) {
                       return Lower(name).find(accelerator_lower) != std::string::npos;
                     });
}

// Whether one rank of `d` fits a node with these free resources.
bool RankFits(const JobDemand& d, const std::string& accelerator_lower,
              const herd::v1::NodeInfo& node, double free_cpus, double free_gpus) {
  if (free_cpus + kEpsilon < d.cpus_per_node) return false;
  if (free_gpus + kEpsilon < d.gpus_per_node) return false;
  if (!accelerator_lower.empty() && !HasAccelerator(node, accelerator_lower)) return false;
  return true;
}

std::string Describe(const JobDemand& d, const std::vector<NodeState>& nodes) {
  std::ostringstream out;
  out << "task needs " << d.num_nodes << " node(s) with ";
  if (d.gpus_per_node > 0) {
    out << Num(d.gpus_per_node) << " GPU(s)";
    if (!d.accelerator.empty()) out << " of type " << d.accelerator;
    out << " and ";
  }
  out << Num(d.cpus_per_node) << " CPU(s) each; the cluster has " << nodes.size() << " node(s)";
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const herd::v1::NodeInfo& n = nodes[i].info;
    out << (i == 0 ? ": " : ", ") << n.node_id() << " (cpus=" << n.cpus()
        << ", gpus=" << n.gpu_count();
    if (n.gpu_count() > 0 && n.gpu_names_size() > 0) out << " x " << n.gpu_names(0);
    if (!nodes[i].alive) out << ", lost";
    out << ")";
  }
  return out.str();
}

}  // namespace

JobDemand DemandOf(int64_t job_id, const herd::v1::TaskSpec& spec) {
  JobDemand d;
  d.job_id = job_id;
  d.num_nodes = std::max(1, spec.num_nodes());
  d.cpus_per_node = spec.resources().cpus();
  d.gpus_per_node = spec.resources().accelerator_count();
  d.accelerator = spec.resources().accelerator();
  return Normalized(d);
}

ScheduleResult Schedule(const std::vector<JobDemand>& fifo, const std::vector<NodeState>& nodes) {
  ScheduleResult result;
  std::vector<double> free_cpus(nodes.size());
  std::vector<double> free_gpus(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    free_cpus[i] = nodes[i].info.cpus() - nodes[i].cpus_used;
    free_gpus[i] = nodes[i].info.gpu_count() - nodes[i].gpus_used;
  }

  bool blocked = false;
  for (const JobDemand& raw : fifo) {
    const JobDemand d = Normalized(raw);
    const std::string accelerator_lower = Lower(d.accelerator);

    // Could it ever run? Count nodes that can hold a rank when idle, alive or not.
    int idle_capable = 0;
    for (const NodeState& n : nodes) {
      if (RankFits(d, accelerator_lower, n.info, n.info.cpus(), n.info.gpu_count())) {
        ++idle_capable;
      }
    }
    if (d.num_nodes < 1 || idle_capable < d.num_nodes) {
      result.infeasible.push_back({d.job_id, Describe(d, nodes)});
      continue;
    }
    if (blocked) continue;

    std::vector<std::size_t> chosen;
    for (std::size_t i = 0; i < nodes.size() && static_cast<int>(chosen.size()) < d.num_nodes;
         ++i) {
      if (nodes[i].alive &&
          RankFits(d, accelerator_lower, nodes[i].info, free_cpus[i], free_gpus[i])) {
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
