// Small bounded TCP helpers for the SSH layer.
#pragma once

#include <chrono>
#include <string>

#include "shared/common/status.hpp"

namespace herd::controller {

// Connects to host:port (IPv4 or IPv6 literal, or a name) and reads until the server's
// identification line starts with "SSH-", all within timeout. OK means an SSH server answers;
// the error says what was seen instead (refused, timed out, a non-SSH greeting).
Status ProbeSshBanner(const std::string& host, int port, std::chrono::milliseconds timeout);

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close).
Result<int> PickFreeLocalPort();

}  // namespace herd::controller
