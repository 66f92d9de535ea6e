#include "shared/transport/transport.hpp"

namespace herd::transport {

std::string_view PathForRole(Role role) {
  switch (role) {
    case Role::kAgent:
      return "/v1/agent";
    case Role::kClient:
      return "/v1/client";
    case Role::kUnknown:
      break;
  }
  // No path accepts a certificate without a role.
  return "/v1/none";
}

}  // namespace herd::transport
