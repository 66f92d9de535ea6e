// The order of a cluster's nodes, which is also the rank order of a job that uses all of them.
//
// Cluster order: the head first, then the others by numeric IP of their first address (10.0.0.9
// before 10.0.0.10, unlike SkyPilot's string sort; IPv4 before IPv6; addresses that are not IPs
// last, compared as strings); ties by node_id. It depends only on what each node reports, so a node
// that re-registers with the same address keeps its rank across agent restarts and relaunches.
#pragma once

#include <vector>

#include "herd/v1/common.pb.h"

namespace herd::agent {

bool ClusterOrderLess(const herd::v1::NodeInfo& a, const herd::v1::NodeInfo& b);
void SortClusterOrder(std::vector<herd::v1::NodeInfo>& nodes);

}  // namespace herd::agent
