// What the API server and its warm workers (`herd _serve`, controller/cli/serve.cpp) say to each
// other over the socket between them: the server writes one request, a JSON object on one line
// ({"args": [the verb and its words]}); the worker answers with frames (stream_frames.hpp): 'O'
// and 'E' for the command's output, then 'X' with its exit code. One command at a time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "shared/common/status.hpp"

namespace herd::server {

// Whether a command's words (verb first) are a read a warm worker runs: status, queue, nodes,
// logs --no-follow and jobs queue, with nothing after `--`.
bool IsWarmRead(const std::vector<std::string>& args);

std::string EncodeWarmRequest(const std::vector<std::string>& args);  // with its '\n'
// The words of one request line (without its '\n'); InvalidArgument for anything else, or for a
// command that IsWarmRead refuses.
Result<std::vector<std::string>> DecodeWarmRequest(std::string_view line);

// Writes all of bytes to the socket fd (no SIGPIPE when the other end is gone); false when it
// could not.
bool SendAll(int fd, std::string_view bytes);

}  // namespace herd::server
