// The herd command line. controller/main.cpp only calls RunCli.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace herd::controller {

int RunCli(int argc, char** argv);

// The same for the words after the program's name, with the command's output going to out and
// err: `herd _serve`, the API server's warm worker, runs read commands so, one after another.
int RunCliArgs(std::vector<std::string> args, std::ostream& out, std::ostream& err);

}  // namespace herd::controller
