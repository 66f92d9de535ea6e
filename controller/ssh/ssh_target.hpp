// Where and how to reach one machine over SSH.
#pragma once

#include <string>

namespace herd::controller {

struct SshTarget {
  std::string host;
  int port = 22;
  std::string user;
  std::string identity_file;     // private key; "" lets ssh pick its defaults
  std::string known_hosts_file;  // per-cluster file; "" uses the user's
  std::string control_dir;       // ControlMaster sockets live here; "" disables multiplexing
  std::string name;              // for messages: "demo-worker1"
};

// "demo-worker1 (10.1.2.3:22)", or "10.1.2.3:22" when the target has no name: every error about a
// machine starts with this.
std::string DescribeTarget(const SshTarget& target);

}  // namespace herd::controller
