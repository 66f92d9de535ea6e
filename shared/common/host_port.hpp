// "host:port" addresses as given on command lines and in configs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "shared/common/status.hpp"

namespace herd {

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// "host:port" or "[v6]:port"; the error names the field (a flag or a config key).
Result<HostPort> ParseHostPort(std::string_view text, std::string_view field);

}  // namespace herd
