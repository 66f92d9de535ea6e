// herdlet's configuration file (YAML), written by the controller at bootstrap or by hand.
//
//   role: head | worker
//   cluster: demo
//   node_id: demo-head
//   address: 127.0.0.2           # the node's cluster address; workers dial from it
//   listen: 127.0.0.2:0          # head only: where the head listens (port 0: any)
//   head: 127.0.0.2:7443         # worker only: the head's address
//   certs: /path/certs           # ca.crt, agent.crt, agent.key
//   state_dir: /path/state       # jobs.db (head), logs/, incarnation
//   port_file: /path/port        # head only, optional: the bound port is written here
//   ready_file: /path/ready      # optional: herdlet writes its pid here once it runs (config,
//                                # certs, the head's listener and the worker in place)
//   cpus: 4                      # optional: declared capacity overrides detection
//   gpus: 2                      # optional: declared GPU count ...
//   gpu_name: L4                 # ... and their type
//   cloud: local                 # reported in SKYPILOT_CLUSTER_INFO
//   expected_nodes: 3            # head only: the cluster's size
//   health_check:                # optional (Slurm's HealthCheckProgram): a failing run drains
//     command: /usr/local/bin/check-node   # the node (sh -c; killed after kHealthCheckTimeout)
//     interval: 60               # seconds between runs (at least kHealthCheckMinInterval)
//   spot_metadata: http://169.254.169.254   # optional, spot instances: the instance metadata
//                                # service polled for an interruption notice (spot_notice.hpp)
// Relative paths (certs, state_dir, port_file, ready_file) are relative to the config file's
// directory.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "shared/common/host_port.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/status.hpp"

namespace herd::agent {

struct AgentConfig {
  enum class Role { kHead, kWorker };
  Role role = Role::kWorker;
  std::string cluster;
  std::string node_id;
  std::string address;
  HostPort listen;  // head
  HostPort head;    // worker (the head also dials itself here)
  // The head's node id: the head's certificate must prove it (shared/tls/certs.hpp). The head's own
  // node id on the head; empty in a worker config of an older herd (then not checked).
  std::string head_node;
  std::string certs_dir;
  std::string state_dir;
  std::string port_file;
  std::string ready_file;
  std::optional<int> cpus;
  std::optional<int> gpus;
  std::string gpu_name;
  std::string cloud = "local";
  int expected_nodes = 0;  // head: the cluster's size (jobs wait, not fail, until all registered)
  std::string health_check_command;  // empty: none
  std::chrono::milliseconds health_check_interval = limits::kHealthCheckDefaultInterval;
  std::string spot_metadata;  // empty: not a spot instance, nothing polled
};

Result<AgentConfig> LoadAgentConfig(const std::string& path);

}  // namespace herd::agent
