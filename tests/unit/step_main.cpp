// The job-process supervisor as a program of its own, for tests of the launcher.
#include "agent/process/step.hpp"

int main(int argc, char** argv) { return herd::agent::RunStep(argc, argv); }
