// Runs herdlet until SIGTERM/SIGINT: the head (when the config's role is head) and the node's
// worker, on one io_context thread; processes are supervised on the launcher's libuv thread.
#pragma once

#include "agent/core/agent_config.hpp"

namespace herd::agent {

// Returns the process exit code.
int RunAgent(const AgentConfig& config);

}  // namespace herd::agent
