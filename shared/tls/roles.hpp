// What a certificate lets its holder be (its role) and the files a TLS endpoint of herd reads. Both
// the certificate code (certs.hpp) and the transport (shared/transport) use these; neither
// includes the other's header for them.
#pragma once

#include <string>
#include <string_view>

namespace herd::tls {

// The role a certificate carries in its subject OU (certs.hpp): an agent serves and dials, a client
// only dials.
enum class Role { kUnknown = 0, kAgent = 1, kClient = 2 };
std::string_view RoleName(Role role);

// Certificate files: the cluster CA and this side's certificate and private key (PEM).
struct TlsFiles {
  std::string ca_cert;
  std::string cert;
  std::string key;
};

// File names of a certificate directory: a cluster's (ca.crt, ca.key, client.*) on the controller,
// a node's (ca.crt, agent.*) on the node.
inline constexpr std::string_view kCaCertFile = "ca.crt";
inline constexpr std::string_view kCaKeyFile = "ca.key";
inline constexpr std::string_view kClientCertFile = "client.crt";
inline constexpr std::string_view kClientKeyFile = "client.key";
inline constexpr std::string_view kAgentCertFile = "agent.crt";
inline constexpr std::string_view kAgentKeyFile = "agent.key";

}  // namespace herd::tls
