// Runs herdlet until SIGTERM/SIGINT: the head (when the config's role is head) and the node's
// worker, on one io_context thread; processes are supervised on the launcher's libuv thread.
#pragma once

#include "agent/core/agent_config.hpp"

namespace herd::agent {

// Returns the process exit code. Once running (config, certificates, the head's listener and the
// worker in place) it writes its pid to the config's ready_file and, when ready_fd >= 0, to that
// descriptor, which it then closes and whose start alarm (herdlet --ready-fd) it cancels.
int RunAgent(const AgentConfig& config, int ready_fd = -1);

}  // namespace herd::agent
