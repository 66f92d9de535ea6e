// The head's nodes: who registered from which connection (fencing by incarnation), when each was
// last heard from (liveness), and how each looks to `herd nodes` and `herd status` (UP,
// RECONNECTING, LOST, STOPPED). Times come from the Clock it is given; the head calls
// CheckLiveness every limits::kNodeCheckInterval. What losing a node does to its jobs is the
// head's (Head::NodeLost).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/sched/scheduler.hpp"
#include "herd/v1/agent.pb.h"
#include "herd/v1/client.pb.h"
#include "shared/common/clock.hpp"
#include "shared/transport/transport.hpp"

namespace herd::agent {

struct NodeEntry {
  herd::v1::NodeInfo info;
  uint64_t incarnation = 0;
  std::shared_ptr<transport::Connection> conn;
  std::chrono::steady_clock::time_point last_seen;
  bool alive = false;
  // Its current agent connection ended abruptly at this time (Closed), and no agent registered
  // since: lost once that lasts limits::kNodeClosedGrace.
  std::optional<std::chrono::steady_clock::time_point> closed_at;
  // Declared lost by that rule (not by silence); cleared when an agent registers.
  bool lost_on_close = false;
  // Its agent of incarnation left_incarnation said it was stopping (Leaving): while no newer
  // agent registered, the node is STOPPED (NodeHealth), with the reason it gave.
  bool left = false;
  uint64_t left_incarnation = 0;
  std::string left_reason;
  int64_t left_unix_ms = 0;
};

class NodeRegistry {
 public:
  using ConnPtr = std::shared_ptr<transport::Connection>;
  using Map = std::map<std::string, NodeEntry>;

  explicit NodeRegistry(Clock& clock);

  // The head started: nodes known from jobs.db (Known) have limits::kNodeLostAfter from now to
  // register again before they count as lost.
  void Started();
  // A node of an earlier head (jobs.db): known, not alive until it registers again. Its
  // incarnation keeps fencing an older agent out across the restart.
  void Known(const herd::v1::NodeInfo& info, uint64_t incarnation);

  // Fencing: why an agent of this incarnation may not register as node_id (an older agent than
  // the node's last one); nullopt when it may (equal: the same agent reconnecting; higher: a
  // restarted one).
  std::optional<std::string> WhyStale(const std::string& node_id, uint64_t incarnation);
  struct Registered {
    NodeEntry* node = nullptr;
    bool was_alive = false;
    // A new agent process (a higher incarnation than a known one's): it adopted what the old one
    // supervised and reports it; what it does not report was lost.
    bool agent_restarted = false;
  };
  // Registers conn as the node's agent (after WhyStale said it may); an earlier connection of the
  // node is closed and its messages are ignored from now on (RegisteredOn).
  Registered Register(const ConnPtr& conn, const herd::v1::NodeInfo& info, uint64_t incarnation);
  // The node conn is the current agent connection of; null for one that is not. *registered says
  // whether conn ever registered (one that did not is to be dropped; a fenced-out one, replaced
  // by a newer connection of its node, is only ignored).
  NodeEntry* RegisteredOn(const transport::Connection* conn, bool* registered);
  // conn closed. True when it was an agent's connection; *node_id then names the node whose
  // current connection it was (empty for a fenced-out one). abrupt: it ended without a websocket
  // close (EOF or reset from the agent's kernel: its process died; transport's on_close with an
  // error), which starts the node's limits::kNodeClosedGrace (closed_at); a clean close, as an
  // agent stopping on purpose makes, leaves the node to the kNodeLostAfter rule.
  bool Closed(const transport::Connection* conn, std::string* node_id, bool abrupt = false);

  // A message came from the node.
  void Heard(NodeEntry& node) { node.last_seen = clock_.Now(); }
  // Its agent said it is stopping, with a reason (cut at limits::kMaxLeaveReasonBytes).
  void Leaving(NodeEntry& node, const std::string& reason);
  // A node a restored job runs on: counted alive (not lost) from now, so that it is lost like any
  // other if it does not register within limits::kNodeLostAfter.
  void ExpectBack(const std::string& node_id);

  // Liveness, every limits::kNodeCheckInterval: the nodes silent for longer than
  // limits::kNodeLostAfter, whose connections are closed here, and the nodes whose agent's
  // connection ended abruptly longer than limits::kNodeClosedGrace ago without a registration
  // since (lost_on_close; not a node whose agent said it was stopping, which keeps
  // the whole kNodeLostAfter); the caller declares each lost (MarkLost). A check that runs more
  // than kHeadStallAfter late means the head itself did not run: the silence is its own, and
  // every node alive gets a fresh kNodeLostAfter (and a closed one a fresh grace) instead.
  std::vector<std::string> CheckLiveness();
  void MarkLost(const std::string& node_id) { nodes_[node_id].alive = false; }

  // Declared lost (silent for limits::kNodeLostAfter, or its connection closed for
  // limits::kNodeClosedGrace; after a head restart, not registered within kNodeLostAfter). A node
  // only reconnecting is not.
  bool IsLost(const NodeEntry& node) const;
  // UP, RECONNECTING, LOST or STOPPED, as `herd nodes` and `herd status` show it.
  herd::v1::NodeHealth HealthOf(const NodeEntry& node) const;
  // Alive with its agent connected: new work may go there.
  static bool Up(const NodeEntry& node) { return node.alive && node.conn != nullptr; }
  // Drained (NodeHealth.drained): no new job is placed on it. Kept in its info (drain_reason),
  // which a registration does not replace and jobs.db keeps.
  static bool Drained(const NodeEntry& node) { return !node.info.drain_reason().empty(); }
  // Drains the node with `reason` (cut at limits::kMaxDrainReasonBytes), or undrains it (empty
  // reason); the node, or null when unknown.
  NodeEntry* SetDrain(const std::string& node_id, const std::string& reason, int64_t unix_ms);

  // Every known node's info in cluster order (SortClusterOrder); alive_only: Up ones only.
  std::vector<herd::v1::NodeInfo> OrderedInfos(bool alive_only) const;
  // Every known node in cluster order, kept across scheduling passes and rebuilt only when a node
  // is added or its info changes (NodeEntry addresses in the map are stable): copying and sorting
  // every NodeInfo at each pass would be the head's main cost in a burst of small jobs.
  const std::vector<NodeEntry*>& Order();
  // The scheduler's states of Order()'s nodes, in its order (infos copied once per rebuild; the
  // caller resets the rest for each pass).
  std::vector<NodeState>& SchedStates() { return sched_nodes_; }

  NodeEntry* Find(const std::string& node_id);
  const NodeEntry* Find(const std::string& node_id) const;
  NodeEntry& operator[](const std::string& node_id) { return nodes_[node_id]; }
  const Map& nodes() const { return nodes_; }
  std::size_t size() const { return nodes_.size(); }

 private:
  Clock& clock_;
  std::chrono::steady_clock::time_point last_check_;  // when CheckLiveness last ran
  std::chrono::steady_clock::time_point started_at_;  // Started()
  Map nodes_;
  std::map<const transport::Connection*, std::string> agent_conns_;  // conn -> node id
  uint64_t info_gen_ = 0;  // bumped whenever a node's info is set
  // Order()'s cache, valid for info_gen_ == order_gen_ and as many nodes as nodes_.
  std::vector<NodeEntry*> order_;
  uint64_t order_gen_ = UINT64_MAX;
  std::vector<NodeState> sched_nodes_;
};

}  // namespace herd::agent
