#include "agent/head/node_registry.hpp"

#include <algorithm>

#include "agent/nodes/node_order.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::agent {

using namespace herd::v1;

NodeRegistry::NodeRegistry(Clock& clock)
    : clock_(clock), last_check_(clock.Now()), started_at_(clock.Now()) {}

void NodeRegistry::Started() { started_at_ = clock_.Now(); }

void NodeRegistry::Known(const NodeInfo& info, uint64_t incarnation) {
  NodeEntry& node = nodes_[info.node_id()];
  node.info = info;
  ++info_gen_;
  node.incarnation = incarnation;
}

std::optional<std::string> NodeRegistry::WhyStale(const std::string& node_id,
                                                  uint64_t incarnation) {
  const NodeEntry& node = nodes_[node_id];
  if (incarnation >= node.incarnation) return std::nullopt;
  return "stale agent: incarnation " + std::to_string(incarnation) + " < " +
         std::to_string(node.incarnation);
}

NodeRegistry::Registered NodeRegistry::Register(const ConnPtr& conn, const NodeInfo& info,
                                                uint64_t incarnation) {
  const std::string& id = info.node_id();
  NodeEntry& node = nodes_[id];
  if (node.conn && node.conn != conn) {
    HERD_LOG(kInfo) << "agent " << id << " re-registered (incarnation " << incarnation
                    << "); dropping its old connection";
    agent_conns_.erase(node.conn.get());
    node.conn->Close();
  }
  Registered r;
  r.node = &node;
  r.was_alive = node.alive;
  r.agent_restarted = node.incarnation != 0 && incarnation > node.incarnation;
  // Drained stays drained: an agent's restart does not undrain its node (only a user does).
  std::string drain_reason = node.info.drain_reason();
  const int64_t drained_at = node.info.drained_unix_ms();
  node.info = info;
  node.info.set_drain_reason(std::move(drain_reason));
  node.info.set_drained_unix_ms(drained_at);
  ++info_gen_;
  node.incarnation = incarnation;
  node.conn = conn;
  node.last_seen = clock_.Now();
  node.alive = true;
  node.closed_at.reset();
  node.lost_on_close = false;
  agent_conns_[conn.get()] = id;
  return r;
}

NodeEntry* NodeRegistry::RegisteredOn(const transport::Connection* conn, bool* registered) {
  auto it = agent_conns_.find(conn);
  *registered = it != agent_conns_.end();
  if (!*registered) return nullptr;
  auto node = nodes_.find(it->second);
  if (node == nodes_.end() || node->second.conn.get() != conn) return nullptr;  // fenced: stale
  return &node->second;
}

bool NodeRegistry::Closed(const transport::Connection* conn, std::string* node_id, bool abrupt) {
  node_id->clear();
  auto it = agent_conns_.find(conn);
  if (it == agent_conns_.end()) return false;
  auto node = nodes_.find(it->second);
  if (node != nodes_.end() && node->second.conn.get() == conn) {
    *node_id = it->second;
    node->second.conn.reset();
    if (abrupt) node->second.closed_at = clock_.Now();
  }
  agent_conns_.erase(it);
  return true;
}

void NodeRegistry::Leaving(NodeEntry& node, const std::string& reason) {
  node.last_seen = clock_.Now();
  node.left = true;
  node.left_incarnation = node.incarnation;
  // Cut at a character boundary: a string field must stay valid UTF-8 for NodesReply to parse.
  std::size_t keep = std::min(reason.size(), limits::kMaxLeaveReasonBytes);
  while (keep > 0 && keep < reason.size() &&
         (static_cast<unsigned char>(reason[keep]) & 0xC0) == 0x80) {
    --keep;
  }
  node.left_reason = reason.substr(0, keep);
  node.left_unix_ms = clock_.UnixMs();
}

void NodeRegistry::ExpectBack(const std::string& node_id) {
  NodeEntry& node = nodes_[node_id];
  if (node.alive) return;
  node.alive = true;
  node.last_seen = clock_.Now();
}

std::vector<std::string> NodeRegistry::CheckLiveness() {
  const auto now = clock_.Now();
  if (now - last_check_ > limits::kNodeCheckInterval + limits::kHeadStallAfter) {
    // The head did not run for a while: the silence it measured is its own. Connected nodes get a
    // fresh window; their agents, which may have dropped the connection meanwhile and redial at
    // their longest backoff, re-register within it: a connection that ended abruptly before or
    // during the stall no longer counts (only silence does, from now).
    HERD_LOG(kWarn)
        << "the head did not run for "
        << std::chrono::duration_cast<std::chrono::milliseconds>(now - last_check_).count()
        << " ms; giving every agent " << limits::kNodeLostAfter.count()
        << " ms to be heard from again";
    for (auto& [id, node] : nodes_) {
      if (!node.alive) continue;
      node.last_seen = now;
      node.closed_at.reset();
    }
  }
  last_check_ = now;
  std::vector<std::string> lost;
  for (auto& [id, node] : nodes_) {
    if (!node.alive) continue;
    if (now - node.last_seen > limits::kNodeLostAfter) {
      if (node.conn) {
        agent_conns_.erase(node.conn.get());
        node.conn->Close();
        node.conn.reset();
      }
      lost.push_back(id);
    } else if (node.closed_at && !node.conn &&
               !(node.left && node.left_incarnation == node.incarnation) &&
               now - *node.closed_at > limits::kNodeClosedGrace) {
      node.lost_on_close = true;
      lost.push_back(id);
    }
  }
  return lost;
}

bool NodeRegistry::IsLost(const NodeEntry& node) const {
  if (node.alive) return false;
  return node.lost_on_close ||
         clock_.Now() - std::max(node.last_seen, started_at_) >= limits::kNodeLostAfter;
}

NodeEntry* NodeRegistry::SetDrain(const std::string& node_id, const std::string& reason,
                                  int64_t unix_ms) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return nullptr;
  NodeInfo& info = it->second.info;
  info.set_drain_reason(reason.substr(0, limits::kMaxDrainReasonBytes));
  info.set_drained_unix_ms(reason.empty() ? 0 : unix_ms);
  ++info_gen_;
  return &it->second;
}

NodeHealth NodeRegistry::HealthOf(const NodeEntry& node) const {
  NodeHealth h;
  if (Drained(node)) {
    h.set_drained(true);
    h.set_drain_reason(node.info.drain_reason());
    h.set_drained_unix_ms(node.info.drained_unix_ms());
  }
  if (Up(node)) {
    h.set_condition(NODE_CONDITION_UP);
    return h;
  }
  h.set_silent_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                      clock_.Now() - std::max(node.last_seen, started_at_))
                      .count());
  if (node.left && node.left_incarnation == node.incarnation) {
    h.set_condition(NODE_CONDITION_STOPPED);
    h.set_stopped_reason(node.left_reason);
    h.set_stopped_unix_ms(node.left_unix_ms);
  } else {
    h.set_condition(IsLost(node) ? NODE_CONDITION_LOST : NODE_CONDITION_RECONNECTING);
  }
  return h;
}

std::vector<NodeInfo> NodeRegistry::OrderedInfos(bool alive_only) const {
  std::vector<NodeInfo> out;
  for (const auto& [id, node] : nodes_) {
    if (!alive_only || Up(node)) out.push_back(node.info);
  }
  SortClusterOrder(out);
  return out;
}

const std::vector<NodeEntry*>& NodeRegistry::Order() {
  if (order_gen_ == info_gen_ && order_.size() == nodes_.size()) return order_;
  std::vector<NodeInfo> sorted = OrderedInfos(false);
  order_.clear();
  sched_nodes_.clear();
  for (auto& info : sorted) {
    order_.push_back(&nodes_.at(info.node_id()));
    NodeState s;
    s.info = std::move(info);
    sched_nodes_.push_back(std::move(s));
  }
  order_gen_ = info_gen_;
  return order_;
}

NodeEntry* NodeRegistry::Find(const std::string& node_id) {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second;
}

const NodeEntry* NodeRegistry::Find(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second;
}

}  // namespace herd::agent
