// `herd launch` of a task with `image_id: docker:IMAGE`: every node is asked, once its agent is up
// and before the job is submitted, whether it can start that image's container (its herdlet
// checks the runtime and, with SKYPILOT_DOCKER_USERNAME, logs in to the registry: agent/container
// node_container.hpp; shared/common/agent_layout.hpp's kContainerCheckFlag). A node that cannot
// fails the launch with one line naming it and the image; nothing is submitted or started.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "controller/ssh/ssh_runner.hpp"
#include "shared/common/status.hpp"

namespace herd::ops {

struct NodeToCheck {
  std::string name;  // the node's name in herd ("c-worker1"), for the error
  controller::SshTarget target;
};

// The herdlet command that checks a node for `image`, run from the home (the login, when any,
// goes on stdin).
std::string RuntimeCheckCommand(const std::string& herdlet, const std::string& image, bool login);

// The registry login the task's envs and secrets give (SKYPILOT_DOCKER_USERNAME, _PASSWORD,
// _SERVER; a secret wins over an env of the same name), as the check's stdin: "" without a
// username.
std::string RuntimeCheckLogin(const std::map<std::string, std::string>& envs,
                              const std::map<std::string, std::string>& secrets);

// Checks every node at once (herdlet: the agent binary's path on the nodes, relative to their
// home or absolute). The error is the first failing node's, in node order: "node N, image I: WHY"
// (plus how many other nodes failed); its code is the node's (FailedPrecondition: no runtime,
// PermissionDenied: the registry refused the login) or the SSH error's.
Status CheckNodesForImage(controller::SshRunner& ssh, const std::vector<NodeToCheck>& nodes,
                          const std::string& herdlet, const std::string& image,
                          const std::map<std::string, std::string>& envs,
                          const std::map<std::string, std::string>& secrets);

}  // namespace herd::ops
