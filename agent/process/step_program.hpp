// herd-step, the supervisor program (step_main.cpp), as herdlet carries it: its bytes are part of
// herdlet's image (made by agent/process/embed_step.cmake), and the agent writes them to a file of
// their own at start, so that a launch still uploads one file per node. The file is named by the
// program's hash, so agents of different versions on one node never overwrite a program that a
// running supervisor executes.
#pragma once

#include <string>
#include <string_view>

#include "shared/common/status.hpp"

namespace herd::agent {

struct EmbeddedProgram {
  std::string_view bytes;
  std::string_view sha256;  // hex, of bytes
};

// The herd-step built with this herdlet (in the herd_step_blob library).
EmbeddedProgram EmbeddedStepProgram();

// Makes `dir`/herd-step-<first 16 hex digits of the hash> hold `program` (written atomically,
// mode 0755, unless a file there already holds exactly these bytes), removes the other herd-step-*
// files in `dir` (a supervisor that still runs one keeps its copy: the kernel holds it until it
// exits) and returns its absolute path. An error when it cannot be written, or cannot be executed
// there (a noexec mount): the caller then falls back to `herdlet --step`.
Result<std::string> InstallStepProgram(const std::string& dir, const EmbeddedProgram& program);

}  // namespace herd::agent
