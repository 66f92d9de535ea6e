#include "shared/common/host_port.hpp"

#include <charconv>

namespace herd {

Result<HostPort> ParseHostPort(std::string_view text, std::string_view field) {
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return InvalidArgument(std::string(field) + ": expected HOST:PORT, got '" + std::string(text) +
                           "'");
  }
  std::string_view host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::string_view port_text = text.substr(colon + 1);
  unsigned port = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port > 65535) {
    return InvalidArgument(std::string(field) + ": bad port '" + std::string(port_text) + "' in '" +
                           std::string(text) + "'");
  }
  return HostPort{std::string(host), static_cast<uint16_t>(port)};
}

}  // namespace herd
