// herd: the controller CLI. All logic lives in controller/core.
#include "controller/cli/cli.hpp"

int main(int argc, char** argv) { return herd::controller::RunCli(argc, argv); }
