#include "controller/ops/container_check.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <fstream>
#include <optional>
#include <sstream>

#include "tests/fakes/fake_ssh_runner.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::ops {
namespace {

using herd::testing::LocalShellRunner;
using herd::testing::TempDir;

constexpr const char* kHerdlet = ".herd/agent/bin/herdlet";

// Nodes whose "herdlet" is a script: it records its arguments and stdin, then prints `err` and
// exits `code`. A node given no script has no herdlet at all.
struct Nodes {
  TempDir dir{"herd-container-check"};
  LocalShellRunner ssh;
  std::vector<NodeToCheck> nodes;

  void Add(const std::string& name, std::optional<std::pair<int, std::string>> herdlet) {
    const std::string home = dir / name;
    ::mkdir(home.c_str(), 0700);
    ssh.homes[name] = home;
    if (herdlet) {
      const std::string script =
          dir.Write(name + "/" + kHerdlet,
                    "#!/bin/sh\necho \"$@\" > \"$HOME/args\"\n"
                    "cat > \"$HOME/stdin\"\necho '" +
                        herdlet->second + "' >&2\nexit " + std::to_string(herdlet->first) + "\n");
      ::chmod(script.c_str(), 0755);
    }
    controller::SshTarget t;
    t.host = name;
    t.name = name;
    nodes.push_back({"c-" + name, t});
  }
  std::string Read(const std::string& name, const std::string& file) {
    std::ifstream in(dir / (name + "/" + file));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  Status Check(const std::map<std::string, std::string>& envs = {},
               const std::map<std::string, std::string>& secrets = {}) {
    return CheckNodesForImage(ssh, nodes, kHerdlet, "127.0.235.1:5000/img:1", envs, secrets);
  }
};

TEST_CASE("every node's herdlet checks the image; the login goes on stdin, a secret first") {
  Nodes n;
  n.Add("head", std::pair{0, ""});
  n.Add("worker1", std::pair{0, ""});
  REQUIRE(n.Check().ok());
  CHECK(n.Read("worker1", "args") == "--check-container-runtime 127.0.235.1:5000/img:1\n");
  CHECK(n.Read("worker1", "stdin").empty());

  REQUIRE(n.Check({{"SKYPILOT_DOCKER_USERNAME", "me"}, {"SKYPILOT_DOCKER_PASSWORD", "in-env"}},
                  {{"SKYPILOT_DOCKER_PASSWORD", "s3cret"}})
              .ok());
  for (const char* node : {"head", "worker1"}) {
    CHECK(n.Read(node, "args") ==
          "--check-container-runtime 127.0.235.1:5000/img:1 --login-stdin\n");
    CHECK(n.Read(node, "stdin") == "me\n\ns3cret\n");
  }
  // The password is never part of the command.
  CHECK(RuntimeCheckCommand(kHerdlet, "img:1", true).find("s3cret") == std::string::npos);
  CHECK(RuntimeCheckLogin({{"SKYPILOT_DOCKER_PASSWORD", "pw"}}, {}).empty());  // no username
  CHECK(RuntimeCheckLogin(
            {{"SKYPILOT_DOCKER_USERNAME", "u"}, {"SKYPILOT_DOCKER_SERVER", "reg.example"}}, {}) ==
        "u\nreg.example\n\n");
}

TEST_CASE("a node without a runtime fails the check with one line naming it and the image") {
  Nodes n;
  n.Add("head", std::pair{0, ""});
  n.Add("worker1", std::pair{125,
                             "herd: no container runtime: podman is not installed (no "
                             "container runtime)"});
  Status s = n.Check();
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK(s.message() ==
        "node c-worker1, image 127.0.235.1:5000/img:1: no container runtime: podman is not "
        "installed (no container runtime)");

  // Several: the first in node order, and how many more.
  n.Add("worker2", std::nullopt);  // no herdlet there: the shell's error
  n.Add("worker3", std::pair{125, "herd: no container runtime: podman does not run"});
  s = n.Check();
  CHECK(
      s.message().starts_with("node c-worker1, image 127.0.235.1:5000/img:1: no container "
                              "runtime: podman is not installed"));
  CHECK(s.message().ends_with(" (and 2 other nodes)"));
  CHECK(s.message().find('\n') == std::string::npos);
}

TEST_CASE("a refused login, a missing herdlet and an unreachable node each name the node") {
  Nodes refused;
  refused.Add("head", std::pair{125,
                                "herd: the registry 127.0.235.1:5000 refused the login of me: "
                                "Error: logging in: invalid username/password (exit 125)"});
  Status s = refused.Check({{"SKYPILOT_DOCKER_USERNAME", "me"}});
  CHECK(s.code() == Code::kPermissionDenied);
  CHECK(
      s.message().starts_with("node c-head, image 127.0.235.1:5000/img:1: the registry "
                              "127.0.235.1:5000 refused the login of me"));

  Nodes missing;
  missing.Add("head", std::nullopt);
  s = missing.Check();
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK(s.message().starts_with(
      "node c-head, image 127.0.235.1:5000/img:1: cannot check for a container runtime: "));
  CHECK(s.message().ends_with("(exit 127)"));

  Nodes gone;
  controller::SshTarget t;
  t.host = "nowhere";
  gone.nodes.push_back({"c-head", t});
  s = gone.Check();
  CHECK(s.code() == Code::kUnavailable);
  CHECK(s.message().starts_with(
      "node c-head, image 127.0.235.1:5000/img:1: cannot check for a container runtime: "));
}

}  // namespace
}  // namespace herd::ops
