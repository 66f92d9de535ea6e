// herd's built-in catalog of EC2 instance types (GPU families p5, p4d, p4de, p3, g6e, g6, g5,
// g4dn and the general-purpose m6i/c6i/r6i) and the choice of one for a task's resources, as
// SkyPilot's catalog does it: the accelerator name (case-insensitive) and count must match
// exactly; cpus/memory "N" mean exactly N, "N+" at least N; the cheapest match wins (on-demand
// price in us-east-1, ties by name). Without accelerators only CPU types are considered, and a
// task that asks for nothing gets SkyPilot's AWS default of 8+ vCPUs and 32+ GiB (m6i.2xlarge).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/common/status.hpp"

namespace herd::controller {

struct CatalogEntry {
  std::string_view name;  // "p4d.24xlarge"
  int vcpus;
  double memory_gib;
  std::string_view gpu;  // "A100"; "" for CPU types
  int gpu_count;
  double price_per_hour;  // on-demand USD, us-east-1
};

const std::vector<CatalogEntry>& InstanceCatalog();
const CatalogEntry* FindInstanceType(std::string_view name);

struct InstanceDemand {
  std::string accelerator;  // "" = none
  double accelerator_count = 0;
  std::optional<double> cpus;
  bool cpus_at_least = false;
  std::optional<double> memory_gib;
  bool memory_at_least = false;
};

// The chosen type, or InvalidArgument that says what the catalog offers for that accelerator
// (or that it has none) and that `instance_type` takes any EC2 type as is.
Result<CatalogEntry> ChooseInstanceType(const InstanceDemand& demand);

}  // namespace herd::controller
