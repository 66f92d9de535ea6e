// Small file helpers of herd_cstate (internal to the library).
#pragma once

#include <optional>
#include <string>

#include "shared/common/status.hpp"

namespace herd::controller::internal {

// Writes `content` to `path` through a temporary file in the same directory and rename(2), so a
// reader sees the old or the new file, never half of one. The file gets `mode`.
Status WriteFileAtomic(const std::string& path, const std::string& content, unsigned mode);
// nullopt if the file does not exist.
Result<std::optional<std::string>> ReadFileIfExists(const std::string& path);

}  // namespace herd::controller::internal
