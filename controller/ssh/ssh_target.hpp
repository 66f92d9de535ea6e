// Where and how to reach one machine over SSH.
#pragma once

#include <string>
#include <vector>

namespace herd::controller {

// A host the connection goes through first (ssh's ProxyJump: a bastion in front of a Slurm login
// node), reached with its own key; `host` empty means none. A chain of jump hosts ("ProxyJump
// a,b", or a bastion with a ProxyJump of its own) is the last hop here and the hops that lead to
// it in `before`, first to last, each of those reached from the one before it (their own
// `before` empty).
struct SshJump {
  std::string host;
  int port = 22;
  std::string user;               // "" lets ssh pick (the local user)
  std::string identity_file;      // "" lets ssh pick its defaults
  std::vector<SshJump> before{};  // the hops before this one, first to last; empty: direct

  bool empty() const { return host.empty(); }
  bool operator==(const SshJump&) const = default;
};

struct SshTarget {
  std::string host;
  int port = 22;
  std::string user;
  std::string identity_file;     // private key; "" lets ssh pick its defaults
  std::string known_hosts_file;  // per-cluster file; "" uses the user's
  std::string control_dir;       // ControlMaster sockets live here; "" disables multiplexing
  std::string name;              // for messages: "demo-worker1"
  SshJump jump{};                // reached through this host first; empty: directly
};

// "demo-worker1 (10.1.2.3:22)", or "10.1.2.3:22" when the target has no name: every error about a
// machine starts with this.
std::string DescribeTarget(const SshTarget& target);

}  // namespace herd::controller
