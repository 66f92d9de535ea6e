// What the controller remembers about a cluster between `herd` commands.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "controller/ssh/ssh_target.hpp"
#include "shared/common/status.hpp"

namespace herd::controller {

struct NodeRecord {
  std::string name;  // provider's node name
  std::string ip;    // address the controller reaches the node's sshd on
  int ssh_port = 22;
  std::string ssh_user;
  std::string identity_file;  // private key for ssh_user
  std::string netns;          // local provider: the node's network namespace
  std::string host_home;      // local provider: the node's home directory on this machine
  bool is_head = false;
  // Where the other nodes reach it (a cloud VM's private IP); "" means ip.
  std::string internal_ip{};
  // The host ssh goes through first (ProxyJump); empty: reached directly.
  SshJump jump{};
  // A spot instance's metadata service, where its agent polls for an interruption notice
  // (agent config `spot_metadata`); "" when the node is not a spot instance.
  std::string spot_metadata{};

  bool operator==(const NodeRecord&) const = default;
};

// The cluster's life cycle as `herd status` shows it (SkyPilot's names).
enum class ClusterStatus { kInit, kUp, kStopped, kAutostopping };
// "INIT", "UP", "STOPPED", "AUTOSTOPPING".
std::string_view Name(ClusterStatus status);
// Inverse of Name; InvalidArgument for anything else.
Result<ClusterStatus> ParseClusterStatus(std::string_view name);

struct ClusterRecord {
  std::string name;
  std::string provider;  // "local", "ssh", "aws"
  std::string infra;     // "local" / "ssh/<pool>" (the INFRA column)
  ClusterStatus status = ClusterStatus::kInit;
  std::vector<NodeRecord> nodes;  // stable order: head first (as provisioned)
  std::string resources;          // "2x(gpus=L4:4, cpus=4)" for the status table
  int head_port = 0;              // the head's port on the head node
  std::string certs_dir, ssh_key_path, known_hosts_path, control_dir, state_dir;
  int autostop_idle_minutes = -1;  // -1: off
  bool autostop_down = false;
  int64_t launched_unix_ms = 0;
  std::string agent_version;
  // What the last successful bootstrap installed, as one hash (sdk.cpp AgentStamp): a relaunch of
  // an UP cluster whose stamp is unchanged and whose agents are all alive skips SSH and bootstrap.
  std::string agents_stamp;

  bool operator==(const ClusterRecord&) const = default;
};

// The head: the node marked is_head, else the first one; nullptr if there are no nodes.
const NodeRecord* HeadNode(const ClusterRecord& c);
// The other nodes in record order: worker 1, worker 2, ...
std::vector<const NodeRecord*> WorkerNodes(const ClusterRecord& c);

// Whether a team server's autostop sweep asks this cluster's head whether its autostop is due:
// UP, autostop set, on a cloud (a local cluster's head runs its own `herd stop|down`).
bool ServerSweepsAutostop(const ClusterRecord& c);

// JSON form (the store's row format). Decoding ignores unknown keys and leaves missing ones at
// their defaults, so records written by an older or newer herd still load.
std::string ToJson(const ClusterRecord& c);
Result<ClusterRecord> ClusterRecordFromJson(std::string_view json);

}  // namespace herd::controller
