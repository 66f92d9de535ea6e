// How the controller reaches a cluster's nodes: the SSH target of each, and the address the other
// nodes (and the head's forward) use.
#pragma once

#include <string>
#include <vector>

#include "controller/ssh/ssh_target.hpp"
#include "controller/state/cluster_record.hpp"

namespace herd::ops {

// Where the other nodes (and the head's forward) reach a node: its internal address, else its ip.
const std::string& InternalIp(const controller::NodeRecord& n);

controller::SshTarget TargetOf(const controller::ClusterRecord& c, const controller::NodeRecord& n);
std::vector<controller::SshTarget> TargetsOf(const controller::ClusterRecord& c);

}  // namespace herd::ops
