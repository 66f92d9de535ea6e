// `herd infra`'s view of a cluster from its head's answers: each node's GPUs and the ones its
// unfinished jobs hold, and a cluster whose head did not answer has GPUs unknown, not zero.
#include "controller/cli/infra_json.hpp"

#include <doctest/doctest.h>

namespace herd::cli {
namespace {

using namespace herd::v1;

JobInfo Job(int64_t id, JobState state, std::vector<std::pair<std::string, int>> ranks) {
  JobInfo j;
  j.set_job_id(id);
  j.set_state(state);
  for (const auto& [node, gpus] : ranks) {
    j.add_node_ids(node);
    GpuIndices* g = j.add_rank_gpus();
    for (int i = 0; i < gpus; ++i) g->add_indices(i);
  }
  return j;
}

controller::ClusterRecord Record() {
  controller::ClusterRecord c;
  c.name = "train";
  c.infra = "ssh/lab";
  c.status = controller::ClusterStatus::kUp;
  c.resources = "2x(gpus=H100:8)";
  controller::NodeRecord head, worker;
  head.name = "train-head";
  head.ip = "10.0.0.1";
  head.is_head = true;
  worker.name = "train-worker1";
  worker.ip = "10.0.0.2";
  c.nodes = {head, worker};
  return c;
}

TEST_CASE("GPUs in use: what each node's unfinished jobs hold, finished jobs nothing") {
  QueueReply q;
  *q.add_jobs() = Job(1, JOB_STATE_RUNNING, {{"a", 4}, {"b", 4}});
  *q.add_jobs() = Job(2, JOB_STATE_SETTING_UP, {{"a", 2}});
  *q.add_jobs() = Job(3, JOB_STATE_SUCCEEDED, {{"a", 8}, {"b", 8}});
  *q.add_jobs() = Job(4, JOB_STATE_CANCELLED, {{"b", 1}});
  *q.add_jobs() = Job(5, JOB_STATE_RUNNING, {{"c", 0}});  // a CPU job
  auto used = GpusInUse(q);
  CHECK(used["a"] == 6);
  CHECK(used["b"] == 4);
  CHECK(used["c"] == 0);
  // A job whose rank_gpus is shorter than its gang (an older head's record) counts what it has.
  JobInfo partial = Job(6, JOB_STATE_RUNNING, {{"d", 2}});
  partial.add_node_ids("e");
  QueueReply q2;
  *q2.add_jobs() = partial;
  used = GpusInUse(q2);
  CHECK(used["d"] == 2);
  CHECK(used.count("e") == 0);
}

TEST_CASE("a cluster whose head answered: each node's GPUs, in use and its condition") {
  NodesReply nodes;
  for (const char* id : {"train-head", "train-worker1"}) {
    NodeInfo* n = nodes.add_nodes();
    n->set_node_id(id);
    n->add_addresses(std::string(id) == "train-head" ? "10.0.0.1" : "10.0.0.2");
    n->set_is_head(std::string(id) == "train-head");
    n->set_gpu_count(8);
    for (int i = 0; i < 8; ++i) n->add_gpu_names("NVIDIA H100");
  }
  nodes.add_alive(true);
  nodes.add_alive(false);
  NodeHealth* up = nodes.add_health();
  up->set_condition(NODE_CONDITION_UP);
  NodeHealth* lost = nodes.add_health();
  lost->set_condition(NODE_CONDITION_LOST);
  lost->set_drained(true);
  QueueReply q;
  *q.add_jobs() = Job(1, JOB_STATE_RUNNING, {{"train-head", 3}, {"train-worker1", 8}});
  auto o = InfraClusterJson(Record(), &nodes, &q, nullptr);
  CHECK(o.at("name").as_string() == "train");
  CHECK(o.at("infra").as_string() == "ssh/lab");
  CHECK(o.at("status").as_string() == "UP");
  CHECK(o.at("gpus_known").as_bool());
  CHECK(o.at("gpus").as_int64() == 16);
  CHECK(o.at("gpus_in_use").as_int64() == 11);
  CHECK_FALSE(o.contains("error"));
  const auto& ns = o.at("nodes").as_array();
  REQUIRE(ns.size() == 2);
  CHECK(ns[0].at("node_id").as_string() == "train-head");
  CHECK(ns[0].at("is_head").as_bool());
  CHECK(ns[0].at("gpus").as_int64() == 8);
  CHECK(ns[0].at("gpus_in_use").as_int64() == 3);
  CHECK(ns[0].at("gpu_names").as_array().size() == 8);
  CHECK(ns[0].at("status").as_string() == "UP");
  CHECK(ns[1].at("gpus_in_use").as_int64() == 8);
  CHECK(ns[1].at("status").as_string() == "LOST");
  CHECK(ns[1].at("drained").as_bool());
  CHECK_FALSE(ns[1].at("alive").as_bool());
}

TEST_CASE("a cluster not asked or not answering: the record's nodes, GPUs unknown") {
  auto o = InfraClusterJson(Record(), nullptr, nullptr, nullptr);
  CHECK_FALSE(o.at("gpus_known").as_bool());
  CHECK_FALSE(o.contains("error"));
  const auto& ns = o.at("nodes").as_array();
  REQUIRE(ns.size() == 2);
  CHECK(ns[0].at("node_id").as_string() == "train-head");
  CHECK(ns[0].at("address").as_string() == "10.0.0.1");
  CHECK_FALSE(ns[0].as_object().contains("gpus"));
  const Status why = Unavailable("its head did not answer within 3 s");
  o = InfraClusterJson(Record(), nullptr, nullptr, &why);
  CHECK(o.at("error").as_string() == "its head did not answer within 3 s");
  CHECK_FALSE(o.at("gpus_known").as_bool());
}

TEST_CASE("an SSH pool's hosts: the cluster on the pool that holds each, by address and port") {
  controller::SshPool pool;
  pool.name = "lab";
  for (const char* a : {"10.0.0.1", "box2", "10.0.0.3", "10.0.0.4"}) {
    controller::SshPoolHost h;
    h.address = a;
    pool.hosts.push_back(h);
  }
  // How each host resolves: box2 is an alias of 10.0.0.2; 10.0.0.4 cannot be resolved.
  std::size_t asked = 0;
  auto resolve = [&](std::size_t i) -> Result<std::pair<std::string, int>> {
    ++asked;
    if (i == 1) return std::make_pair(std::string("10.0.0.2"), 22);
    if (i == 3) return Unavailable("no such host");
    return std::make_pair(pool.hosts[i].address, 22);
  };
  controller::ClusterRecord train = Record();  // ssh/lab on 10.0.0.1 and 10.0.0.2
  controller::ClusterRecord other = Record();  // another pool's cluster on 10.0.0.3
  other.name = "elsewhere";
  other.infra = "ssh/other";
  other.nodes = {other.nodes[0]};
  other.nodes[0].ip = "10.0.0.3";
  controller::ClusterRecord port = Record();  // lab's 10.0.0.3, but another port: not that host
  port.name = "onport";
  port.nodes = {port.nodes[0]};
  port.nodes[0].ip = "10.0.0.3";
  port.nodes[0].ssh_port = 2222;
  for (auto& n : train.nodes) n.ssh_port = 22;
  auto held = PoolHostHolders(pool, {train, other, port}, resolve);
  CHECK(held == boost::json::object{{"10.0.0.1", "train"}, {"box2", "train"}});
  CHECK(asked == 4);
  // No cluster on the pool: nothing held, nothing resolved.
  asked = 0;
  CHECK(PoolHostHolders(pool, {other}, resolve).empty());
  CHECK(asked == 0);
}

TEST_CASE("a node's condition in one word, from alive alone for a head without health") {
  NodeHealth h;
  CHECK(NodeConditionWord(h, true) == "UP");
  CHECK(NodeConditionWord(h, false) == "LOST");
  h.set_condition(NODE_CONDITION_RECONNECTING);
  CHECK(NodeConditionWord(h, true) == "RECONNECTING");
  h.set_condition(NODE_CONDITION_STOPPED);
  CHECK(NodeConditionWord(h, false) == "STOPPED");
}

}  // namespace
}  // namespace herd::cli
