#include "agent/sched/feasibility.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "shared/common/limits.hpp"

namespace herd::sched {
namespace {

herd::v1::NodeInfo Node(const std::string& id, int cpus, int gpus = 0,
                        const std::string& gpu_name = "") {
  herd::v1::NodeInfo n;
  n.set_node_id(id);
  n.set_cpus(cpus);
  n.set_gpu_count(gpus);
  for (int i = 0; i < gpus; ++i) n.add_gpu_names(gpu_name);
  return n;
}

herd::v1::TaskSpec Spec(int nodes, double cpus, const std::string& acc = "", double count = 0) {
  herd::v1::TaskSpec spec;
  spec.set_num_nodes(nodes);
  spec.mutable_resources()->set_cpus(cpus);
  spec.mutable_resources()->set_accelerator(acc);
  spec.mutable_resources()->set_accelerator_count(count);
  return spec;
}

TEST_CASE("DemandOf fills in SkyPilot's defaults") {
  JobDemand d = DemandOf(5, Spec(0, 0));
  CHECK(d.job_id == 5);
  CHECK(d.num_nodes == 1);
  CHECK(d.cpus_per_node == limits::kDefaultTaskCpus);
  CHECK(d.gpus_per_node == 0);
  CHECK(DemandOf(6, Spec(2, 4, "T4", 0.5)).gpus_per_node == 0.5);
  CHECK(DemandOf(7, Spec(1, 1, "L4")).gpus_per_node == 1);  // "--gpus L4" means one
}

TEST_CASE("feasible when enough nodes could hold a rank when idle, alive or not") {
  std::vector<herd::v1::NodeInfo> nodes = {Node("h", 4), Node("g1", 8, 8, "NVIDIA H200"),
                                           Node("g2", 8, 8, "NVIDIA H200")};
  CHECK_FALSE(WhyInfeasible(DemandOf(1, Spec(2, 8, "h200", 8)), nodes, {false, true, false}));
  CHECK_FALSE(WhyInfeasible(DemandOf(1, Spec(3, 1)), nodes));
  CHECK_FALSE(WhyInfeasible(DemandOf(1, Spec(1, 1, "H200", 0.25)), nodes));

  auto why = WhyInfeasible(DemandOf(1, Spec(3, 1, "H200", 4)), nodes, {false, true, false});
  REQUIRE(why);
  CHECK(*why ==
        "task needs 3 node(s) with 4 GPU(s) of type H200 and 1 CPU(s) each; the cluster has 3 "
        "node(s): h (cpus=4, gpus=0), g1 (cpus=8, gpus=8 x NVIDIA H200, lost), g2 (cpus=8, "
        "gpus=8 x NVIDIA H200)");
  CHECK(WhyInfeasible(DemandOf(1, Spec(1, 1, "H200", 9)), nodes));  // more than any node has
  CHECK(WhyInfeasible(DemandOf(1, Spec(1, 9)), nodes));             // more CPUs than any
  CHECK(WhyInfeasible(DemandOf(1, Spec(1, 1, "A100", 1)), nodes));  // a type no node has
  CHECK(WhyInfeasible(DemandOf(1, Spec(1, 1)), {}));                // no node at all
}

TEST_CASE("RankFits compares free amounts with slack for sums of decimals") {
  const herd::v1::NodeInfo n = Node("g", 4, 1, "Tesla T4");
  JobDemand d = DemandOf(1, Spec(1, 1, "t4", 0.7));
  CHECK(RankFits(d, n, 4, 1.0 - (0.1 + 0.2)));
  CHECK_FALSE(RankFits(d, n, 4, 0.6));
  CHECK_FALSE(RankFits(d, n, 0.5, 1));
  d.accelerator = "L4";
  CHECK_FALSE(RankFits(d, n, 4, 1));
}

}  // namespace
}  // namespace herd::sched
