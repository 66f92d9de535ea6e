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
// A node reaches its subnet and, through 10.213.S.254, the prefixes of `local.host_routes`
// (LocalConfig): this machine's own addresses there answer (a store for bucket mounts that every
// local cluster's nodes use); herd adds no forwarding or NAT.
#pragma once

#include <string>
#include <vector>

#include "controller/provider/provider.hpp"

namespace herd::controller {

// The `local:` section of herd's config.yaml (DefaultHerdConfigFile):
//   local:
//     host_routes: [192.168.1.5, 10.213.0.0/24]
// host_routes: IPv4 prefixes (an address alone is a /32) that every namespace node routes through
// this machine (`route PREFIX via 10.213.S.254`), so that a service listening on one of this
// machine's own addresses there is reached from the nodes of every local cluster, whichever subnet
// each got. Loopback (127.0.0.0/8) and the clusters' subnets (10.213.1.0 to 10.213.255.255) are
// refused; 10.213.0.0/24 is never a cluster's and free for this. User-mode nodes share this
// machine's network and need none of it.
struct LocalConfig {
  std::vector<std::string> host_routes;  // "a.b.c.d/len", host bits cleared
};
// The file's `local:` section; defaults when the file or the section does not exist; errors name
// "file:line:col: local.field".
Result<LocalConfig> LoadLocalConfig(const std::string& file);

class LocalProvider : public Provider {
 public:
  // config_file: where LoadLocalConfig reads (at every Provision and Start); "" =
  // DefaultHerdConfigFile().
  explicit LocalProvider(std::string config_file = "") : config_file_(std::move(config_file)) {}
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

 private:
  Result<LocalConfig> Config() const;

  std::string config_file_;
};

}  // namespace herd::controller
