#include "agent/core/agent_config.hpp"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>

namespace herd::agent {

Result<AgentConfig> LoadAgentConfig(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return NotFound("cannot read agent config " + path);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(path + ":" + std::to_string(e.mark.line + 1) + ":" +
                           std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  if (!root.IsMap()) return InvalidArgument(path + ": expected a map of settings");
  static const std::set<std::string> kKnown = {
      "role",     "cluster",   "node_id",        "address",    "listen",       "head",
      "certs",    "state_dir", "port_file",      "ready_file", "cpus",         "gpus",
      "gpu_name", "cloud",     "expected_nodes", "head_node",  "health_check", "spot_metadata"};
  AgentConfig c;
  try {
    for (const auto& kv : root) {
      std::string key = kv.first.as<std::string>();
      auto where = path + ":" + std::to_string(kv.first.Mark().line + 1) + ":" +
                   std::to_string(kv.first.Mark().column + 1) + ": ";
      if (!kKnown.count(key)) return InvalidArgument(where + "unknown setting '" + key + "'");
    }
    auto str = [&](const char* k) -> std::string {
      return root[k] ? root[k].as<std::string>() : std::string();
    };
    std::string role = str("role");
    if (role == "head") {
      c.role = AgentConfig::Role::kHead;
    } else if (role == "worker") {
      c.role = AgentConfig::Role::kWorker;
    } else {
      return InvalidArgument(path + ": role: expected 'head' or 'worker', got '" + role + "'");
    }
    c.cluster = str("cluster");
    c.node_id = str("node_id");
    c.address = str("address");
    c.certs_dir = str("certs");
    c.state_dir = str("state_dir");
    c.port_file = str("port_file");
    c.ready_file = str("ready_file");
    c.gpu_name = str("gpu_name");
    if (root["cloud"]) c.cloud = str("cloud");
    c.spot_metadata = str("spot_metadata");
    if (root["cpus"]) c.cpus = root["cpus"].as<int>();
    if (root["gpus"]) c.gpus = root["gpus"].as<int>();
    if (root["expected_nodes"]) c.expected_nodes = root["expected_nodes"].as<int>();
    if (const YAML::Node hc = root["health_check"]) {
      auto where = [&](const YAML::Node& n) {
        return path + ":" + std::to_string(n.Mark().line + 1) + ":" +
               std::to_string(n.Mark().column + 1) + ": health_check";
      };
      if (!hc.IsMap()) return InvalidArgument(where(hc) + ": expected {command, interval}");
      for (const auto& kv : hc) {
        const std::string key = kv.first.as<std::string>();
        if (key != "command" && key != "interval") {
          return InvalidArgument(where(kv.first) + ": unknown setting '" + key + "'");
        }
      }
      c.health_check_command = hc["command"] ? hc["command"].as<std::string>() : "";
      if (c.health_check_command.empty()) {
        return InvalidArgument(where(hc) + ".command: give the command to run");
      }
      if (hc["interval"]) {
        const double seconds = hc["interval"].as<double>();
        const auto interval = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
        if (!(seconds > 0) || interval < limits::kHealthCheckMinInterval) {
          return InvalidArgument(where(hc["interval"]) + ".interval: at least " +
                                 std::to_string(limits::kHealthCheckMinInterval.count() / 1000) +
                                 " s, got " + hc["interval"].as<std::string>());
        }
        c.health_check_interval = interval;
      }
    }
    if (c.role == AgentConfig::Role::kHead) {
      HERD_ASSIGN_OR_RETURN(c.listen, ParseHostPort(str("listen"), path + ": listen"));
      c.head_node = c.node_id;
    } else {
      HERD_ASSIGN_OR_RETURN(c.head, ParseHostPort(str("head"), path + ": head"));
      c.head_node = str("head_node");
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument(path + ":" + std::to_string(e.mark.line + 1) + ":" +
                           std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  // Relative paths are relative to the config file, so an installed agent dir can move.
  std::string base = std::filesystem::path(path).parent_path().string();
  for (std::string* p : {&c.certs_dir, &c.state_dir, &c.port_file, &c.ready_file}) {
    if (!p->empty() && (*p)[0] != '/') *p = (base.empty() ? "." : base) + "/" + *p;
  }
  for (auto [name, value] : {std::pair{"cluster", &c.cluster},
                             {"node_id", &c.node_id},
                             {"address", &c.address},
                             {"certs", &c.certs_dir},
                             {"state_dir", &c.state_dir}}) {
    if (value->empty()) return InvalidArgument(path + ": " + name + " is required");
  }
  return c;
}

}  // namespace herd::agent
