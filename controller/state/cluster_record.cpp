#include "controller/state/cluster_record.hpp"

#include <boost/json.hpp>

#include <array>
#include <utility>

namespace herd::controller {
namespace {

namespace json = boost::json;

constexpr std::array<std::pair<ClusterStatus, std::string_view>, 4> kStatusNames = {{
    {ClusterStatus::kInit, "INIT"},
    {ClusterStatus::kUp, "UP"},
    {ClusterStatus::kStopped, "STOPPED"},
    {ClusterStatus::kAutostopping, "AUTOSTOPPING"},
}};

// Typed readers: a key of the wrong type is a damaged record, a missing key keeps the default.
class Reader {
 public:
  explicit Reader(const json::object& o) : o_(o) {}

  Status Str(std::string_view key, std::string& out) const {
    const json::value* v = o_.if_contains(key);
    if (v == nullptr) return Status::Ok();
    if (!v->is_string()) return Wrong(key, "a string");
    out = std::string(v->get_string());
    return Status::Ok();
  }
  template <typename Int>
  Status Integer(std::string_view key, Int& out) const {
    const json::value* v = o_.if_contains(key);
    if (v == nullptr) return Status::Ok();
    if (v->is_int64()) {
      out = static_cast<Int>(v->get_int64());
    } else if (v->is_uint64()) {
      out = static_cast<Int>(v->get_uint64());
    } else {
      return Wrong(key, "an integer");
    }
    return Status::Ok();
  }
  Status Bool(std::string_view key, bool& out) const {
    const json::value* v = o_.if_contains(key);
    if (v == nullptr) return Status::Ok();
    if (!v->is_bool()) return Wrong(key, "true or false");
    out = v->get_bool();
    return Status::Ok();
  }

 private:
  static Status Wrong(std::string_view key, std::string_view want) {
    return InvalidArgument("key '" + std::string(key) + "' is not " + std::string(want));
  }
  const json::object& o_;
};

json::object NodeToJson(const NodeRecord& n) {
  json::object o{{"name", n.name},
                 {"ip", n.ip},
                 {"ssh_port", n.ssh_port},
                 {"ssh_user", n.ssh_user},
                 {"identity_file", n.identity_file},
                 {"netns", n.netns},
                 {"host_home", n.host_home},
                 {"internal_ip", n.internal_ip},
                 {"spot_metadata", n.spot_metadata},
                 {"is_head", n.is_head}};
  if (!n.jump.empty()) {
    auto hop = [](const SshJump& j) {
      return json::object{
          {"host", j.host}, {"port", j.port}, {"user", j.user}, {"identity_file", j.identity_file}};
    };
    json::object jump = hop(n.jump);
    if (!n.jump.before.empty()) {
      json::array before;
      for (const SshJump& j : n.jump.before) before.push_back(hop(j));
      jump["before"] = std::move(before);
    }
    o["jump"] = std::move(jump);
  }
  return o;
}

Result<NodeRecord> NodeFromJson(const json::value& v) {
  if (!v.is_object()) return InvalidArgument("a node is not an object");
  Reader r(v.get_object());
  NodeRecord n;
  HERD_RETURN_IF_ERROR(r.Str("name", n.name));
  HERD_RETURN_IF_ERROR(r.Str("ip", n.ip));
  HERD_RETURN_IF_ERROR(r.Integer("ssh_port", n.ssh_port));
  HERD_RETURN_IF_ERROR(r.Str("ssh_user", n.ssh_user));
  HERD_RETURN_IF_ERROR(r.Str("identity_file", n.identity_file));
  HERD_RETURN_IF_ERROR(r.Str("netns", n.netns));
  HERD_RETURN_IF_ERROR(r.Str("host_home", n.host_home));
  HERD_RETURN_IF_ERROR(r.Str("internal_ip", n.internal_ip));
  HERD_RETURN_IF_ERROR(r.Str("spot_metadata", n.spot_metadata));
  HERD_RETURN_IF_ERROR(r.Bool("is_head", n.is_head));
  if (const json::value* jump = v.get_object().if_contains("jump")) {
    if (!jump->is_object()) return InvalidArgument("key 'jump' is not an object");
    auto hop = [](const json::object& o, SshJump& out) -> Status {
      Reader j(o);
      HERD_RETURN_IF_ERROR(j.Str("host", out.host));
      HERD_RETURN_IF_ERROR(j.Integer("port", out.port));
      HERD_RETURN_IF_ERROR(j.Str("user", out.user));
      return j.Str("identity_file", out.identity_file);
    };
    HERD_RETURN_IF_ERROR(hop(jump->get_object(), n.jump));
    if (const json::value* before = jump->get_object().if_contains("before")) {
      if (!before->is_array()) return InvalidArgument("key 'jump.before' is not an array");
      for (const json::value& h : before->get_array()) {
        if (!h.is_object()) return InvalidArgument("a hop of 'jump.before' is not an object");
        HERD_RETURN_IF_ERROR(hop(h.get_object(), n.jump.before.emplace_back()));
      }
    }
  }
  return n;
}

}  // namespace

bool ServerSweepsAutostop(const ClusterRecord& c) {
  return c.status == ClusterStatus::kUp && c.autostop_idle_minutes >= 0 && c.provider != "local";
}

std::string_view Name(ClusterStatus status) {
  for (const auto& [s, name] : kStatusNames) {
    if (s == status) return name;
  }
  return "UNKNOWN";
}

Result<ClusterStatus> ParseClusterStatus(std::string_view name) {
  for (const auto& [s, n] : kStatusNames) {
    if (n == name) return s;
  }
  return InvalidArgument("unknown cluster status '" + std::string(name) +
                         "' (expected INIT, UP, STOPPED or AUTOSTOPPING)");
}

const NodeRecord* HeadNode(const ClusterRecord& c) {
  for (const auto& n : c.nodes) {
    if (n.is_head) return &n;
  }
  return c.nodes.empty() ? nullptr : &c.nodes.front();
}

std::vector<const NodeRecord*> WorkerNodes(const ClusterRecord& c) {
  const NodeRecord* head = HeadNode(c);
  std::vector<const NodeRecord*> workers;
  for (const auto& n : c.nodes) {
    if (&n != head) workers.push_back(&n);
  }
  return workers;
}

std::string ToJson(const ClusterRecord& c) {
  json::array nodes;
  for (const auto& n : c.nodes) nodes.push_back(NodeToJson(n));
  json::object o{{"name", c.name},
                 {"provider", c.provider},
                 {"infra", c.infra},
                 {"status", Name(c.status)},
                 {"nodes", std::move(nodes)},
                 {"resources", c.resources},
                 {"head_port", c.head_port},
                 {"certs_dir", c.certs_dir},
                 {"ssh_key_path", c.ssh_key_path},
                 {"known_hosts_path", c.known_hosts_path},
                 {"control_dir", c.control_dir},
                 {"state_dir", c.state_dir},
                 {"autostop_idle_minutes", c.autostop_idle_minutes},
                 {"autostop_down", c.autostop_down},
                 {"launched_unix_ms", c.launched_unix_ms},
                 {"agent_version", c.agent_version},
                 {"agents_stamp", c.agents_stamp}};
  return json::serialize(o);
}

Result<ClusterRecord> ClusterRecordFromJson(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) return InvalidArgument("not JSON: " + ec.message());
  if (!v.is_object()) return InvalidArgument("not a JSON object");
  const json::object& o = v.get_object();
  Reader r(o);
  ClusterRecord c;
  HERD_RETURN_IF_ERROR(r.Str("name", c.name));
  HERD_RETURN_IF_ERROR(r.Str("provider", c.provider));
  HERD_RETURN_IF_ERROR(r.Str("infra", c.infra));
  std::string status = std::string(Name(c.status));
  HERD_RETURN_IF_ERROR(r.Str("status", status));
  HERD_ASSIGN_OR_RETURN(c.status, ParseClusterStatus(status));
  if (const json::value* nodes = o.if_contains("nodes"); nodes != nullptr) {
    if (!nodes->is_array()) return InvalidArgument("key 'nodes' is not an array");
    for (const auto& n : nodes->get_array()) {
      HERD_ASSIGN_OR_RETURN(NodeRecord node, NodeFromJson(n));
      c.nodes.push_back(std::move(node));
    }
  }
  HERD_RETURN_IF_ERROR(r.Str("resources", c.resources));
  HERD_RETURN_IF_ERROR(r.Integer("head_port", c.head_port));
  HERD_RETURN_IF_ERROR(r.Str("certs_dir", c.certs_dir));
  HERD_RETURN_IF_ERROR(r.Str("ssh_key_path", c.ssh_key_path));
  HERD_RETURN_IF_ERROR(r.Str("known_hosts_path", c.known_hosts_path));
  HERD_RETURN_IF_ERROR(r.Str("control_dir", c.control_dir));
  HERD_RETURN_IF_ERROR(r.Str("state_dir", c.state_dir));
  HERD_RETURN_IF_ERROR(r.Integer("autostop_idle_minutes", c.autostop_idle_minutes));
  HERD_RETURN_IF_ERROR(r.Bool("autostop_down", c.autostop_down));
  HERD_RETURN_IF_ERROR(r.Integer("launched_unix_ms", c.launched_unix_ms));
  HERD_RETURN_IF_ERROR(r.Str("agent_version", c.agent_version));
  HERD_RETURN_IF_ERROR(r.Str("agents_stamp", c.agents_stamp));
  return c;
}

}  // namespace herd::controller
