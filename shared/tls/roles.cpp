#include "shared/tls/roles.hpp"

namespace herd::tls {

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kAgent:
      return "agent";
    case Role::kClient:
      return "client";
    case Role::kUnknown:
      break;
  }
  return "unknown";
}

}  // namespace herd::tls
