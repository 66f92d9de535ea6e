// Installing, starting and stopping herdlet on a cluster's nodes over SSH. Idempotent: a node
// whose binary, certificates and config are already in place and whose agent runs is left alone,
// so `herd launch` on an existing cluster uploads and restarts nothing.
//
// Per node, under <remote_dir> (layout in remote_scripts.hpp): files are compared by SHA-256 with
// what the node has and only differing ones are sent; the agent is (re)started when one of them
// changed or it does not run. Where systemd runs the node (/run/systemd/system) it is a unit
// (herdlet.service as root, herdlet-user.service as a user unit otherwise); elsewhere
// packaging/herdlet-supervise keeps it running (restart with backoff on a non-zero exit), started
// with setsid. herdlet runs with HOME = the login user's home and its working directory =
// <remote_dir>, so relative paths in the config (certs: certs, state_dir: state) point into it.
#pragma once

#include <string>
#include <vector>

#include "controller/ssh/ssh_runner.hpp"
#include "controller/ssh/ssh_target.hpp"
#include "shared/common/agent_layout.hpp"
#include "shared/common/status.hpp"

namespace herd::controller {

struct AgentInstall {
  SshTarget target;       // how to reach the node
  std::string node_name;  // "demo-head"; names the node in errors when target.name is ""
  // The whole herdlet.yaml for this node; it must name kRemoteReadyFile (remote_scripts.hpp) as
  // its ready_file, which the start script waits for.
  std::string agent_config_yaml;
  std::string certs_dir;  // local dir with ca.crt, agent.crt, agent.key for this node
  // The node's home as a directory of this machine (the local provider's nodes), "" for a remote
  // node. Such a node gets the agent binary put into <host_home>/<remote_dir>/bin/herdlet (a hard
  // link to BootstrapOptions::host_cache_dir's copy, else a copy), as a machine image would carry
  // it, instead of through ssh (whose encryption of the whole binary costs the node's sshd CPU on
  // the same machine); a changed binary restarts the agent like an upload.
  std::string host_home{};
};

struct BootstrapOptions {
  // Local binary to install (the build's herdlet.upload). Where PATH.gz lies beside it with
  // PATH.gz.sha256 naming this very binary (packaging/compress_upload.cmake), nodes that have gzip
  // get the compressed copy (less than half the size) and check the SHA-256 of what they unpacked:
  // on a shared link the upload is most of a re-bootstrap. Nodes with a host_home get a copy
  // instead (AgentInstall).
  std::string herdlet_path;
  std::string remote_dir = kDefaultAgentDir;  // relative to the node user's home, or absolute
  // Where the binary for nodes with a host_home is kept once (herdlet-<hash>), each node getting a
  // hard link to it; "" (or a directory on another file system) copies it to every node.
  std::string host_cache_dir{};
};

struct BootstrapResult {
  int uploaded = 0;             // nodes that were sent at least one file
  int restarted = 0;            // nodes whose agent was (re)started
  int unchanged = 0;            // nodes with nothing sent and nothing restarted
  std::vector<int> agent_pids;  // herdlet's pid per node, in the order of the input
};

// Installs and (re)starts the agent on every node in parallel (ForEachParallel). Errors name the
// node: "demo-worker1 (10.213.4.2:22): cannot install herdlet: ..."; with several failing nodes
// "2 of 5 nodes failed: <each message>", the code of the first.
Result<BootstrapResult> BootstrapAgents(SshRunner& ssh, const std::vector<AgentInstall>& nodes,
                                        const BootstrapOptions& options);

// Stops the supervisor or unit and herdlet on every node (SIGKILL after
// limits::kAgentStopTimeout); jobs' processes are left to the caller. OK for a node without an
// agent.
Status StopAgents(SshRunner& ssh, const std::vector<SshTarget>& nodes,
                  const BootstrapOptions& options);

// herdlet's pid on every node, 0 where it does not run.
Result<std::vector<int>> AgentPids(SshRunner& ssh, const std::vector<SshTarget>& nodes,
                                   const BootstrapOptions& options);

}  // namespace herd::controller
