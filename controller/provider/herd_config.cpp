#include "controller/provider/herd_config.hpp"

#include <cstdlib>
#include <filesystem>

namespace herd::controller {

namespace fs = std::filesystem;

std::string DefaultHerdConfigFile() {
  if (const char* h = std::getenv("HERD_HOME"); h && *h) {
    return (fs::absolute(h) / "config.yaml").string();
  }
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.herd/config.yaml";
}

Result<YAML::Node> LoadHerdConfigYaml(const std::string& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return YAML::Node();
  try {
    return YAML::LoadFile(file);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(file + ":" + std::to_string(e.mark.line + 1) + ":" +
                           std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
}

}  // namespace herd::controller
