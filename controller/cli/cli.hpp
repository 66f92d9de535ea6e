// The herd command line. controller/main.cpp only calls RunCli.
#pragma once

namespace herd::controller {

int RunCli(int argc, char** argv);

}  // namespace herd::controller
