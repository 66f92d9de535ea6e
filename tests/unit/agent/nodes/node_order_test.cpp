#include "agent/nodes/node_order.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {

herd::v1::NodeInfo Node(const std::string& id, const std::string& address, bool head = false) {
  herd::v1::NodeInfo n;
  n.set_node_id(id);
  if (!address.empty()) n.add_addresses(address);
  n.set_is_head(head);
  return n;
}

std::vector<std::string> Ids(const std::vector<herd::v1::NodeInfo>& nodes) {
  std::vector<std::string> ids;
  for (const auto& n : nodes) ids.push_back(n.node_id());
  return ids;
}

}  // namespace

TEST_CASE("IPs sort numerically, not as strings") {
  std::vector<herd::v1::NodeInfo> nodes = {Node("w10", "10.0.0.10"), Node("w9", "10.0.0.9"),
                                           Node("w100", "10.0.0.100"), Node("w2", "10.0.0.2")};
  herd::agent::SortClusterOrder(nodes);
  CHECK(Ids(nodes) == std::vector<std::string>{"w2", "w9", "w10", "w100"});
  CHECK(herd::agent::ClusterOrderLess(Node("a", "10.0.0.9"), Node("b", "10.0.0.10")));
  CHECK_FALSE(herd::agent::ClusterOrderLess(Node("b", "10.0.0.10"), Node("a", "10.0.0.9")));
  CHECK(herd::agent::ClusterOrderLess(Node("a", "9.255.255.255"), Node("b", "10.0.0.0")));
}

TEST_CASE("the head comes first whatever its address") {
  std::vector<herd::v1::NodeInfo> nodes = {Node("w1", "10.0.0.1"), Node("head", "10.0.0.200", true),
                                           Node("w2", "10.0.0.2")};
  herd::agent::SortClusterOrder(nodes);
  CHECK(Ids(nodes) == std::vector<std::string>{"head", "w1", "w2"});
}

TEST_CASE("IPv4, then IPv6, then names; ties by node_id") {
  std::vector<herd::v1::NodeInfo> nodes = {
      Node("name-b", "worker-b.local"), Node("v6-big", "fd00::10"),    Node("none", ""),
      Node("name-a", "worker-a.local"), Node("v6-small", "[fd00::9]"), Node("v4", "192.168.1.5"),
      Node("twin-b", "10.1.1.1"),       Node("twin-a", "10.1.1.1")};
  herd::agent::SortClusterOrder(nodes);
  CHECK(Ids(nodes) == std::vector<std::string>{"twin-a", "twin-b", "v4", "v6-small", "v6-big",
                                               "none", "name-a", "name-b"});
}

TEST_CASE("order depends only on what nodes report, not on input order") {
  std::vector<herd::v1::NodeInfo> a = {Node("h", "10.0.0.50", true), Node("x", "10.0.0.3"),
                                       Node("y", "10.0.0.12"), Node("z", "10.0.0.4")};
  std::vector<herd::v1::NodeInfo> b = {a[3], a[1], a[2], a[0]};
  herd::agent::SortClusterOrder(a);
  herd::agent::SortClusterOrder(b);
  CHECK(Ids(a) == Ids(b));
  CHECK(Ids(a) == std::vector<std::string>{"h", "x", "z", "y"});
  // Only the first address counts: it is the one the cluster uses.
  herd::v1::NodeInfo multi = Node("m", "10.0.0.1");
  multi.add_addresses("1.1.1.1");
  CHECK(herd::agent::ClusterOrderLess(Node("n", "10.0.0.0"), multi));
}
