#include "controller/state/api_config.hpp"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "controller/state/herd_home.hpp"
#include "shared/common/file_util.hpp"

namespace herd::controller {

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

std::string ApiConfigPath() { return HerdHome() + "/config.yaml"; }

Result<std::optional<ApiConfig>> LoadApiConfig() {
  const std::string forced = Env("HERD_API_SERVER");
  if (forced == "local") return std::optional<ApiConfig>();
  ApiConfig c;
  const std::string path = ApiConfigPath();
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    HERD_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
    try {
      YAML::Node root = YAML::Load(text);
      if (root && root.IsMap() && root["api_server"]) {
        YAML::Node s = root["api_server"];
        if (!s.IsMap()) {
          return InvalidArgument(path + ":" + std::to_string(s.Mark().line + 1) + ":" +
                                 std::to_string(s.Mark().column + 1) +
                                 ": api_server: expected a mapping");
        }
        if (s["endpoint"]) c.endpoint = s["endpoint"].as<std::string>();
        if (s["token"]) c.token = s["token"].as<std::string>();
        if (s["ca_cert"]) c.ca_cert = s["ca_cert"].as<std::string>();
      }
    } catch (const YAML::Exception& e) {
      return InvalidArgument(path + ":" + std::to_string(e.mark.line + 1) + ":" +
                             std::to_string(e.mark.column + 1) + ": " + e.msg);
    }
  }
  if (!forced.empty()) c.endpoint = forced;
  if (!Env("HERD_API_TOKEN").empty()) c.token = Env("HERD_API_TOKEN");
  if (!Env("HERD_API_CA_CERT").empty()) c.ca_cert = Env("HERD_API_CA_CERT");
  if (c.endpoint.empty()) return std::optional<ApiConfig>();
  return std::optional<ApiConfig>(c);
}

namespace {

// The file's YAML as it is (other sections, such as aws:, stay), or an empty map when missing.
Result<YAML::Node> LoadConfigFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return YAML::Node(YAML::NodeType::Map);
  HERD_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  try {
    YAML::Node root = YAML::Load(text);
    if (!root || root.IsNull()) return YAML::Node(YAML::NodeType::Map);
    if (!root.IsMap()) {
      return InvalidArgument(path + ":" + std::to_string(root.Mark().line + 1) + ":" +
                             std::to_string(root.Mark().column + 1) + ": expected a mapping");
    }
    return root;
  } catch (const YAML::Exception& e) {
    return InvalidArgument(path + ":" + std::to_string(e.mark.line + 1) + ":" +
                           std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
}

Status WriteConfigFile(const std::string& path, const YAML::Node& root) {
  YAML::Emitter out;
  out << root;
  HERD_RETURN_IF_ERROR(EnsureDir(HerdHome()));
  return WriteFileAtomic(path, std::string(out.c_str()) + "\n", 0600);
}

}  // namespace

Status SaveApiConfig(const ApiConfig& config) {
  const std::string path = ApiConfigPath();
  HERD_ASSIGN_OR_RETURN(YAML::Node root, LoadConfigFile(path));
  YAML::Node s(YAML::NodeType::Map);
  s["endpoint"] = config.endpoint;
  s["token"] = config.token;
  if (!config.ca_cert.empty()) s["ca_cert"] = config.ca_cert;
  root["api_server"] = s;
  return WriteConfigFile(path, root);
}

Status ClearApiConfig() {
  const std::string path = ApiConfigPath();
  HERD_ASSIGN_OR_RETURN(YAML::Node root, LoadConfigFile(path));
  if (!root["api_server"]) return Status::Ok();
  root.remove("api_server");
  if (root.size() == 0) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    if (ec) return IoError("cannot remove " + path + ": " + ec.message());
    return Status::Ok();
  }
  return WriteConfigFile(path, root);
}

bool AutostopByServer() {
  const char* v = std::getenv(kAutostopByServerEnv);
  return v != nullptr && std::string_view(v) == "1";
}

}  // namespace herd::controller
