// The optimizer: where a task runs and on what, as SkyPilot's optimizer chooses it.
//
// A task's alternatives are its `ordered` or `any_of` candidates (accelerator alternatives such as
// `{A100:8, H100:8}` and lists arrive here as any_of and ordered, task_parser.cpp), else its own
// resources. For each alternative, every infra it may use is enumerated: the one it (or --infra)
// names, else every infra of this machine (Environment, infra.hpp):
//   - local and ssh/<pool>: existing machines whose hardware herd does not inventory. They are
//     candidates of a task that names them; a task that names no infra gets them only when it asks
//     for no accelerator and no instance type (the head refuses a job no node can hold), and local
//     also for accelerators when this machine has NVIDIA GPUs. They cost $0 unless priced
//     (prices: in ~/.herd/config.yaml).
//   - aws, aws/REGION, aws/REGION/ZONE: every catalog row (catalog.hpp) of the region (and zone)
//     that fits: the instance type if one is named, else the accelerator's name (case-insensitive)
//     and count exactly, else CPU types only; cpus/memory "N" exactly, "N+" at least (SkyPilot's
//     AWS default, 8+ vCPUs and 32+ GiB, when a task asks for nothing); disk_size within EBS's
//     limit; use_spot priced at SpotPrice. An instance type the catalog does not list is kept
//     as is, unpriced (EC2 checks it at launch).
// Ranking: usable infra first; for `ordered` the user's order; then the cost of the whole cluster
// (price x nodes; unpriced last), then local < ssh < aws, then the configured AWS region, then
// names. The first candidate is the choice.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "controller/optimizer/catalog.hpp"
#include "controller/optimizer/infra.hpp"
#include "controller/task/task.hpp"
#include "shared/common/status.hpp"

namespace herd::optimizer {

struct Candidate {
  std::string infra;  // what the launch uses: "local", "ssh/p", "aws/us-east-1[/us-east-1a]"
  std::string group;  // the table's grouping: "local", "ssh/p", "aws"
  std::string instance_type;                // "" off clouds
  std::optional<double> vcpus, memory_gib;  // unknown off clouds
  std::string accelerator;                  // "" = none asked
  double accelerator_count = 0;
  bool spot = false;
  std::optional<double> node_price;  // USD per hour for one node; nullopt = not priced
  std::optional<double> cost;        // node_price x nodes
  std::size_t alternative = 0;       // index into Plan::alternatives
  bool usable = true;                // the infra is usable here (Environment)
  bool named = false;                // the task or --infra named this infra
  std::string why_unusable;          // when !usable
};

struct Plan {
  int num_nodes = 1;
  bool ordered = false;  // the alternatives are in the user's order of preference
  std::vector<task::Resources> alternatives;
  std::vector<Candidate> candidates;  // ranked, the choice first
  const Candidate& Chosen() const { return candidates.front(); }
};

struct PlanOptions {
  std::string infra;  // --infra: replaces every alternative's infra ("" = theirs)
  int num_nodes = 0;  // --num-nodes (0 = the task's)
};

// Every candidate, ranked. InvalidArgument when there is none, naming for each alternative what
// is missing (an unknown accelerator names the ones the catalog has); also when the best
// candidate runs on infra that is not usable here and the task did not name it.
Result<Plan> PlanTask(const task::Task& task, const Environment& env, const Catalog& aws,
                      const PlanOptions& options = {});

// The task to launch: its resources become the chosen alternative with the chosen infra (and
// instance type on a cloud); the alternatives are dropped.
task::Task ApplyPlan(const task::Task& task, const Plan& plan);
// The same for any candidate of the plan (failover.hpp tries them one after another).
task::Task ApplyCandidate(const task::Task& task, const Plan& plan, const Candidate& c);

// A pipeline's later task on the cluster its first task gets (`herd launch pipeline.yaml`): the
// reason a cluster made for candidate `c` with `nodes` nodes cannot run `later` (""  when it can).
// It can when the task asks for no more nodes and one of its alternatives asks for no other infra
// than c's and, on a cloud, for an instance that is c's (its type; its accelerators by name and at
// most c's count; at least its vCPUs and memory). On machines that exist (local, SSH, Slurm) what
// the nodes hold is not known before they are reached: the head refuses then what no node holds.
std::string WhyNotFits(const task::Task& later, const Candidate& c, int nodes);

// Keeps the plan's candidates (in order) whose cluster can run every one of `later`;
// InvalidArgument, naming the first task that fits none of them and why, when none is left.
// later[i] is the pipeline's task i + 2 (for the message).
Status KeepCandidatesFor(Plan& plan, const std::vector<const task::Task*>& later);

// SkyPilot's table: "Considered resources (N node(s)):" then INFRA, INSTANCE, vCPUs, Mem(GB),
// GPUS, COST ($/hr), CHOSEN (a check mark on the chosen row), the best row of each alternative
// and infra, the choice first, at most limits::kMaxConsideredRows.
std::string RenderConsidered(const Plan& plan);

// `herd gpus list`: what accelerators the catalog offers where.
struct GpuOffer {
  std::string accelerator;
  double count = 0;
  std::string instance_type;
  double vcpus = 0, memory_gib = 0;
  std::optional<double> price, spot_price;
  std::string region, zone;
};
// filter: "" (all), "NAME" or "NAME:COUNT" (name case-insensitive); infra: "", "aws",
// "aws/REGION". all_regions: every region's row, else the cheapest region per instance type.
// Unknown names are InvalidArgument naming the catalog's accelerators.
Result<std::vector<GpuOffer>> ListGpus(const Catalog& aws, const std::string& filter,
                                       const std::string& infra, bool all_regions);
// Without a filter: GPU, QTY (the counts offered), INFRA; with one: GPU, QTY, INFRA,
// INSTANCE_TYPE, vCPUs, HOST_MEM, HOURLY_PRICE, HOURLY_SPOT_PRICE, REGION.
std::string RenderGpus(const std::vector<GpuOffer>& offers, bool detailed);

}  // namespace herd::optimizer
