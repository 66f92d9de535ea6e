// The `local` provider's mode for a normal user (no root, so no network namespaces): every node is
// a user-mode sshd on a loopback address of its own, with a home of its own.
//
// Layout for cluster C with n nodes and loopback range 127.213.S.0/24 (S recorded in state_dir):
//   node i      address 127.213.S.<i+1>, sshd on a free port > 1024 (recorded), run as the user
//   state_dir/local_user_nodes.state, state_dir/nodes/<node>/{home,sshd_config,session,...}
//
// HOME: sshd_config's `SetEnv HOME=<node>/home` (OpenSSH >= 8.7) overrides the HOME that sshd
// takes from the passwd entry, measured with `sshd -T` and a login on OpenSSH 9.2. sshd still
// starts each session in the passwd home, and the controller relies on the session starting in
// the node's home (relative rsync destinations such as "sky_workdir/"), so a ForceCommand runs the
// node's `session` script, which enters $HOME and then runs the requested command (or a login
// shell) with the user's shell exactly as sshd would.
//
// What the nodes share (unlike namespace nodes): the hostname, /etc/hosts and the port space of
// wildcard listeners; a process that binds 0.0.0.0:P on one node takes P from every node.
//
// Processes belong to a node: its sshd (found by the sshd_config path in its command line; sshd
// is non-dumpable, so its environment cannot be read by the user), everything whose environment
// has HOME=<node dir>/home (all that sessions start, daemons that setsid away included), and the
// descendants of both. Stop and Teardown kill those; a process that both leaves the tree and
// changes HOME escapes.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "controller/provider/provider.hpp"

namespace herd::controller {

class UserNodes {
 public:
  // The record's name inside state_dir; its presence means the cluster was made in this mode.
  static constexpr const char* kRecordFile = "local_user_nodes.state";

  static bool HasRecord(const std::string& state_dir);

  // The request is validated by LocalProvider (name, node count, key) before it comes here.
  static Result<std::vector<NodeHandle>> Provision(const ProvisionRequest& request);
  static Status Stop(const std::string& cluster, const std::string& state_dir);
  static Result<std::vector<NodeHandle>> Start(const std::string& cluster,
                                               const std::string& state_dir);
  // Kills every process of every node found under state_dir (with or without a record) and
  // removes the nodes' files and the record.
  static Status Teardown(const std::string& cluster, const std::string& state_dir);

  // Live processes that belong to a node under state_dir: the
  // node's sshd and its sessions, what they started, and their descendants. node is a node name
  // ("demo-worker1"); "" means every node.
  static std::vector<pid_t> Processes(const std::string& state_dir, const std::string& node = "");
};

}  // namespace herd::controller
