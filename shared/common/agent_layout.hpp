// Files of an agent's state directory that the controller reads too; the rest of that directory is
// the agent's own business.
#pragma once

namespace herd {

// The agent's directory on a node, relative to the node user's home (BootstrapOptions::remote_dir's
// default); its state directory is <this>/state.
inline constexpr char kDefaultAgentDir[] = ".herd/agent";

// One line: the directory holding the agent's per-job cgroups (agent/core/agentd.cpp writes it at
// start where cgroups are used). The local provider's stop and down, and down of an SSH pool's
// nodes, remove that directory and the empty cgroups in it once no process of the node is left.
inline constexpr char kCgroupScopeFile[] = "cgroup.scope";

}  // namespace herd
