// The `ssh` provider: machines that already exist, listed as pools in ~/.herd/ssh_node_pools.yaml
// (SkyPilot's format). herd does not create, stop or authorise anything on them; it picks hosts of
// the pool for a cluster, remembers which ones (so two clusters never share a machine), and hands
// back how to reach each host with the pool's own keys.
//
//   my-pool:
//     user: ubuntu                  # default for the hosts below
//     identity_file: ~/.ssh/id_rsa  # default private key
//     hosts:
//       - 1.2.3.4                   # an IP
//       - my-alias                  # an ssh-config alias (resolved with `ssh -G`)
//       - ip: 5.6.7.8               # a map overrides per host
//         user: root
//         identity_file: ~/.ssh/other
//         port: 2222
//
// Precedence per field: the host's map > for an alias, what the ssh config sets for it > the pool's
// user/identity_file > ssh's defaults (for an IP the pool's values win over a matching ssh config
// entry: the pool names the machine directly).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "controller/provider/provider.hpp"
#include "shared/common/status.hpp"

namespace herd::controller {

// One entry of a pool's hosts list, as written. Fields are "" / 0 when the entry does not set them.
struct SshPoolHost {
  std::string address;        // the IP, alias or host name (the map form's `ip`)
  std::string user;           // only from the map form
  std::string identity_file;  // only from the map form, "~" expanded
  int port = 0;               // only from the map form
  std::string location;       // "file:line:col" of the entry, for messages
};

struct SshPool {
  std::string name;
  std::string user;           // pool-level default; "" when not set
  std::string identity_file;  // pool-level default, "~" expanded; "" when not set
  std::vector<SshPoolHost> hosts;
  std::string location;  // "file:line:col" of the pool's name
};

// $HERD_HOME/ssh_node_pools.yaml (HERD_HOME made absolute), or $HOME/.herd/ssh_node_pools.yaml.
std::string DefaultSshNodePoolsFile();

// Parses the pools file's text; `file` names it in messages ("file:line:col: my-pool.hosts[1]:
// ..."). Pools come in file order. Every structural mistake is an InvalidArgument.
Result<std::vector<SshPool>> ParseSshNodePools(std::string_view text, const std::string& file);

// Reads and parses `file` and returns the pool named `pool`: NotFound naming where it looked for a
// missing file, and the pools that exist for a missing pool.
Result<SshPool> LoadSshNodePool(const std::string& file, const std::string& pool);

// How to reach one host: the address (an IP), port, user and private key ("" for ssh's defaults).
struct ResolvedSshHost {
  std::string ip;
  int port = 22;
  std::string user;
  std::string identity_file;
};

// Applies the precedence above to host `index` of `pool`, asking `ssh -G` (with `-F
// ssh_config_file` when that is not "") what the ssh config says, and resolving a host name to an
// IP. Runs nothing remote.
Result<ResolvedSshHost> ResolveSshPoolHost(const SshPool& pool, size_t index,
                                           const std::string& ssh_config_file = "");

class SshPoolProvider : public Provider {
 public:
  // ssh_config_file: the ssh client config aliases are resolved with; "" is the user's own.
  explicit SshPoolProvider(std::string pool, std::string pools_file = DefaultSshNodePoolsFile(),
                           std::string ssh_config_file = "");

  std::string name() const override { return "ssh"; }

  // Takes the first num_nodes hosts of the pool that no other cluster of the same pool (a sibling
  // of state_dir holding a record) uses, and records them in state_dir/ssh_pool.state. Idempotent:
  // a cluster that has a record gets its recorded hosts back. request.ssh_public_key is not used:
  // herd reaches these machines with the pool's keys (NodeHandle::identity_file).
  Result<std::vector<NodeHandle>> Provision(const ProvisionRequest& request) override;
  // Nothing to do at machine level (the machines are not herd's; the caller stops the agents).
  // NotFound when the cluster has no record.
  Status Stop(const std::string& cluster, const std::string& state_dir) override;
  // The recorded nodes, in Provision's order.
  Result<std::vector<NodeHandle>> Start(const std::string& cluster,
                                        const std::string& state_dir) override;
  // Forgets the record, which frees the hosts for other clusters; OK when there is none.
  Status Teardown(const std::string& cluster, const std::string& state_dir) override;

  const std::string& pool() const { return pool_; }
  const std::string& pools_file() const { return pools_file_; }

 private:
  std::string pool_;
  std::string pools_file_;
  std::string ssh_config_file_;
};

}  // namespace herd::controller
