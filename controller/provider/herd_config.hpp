// herd's own config file (~/.herd/config.yaml): where it is, and its YAML for each section's
// reader (aws: in aws_provider, local: in local_provider, prices: in the optimizer's infra).
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include "shared/common/status.hpp"

namespace herd::controller {

// $HERD_HOME/config.yaml (HERD_HOME made absolute), or $HOME/.herd/config.yaml.
std::string DefaultHerdConfigFile();
// The YAML of herd's config file: a null node when `file` does not exist; a parse error names
// "file:line:col".
Result<YAML::Node> LoadHerdConfigYaml(const std::string& file);

}  // namespace herd::controller
