#include "agent/nodes/node_order.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <tuple>

namespace herd::agent {
namespace {

// Sort key of an address: its family class, then its bytes in network order (so numeric order),
// then the text itself for addresses that are not IPs.
struct AddressKey {
  int family_rank = 2;  // 0: IPv4, 1: IPv6, 2: not an IP
  std::array<std::uint8_t, 16> bytes{};
  std::string text;

  auto Tie() const { return std::tie(family_rank, bytes, text); }
};

AddressKey KeyOf(const herd::v1::NodeInfo& node) {
  AddressKey key;
  if (node.addresses().empty()) return key;
  std::string address = node.addresses(0);
  // "[fe80::1]" as written in URLs.
  if (address.size() > 2 && address.front() == '[' && address.back() == ']') {
    address = address.substr(1, address.size() - 2);
  }
  if (inet_pton(AF_INET, address.c_str(), key.bytes.data()) == 1) {
    key.family_rank = 0;
  } else if (inet_pton(AF_INET6, address.c_str(), key.bytes.data()) == 1) {
    key.family_rank = 1;
  } else {
    key.bytes.fill(0);
    key.text = node.addresses(0);
  }
  return key;
}

}  // namespace

bool ClusterOrderLess(const herd::v1::NodeInfo& a, const herd::v1::NodeInfo& b) {
  if (a.is_head() != b.is_head()) return a.is_head();
  const AddressKey ka = KeyOf(a);
  const AddressKey kb = KeyOf(b);
  if (ka.Tie() != kb.Tie()) return ka.Tie() < kb.Tie();
  return a.node_id() < b.node_id();
}

void SortClusterOrder(std::vector<herd::v1::NodeInfo>& nodes) {
  // The order of ClusterOrderLess with each node's key parsed once, not at every comparison: the
  // head sorts its nodes for every scheduling pass (N log N inet_pton calls for 1000 nodes).
  struct Keyed {
    bool not_head;
    AddressKey key;
    std::size_t index;
  };
  std::vector<Keyed> keyed;
  keyed.reserve(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    keyed.push_back({!nodes[i].is_head(), KeyOf(nodes[i]), i});
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const Keyed& a, const Keyed& b) {
    if (a.not_head != b.not_head) return b.not_head;
    if (a.key.Tie() != b.key.Tie()) return a.key.Tie() < b.key.Tie();
    return nodes[a.index].node_id() < nodes[b.index].node_id();
  });
  std::vector<herd::v1::NodeInfo> sorted;
  sorted.reserve(nodes.size());
  for (const Keyed& k : keyed) sorted.push_back(std::move(nodes[k.index]));
  nodes = std::move(sorted);
}

}  // namespace herd::agent
