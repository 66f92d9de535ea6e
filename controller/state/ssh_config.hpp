// `ssh NAME` (the head) and `ssh NAME-worker1` (the first worker) for the user, as SkyPilot does:
// a generated <home>/ssh/<cluster>.config with one Host block per node, pulled in by an
// `Include <home>/ssh/*.config` line at the top of ~/.ssh/config.
//
// The Include must come first: ssh takes the first value it finds for each option, so a user's
// `Host *` block above it would override the cluster's HostName, Port or IdentityFile.
#pragma once

#include <string>

#include "controller/state/cluster_record.hpp"
#include "shared/common/status.hpp"

namespace herd::controller {

// Host alias of node `i` in the order of WorkerNodes (1-based): "<cluster>-worker<i>".
std::string WorkerAlias(const std::string& cluster, int i);

// The generated file's text: a Host block for the head (alias = cluster name), then one per
// worker. Pure: reads no environment.
std::string RenderSshConfig(const ClusterRecord& c);
// <home>/ssh/<cluster>.config
std::string SshConfigPath(const std::string& cluster);
// "Include <home>/ssh/*.config"
std::string SshIncludeLine();

// Writes <home>/ssh/<cluster>.config (0600, dir 0700, atomically), creates the cluster's
// control_dir (0700) for the ControlPath, and makes sure ~/.ssh/config ($HOME) starts with the
// Include line: created 0600 (dir 0700) if missing, the line added once, the rest of the file kept
// byte for byte.
Status WriteSshConfig(const ClusterRecord& c);
// Removes the cluster's file (on `herd down`); a missing file is fine. The Include line stays:
// it matches nothing once no cluster is left.
Status RemoveSshConfig(const std::string& cluster);

}  // namespace herd::controller
