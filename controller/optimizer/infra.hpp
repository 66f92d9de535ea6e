// Which infra herd can use on this machine, and why not (`herd check` with no task, and the
// optimizer's candidate list): local (the embedded provider: sshd, plus root and `ip netns` for
// namespace nodes), each SSH node pool of ~/.herd/ssh_node_pools.yaml, each Slurm cluster of
// ~/.slurm/config (controller/provider/slurm_config.hpp), and AWS (credentials found
// by the standard chain; nothing is sent to AWS). Also the per-node prices of infra that the
// user prices themselves, from the `prices:` section of ~/.herd/config.yaml:
//
//   prices:            # USD per node per hour; local and ssh/<pool> are $0 when not listed
//     local: 0.0
//     ssh/lab-a100: 2.5
#pragma once

#include <map>
#include <string>
#include <vector>

#include "controller/provider/aws_credentials.hpp"
#include "shared/common/status.hpp"

namespace herd::optimizer {

struct InfraState {
  std::string infra;  // "local", "ssh/<pool>", "aws"
  bool usable = false;
  std::string reason;  // what was found ("root with ip netns") or what is missing
};

struct Environment {
  InfraState local;
  // This machine has NVIDIA GPUs (/dev/nvidia0 or /proc/driver/nvidia/gpus/*): local nodes then
  // also stand for tasks that ask for accelerators (the head checks the type and count).
  bool local_gpus = false;
  std::vector<InfraState> ssh_pools;  // in the pools file's order; empty without a file
  std::string ssh_pools_note;         // why there are none ("no file ~/.herd/ssh_node_pools.yaml")
  InfraState aws;
  // Each cluster of ~/.slurm/config ("slurm/<cluster>"), in the file's order; usable when listed
  // (whether its login node answers is found at launch: nothing is sent here).
  std::vector<InfraState> slurm_clusters;
  std::string slurm_note;  // why there are none ("no file ~/.slurm/config")
  std::string aws_region;  // the configured region ("" = none): preferred among equal prices
  std::map<std::string, double> prices;  // infra -> USD per node per hour (prices:)

  // Every infra in the order `herd check` lists them.
  std::vector<InfraState> All() const;
  // The state of "local", "ssh/<pool>", "aws..." or "slurm[/<cluster>[/<partition>]]" (nullptr for
  // an infra herd does not know).
  const InfraState* Find(const std::string& infra) const;
};

// Probes this machine: files and the environment only, no process started, nothing sent.
// config_file "" = ~/.herd/config.yaml; a malformed prices section is an error naming
// file:line:col.
Result<Environment> ProbeEnvironment(const controller::GetenvFn& getenv = controller::SystemGetenv,
                                     const std::string& config_file = "");

// The `prices:` section of config.yaml (empty when the file or section is absent).
Result<std::map<std::string, double>> LoadInfraPrices(const std::string& config_file);

}  // namespace herd::optimizer
