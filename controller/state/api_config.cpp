#include "controller/state/api_config.hpp"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>

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

Status SaveApiConfig(const ApiConfig& config) {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "api_server" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "endpoint" << YAML::Value << config.endpoint;
  out << YAML::Key << "token" << YAML::Value << config.token;
  if (!config.ca_cert.empty()) out << YAML::Key << "ca_cert" << YAML::Value << config.ca_cert;
  out << YAML::EndMap << YAML::EndMap;
  HERD_RETURN_IF_ERROR(EnsureDir(HerdHome()));
  return WriteFileAtomic(ApiConfigPath(), std::string(out.c_str()) + "\n", 0600);
}

Status ClearApiConfig() {
  std::error_code ec;
  std::filesystem::remove(ApiConfigPath(), ec);
  if (ec) return IoError("cannot remove " + ApiConfigPath() + ": " + ec.message());
  return Status::Ok();
}

}  // namespace herd::controller
