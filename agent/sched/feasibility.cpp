#include "agent/sched/feasibility.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <string_view>

#include "shared/common/limits.hpp"

namespace herd::sched {
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

bool HasAccelerator(const herd::v1::NodeInfo& node, const std::string& accelerator) {
  const std::string wanted = Lower(accelerator);
  return std::any_of(
      node.gpu_names().begin(), node.gpu_names().end(),
      [&](const std::string& name) { return Lower(name).find(wanted) != std::string::npos; });
}

std::string Describe(const JobDemand& d, const std::vector<herd::v1::NodeInfo>& nodes,
                     const std::vector<bool>& lost) {
  std::ostringstream out;
  out << "task needs " << d.num_nodes << " node(s) with ";
  if (d.gpus_per_node > 0) {
    out << Num(d.gpus_per_node) << " GPU(s)";
    if (!d.accelerator.empty()) out << " of type " << d.accelerator;
    out << " and ";
  }
  out << Num(d.cpus_per_node) << " CPU(s) each; the cluster has " << nodes.size() << " node(s)";
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const herd::v1::NodeInfo& n = nodes[i];
    out << (i == 0 ? ": " : ", ") << n.node_id() << " (cpus=" << n.cpus()
        << ", gpus=" << n.gpu_count();
    if (n.gpu_count() > 0 && n.gpu_names_size() > 0) out << " x " << n.gpu_names(0);
    if (i < lost.size() && lost[i]) out << ", lost";
    out << ")";
  }
  return out.str();
}

}  // namespace

JobDemand Normalized(JobDemand d) {
  if (d.cpus_per_node <= 0) d.cpus_per_node = limits::kDefaultTaskCpus;
  if (!d.accelerator.empty() && d.gpus_per_node <= 0) d.gpus_per_node = 1;
  if (d.gpus_per_node < 0) d.gpus_per_node = 0;
  return d;
}

JobDemand DemandOf(int64_t job_id, const herd::v1::TaskSpec& spec) {
  JobDemand d;
  d.job_id = job_id;
  d.num_nodes = std::max(1, spec.num_nodes());
  d.cpus_per_node = spec.resources().cpus();
  d.gpus_per_node = spec.resources().accelerator_count();
  d.accelerator = spec.resources().accelerator();
  return Normalized(d);
}

bool RankFits(const JobDemand& d, const herd::v1::NodeInfo& node, double free_cpus,
              double free_gpus) {
  if (free_cpus + kEpsilon < d.cpus_per_node) return false;
  if (free_gpus + kEpsilon < d.gpus_per_node) return false;
  if (!d.accelerator.empty() && !HasAccelerator(node, d.accelerator)) return false;
  return true;
}

std::optional<std::string> WhyInfeasible(const JobDemand& raw,
                                         const std::vector<herd::v1::NodeInfo>& nodes,
                                         const std::vector<bool>& lost) {
  const JobDemand d = Normalized(raw);
  int idle_capable = 0;
  for (const herd::v1::NodeInfo& n : nodes) {
    if (RankFits(d, n, n.cpus(), n.gpu_count())) ++idle_capable;
  }
  if (d.num_nodes >= 1 && idle_capable >= d.num_nodes) return std::nullopt;
  return Describe(d, nodes, lost);
}

}  // namespace herd::sched
