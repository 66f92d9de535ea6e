// Network-namespace nodes for the unit tests that reach real machines: a LocalProvider cluster of
// namespace nodes with their own sshd, reached over real ssh, and removed however the test ends.
// Needs root, `ip netns` and sshd: NetnsSkipReason says which is missing, and a test case calls
// Skip with it (test_support.hpp).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#include "controller/provider/local_provider.hpp"
#include "controller/provider/netns.hpp"
#include "controller/ssh/ssh_runner.hpp"
#include "controller/ssh/subprocess.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::testing {

// Why namespace nodes cannot be made here, or "" when they can.
inline std::string NetnsSkipReason() {
  using namespace std::chrono_literals;
  if (::geteuid() != 0) return "not root";
  auto r = controller::RunProcess({"ip", "netns", "list"}, {}, 10s);
  if (!r.ok() || r->exit_code != 0) return "`ip netns` is unavailable";
  if (::access("/usr/sbin/sshd", X_OK) != 0) return "no /usr/sbin/sshd";
  return "";
}

// Removes every namespace of the cluster by hand: the last line of cleanup, even when the
// provider's own Teardown is what failed.
inline void SweepNamespaces(const std::string& cluster) {
  using namespace std::chrono_literals;
  for (const auto& ns : controller::LocalProvider::ExistingNamespaces(cluster)) {
    (void)controller::netns::KillAll(ns, 200ms, 3s);
    (void)controller::RunProcess({"ip", "netns", "delete", ns}, {}, 10s);
  }
}

// Makes an ed25519 key pair without a passphrase: path and path.pub.
inline void Keygen(const std::string& path) {
  using namespace std::chrono_literals;
  auto r =
      controller::RunProcess({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path}, {}, 30s);
  REQUIRE(r.ok());
  REQUIRE(r->exit_code == 0);
}

// A namespace cluster's files and the means to reach it. The cluster is named
// <prefix><pid % 100000><suffix> (a test's own prefix: no other test's namespaces are touched) and
// swept first (a previous run killed hard); its state is tmp/<state_parent>/<name> and its key
// tmp/id_cluster. The test provisions `nodes` through `provider`. At the end, however the test
// ends: every ControlMaster of a node or of an `opened` target is closed, the cluster torn down
// and swept, and tmp removed.
struct NetnsCluster {
  TempDir dir;
  std::string tmp = dir.path();
  std::string name;
  std::string state_dir, key, known_hosts, control_dir;
  controller::LocalProvider provider;
  controller::OpenSshRunner ssh;
  std::vector<controller::NodeHandle> nodes;
  std::vector<controller::SshTarget> opened;

  NetnsCluster(std::string_view tmp_prefix, const std::string& prefix,
               const std::string& suffix = "", const std::string& state_parent = "clusters")
      : dir(tmp_prefix), name(prefix + std::to_string(::getpid() % 100000) + suffix) {
    state_dir = tmp + "/" + state_parent + "/" + name;
    key = tmp + "/id_cluster";
    known_hosts = tmp + "/known_hosts";
    control_dir = tmp + "/cm";
    std::filesystem::create_directories(control_dir);
    SweepNamespaces(name);
    Keygen(key);
  }
  ~NetnsCluster() {
    for (size_t i = 0; i < nodes.size(); ++i) (void)ssh.CloseMaster(Target(i));
    for (const auto& t : opened) (void)ssh.CloseMaster(t);
    Status s = provider.Teardown(name, state_dir);
    if (!s.ok()) MESSAGE("teardown failed: " << s.ToString());
    SweepNamespaces(name);
  }
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  // Node i as the cluster reaches it: its address, port and user, the cluster key.
  controller::SshTarget Target(size_t i) const {
    controller::SshTarget t;
    t.host = nodes[i].ip;
    t.port = nodes[i].ssh_port;
    t.user = nodes[i].ssh_user;
    t.identity_file = key;
    t.known_hosts_file = known_hosts;
    t.control_dir = control_dir;
    t.name = nodes[i].name;
    return t;
  }
};

}  // namespace herd::testing
