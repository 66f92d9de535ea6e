#include "agent/sched/scheduler.hpp"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "agent/store/job_store.hpp"
#include "shared/common/limits.hpp"

using herd::agent::AssignGpus;
using herd::agent::DemandOf;
using herd::agent::JobDemand;
using herd::agent::NodeState;
using herd::agent::Reserve;
using herd::agent::Schedule;
using herd::agent::ScheduleResult;
using herd::agent::TakeGpus;

namespace {

NodeState Node(const std::string& id, int cpus, int gpus = 0, const std::string& gpu_name = "") {
  NodeState n;
  n.info.set_node_id(id);
  n.info.set_cpus(cpus);
  n.info.set_gpu_count(gpus);
  for (int i = 0; i < gpus; ++i) n.info.add_gpu_names(gpu_name);
  return n;
}

JobDemand Job(int64_t id, int nodes, double cpus, double gpus = 0, const std::string& acc = "") {
  return JobDemand{id, nodes, cpus, gpus, acc};
}

using Ids = std::vector<std::string>;
using Gpus = std::vector<int>;

std::vector<int64_t> Started(const ScheduleResult& r) {
  std::vector<int64_t> ids;
  for (const auto& p : r.start) ids.push_back(p.job_id);
  return ids;
}

}  // namespace

TEST_CASE("DemandOf fills in SkyPilot's defaults") {
  herd::v1::TaskSpec spec;
  spec.set_num_nodes(3);
  JobDemand d = DemandOf(5, spec);
  CHECK(d.job_id == 5);
  CHECK(d.num_nodes == 3);
  CHECK(d.cpus_per_node == herd::limits::kDefaultTaskCpus);
  CHECK(d.gpus_per_node == 0);
  CHECK(d.accelerator.empty());

  spec.set_num_nodes(0);
  spec.mutable_resources()->set_cpus(4);
  spec.mutable_resources()->set_accelerator("T4");
  spec.mutable_resources()->set_accelerator_count(0.5);
  d = DemandOf(6, spec);
  CHECK(d.num_nodes == 1);
  CHECK(d.cpus_per_node == 4);
  CHECK(d.gpus_per_node == 0.5);
  CHECK(d.accelerator == "T4");

  spec.mutable_resources()->set_accelerator_count(0);  // "--gpus L4" means one
  CHECK(DemandOf(7, spec).gpus_per_node == 1);
}

TEST_CASE("a gang takes the first fitting nodes in cluster order, one rank per node") {
  std::vector<NodeState> nodes = {Node("head", 4), Node("w1", 4), Node("w2", 4)};
  ScheduleResult r = Schedule({Job(1, 3, 1)}, nodes);
  REQUIRE(r.start.size() == 1);
  CHECK(r.infeasible.empty());
  CHECK(r.start[0].job_id == 1);
  CHECK(r.start[0].node_ids == Ids{"head", "w1", "w2"});
}

TEST_CASE("strict spread: never two ranks on one node, even when one node has room for both") {
  // One big node and one small one: a 2-node job needs two distinct nodes with 2 CPUs each.
  std::vector<NodeState> nodes = {Node("big", 16), Node("small", 1)};
  ScheduleResult r = Schedule({Job(1, 2, 2)}, nodes);
  CHECK(r.start.empty());
  REQUIRE(r.infeasible.size() == 1);
  CHECK(r.infeasible[0].job_id == 1);

  // Two jobs of 2 nodes on 3 nodes: the second has to wait for distinct free nodes.
  nodes = {Node("a", 2), Node("b", 2), Node("c", 2)};
  r = Schedule({Job(1, 2, 2), Job(2, 2, 2)}, nodes);
  REQUIRE(r.start.size() == 1);
  CHECK(r.start[0].node_ids == Ids{"a", "b"});
  CHECK(r.infeasible.empty());
}

TEST_CASE("a job on a subset of nodes skips nodes that do not fit") {
  std::vector<NodeState> nodes = {Node("head", 8), Node("cpu1", 8), Node("gpu1", 8, 4, "NVIDIA L4"),
                                  Node("gpu2", 8, 4, "NVIDIA L4")};
  ScheduleResult r = Schedule({Job(1, 2, 1, 2, "l4")}, nodes);  // case-insensitive name match
  REQUIRE(r.start.size() == 1);
  CHECK(r.start[0].node_ids == Ids{"gpu1", "gpu2"});

  nodes[0].cpus_used = 8;  // head is busy: a 1-node CPU job goes to the next node
  r = Schedule({Job(2, 1, 1)}, nodes);
  REQUIRE(r.start.size() == 1);
  CHECK(r.start[0].node_ids == Ids{"cpu1"});
}

TEST_CASE("resources are reserved for the jobs that follow in the same pass") {
  std::vector<NodeState> nodes = {Node("a", 4), Node("b", 4)};
  ScheduleResult r = Schedule({Job(1, 1, 3), Job(2, 1, 3), Job(3, 1, 1), Job(4, 2, 1)}, nodes);
  REQUIRE(r.start.size() == 3);
  CHECK(r.start[0].node_ids == Ids{"a"});
  CHECK(r.start[1].node_ids == Ids{"b"});  // a has only 1 CPU left
  CHECK(r.start[2].node_ids == Ids{"a"});  // which job 3 takes
  // Job 4 needs 1 CPU on two nodes but only b has one left: it waits.
  CHECK(r.infeasible.empty());
}

TEST_CASE("reservations: a job that no longer fits after earlier placements waits") {
  std::vector<NodeState> nodes = {Node("a", 4), Node("b", 4)};
  ScheduleResult r = Schedule({Job(1, 2, 3), Job(2, 2, 2)}, nodes);
  CHECK(Started(r) == std::vector<int64_t>{1});
  CHECK(r.infeasible.empty());  // it fits the idle cluster, so it waits, not fails
}

TEST_CASE("head-of-line blocking: a waiting job blocks every job behind it") {
  std::vector<NodeState> nodes = {Node("a", 4), Node("b", 4)};
  nodes[0].cpus_used = 3;  // a running job holds 3 CPUs of a
  // Job 1 needs 2 CPUs on both nodes: waits. Job 2 (1 CPU, 1 node) would fit b but must not start.
  ScheduleResult r = Schedule({Job(1, 2, 2), Job(2, 1, 1)}, nodes);
  CHECK(r.start.empty());
  CHECK(r.infeasible.empty());

  // Jobs before the blocker still start.
  r = Schedule({Job(3, 1, 1), Job(1, 2, 2), Job(2, 1, 1)}, nodes);
  CHECK(Started(r) == std::vector<int64_t>{3});
}

TEST_CASE("an infeasible job does not block, and is reported even behind a blocker") {
  std::vector<NodeState> nodes = {Node("a", 4), Node("b", 4)};
  ScheduleResult r = Schedule({Job(1, 3, 1), Job(2, 1, 1)}, nodes);
  CHECK(Started(r) == std::vector<int64_t>{2});
  REQUIRE(r.infeasible.size() == 1);
  CHECK(r.infeasible[0].job_id == 1);

  nodes[1].cpus_used = 4;
  r = Schedule({Job(3, 2, 1), Job(4, 1, 100), Job(5, 1, 1)}, nodes);
  CHECK(r.start.empty());  // 3 waits for b; 5 is behind it
  REQUIRE(r.infeasible.size() == 1);
  CHECK(r.infeasible[0].job_id == 4);
}

TEST_CASE("fractional GPUs: two T4:0.5 jobs share one GPU, a third waits") {
  std::vector<NodeState> nodes = {Node("g", 8, 1, "Tesla T4")};
  ScheduleResult r =
      Schedule({Job(1, 1, 1, 0.5, "T4"), Job(2, 1, 1, 0.5, "T4"), Job(3, 1, 1, 0.5, "T4")}, nodes);
  CHECK(Started(r) == std::vector<int64_t>{1, 2});
  CHECK(r.infeasible.empty());

  nodes[0].gpu_used = {0.5};  // one running already
  r = Schedule({Job(4, 1, 1, 0.5, "T4"), Job(5, 1, 1, 0.5, "T4")}, nodes);
  CHECK(Started(r) == std::vector<int64_t>{4});

  // Sums of decimals: 0.1 + 0.2 used leaves room for 0.7.
  nodes[0].gpu_used = {0.1 + 0.2};
  r = Schedule({Job(6, 1, 1, 0.7, "T4")}, nodes);
  CHECK(Started(r) == std::vector<int64_t>{6});
}

TEST_CASE("infeasible reasons say what was asked and what the nodes have") {
  std::vector<NodeState> nodes = {Node("node-a", 4), Node("node-b", 8, 4, "NVIDIA L4"),
                                  Node("node-c", 2)};
  nodes[2].alive = false;

  SUBCASE("wrong GPU type") {
    ScheduleResult r = Schedule({Job(1, 2, 0.5, 8, "H100")}, nodes);
    REQUIRE(r.infeasible.size() == 1);
    const std::string& why = r.infeasible[0].reason;
    CHECK(why.find("task needs 2 node(s) with 8 GPU(s) of type H100 and 0.5 CPU(s) each") == 0);
    CHECK(why.find("the cluster has 3 node(s): node-a (cpus=4, gpus=0), "
                   "node-b (cpus=8, gpus=4 x NVIDIA L4), node-c (cpus=2, gpus=0, lost)") !=
          std::string::npos);
  }
  SUBCASE("too many nodes") {
    ScheduleResult r = Schedule({Job(2, 4, 0)}, nodes);
    REQUIRE(r.infeasible.size() == 1);
    CHECK(r.infeasible[0].reason.find("task needs 4 node(s) with 0.5 CPU(s) each; the cluster "
                                      "has 3 node(s)") == 0);
  }
  SUBCASE("more GPUs than any node has") {
    ScheduleResult r = Schedule({Job(3, 1, 1, 5, "L4")}, nodes);
    REQUIRE(r.infeasible.size() == 1);
    CHECK(r.infeasible[0].reason.find("1 node(s) with 5 GPU(s) of type L4 and 1 CPU(s)") !=
          std::string::npos);
  }
  SUBCASE("more CPUs than any node has") {
    ScheduleResult r = Schedule({Job(4, 1, 9)}, nodes);
    REQUIRE(r.infeasible.size() == 1);
    CHECK(r.infeasible[0].reason.find("with 9 CPU(s) each") != std::string::npos);
  }
  SUBCASE("a GPU job with no type on a cluster without GPUs") {
    ScheduleResult r = Schedule({Job(5, 1, 1, 1)}, {Node("node-a", 4)});
    REQUIRE(r.infeasible.size() == 1);
    CHECK(r.infeasible[0].reason ==
          "task needs 1 node(s) with 1 GPU(s) and 1 CPU(s) each; the cluster has 1 node(s): "
          "node-a (cpus=4, gpus=0)");
  }
}

TEST_CASE("dead nodes are skipped; a job that needs one waits rather than fails") {
  std::vector<NodeState> nodes = {Node("head", 4), Node("w1", 4), Node("w2", 4)};
  nodes[1].alive = false;
  ScheduleResult r = Schedule({Job(1, 2, 1)}, nodes);
  REQUIRE(r.start.size() == 1);
  CHECK(r.start[0].node_ids == Ids{"head", "w2"});

  r = Schedule({Job(2, 3, 1)}, nodes);
  CHECK(r.start.empty());
  CHECK(r.infeasible.empty());
}

TEST_CASE("CPU jobs may run on GPU nodes; a zero CPU demand means the default") {
  std::vector<NodeState> nodes = {Node("g", 1, 1, "NVIDIA H200")};
  ScheduleResult r = Schedule({Job(1, 1, 0), Job(2, 1, 0), Job(3, 1, 0)}, nodes);
  // 1 CPU holds two jobs of the default 0.5 CPUs.
  CHECK(Started(r) == std::vector<int64_t>{1, 2});
}

TEST_CASE(
    "AssignGpus: whole GPUs are the lowest free indices; a share packs onto the fullest GPU") {
  std::vector<double> used;
  CHECK(AssignGpus(used, 8, 4) == Gpus{0, 1, 2, 3});
  CHECK(AssignGpus(used, 8, 0) == Gpus{});
  CHECK(AssignGpus(used, 8, 1.5) == Gpus{0, 1});  // rounded up, as SKYPILOT_NUM_GPUS_PER_NODE
  CHECK(AssignGpus(used, 8, 8.0000000001) == Gpus{0, 1, 2, 3, 4, 5, 6, 7});  // float noise
  CHECK_FALSE(AssignGpus(used, 8, 9));
  CHECK_FALSE(AssignGpus(used, 0, 0.5));

  TakeGpus(used, {0, 1, 2, 3}, 4);
  CHECK(AssignGpus(used, 8, 4) == Gpus{4, 5, 6, 7});
  CHECK_FALSE(AssignGpus(used, 8, 5));

  // Shares: the first goes to the lowest free index, the next ones to the fullest that has room.
  TakeGpus(used, {4}, 0.5);
  CHECK(used[4] == 0.5);
  CHECK(AssignGpus(used, 8, 0.5) == Gpus{4});
  CHECK(AssignGpus(used, 8, 0.25) == Gpus{4});
  CHECK(AssignGpus(used, 8, 0.75) == Gpus{5});  // does not fit 4 any more
  CHECK(AssignGpus(used, 8, 1) == Gpus{5});     // a whole GPU never takes a shared one
  CHECK(AssignGpus(used, 8, 3) == Gpus{5, 6, 7});
  CHECK_FALSE(AssignGpus(used, 8, 4));
  TakeGpus(used, {4}, 0.5);
  CHECK(AssignGpus(used, 8, 0.5) == Gpus{5});  // 4 is full now
}

TEST_CASE("8 GPUs: two 4-GPU jobs get disjoint indices at once, an 8-GPU job waits for both") {
  std::vector<NodeState> nodes = {Node("g", 64, 8, "NVIDIA H200")};
  ScheduleResult r =
      Schedule({Job(1, 1, 1, 4, "H200"), Job(2, 1, 1, 4, "H200"), Job(3, 1, 1, 8, "H200")}, nodes);
  CHECK(Started(r) == std::vector<int64_t>{1, 2});
  CHECK(r.infeasible.empty());  // 3 waits: it fits the idle node
  REQUIRE(r.start.size() == 2);
  CHECK(r.start[0].gpus == std::vector<Gpus>{{0, 1, 2, 3}});
  CHECK(r.start[1].gpus == std::vector<Gpus>{{4, 5, 6, 7}});

  // With 1 and 2 running (as the head reserves them from their records), 3 still waits ...
  herd::v1::JobInfo one, two;
  one.add_node_ids("g");
  one.add_rank_gpus();
  for (int i : {0, 1, 2, 3}) one.mutable_rank_gpus(0)->add_indices(i);
  two.add_node_ids("g");
  two.add_rank_gpus();
  for (int i : {4, 5, 6, 7}) two.mutable_rank_gpus(0)->add_indices(i);
  std::vector<NodeState> busy = nodes;
  Reserve(busy, Job(1, 1, 1, 4, "H200"), one);
  Reserve(busy, Job(2, 1, 1, 4, "H200"), two);
  CHECK(busy[0].cpus_used == 2);
  CHECK(Schedule({Job(3, 1, 1, 8, "H200")}, busy).start.empty());
  // ... and behind it a 4-GPU job waits too (no backfill).
  busy = nodes;
  Reserve(busy, Job(1, 1, 1, 4, "H200"), one);
  CHECK(Started(Schedule({Job(3, 1, 1, 8, "H200"), Job(4, 1, 1, 4, "H200")}, busy)).empty());
  // When both ended, 3 gets all 8.
  r = Schedule({Job(3, 1, 1, 8, "H200")}, nodes);
  REQUIRE(r.start.size() == 1);
  CHECK(r.start[0].gpus == std::vector<Gpus>{{0, 1, 2, 3, 4, 5, 6, 7}});
}

TEST_CASE("a gang gets GPU indices per rank, each on its own node") {
  std::vector<NodeState> nodes = {Node("head", 8), Node("g1", 8, 4, "NVIDIA L4"),
                                  Node("g2", 8, 4, "NVIDIA L4")};
  nodes[2].gpu_used = {1, 0, 0.5};
  ScheduleResult r = Schedule({Job(1, 2, 1, 2, "L4")}, nodes);
  REQUIRE(r.start.size() == 1);
  CHECK(r.start[0].node_ids == Ids{"g1", "g2"});
  CHECK(r.start[0].gpus == std::vector<Gpus>{{0, 1}, {1, 3}});
  // A job without GPUs gets no index, even on a GPU node.
  r = Schedule({Job(2, 1, 1)}, {Node("g", 8, 4, "NVIDIA L4")});
  REQUIRE(r.start.size() == 1);
  CHECK(r.start[0].gpus == std::vector<Gpus>{{}});
  // Enough GPUs in total but not whole ones: 4 GPUs each half used cannot hold a 1-GPU rank.
  nodes = {Node("g", 8, 4, "NVIDIA L4")};
  nodes[0].gpu_used = {0.5, 0.5, 0.5, 0.5};
  CHECK(Schedule({Job(3, 1, 1, 1, "L4")}, nodes).start.empty());
  CHECK(Started(Schedule({Job(4, 1, 1, 0.5, "L4")}, nodes)) == std::vector<int64_t>{4});
}

TEST_CASE("Reserve: a record without indices (an older head's) is still counted") {
  std::vector<NodeState> nodes = {Node("g", 8, 8, "NVIDIA H200")};
  herd::v1::JobInfo old;
  old.add_node_ids("g");
  old.add_node_ids("gone");  // a node the head no longer knows is skipped
  Reserve(nodes, Job(1, 2, 2, 4, "H200"), old);
  CHECK(nodes[0].cpus_used == 2);
  CHECK(nodes[0].gpu_used == std::vector<double>{1, 1, 1, 1});
  Reserve(nodes, Job(2, 1, 2, 6, "H200"), old);  // more than is free: counted, not forgotten
  CHECK(nodes[0].gpu_used == std::vector<double>{2, 2, 2, 2, 1, 1});
  CHECK(Schedule({Job(3, 1, 1, 3, "H200")}, nodes).start.empty());
  ScheduleResult r = Schedule({Job(4, 1, 1, 2, "H200")}, nodes);
  REQUIRE(r.start.size() == 1);
  CHECK(r.start[0].gpus == std::vector<Gpus>{{6, 7}});
}

TEST_CASE("the assignment is kept in jobs.db: a new head process reserves the same GPUs") {
  char tmpl[] = "/tmp/herd-sched-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string db = dir + "/jobs.db";
  std::vector<NodeState> nodes = {Node("g", 64, 8, "NVIDIA H200")};
  herd::v1::TaskSpec spec;
  spec.set_num_nodes(1);
  spec.mutable_resources()->set_accelerator("H200");
  spec.mutable_resources()->set_accelerator_count(4);
  {
    auto store = herd::agent::JobStore::Open(db);
    REQUIRE(store.ok());
    herd::agent::JobRecord rec;
    rec.spec = spec;
    rec.info.set_state(herd::v1::JOB_STATE_PENDING);
    auto id = (*store)->AddJob(rec);
    REQUIRE(id.ok());
    rec.info.set_job_id(*id);
    // The head placed it on the second half (the first was taken by a job since finished).
    std::vector<NodeState> busy = nodes;
    busy[0].gpu_used = {1, 1, 1, 1};
    ScheduleResult r = Schedule({DemandOf(*id, spec)}, busy);
    REQUIRE(r.start.size() == 1);
    rec.info.set_state(herd::v1::JOB_STATE_RUNNING);
    rec.info.add_node_ids("g");
    rec.info.add_rank_gpus()->mutable_indices()->Add(r.start[0].gpus[0].begin(),
                                                     r.start[0].gpus[0].end());
    REQUIRE((*store)->UpdateJob(rec).ok());
  }
  auto store = herd::agent::JobStore::Open(db);
  REQUIRE(store.ok());
  auto active = (*store)->ActiveJobs();
  REQUIRE(active.ok());
  REQUIRE(active->size() == 1);
  std::vector<NodeState> after = nodes;
  Reserve(after, DemandOf(1, active->at(0).spec), active->at(0).info);
  ScheduleResult r = Schedule({DemandOf(2, spec)}, after);
  REQUIRE(r.start.size() == 1);
  CHECK(r.start[0].gpus == std::vector<Gpus>{{0, 1, 2, 3}});  // not 4-7: those are still taken
  std::filesystem::remove_all(dir);
}
