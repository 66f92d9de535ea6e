// herd_test_hosts: "existing machines" for tests of the ssh provider — network-namespace hosts
// with sshd, made by the local provider, with no herd agent on them.
//   herd_test_hosts up NAME N STATE_DIR PUBKEY_FILE   -> one "ip" line per host
//   herd_test_hosts down NAME STATE_DIR
//   herd_test_hosts stop-host NAME STATE_DIR INDEX  -> every process of host INDEX ends (as the
//                                                       local provider's Stop does for all)
//   herd_test_hosts start NAME STATE_DIR             -> every host whose sshd is down gets it back
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "controller/provider/local_provider.hpp"
#include "controller/provider/netns.hpp"
#include "shared/common/limits.hpp"

int main(int argc, char** argv) {
  using herd::controller::LocalProvider;
  std::string verb = argc > 1 ? argv[1] : "";
  LocalProvider provider;
  if (verb == "up" && argc == 6) {
    std::ifstream in(argv[5]);
    std::stringstream key;
    key << in.rdbuf();
    herd::controller::ProvisionRequest req{argv[2], std::stoi(argv[3]), argv[4], key.str()};
    auto nodes = provider.Provision(req);
    if (!nodes.ok()) {
      std::cerr << nodes.status().message() << "\n";
      return 1;
    }
    for (const auto& n : *nodes) std::cout << n.ip << "\n";
    return 0;
  }
  if (verb == "down" && argc == 4) {
    auto s = provider.Teardown(argv[2], argv[3]);
    if (!s.ok()) {
      std::cerr << s.message() << "\n";
      return 1;
    }
    return 0;
  }
  if (verb == "stop-host" && argc == 5) {
    std::string dir =
        std::string(argv[3]) + "/nodes/" + LocalProvider::NodeName(argv[2], std::stoi(argv[4]));
    auto s = herd::controller::netns::KillAll(LocalProvider::NodeNetns(argv[2], std::stoi(argv[4])),
                                              herd::limits::kKillGracePeriod,
                                              herd::limits::kKillSweepTimeout);
    std::remove((dir + "/sshd.pid").c_str());
    if (!s.ok()) {
      std::cerr << s.message() << "\n";
      return 1;
    }
    return 0;
  }
  if (verb == "start" && argc == 4) {
    auto nodes = provider.Start(argv[2], argv[3]);
    if (!nodes.ok()) {
      std::cerr << nodes.status().message() << "\n";
      return 1;
    }
    return 0;
  }
  std::cerr << "usage: herd_test_hosts up NAME N STATE_DIR PUBKEY_FILE | down NAME STATE_DIR | "
               "stop-host NAME STATE_DIR INDEX | start NAME STATE_DIR\n";
  return 2;
}
