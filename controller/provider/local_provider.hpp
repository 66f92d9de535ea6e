// The embedded `local` provider: each node is a network namespace on this machine, with its own
// sshd, hostname, /etc/hosts and home, all on a per-cluster bridge that the controller (in the
// root namespace) reaches through a veth. That mode needs root; for a normal user (geteuid() != 0)
// nodes are user-mode sshds on loopback addresses instead (see user_nodes.hpp). The mode is
// chosen at Provision and kept for the cluster's life (by which record its state_dir holds).
//
// Layout for cluster C with n nodes and subnet 10.213.S.0/24 (S recorded in state_dir):
//   netns herd-C-br   bridge br0; ports n<i> (to node i) and uplink (to the root namespace)
//   netns herd-C-<i>  eth0 = 10.213.S.<i+1>; sshd on port 22; hostname C-head / C-worker<i>
//   root namespace    veth herdl<S> = 10.213.S.254
//   state_dir/local_provider.state, state_dir/nodes/<node>/{home,hosts,sshd_config,...}
#pragma once

#include <string>
#include <vector>

#include "controller/provider/provider.hpp"

namespace herd::controller {

class LocalProvider : public Provider {
 public:
  std::string name() const override { return "local"; }
  Result<std::vector<NodeHandle>> Provision(const ProvisionRequest& request) override;
  Status Stop(const std::string& cluster, const std::string& state_dir) override;
  Result<std::vector<NodeHandle>> Start(const std::string& cluster,
                                        const std::string& state_dir) override;
  Status Teardown(const std::string& cluster, const std::string& state_dir) override;
  // Namespace nodes: running while every node's namespace has a live process, stopped when none
  // has, gone without namespaces; kUnknown for user-mode nodes.
  Result<MachinesView> Machines(const std::string& cluster, const std::string& state_dir) override;
  // Each node's sshd has written its PidFile (it listens) before Provision/Start return.
  bool SshReadyOnReturn() const override { return true; }

  // "demo-head" for index 0, "demo-worker<i>" after.
  static std::string NodeName(const std::string& cluster, int index);
  // "herd-demo-<i>" and "herd-demo-br".
  static std::string NodeNetns(const std::string& cluster, int index);
  static std::string BridgeNetns(const std::string& cluster);
  // Every namespace name this provider may have made for the cluster that exists now (also
  // without a state record: what Teardown removes after a crash).
  static std::vector<std::string> ExistingNamespaces(const std::string& cluster);
};

}  // namespace herd::controller
