#include "controller/ops/node_targets.hpp"

namespace herd::ops {

using controller::ClusterRecord;
using controller::NodeRecord;
using controller::SshTarget;

const std::string& InternalIp(const NodeRecord& n) {
  return n.internal_ip.empty() ? n.ip : n.internal_ip;
}

SshTarget TargetOf(const ClusterRecord& c, const NodeRecord& n) {
  SshTarget t;
  t.host = n.ip;
  t.port = n.ssh_port;
  t.user = n.ssh_user;
  t.identity_file = n.identity_file.empty() ? c.ssh_key_path : n.identity_file;
  t.known_hosts_file = c.known_hosts_path;
  t.control_dir = c.control_dir;
  t.name = n.name;
  t.jump = n.jump;
  return t;
}

std::vector<SshTarget> TargetsOf(const ClusterRecord& c) {
  std::vector<SshTarget> out;
  for (const auto& n : c.nodes) out.push_back(TargetOf(c, n));
  return out;
}

}  // namespace herd::ops
