#include "controller/cli/infra_json.hpp"

#include "shared/proto/job_state.hpp"

namespace herd::cli {

std::string NodeConditionWord(const herd::v1::NodeHealth& h, bool alive) {
  switch (h.condition()) {
    case herd::v1::NODE_CONDITION_UP:
      return "UP";
    case herd::v1::NODE_CONDITION_RECONNECTING:
      return "RECONNECTING";
    case herd::v1::NODE_CONDITION_LOST:
      return "LOST";
    case herd::v1::NODE_CONDITION_STOPPED:
      return "STOPPED";
    default:
      return alive ? "UP" : "LOST";
  }
}

std::map<std::string, int> GpusInUse(const herd::v1::QueueReply& queue) {
  std::map<std::string, int> used;
  for (const auto& j : queue.jobs()) {
    if (proto::IsTerminal(j.state())) continue;
    for (int r = 0; r < j.rank_gpus_size() && r < j.node_ids_size(); ++r) {
      used[j.node_ids(r)] += j.rank_gpus(r).indices_size();
    }
  }
  return used;
}

boost::json::object InfraClusterJson(const controller::ClusterRecord& c,
                                     const herd::v1::NodesReply* reply,
                                     const herd::v1::QueueReply* queue, const Status* error) {
  boost::json::object o;
  o["name"] = c.name;
  o["infra"] = c.infra;
  o["status"] = std::string(controller::Name(c.status));
  o["resources"] = c.resources;
  int gpus = 0, in_use = 0;
  boost::json::array nodes;
  const bool known = reply != nullptr && queue != nullptr;
  if (known) {
    const auto used = GpusInUse(*queue);
    for (int i = 0; i < reply->nodes_size(); ++i) {
      const auto& n = reply->nodes(i);
      const bool alive = i < reply->alive_size() && reply->alive(i);
      const herd::v1::NodeHealth h =
          i < reply->health_size() ? reply->health(i) : herd::v1::NodeHealth{};
      auto u = used.find(n.node_id());
      const int node_in_use = u == used.end() ? 0 : u->second;
      boost::json::array names;
      for (const auto& g : n.gpu_names()) names.push_back(boost::json::string(g));
      nodes.push_back(boost::json::object{{"node_id", n.node_id()},
                                          {"hostname", n.hostname()},
                                          {"address", n.addresses_size() ? n.addresses(0) : ""},
                                          {"is_head", n.is_head()},
                                          {"cpus", n.cpus()},
                                          {"gpus", n.gpu_count()},
                                          {"gpu_names", std::move(names)},
                                          {"gpus_in_use", node_in_use},
                                          {"alive", alive},
                                          {"status", NodeConditionWord(h, alive)},
                                          {"drained", h.drained()}});
      gpus += n.gpu_count();
      in_use += node_in_use;
    }
  } else {
    for (const auto& n : c.nodes) {
      nodes.push_back(boost::json::object{{"node_id", n.name},
                                          {"hostname", ""},
                                          {"address", n.ip},
                                          {"is_head", n.is_head},
                                          {"status", std::string(controller::Name(c.status))}});
    }
    if (error != nullptr) o["error"] = error->message();
  }
  o["nodes"] = std::move(nodes);
  o["gpus"] = gpus;
  o["gpus_in_use"] = in_use;
  o["gpus_known"] = known;
  return o;
}

boost::json::object PoolHostHolders(const controller::SshPool& pool,
                                    const std::vector<controller::ClusterRecord>& clusters,
                                    const ResolvePoolHostFn& resolve) {
  std::map<std::pair<std::string, int>, std::string> holder;  // (ip, port) -> cluster
  for (const auto& c : clusters) {
    if (c.infra != "ssh/" + pool.name) continue;
    for (const auto& n : c.nodes) holder.emplace(std::make_pair(n.ip, n.ssh_port), c.name);
  }
  boost::json::object held;
  if (holder.empty()) return held;
  for (std::size_t i = 0; i < pool.hosts.size(); ++i) {
    auto at = resolve(i);
    if (!at.ok()) continue;
    if (auto h = holder.find(*at); h != holder.end()) held[pool.hosts[i].address] = h->second;
  }
  return held;
}

}  // namespace herd::cli
