// The head's node registry (agent/head/node_registry) on simulated time: when a silent node is
// lost (and when a stalled head forgives the silence it caused), when a node whose agent's
// connection ended abruptly is, fencing by incarnation, what a closed or replaced connection
// means, and each health condition `herd nodes` shows.
#include "agent/head/node_registry.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "shared/common/limits.hpp"
#include "tests/fakes/fake_clock.hpp"
#include "tests/fakes/fake_connection.hpp"

namespace herd::agent {
namespace {

using namespace std::chrono_literals;
using herd::testing::FakeClock;
using herd::testing::FakeConnection;

herd::v1::NodeInfo Info(const std::string& id, const std::string& ip) {
  herd::v1::NodeInfo info;
  info.set_node_id(id);
  info.add_addresses(ip);
  return info;
}

std::shared_ptr<FakeConnection> Conn(const std::string& node) {
  return std::make_shared<FakeConnection>(transport::Role::kAgent, node, "c1");
}

// Runs the head's check every kNodeCheckInterval for `span`, gathering the nodes declared lost
// (MarkLost on each, as the head does).
std::vector<std::string> CheckFor(FakeClock& clock, NodeRegistry& nodes,
                                  std::chrono::milliseconds span) {
  std::vector<std::string> lost;
  for (auto t = 0ms; t < span; t += limits::kNodeCheckInterval) {
    clock.Advance(limits::kNodeCheckInterval);
    for (auto& id : nodes.CheckLiveness()) {
      nodes.MarkLost(id);
      lost.push_back(id);
    }
  }
  return lost;
}

TEST_CASE("a silent node is lost after kNodeLostAfter, and not before") {
  FakeClock clock;
  NodeRegistry nodes(clock);
  nodes.Started();
  auto a = Conn("a");
  auto b = Conn("b");
  nodes.Register(a, Info("a", "127.0.9.1"), 1);
  nodes.Register(b, Info("b", "127.0.9.2"), 1);
  CHECK(nodes.HealthOf(*nodes.Find("a")).condition() == herd::v1::NODE_CONDITION_UP);

  // b keeps talking; a goes silent.
  std::vector<std::string> lost;
  for (auto t = 0ms; t < limits::kNodeLostAfter; t += limits::kNodeCheckInterval) {
    clock.Advance(limits::kNodeCheckInterval);
    nodes.Heard(*nodes.Find("b"));
    for (auto& id : nodes.CheckLiveness()) lost.push_back(id);
  }
  CHECK(lost.empty());  // silent for exactly kNodeLostAfter: not yet
  CHECK_FALSE(a->closed());
  clock.Advance(limits::kNodeCheckInterval);
  nodes.Heard(*nodes.Find("b"));
  lost = nodes.CheckLiveness();
  CHECK(lost == std::vector<std::string>{"a"});
  CHECK(a->closed());  // its connection is dropped
  CHECK_FALSE(b->closed());
  nodes.MarkLost("a");
  const NodeEntry& entry = *nodes.Find("a");
  CHECK_FALSE(NodeRegistry::Up(entry));
  CHECK(nodes.IsLost(entry));
  const auto h = nodes.HealthOf(entry);
  CHECK(h.condition() == herd::v1::NODE_CONDITION_LOST);
  CHECK(h.silent_ms() == std::chrono::duration_cast<std::chrono::milliseconds>(
                             limits::kNodeLostAfter + limits::kNodeCheckInterval)
                             .count());
  // Messages on the dropped connection are no node's.
  bool registered = true;
  CHECK(nodes.RegisteredOn(a.get(), &registered) == nullptr);
  CHECK_FALSE(registered);
  CHECK(CheckFor(clock, nodes, limits::kNodeLostAfter).empty());  // lost once
}

TEST_CASE("a head that did not run forgives the silence it caused") {
  FakeClock clock;
  NodeRegistry nodes(clock);
  nodes.Started();
  auto a = Conn("a");
  nodes.Register(a, Info("a", "127.0.9.1"), 1);
  CHECK(nodes.CheckLiveness().empty());
  // The head was stopped (SIGSTOP, a frozen VM) for longer than kNodeLostAfter.
  clock.Advance(limits::kNodeLostAfter * 3);
  CHECK(nodes.CheckLiveness().empty());
  CHECK_FALSE(a->closed());
  // The node gets a fresh kNodeLostAfter from the late check: lost only if silent through it.
  const auto lost = CheckFor(clock, nodes, limits::kNodeLostAfter + limits::kNodeCheckInterval);
  CHECK(lost == std::vector<std::string>{"a"});

  // A check late by less than kHeadStallAfter is no stall: the silence counts.
  NodeRegistry other(clock);
  auto b = Conn("b");
  other.Register(b, Info("b", "127.0.9.2"), 1);
  CHECK(other.CheckLiveness().empty());
  CHECK(CheckFor(clock, other, limits::kNodeLostAfter - limits::kHeadStallAfter).empty());
  clock.Advance(limits::kNodeCheckInterval + limits::kHeadStallAfter);
  CHECK(other.CheckLiveness() == std::vector<std::string>{"b"});
}

TEST_CASE("fencing: an older agent is refused, a newer one replaces the old connection") {
  FakeClock clock;
  NodeRegistry nodes(clock);
  auto first = Conn("a");
  auto r = nodes.Register(first, Info("a", "127.0.9.1"), 5);
  CHECK_FALSE(r.was_alive);
  CHECK_FALSE(r.agent_restarted);  // a node never seen: a first registration
  CHECK(nodes.WhyStale("a", 4) == "stale agent: incarnation 4 < 5");
  CHECK_FALSE(nodes.WhyStale("a", 5).has_value());  // the same agent reconnecting
  CHECK_FALSE(nodes.WhyStale("a", 6).has_value());  // a restarted one
  CHECK_FALSE(nodes.WhyStale("new", 0).has_value());

  // The same agent on a new connection: a reconnect.
  auto second = Conn("a");
  r = nodes.Register(second, Info("a", "127.0.9.1"), 5);
  CHECK(r.was_alive);
  CHECK_FALSE(r.agent_restarted);
  CHECK(first->closed());
  bool registered = false;
  CHECK(nodes.RegisteredOn(second.get(), &registered) == nodes.Find("a"));
  CHECK(registered);
  CHECK(nodes.RegisteredOn(first.get(), &registered) == nullptr);

  // A restarted agent.
  auto third = Conn("a");
  r = nodes.Register(third, Info("a", "127.0.9.7"), 6);
  CHECK(r.agent_restarted);
  CHECK(second->closed());
  CHECK(nodes.Find("a")->info.addresses(0) == "127.0.9.7");
  CHECK(nodes.WhyStale("a", 5) == "stale agent: incarnation 5 < 6");

  // The old connection closing later is no news of the node: its current one stays.
  std::string closed_node = "x";
  CHECK_FALSE(nodes.Closed(second.get(), &closed_node));  // forgotten when replaced
  CHECK(closed_node.empty());
  CHECK(NodeRegistry::Up(*nodes.Find("a")));
  // Its current one closing is.
  CHECK(nodes.Closed(third.get(), &closed_node));
  CHECK(closed_node == "a");
  CHECK_FALSE(NodeRegistry::Up(*nodes.Find("a")));
  // A client's connection is no agent's.
  auto client = std::make_shared<FakeConnection>(transport::Role::kClient, "me", "");
  CHECK_FALSE(nodes.Closed(client.get(), &closed_node));
}

TEST_CASE("a disconnected node reconnects within kNodeLostAfter, or is lost") {
  FakeClock clock;
  NodeRegistry nodes(clock);
  nodes.Started();
  auto a = Conn("a");
  nodes.Register(a, Info("a", "127.0.9.1"), 1);
  std::string id;
  REQUIRE(nodes.Closed(a.get(), &id));
  clock.Advance(limits::kNodeLostAfter / 2);
  CHECK(nodes.HealthOf(*nodes.Find("a")).condition() == herd::v1::NODE_CONDITION_RECONNECTING);
  CHECK_FALSE(nodes.IsLost(*nodes.Find("a")));
  auto again = Conn("a");
  nodes.Register(again, Info("a", "127.0.9.1"), 1);
  CHECK(CheckFor(clock, nodes, limits::kNodeLostAfter / 2).empty());

  REQUIRE(nodes.Closed(again.get(), &id));
  CHECK(CheckFor(clock, nodes, limits::kNodeLostAfter + limits::kNodeCheckInterval) ==
        std::vector<std::string>{"a"});
  CHECK(nodes.HealthOf(*nodes.Find("a")).condition() == herd::v1::NODE_CONDITION_LOST);
}

TEST_CASE("a stopping agent leaves its node STOPPED, with its reason, until a newer one") {
  FakeClock clock;
  NodeRegistry nodes(clock);
  nodes.Started();
  auto a = Conn("a");
  nodes.Register(a, Info("a", "127.0.9.1"), 3);
  // Cut at a character boundary: "é" (2 bytes) would straddle the limit.
  std::string reason(limits::kMaxLeaveReasonBytes - 1, 'r');
  reason += "\xc3\xa9 and more";
  nodes.Leaving(*nodes.Find("a"), reason);
  std::string id;
  nodes.Closed(a.get(), &id);
  auto h = nodes.HealthOf(*nodes.Find("a"));
  CHECK(h.condition() == herd::v1::NODE_CONDITION_STOPPED);
  CHECK(h.stopped_reason() == std::string(limits::kMaxLeaveReasonBytes - 1, 'r'));
  CHECK(h.stopped_unix_ms() == clock.UnixMs());
  // Still STOPPED once it would be lost; a submit that needs it is refused (IsLost).
  CHECK(CheckFor(clock, nodes, limits::kNodeLostAfter * 2) == std::vector<std::string>{"a"});
  CHECK(nodes.HealthOf(*nodes.Find("a")).condition() == herd::v1::NODE_CONDITION_STOPPED);
  CHECK(nodes.IsLost(*nodes.Find("a")));
  // A newer agent registering ends it: UP, and merely RECONNECTING when it drops again.
  auto back = Conn("a");
  nodes.Register(back, Info("a", "127.0.9.1"), 4);
  CHECK(nodes.HealthOf(*nodes.Find("a")).condition() == herd::v1::NODE_CONDITION_UP);
  nodes.Closed(back.get(), &id);
  CHECK(nodes.HealthOf(*nodes.Find("a")).condition() == herd::v1::NODE_CONDITION_RECONNECTING);
}

TEST_CASE("after a head restart, known nodes have kNodeLostAfter to register again") {
  FakeClock clock;
  NodeRegistry nodes(clock);
  clock.Advance(1h);  // the registry was made long before Start
  nodes.Started();
  nodes.Known(Info("a", "127.0.9.1"), 7);
  nodes.Known(Info("b", "127.0.9.2"), 2);
  CHECK(nodes.WhyStale("a", 6).has_value());  // fencing survives the restart
  CHECK(nodes.HealthOf(*nodes.Find("a")).condition() == herd::v1::NODE_CONDITION_RECONNECTING);
  // a runs a job the head restored: it is expected back and lost like any node if it is not.
  nodes.ExpectBack("a");
  CHECK(nodes.CheckLiveness().empty());  // Start's first check
  CHECK(CheckFor(clock, nodes, limits::kNodeLostAfter - limits::kNodeCheckInterval).empty());
  CHECK_FALSE(nodes.IsLost(*nodes.Find("b")));
  // b was never alive: nothing for CheckLiveness to declare, it is lost by its silence alone.
  CHECK(CheckFor(clock, nodes, limits::kNodeCheckInterval).empty());
  CHECK(nodes.IsLost(*nodes.Find("b")));
  CHECK(nodes.HealthOf(*nodes.Find("b")).condition() == herd::v1::NODE_CONDITION_LOST);
  // a, expected back, is declared lost once silent for longer than kNodeLostAfter.
  CHECK_FALSE(nodes.IsLost(*nodes.Find("a")));
  CHECK(CheckFor(clock, nodes, limits::kNodeCheckInterval) == std::vector<std::string>{"a"});
  CHECK(nodes.IsLost(*nodes.Find("a")));
}

TEST_CASE("cluster order: infos sorted once, rebuilt when a node's info changes") {
  FakeClock clock;
  NodeRegistry nodes(clock);
  auto c = Conn("c");
  auto a = Conn("a");
  nodes.Register(c, Info("c", "127.0.9.30"), 1);
  nodes.Register(a, Info("a", "127.0.9.4"), 1);
  nodes.Known(Info("b", "127.0.9.10"), 1);
  std::vector<std::string> order;
  for (const NodeEntry* n : nodes.Order()) order.push_back(n->info.node_id());
  CHECK(order == std::vector<std::string>{"a", "b", "c"});  // by numeric address
  CHECK(nodes.SchedStates().size() == 3);
  std::vector<std::string> up;
  for (const auto& info : nodes.OrderedInfos(true)) up.push_back(info.node_id());
  CHECK(up == std::vector<std::string>{"a", "c"});
  const NodeEntry* first = nodes.Order()[0];
  CHECK(&nodes.Order() == &nodes.Order());  // cached
  auto a2 = Conn("a");
  nodes.Register(a2, Info("a", "127.0.9.99"), 1);
  order.clear();
  for (const NodeEntry* n : nodes.Order()) order.push_back(n->info.node_id());
  CHECK(order == std::vector<std::string>{"b", "c", "a"});
  CHECK(nodes.Order()[2] == first);  // entries stay where they are
}

TEST_CASE("a node whose agent's connection ended abruptly is lost after kNodeClosedGrace") {
  FakeClock clock;
  NodeRegistry nodes(clock);
  nodes.Started();
  auto a = Conn("a");
  auto b = Conn("b");
  nodes.Register(a, Info("a", "127.0.9.1"), 1);
  nodes.Register(b, Info("b", "127.0.9.2"), 1);
  std::string id;
  // a's agent died (its kernel closed the connection); b's link is silent, its connection open.
  REQUIRE(nodes.Closed(a.get(), &id, /*abrupt=*/true));
  CHECK(id == "a");
  CHECK(CheckFor(clock, nodes, limits::kNodeClosedGrace).empty());  // exactly the grace: not yet
  CHECK(nodes.HealthOf(*nodes.Find("a")).condition() == herd::v1::NODE_CONDITION_RECONNECTING);
  CHECK(CheckFor(clock, nodes, limits::kNodeCheckInterval) == std::vector<std::string>{"a"});
  CHECK(nodes.IsLost(*nodes.Find("a")));
  CHECK(nodes.Find("a")->lost_on_close);
  CHECK(nodes.HealthOf(*nodes.Find("a")).condition() == herd::v1::NODE_CONDITION_LOST);
  // The silent one keeps the whole kNodeLostAfter.
  CHECK_FALSE(nodes.IsLost(*nodes.Find("b")));
  const auto silent_for = limits::kNodeClosedGrace + limits::kNodeCheckInterval;
  CHECK(CheckFor(clock, nodes, limits::kNodeLostAfter - silent_for).empty());
  CHECK(CheckFor(clock, nodes, limits::kNodeCheckInterval) == std::vector<std::string>{"b"});
  CHECK_FALSE(nodes.Find("b")->lost_on_close);

  // A new agent of a registers: UP again, the rule's state gone.
  auto back = Conn("a");
  nodes.Register(back, Info("a", "127.0.9.1"), 2);
  CHECK(nodes.HealthOf(*nodes.Find("a")).condition() == herd::v1::NODE_CONDITION_UP);
  CHECK_FALSE(nodes.Find("a")->lost_on_close);
  CHECK_FALSE(nodes.Find("a")->closed_at.has_value());
}

TEST_CASE("an agent back within kNodeClosedGrace keeps its node; a clean close is not abrupt") {
  FakeClock clock;
  NodeRegistry nodes(clock);
  nodes.Started();
  auto a = Conn("a");
  nodes.Register(a, Info("a", "127.0.9.1"), 1);
  std::string id;
  // Killed and started again (its supervisor, after its first restart delay).
  REQUIRE(nodes.Closed(a.get(), &id, /*abrupt=*/true));
  CHECK(CheckFor(clock, nodes, limits::kNodeClosedGrace - limits::kNodeCheckInterval).empty());
  auto again = Conn("a");
  CHECK(nodes.Register(again, Info("a", "127.0.9.1"), 2).agent_restarted);
  CHECK(CheckFor(clock, nodes, limits::kNodeLostAfter - limits::kNodeCheckInterval).empty());

  // A clean websocket close (an agent stopping on purpose) gets the whole kNodeLostAfter.
  nodes.Heard(*nodes.Find("a"));
  REQUIRE(nodes.Closed(again.get(), &id));
  CHECK_FALSE(nodes.Find("a")->closed_at.has_value());
  CHECK(CheckFor(clock, nodes, limits::kNodeClosedGrace * 3 / 2).empty());
  CHECK(CheckFor(clock, nodes, limits::kNodeLostAfter) == std::vector<std::string>{"a"});
  CHECK_FALSE(nodes.Find("a")->lost_on_close);

  // A fenced-out connection ending abruptly is no news of its node.
  auto c1 = Conn("c");
  auto c2 = Conn("c");
  nodes.Register(c1, Info("c", "127.0.9.3"), 1);
  nodes.Register(c2, Info("c", "127.0.9.3"), 1);
  CHECK_FALSE(nodes.Closed(c1.get(), &id, /*abrupt=*/true));
  CHECK_FALSE(nodes.Find("c")->closed_at.has_value());
}

TEST_CASE("a stopping agent's abrupt close and a stalled head keep the longer windows") {
  FakeClock clock;
  NodeRegistry nodes(clock);
  nodes.Started();
  auto a = Conn("a");
  nodes.Register(a, Info("a", "127.0.9.1"), 1);
  std::string id;
  // It said it was stopping (a planned restart), then its connection ended without a close.
  nodes.Leaving(*nodes.Find("a"), "herdlet received SIGTERM");
  REQUIRE(nodes.Closed(a.get(), &id, /*abrupt=*/true));
  CHECK(CheckFor(clock, nodes, limits::kNodeLostAfter).empty());
  CHECK(CheckFor(clock, nodes, limits::kNodeCheckInterval) == std::vector<std::string>{"a"});

  // The head did not run (SIGSTOP) while an agent's connection ended: the agent redials at its
  // longest backoff once the head runs again, so from the late check only silence counts: the
  // node has kNodeLostAfter, not the grace, to register again.
  auto b = Conn("b");
  nodes.Register(b, Info("b", "127.0.9.2"), 1);
  CHECK(CheckFor(clock, nodes, limits::kNodeCheckInterval).empty());
  REQUIRE(nodes.Closed(b.get(), &id, /*abrupt=*/true));
  clock.Advance(limits::kNodeLostAfter * 2);
  CHECK(nodes.CheckLiveness().empty());
  CHECK_FALSE(nodes.Find("b")->closed_at.has_value());
  static_assert(limits::kReconnectBackoffMax + limits::kNodeCheckInterval < limits::kNodeLostAfter);
  CHECK(CheckFor(clock, nodes, limits::kReconnectBackoffMax + limits::kNodeCheckInterval).empty());
  CHECK(CheckFor(clock, nodes, limits::kNodeLostAfter) == std::vector<std::string>{"b"});
  CHECK_FALSE(nodes.Find("b")->lost_on_close);
}

}  // namespace
}  // namespace herd::agent
