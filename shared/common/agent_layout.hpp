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

// `herdlet --check-container-runtime IMAGE [--login-stdin]`: `herd launch`'s check that a node can
// start a container of IMAGE (agent/container/node_container.hpp; the controller's side is
// controller/ops/container_check.hpp). With --login-stdin, three lines on stdin: the registry
// username, its server ("" = the image's), the password. A failure is one line "herd: WHY" on
// stderr and this exit code (podman's for its own errors), as the node's container errors are.
inline constexpr char kContainerCheckFlag[] = "--check-container-runtime";
inline constexpr int kContainerErrorExit = 125;
// The registry login SkyPilot takes from the task's environment (envs or secrets).
inline constexpr char kDockerUserEnv[] = "SKYPILOT_DOCKER_USERNAME";
inline constexpr char kDockerPasswordEnv[] = "SKYPILOT_DOCKER_PASSWORD";
inline constexpr char kDockerServerEnv[] = "SKYPILOT_DOCKER_SERVER";

}  // namespace herd
