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
// The same for a process that runs one command after another (`herd _serve`): the parser holds
// only the command the first word names (all of them when it names none, or when --help-all asks
// for every command's help). Building the parser of every command is most of what a read
// otherwise costs such a process; the command's output, exit code and errors are the same.
int RunOneCommandArgs(std::vector<std::string> args, std::ostream& out, std::ostream& err);

}  // namespace herd::controller
