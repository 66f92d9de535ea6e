// The herd command line. controller/main.cpp only calls RunCli.
#pragma once

#include "herd/v1/common.pb.h"

namespace herd::controller {

int RunCli(int argc, char** argv);
bool IsTerminalState(herd::v1::JobState state);

}  // namespace herd::controller
