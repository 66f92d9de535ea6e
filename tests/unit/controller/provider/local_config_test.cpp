// The local provider's `local:` section of config.yaml (LoadLocalConfig): host_routes as the nodes
// get them (addresses as /32, host bits cleared), and what is refused, each error naming the file,
// line and column: loopback, the clusters' subnets, a route to everywhere, what is no prefix.
#include <doctest/doctest.h>

#include "controller/provider/local_provider.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::controller {
namespace {

using herd::testing::TempDir;

TEST_CASE("local config: host_routes are read as prefixes the nodes route through this machine") {
  TempDir d;
  // No file, no section, an empty list: no routes.
  CHECK(LoadLocalConfig(d / "none.yaml")->host_routes.empty());
  CHECK(LoadLocalConfig(d.Write("a.yaml", "aws:\n  ssh_user: ec2-user\n"))->host_routes.empty());
  CHECK(LoadLocalConfig(d.Write("b.yaml", "local:\n  host_routes: []\n"))->host_routes.empty());
  auto c = LoadLocalConfig(
      d.Write("c.yaml", "local:\n  host_routes: [10.213.0.232, 192.168.7.9/24, 172.16.0.0/12]\n"));
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  CHECK(c->host_routes ==
        std::vector<std::string>{"10.213.0.232/32", "192.168.7.0/24", "172.16.0.0/12"});
}

TEST_CASE("local config: what the nodes must not route through this machine is refused") {
  TempDir d;
  auto refused = [&](const std::string& routes) {
    const std::string file = d.Write("bad.yaml", "local:\n  host_routes: [" + routes + "]\n");
    auto c = LoadLocalConfig(file);
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == Code::kInvalidArgument);
    return c.status().message().substr(file.size());
  };
  CHECK(refused("127.0.232.1") ==
        ":2:17: local.host_routes[0]: 127.0.232.1 is or covers loopback (127.0.0.0/8), which "
        "every node has of its own");
  CHECK(refused("10.213.0.0/24, 10.213.7.0/24") ==
        ":2:32: local.host_routes[1]: 10.213.7.0/24 overlaps the local clusters' subnets "
        "(10.213.1.0 to 10.213.255.255); 10.213.0.0/24 is free for this machine's services");
  CHECK(refused("10.213.0.0/16").find("overlaps the local clusters' subnets") != std::string::npos);
  CHECK(refused("0.0.0.0/0").find("covers loopback") != std::string::npos);
  for (const char* bad :
       {"10.213.0.300", "10.213.0.1/", "10.213.0.1/x", "10.213.0.1/33", "host.example", "[1]"}) {
    CAPTURE(bad);
    CHECK(refused(bad).find("expected an IPv4 address or prefix") != std::string::npos);
  }
  const std::string file = d.Write("key.yaml", "local:\n  host_route: [10.213.0.1]\n");
  CHECK(LoadLocalConfig(file).status().message() ==
        file + ":2:3: local.host_route: unknown field (known: host_routes)");
  const std::string scalar = d.Write("scalar.yaml", "local:\n  host_routes: 10.213.0.1\n");
  CHECK(LoadLocalConfig(scalar).status().message() ==
        scalar + ":2:16: local.host_routes: expected a list of IPv4 prefixes");
}

}  // namespace
}  // namespace herd::controller
