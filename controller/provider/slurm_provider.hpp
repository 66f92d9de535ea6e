// The `slurm` provider: a herd cluster is one long-lived Slurm allocation on a cluster of
// ~/.slurm/config (slurm_config.hpp). Everything goes through SSH to the cluster's login node:
//
//   Provision  sinfo (the partition exists, has the GRES), then
//              sbatch --parsable --nodes=N --ntasks-per-node=1 [--partition] [--gres=gpu:TYPE:K]
//                     [--cpus-per-task] [--mem] [--time=<partition's limit>] --wait-all-nodes=1
//                     --no-requeue --no-kill   (the batch script on stdin: BatchScript)
//              squeue until RUNNING (limits::kSlurmAllocationWait; otherwise scancel), then
//              scontrol for the nodes and their addresses. Head = the allocation's first node.
//   StartAgents  the herdlet binary and a tar of every node's config and certificates are copied to
//              the login node (~/.herd/slurm/<cluster>-<job>/), then sbcast to every node of the
//              allocation (/tmp/herd-<cluster>-<job>.gN.*: no shared file system needed), the
//              ready marker last. Each call sends the next generation N: the batch script's one
//              step (srun, one task per node) waits for the first marker and runs the newest
//              generation's herdlet on each node. Called again for a kept allocation, it stops
//              the earlier generations' herdlets (srun --overlap; their jobs keep running) and
//              the step starts the new one over the same node directory, which adopts the jobs.
//              The step removes the node's files when it ends.
//   Allocation squeue -j JOB: RUNNING, or how it ended (TIMEOUT, PREEMPTED, CANCELLED, ...).
//   Teardown   scancel, wait until the job left RUNNING/COMPLETING, remove the login node's files.
//   Stop       refused: an allocation cannot be suspended and resumed with its nodes (`herd down`).
//
// The nodes' NodeHandles reach the login node over SSH (ip/port/user/identity_file of the config)
// and carry the compute node's address as internal_ip: the head's forward runs through the login
// node. What the provider recorded lives in <state_dir>/slurm.state.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "controller/provider/provider.hpp"
#include "controller/provider/slurm_config.hpp"
#include "controller/ssh/ssh_runner.hpp"
#include "shared/common/status.hpp"

namespace herd::controller {

// What the task asks of each node.
struct SlurmDemand {
  std::string accelerator;  // "" = none
  double accelerator_count = 0;
  double cpus = 0;       // 0 = Slurm's default
  double memory_gb = 0;  // 0 = Slurm's default
};

// One line of `sinfo -h -o '%P|%l|%G'`, per partition.
struct SlurmPartition {
  std::string name;
  bool is_default = false;
  std::string time_limit;         // sinfo's form ("infinite", "1-00:00:00")
  std::vector<std::string> gres;  // "gpu:L4:2", as sinfo prints them without "(S:...)"
};
// Partitions in sinfo's order; a partition listed on several lines (nodes of several
// configurations) is merged.
std::vector<SlurmPartition> ParseSinfoPartitions(const std::string& sinfo_out);

// The `--gres` value for the demand on `partition` ("gpu:L4:2", the type spelled as the partition
// spells it), "" without accelerators; InvalidArgument naming the partition's GRES when it has no
// such GPU or fewer per node.
Result<std::string> GresFor(const SlurmPartition& partition, const SlurmDemand& demand,
                            const std::string& cluster);

struct SbatchRequest {
  std::string job_name;
  int nodes = 1;
  std::string partition;   // "" = the cluster's default
  std::string gres;        // "" = none
  int cpus_per_task = 0;   // 0 = none asked
  int mem_mb = 0;          // 0 = none asked
  std::string time_limit;  // "" = the partition's default
};
// The sbatch command line run on the login node (the script comes on its stdin).
std::string SbatchCommand(const SbatchRequest& request);
// The allocation's batch script: one srun step, a task per node, that waits for
// <prefix>.ready (at most limits::kSlurmAgentFilesWait), unpacks <prefix>.tar and runs
// <prefix>.herdlet in <prefix>/<slurm node name>, and removes <prefix>* when it ends. `prefix` may
// use $SLURM_JOB_ID.
std::string BatchScript(const std::string& prefix);
// Run on every node of an allocation kept from an earlier launch (srun --overlap) before the
// agents of `generation` can start: SIGTERM to the herdlets of the generations before it (their
// jobs keep running), then waits until none is left (limits::kSlurmAgentStopWait; exit 1 after).
std::string StopEarlierAgentsScript(const std::string& prefix, int generation);

// squeue's state and reason of one job ("RUNNING", "None"); state "" when squeue no longer knows
// the job.
struct SlurmJobState {
  std::string state;
  std::string reason;
  std::string nodelist;
};
SlurmJobState ParseSqueueLine(const std::string& squeue_out);
// Whether the job still holds (or may still get) nodes: PENDING, RUNNING, CONFIGURING,
// COMPLETING, SUSPENDED, ...
bool SlurmJobActive(const std::string& state);

// `scontrol show node -o` output -> (NodeName, NodeAddr) in the output's order.
std::vector<std::pair<std::string, std::string>> ParseScontrolNodes(const std::string& out);

class SlurmProvider : public Provider {
 public:
  // infra: "slurm[/CLUSTER[/PARTITION]]"; config_file "" = ~/.slurm/config.
  SlurmProvider(std::string infra, SlurmDemand demand, std::shared_ptr<SshRunner> ssh,
                std::string config_file = "");

  std::string name() const override { return "slurm"; }
  Result<std::vector<NodeHandle>> Provision(const ProvisionRequest& request) override;
  Status CheckStoppable(const std::string& cluster, const std::string& state_dir) override;
  Status Stop(const std::string& cluster, const std::string& state_dir) override;
  Result<std::vector<NodeHandle>> Start(const std::string& cluster,
                                        const std::string& state_dir) override;
  Status Teardown(const std::string& cluster, const std::string& state_dir) override;
  bool StartsAgents() const override { return true; }
  // tar on the login node, sbcast to every node, and one `srun --overlap` step that unpacks it
  // on each node that does not see the login node's home (a probe file tells).
  Status SpreadFiles(const std::string& cluster, const std::string& state_dir,
                     const std::vector<std::string>& paths) override;
  Status StartAgents(const std::string& cluster, const std::string& state_dir,
                     const std::string& herdlet_path,
                     const std::vector<AgentFiles>& files) override;
  Result<AllocationState> Allocation(const std::string& cluster,
                                     const std::string& state_dir) override;

 private:
  std::string infra_;
  SlurmDemand demand_;
  std::shared_ptr<SshRunner> ssh_;
  std::string config_file_;
};

}  // namespace herd::controller
