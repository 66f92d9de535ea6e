// What `herd nodes` and `herd infra` make of a head's answers: a node's condition in one word,
// the GPUs each node's unfinished jobs hold, and one cluster of `herd infra -o json`.
#pragma once

#include <boost/json.hpp>
#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "controller/provider/ssh_pool_provider.hpp"
#include "controller/state/cluster_record.hpp"
#include "herd/v1/client.pb.h"
#include "shared/common/status.hpp"

namespace herd::cli {

// UP, RECONNECTING, LOST or STOPPED; from `alive` alone for a head that sends no health.
std::string NodeConditionWord(const herd::v1::NodeHealth& h, bool alive);

// The GPUs each node's unfinished jobs hold (node id -> count): each rank's GPU indices
// (JobInfo.rank_gpus, parallel to node_ids) on its node. Finished jobs hold none.
std::map<std::string, int> GpusInUse(const herd::v1::QueueReply& queue);

// One cluster of `herd infra -o json`: {"name", "infra", "status", "resources", "nodes": [...],
// "gpus", "gpus_in_use", "gpus_known"}. With the head's answers (nodes and queue), each node is
// {"node_id", "hostname", "address", "is_head", "cpus", "gpus", "gpu_names", "gpus_in_use",
// "alive", "status", "drained"} and gpus_known is true. Without (a cluster not UP: not asked; or
// `error`: why its head gave no answer, also as "error"), the nodes are the record's and their
// GPUs unknown: gpus_known false, never a count of 0 that was not seen.
boost::json::object InfraClusterJson(const controller::ClusterRecord& c,
                                     const herd::v1::NodesReply* nodes,
                                     const herd::v1::QueueReply* queue, const Status* error);

// Which cluster holds each host of an SSH node pool (`herd infra -o json`'s "held_by" of the pool):
// {"HOST": "CLUSTER"} for each host, as the pools file writes it, that a node of one of `clusters`
// on the pool (infra "ssh/<pool>") is: the same address and SSH port. `resolve(i)` gives host i's
// (ResolveSshPoolHost: an alias through the ssh config, a name to its IP); it is asked only when
// a cluster is on the pool, and a host it cannot resolve is held by none.
using ResolvePoolHostFn = std::function<Result<std::pair<std::string, int>>(std::size_t index)>;
boost::json::object PoolHostHolders(const controller::SshPool& pool,
                                    const std::vector<controller::ClusterRecord>& clusters,
                                    const ResolvePoolHostFn& resolve);

}  // namespace herd::cli
