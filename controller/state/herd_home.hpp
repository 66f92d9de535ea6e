// Where the controller keeps its state on the user's machine, and the rule for cluster names
// (they become directory, lock-file and ssh Host names, so the rule is checked everywhere a name
// turns into a path).
#pragma once

#include <string>
#include <string_view>

#include "shared/common/status.hpp"

namespace herd::controller {

// $HERD_HOME (made absolute), else ~/.herd. Created 0700 if missing; a failure to create it is
// logged and surfaces as an error of whatever then tries to use a file under it.
std::string HerdHome();
// $HOME, else the passwd entry's home directory.
std::string UserHome();
// <home>/clusters/<name>: per-cluster files (certs, keys, known_hosts).
std::string ClusterDir(std::string_view cluster);
// <home>/state.db: the ClusterStore file.
std::string StateDbPath();

// 1 to 40 characters of [a-z0-9-], starting with a letter. The message states the rule.
Status ValidateClusterName(std::string_view name);

// mkdir -p with `mode` for the directories it creates (existing ones are left as they are).
Status EnsureDir(const std::string& path, unsigned mode = 0700);

}  // namespace herd::controller
