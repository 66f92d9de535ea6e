// What the controller installs on a cluster's nodes: each agent's config, its certificates, the
// herdlet binary, and the stamp that says whether what runs there is still what would be installed.
#pragma once

#include <cstddef>
#include <string>

#include "controller/bootstrap/agent_bootstrap.hpp"
#include "controller/core/progress.hpp"
#include "controller/provider/provider.hpp"
#include "controller/ssh/ssh_runner.hpp"
#include "controller/state/cluster_record.hpp"
#include "shared/common/status.hpp"

namespace herd::ops {

// Node i's herdlet config (agent/core/agent_config.hpp reads it).
std::string AgentConfigYaml(const controller::ClusterRecord& c, std::size_t i);

// Issues missing agent certificates (the CA key stays here) and installs/starts the agents.
Result<controller::BootstrapResult> BootstrapCluster(controller::SshRunner& ssh,
                                                     const controller::ClusterRecord& c,
                                                     const controller::ProgressFn& progress);

// For a provider that starts the agents itself (Provider::StartsAgents: Slurm): issues missing
// agent certificates as BootstrapCluster does and hands every node's config and certificates to
// the provider. Every node counts as uploaded and restarted.
Result<controller::BootstrapResult> StartProviderAgents(controller::Provider& provider,
                                                        const controller::ClusterRecord& c,
                                                        const controller::ProgressFn& progress);

// What BootstrapCluster would install on c, as one hash: the local herdlet file's identity
// (device, inode, size, modification time: a rebuilt or replaced binary changes it), the remote
// directory, and every node's agent config and certificates. Fails while a node has no
// certificates yet.
Result<std::string> AgentStamp(const controller::ClusterRecord& c);

}  // namespace herd::ops
