// herdlet: the on-node agent. All logic lives in agent/core; this only parses the command line.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <string_view>

#include "agent/container/node_container.hpp"
#include "agent/core/agentd.hpp"
#include "agent/core/node_probe.hpp"
#include "agent/gpu/system_gpu_probe.hpp"
#include "agent/process/step.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace {
// --ready-fd: a herdlet that hangs before it is ready must not hold its starter forever.
extern "C" void NotReadyInTime(int) {
  constexpr char kMsg[] = "herdlet: not ready within the start timeout; exiting\n";
  ssize_t ignored = ::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
  (void)ignored;
  ::_exit(1);
}
}  // namespace

int main(int argc, char** argv) {
  // The supervisor of one job process (agent/process/step.hpp), started by the agent itself.
  if (argc > 1 && std::string_view(argv[1]) == "--step") {
    return herd::agent::RunStep(argc - 1, argv + 1);
  }
  // A job process in the node's container, the containers' removal and `herd launch`'s check of
  // the node's runtime (agent/container).
  if (argc > 1 && (std::string_view(argv[1]) == herd::agent::kContainerRunFlag ||
                   std::string_view(argv[1]) == herd::agent::kContainerRemoveFlag ||
                   std::string_view(argv[1]) == herd::kContainerCheckFlag)) {
    return herd::agent::RunContainerMain(argc - 1, argv + 1);
  }
  CLI::App app{"herdlet: the herd node agent (head or worker role, from its config)"};
  std::string config_path;
  std::string level = "info";
  bool version = false, probe_gpus = false;
  std::string nvml_library = "libnvidia-ml.so.1";
  int ready_fd = -1;
  app.add_option("-c,--config", config_path, "agent config file (YAML)");
  app.add_option("--log-level", level, "debug, info, warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
  app.add_flag("--version", version, "print the version and exit");
  app.add_flag("--probe-gpus", probe_gpus,
               "print the GPUs this node reports (NVML, else nvidia-smi, else procfs) and exit");
  app.add_option("--nvml-library", nvml_library, "with --probe-gpus: the NVML library to dlopen");
  app.add_option("--ready-fd", ready_fd,
                 "write the pid to this descriptor once running (config, certificates, the head's "
                 "listener and the worker in place), then close it; exit if that takes longer "
                 "than the start timeout")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  if (version) {
    std::cout << herd::agent::kAgentVersion << "\n";
    return 0;
  }
  if (probe_gpus) {
    herd::agent::SystemGpuProbe::Options options;
    options.nvml_library = nvml_library;
    herd::agent::SystemGpuProbe probe(options);
    herd::agent::GpuInventory inv = probe.Probe();
    std::cout << "{\"source\":\"" << inv.source << "\",\"count\":" << inv.count() << ",\"names\":[";
    for (int i = 0; i < inv.count(); ++i)
      std::cout << (i ? "," : "") << "\"" << inv.names[i] << "\"";
    std::cout << "]}\n";
    return 0;
  }
  if (config_path.empty()) {
    std::cerr << "herdlet: --config is required\n";
    return 2;
  }
  if (ready_fd >= 0) {
    // Not inherited by the jobs: a job holding it would keep the starter waiting.
    if (::fcntl(ready_fd, F_SETFD, FD_CLOEXEC) != 0) {
      std::cerr << "herdlet: --ready-fd " << ready_fd << ": not an open descriptor\n";
      return 2;
    }
    ::signal(SIGALRM, NotReadyInTime);
    ::alarm(static_cast<unsigned>(
        std::chrono::ceil<std::chrono::seconds>(herd::limits::kAgentStartTimeout).count()));
  }
  using herd::log::Level;
  herd::log::SetLevel(level == "debug"   ? Level::kDebug
                      : level == "warn"  ? Level::kWarn
                      : level == "error" ? Level::kError
                                         : Level::kInfo);
  auto config = herd::agent::LoadAgentConfig(config_path);
  if (!config.ok()) {
    std::cerr << "herdlet: " << config.status().message() << "\n";
    return 2;
  }
  return herd::agent::RunAgent(*config, ready_fd);
}
