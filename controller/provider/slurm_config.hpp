// Slurm clusters as infra: `infra: slurm[/CLUSTER[/PARTITION]]`, the clusters listed in
// ~/.slurm/config in SSH-config format (SkyPilot's format), one Host per cluster's login node:
//
//   Host mycluster                 # the cluster's name in `slurm/mycluster`
//     HostName login.example.com   # the login node (default: the Host name)
//     User alice
//     Port 22
//     IdentityFile ~/.ssh/id_ed25519
//     ProxyJump bastion.example.com
//
// As in ssh_config, keys are case-insensitive, `Key value` and `Key=value` both work, a Host line
// may name several patterns, and for each key the first value found among the Host blocks that
// match the cluster's name wins (so a trailing `Host *` block gives defaults). Only the names of
// Host lines without wildcards are clusters, except a Host that is another's ProxyJump (a bastion
// with its own HostName, User, Port, IdentityFile). ProxyJump takes hops "[user@]host[:port]", one
// or a comma list gone through in order, and a hop that is a Host with a ProxyJump of its own is
// reached through that first (a chain of bastions; a loop is refused); without an IdentityFile of
// its own a hop uses the cluster's. Other keys are ignored.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "controller/ssh/ssh_target.hpp"
#include "shared/common/status.hpp"

namespace herd::controller {

struct SlurmClusterConfig {
  std::string name;      // the Host name: `slurm/<name>`
  std::string hostname;  // the login node's address (HostName, else the name)
  std::string user;      // "" lets ssh pick (the local user)
  int port = 22;
  std::string identity_file;  // "~" expanded; "" lets ssh pick its defaults
  SshJump jump;               // ProxyJump, resolved (its hops before it in jump.before)
  std::string location;       // "file:line" of the Host line, for messages
};

// $HOME/.slurm/config.
std::string DefaultSlurmConfigFile();

// Parses the config's text; `file` names it in messages ("file:12: Port: expected a number ...").
// Clusters come in file order.
Result<std::vector<SlurmClusterConfig>> ParseSlurmConfig(std::string_view text,
                                                         const std::string& file);

// Reads and parses `file`: NotFound naming the file when it does not exist.
Result<std::vector<SlurmClusterConfig>> LoadSlurmConfig(const std::string& file);

// The cluster and partition an infra names: "slurm" (both ""), "slurm/C", "slurm/C/P".
struct SlurmInfra {
  std::string cluster;    // "" = the first cluster of the config
  std::string partition;  // "" = the cluster's default partition
};
bool IsSlurmInfra(const std::string& infra);
Result<SlurmInfra> ParseSlurmInfra(const std::string& infra);

// The cluster `wanted` names ("" = the first one): NotFound listing the clusters that exist.
Result<SlurmClusterConfig> FindSlurmCluster(const std::vector<SlurmClusterConfig>& clusters,
                                            const std::string& wanted, const std::string& file);

}  // namespace herd::controller
