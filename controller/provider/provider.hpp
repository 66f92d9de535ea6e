// Where a cluster's machines come from. A provider makes machines reachable over SSH and keeps
// track of them in the cluster's state dir; everything after that (agents, jobs) goes through
// SshRunner and does not care which provider made the machine.
#pragma once

#include <string>
#include <vector>

#include "controller/ssh/ssh_target.hpp"
#include "shared/common/status.hpp"

namespace herd::controller {

struct NodeHandle {
  std::string name;  // "demo-head", "demo-worker1"
  std::string ip;    // the address other nodes and the controller reach it at
  int ssh_port = 22;
  std::string ssh_user;
  std::string netns;      // the network namespace when the node is one; "" when none
  std::string host_home;  // the node's home as a path on the controller's machine; "" when remote
  // The private key to reach it with when the provider does not authorise the cluster key (the
  // ssh pool's machines); "" means the cluster key. "{}" keeps initialisers that omit it valid.
  std::string identity_file{};
  // The address the other nodes reach it at when that is not `ip` (a cloud VM's private address
  // behind its public one); "" means ip.
  std::string internal_ip{};
  // The host ssh goes through to reach it (a Slurm login node behind a bastion); empty: none.
  SshJump jump{};
  // A spot instance's metadata service as the node reaches it (real EC2: http://169.254.169.254),
  // where its agent polls for an interruption notice; "" when the node is not a spot instance.
  std::string spot_metadata{};
};

struct ProvisionRequest {
  std::string cluster;
  int num_nodes = 1;
  std::string state_dir;       // $HERD_HOME/clusters/<name>
  std::string ssh_public_key;  // the cluster key's .pub contents, the only key authorised
};

// What a provider that starts the agents itself (StartsAgents) installs for one node: the node's
// herdlet.yaml and the directory with its ca.crt, agent.crt and agent.key.
struct AgentFiles {
  std::string node;  // the NodeHandle's name
  std::string config_yaml;
  std::string certs_dir;
};

// What a provider with a scheduler of its own (Slurm) says of the cluster's machines now.
struct AllocationState {
  bool known = false;  // false: the provider has no such view (every provider but slurm)
  bool alive = true;   // the machines are still the cluster's
  std::string state;   // the scheduler's word: "RUNNING", "TIMEOUT", "PREEMPTED", "ENDED", ...
  std::string detail;  // one line for the user when not alive
};

// What the head of a cloud cluster needs to stop its own machines (SetAutostop.cloud): where to
// call, which machines, and a key that may do nothing else.
struct AutostopGrant {
  std::string provider;  // "aws"
  std::string region;
  std::string endpoint;  // as the nodes reach it
  std::vector<std::string> instance_ids;
  std::string access_key_id;
  std::string secret_access_key;
};

// The cluster's machines as the provider sees them now (`herd status -r`, and `herd status` for
// clusters that may have stopped themselves).
enum class MachinesState {
  kUnknown,   // the provider cannot tell (an ssh pool's machines are not herd's)
  kRunning,   // every machine runs (or is starting)
  kStopping,  // some are stopping or terminating
  kStopped,   // every machine is stopped
  kGone,      // none is left (terminated, or never made)
  kMixed,     // some run, some do not
};
struct MachinesView {
  MachinesState state = MachinesState::kUnknown;
  std::string detail;  // each machine's state, for the user ("i-0a1 stopped, i-0b2 running")
};

class Provider {
 public:
  virtual ~Provider();
  virtual std::string name() const = 0;  // "local", "ssh"

  // Makes num_nodes machines, head first, reachable over SSH with the cluster key. Idempotent:
  // nodes that exist and run are returned as they are; half-made ones are repaired.
  virtual Result<std::vector<NodeHandle>> Provision(const ProvisionRequest& request) = 0;
  // Whether Stop can work, asked before anything is stopped (agents included); reads only what the
  // provider recorded. OK by default.
  virtual Status CheckStoppable(const std::string& cluster, const std::string& state_dir);
  // Stops every process on the nodes; the nodes and their files stay.
  virtual Status Stop(const std::string& cluster, const std::string& state_dir) = 0;
  // Brings stopped nodes back (idempotent) and returns them in the same order as Provision.
  virtual Result<std::vector<NodeHandle>> Start(const std::string& cluster,
                                                const std::string& state_dir) = 0;
  // Removes the nodes and everything the provider recorded; OK when nothing is left to remove.
  virtual Status Teardown(const std::string& cluster, const std::string& state_dir) = 0;
  // True when Provision and Start return only once every node's sshd accepts connections with
  // the cluster key in place (the local provider waits for that): the launch then skips its own
  // wait for SSH (an `ssh true` per node) and the bootstrap's first session opens the connection.
  // False by default: a cloud VM or a pool host may still be booting.
  virtual bool SshReadyOnReturn() const { return false; }
  // True when the nodes cannot be reached by SSH one by one and the provider starts herdlet on
  // them itself (StartAgents) instead of the controller's bootstrap over SSH. False by default.
  virtual bool StartsAgents() const { return false; }
  // Installs and starts herdlet on every node of the provisioned cluster (one AgentFiles per node,
  // in Provision's order); returns once they were started, not once they registered.
  virtual Status StartAgents(const std::string& cluster, const std::string& state_dir,
                             const std::string& herdlet_path, const std::vector<AgentFiles>& files);
  // Copies what the controller synced into the home of the machine it reaches the nodes through
  // (`paths`: relative to that home, or absolute) onto every node that does not share that home
  // (a Slurm cluster's compute nodes behind its login node). Nothing to do by default: every node
  // was synced itself.
  virtual Status SpreadFiles(const std::string& cluster, const std::string& state_dir,
                             const std::vector<std::string>& paths);
  // What the provider's scheduler says of the cluster's machines; known = false by default.
  virtual Result<AllocationState> Allocation(const std::string& cluster,
                                             const std::string& state_dir);
  // A key scoped to this cluster's machines for its head's autostop (made on first use, kept in
  // state_dir, removed by Teardown). Unimplemented by default: nothing the head may call stops
  // these machines.
  virtual Result<AutostopGrant> GrantAutostop(const std::string& cluster,
                                              const std::string& state_dir);
  // Whether herd stops these machines for autostop at all (a team server stops them with its own
  // credentials instead of granting the head a key): FailedPrecondition by default, as
  // GrantAutostop; reads only what the provider recorded.
  virtual Status CheckAutostop(const std::string& cluster, const std::string& state_dir);
  // The machines' state from the provider itself (not from the head); kUnknown by default.
  virtual Result<MachinesView> Machines(const std::string& cluster, const std::string& state_dir);
};

}  // namespace herd::controller
