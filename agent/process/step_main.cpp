// herd-step: the job-process supervisor (agent/process/step.hpp) as a program of its own. It is
// linked statically and kept small (no protobuf, Boost or OpenSSL), because one starts for every
// job process: herdlet embeds it (step_program.hpp) and writes it next to its state once per
// version. `herdlet --step` runs the same code and stays the fallback.
#include "agent/process/step.hpp"

int main(int argc, char** argv) { return herd::agent::RunStep(argc, argv); }
