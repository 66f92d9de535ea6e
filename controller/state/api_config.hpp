// Which API server this CLI talks to (`herd api login`): its endpoint, the user's token and the CA
// its certificate chains to, kept in <herd home>/config.yaml (0600). HERD_API_SERVER,
// HERD_API_TOKEN and HERD_API_CA_CERT override the file; HERD_API_SERVER=local forces local mode
// (the server sets it for the commands it runs).
#pragma once

#include <optional>
#include <string>

#include "shared/common/status.hpp"

namespace herd::controller {

struct ApiConfig {
  std::string endpoint;  // "https://HOST:PORT"
  std::string token;
  std::string ca_cert;  // "" : the system's trust store
};

// <herd home>/config.yaml
std::string ApiConfigPath();

// The server to use, or nullopt for local mode. An unreadable or malformed file is an error that
// names it (file:line:col).
Result<std::optional<ApiConfig>> LoadApiConfig();
// Writes the api_server section (file 0600); the file's other sections (aws:) stay as they are.
Status SaveApiConfig(const ApiConfig& config);
// Back to local mode: the file's api_server section is removed, the others stay (the file goes
// when nothing else is in it). OK when there was none.
Status ClearApiConfig();

// Set to "1" by a team server in the environment of every herd it runs for a user: that server
// stops (or tears down) the user's cloud clusters once their heads report their autostop due
// (`herd _autostop-sweep`), so no cloud key goes to a head.
inline constexpr char kAutostopByServerEnv[] = "HERD_AUTOSTOP_BY_SERVER";
// Whether kAutostopByServerEnv is "1" in this process.
bool AutostopByServer();

}  // namespace herd::controller
