#include "controller/provider/instance_catalog.hpp"

#include <strings.h>
#include <algorithm>
#include <cmath>

#include "controller/task/resource_values.hpp"

namespace herd::controller {

const std::vector<CatalogEntry>& InstanceCatalog() {
  static const std::vector<CatalogEntry> kCatalog = {
      // name              vCPU  GiB    GPU     n  $/h
      {"p5.48xlarge", 192, 2048, "H100", 8, 98.32},
      {"p4d.24xlarge", 96, 1152, "A100", 8, 32.7726},
      {"p4de.24xlarge", 96, 1152, "A100-80GB", 8, 40.9657},
      {"p3.2xlarge", 8, 61, "V100", 1, 3.06},
      {"p3.8xlarge", 32, 244, "V100", 4, 12.24},
      {"p3.16xlarge", 64, 488, "V100", 8, 24.48},
      {"g6e.xlarge", 4, 32, "L40S", 1, 1.861},
      {"g6e.2xlarge", 8, 64, "L40S", 1, 2.24208},
      {"g6e.12xlarge", 48, 384, "L40S", 4, 10.49264},
      {"g6e.48xlarge", 192, 1536, "L40S", 8, 30.13118},
      {"g6.xlarge", 4, 16, "L4", 1, 0.8048},
      {"g6.2xlarge", 8, 32, "L4", 1, 0.9776},
      {"g6.4xlarge", 16, 64, "L4", 1, 1.3232},
      {"g6.8xlarge", 32, 128, "L4", 1, 2.0144},
      {"g6.12xlarge", 48, 192, "L4", 4, 4.6016},
      {"g6.24xlarge", 96, 384, "L4", 4, 6.6752},
      {"g6.48xlarge", 192, 768, "L4", 8, 13.3504},
      {"g5.xlarge", 4, 16, "A10G", 1, 1.006},
      {"g5.2xlarge", 8, 32, "A10G", 1, 1.212},
      {"g5.4xlarge", 16, 64, "A10G", 1, 1.624},
      {"g5.8xlarge", 32, 128, "A10G", 1, 2.448},
      {"g5.12xlarge", 48, 192, "A10G", 4, 5.672},
      {"g5.24xlarge", 96, 384, "A10G", 4, 8.144},
      {"g5.48xlarge", 192, 768, "A10G", 8, 16.288},
      {"g4dn.xlarge", 4, 16, "T4", 1, 0.526},
      {"g4dn.2xlarge", 8, 32, "T4", 1, 0.752},
      {"g4dn.4xlarge", 16, 64, "T4", 1, 1.204},
      {"g4dn.12xlarge", 48, 192, "T4", 4, 3.912},
      {"g4dn.metal", 96, 384, "T4", 8, 7.824},
      {"m6i.large", 2, 8, "", 0, 0.096},
      {"m6i.xlarge", 4, 16, "", 0, 0.192},
      {"m6i.2xlarge", 8, 32, "", 0, 0.384},
      {"m6i.4xlarge", 16, 64, "", 0, 0.768},
      {"m6i.8xlarge", 32, 128, "", 0, 1.536},
      {"m6i.16xlarge", 64, 256, "", 0, 3.072},
      {"m6i.32xlarge", 128, 512, "", 0, 6.144},
      {"c6i.large", 2, 4, "", 0, 0.085},
      {"c6i.xlarge", 4, 8, "", 0, 0.17},
      {"c6i.2xlarge", 8, 16, "", 0, 0.34},
      {"c6i.4xlarge", 16, 32, "", 0, 0.68},
      {"c6i.8xlarge", 32, 64, "", 0, 1.36},
      {"c6i.16xlarge", 64, 128, "", 0, 2.72},
      {"r6i.large", 2, 16, "", 0, 0.126},
      {"r6i.xlarge", 4, 32, "", 0, 0.252},
      {"r6i.2xlarge", 8, 64, "", 0, 0.504},
      {"r6i.4xlarge", 16, 128, "", 0, 1.008},
      {"r6i.8xlarge", 32, 256, "", 0, 2.016},
  };
  return kCatalog;
}

const CatalogEntry* FindInstanceType(std::string_view name) {
  for (const auto& e : InstanceCatalog()) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

namespace {

bool SameName(std::string_view a, std::string_view b) {
  return a.size() == b.size() && ::strncasecmp(a.data(), b.data(), a.size()) == 0;
}

bool Fits(double have, std::optional<double> want, bool at_least) {
  if (!want) return true;
  return at_least ? have + 1e-9 >= *want : std::fabs(have - *want) < 1e-9;
}

std::string Amount(std::optional<double> v, bool at_least) {
  return task::FormatNumber(*v) + (at_least ? "+" : "");
}

}  // namespace

Result<CatalogEntry> ChooseInstanceType(const InstanceDemand& in) {
  InstanceDemand d = in;
  if (d.accelerator.empty() && !d.cpus && !d.memory_gib) {
    d.cpus = 8;
    d.cpus_at_least = true;
    d.memory_gib = 32;
    d.memory_at_least = true;
  }
  const CatalogEntry* best = nullptr;
  std::vector<std::string> offered;  // "A100:8 (p4d.24xlarge)" for the message
  for (const auto& e : InstanceCatalog()) {
    if (d.accelerator.empty() != e.gpu.empty()) continue;
    if (!d.accelerator.empty()) {
      if (!SameName(e.gpu, d.accelerator)) continue;
      offered.push_back(std::string(e.gpu) + ":" + std::to_string(e.gpu_count) + " (" +
                        std::string(e.name) + ")");
      if (std::fabs(e.gpu_count - d.accelerator_count) > 1e-9) continue;
    }
    if (!Fits(e.vcpus, d.cpus, d.cpus_at_least)) continue;
    if (!Fits(e.memory_gib, d.memory_gib, d.memory_at_least)) continue;
    if (best == nullptr || e.price_per_hour < best->price_per_hour ||
        (e.price_per_hour == best->price_per_hour && e.name < best->name)) {
      best = &e;
    }
  }
  if (best != nullptr) return *best;

  std::string want;
  if (!d.accelerator.empty()) {
    want = d.accelerator + ":" + task::FormatNumber(d.accelerator_count);
  }
  if (d.cpus)
    want += std::string(want.empty() ? "" : ", ") + "cpus=" + Amount(d.cpus, d.cpus_at_least);
  if (d.memory_gib) {
    want += std::string(want.empty() ? "" : ", ") +
            "memory=" + Amount(d.memory_gib, d.memory_at_least) + "GB";
  }
  std::string msg = "no EC2 instance type in herd's catalog has " + want;
  if (!d.accelerator.empty()) {
    if (offered.empty()) {
      std::vector<std::string> gpus;
      for (const auto& e : InstanceCatalog()) {
        if (!e.gpu.empty() && std::find(gpus.begin(), gpus.end(), e.gpu) == gpus.end()) {
          gpus.emplace_back(e.gpu);
        }
      }
      msg += "; GPUs it knows: ";
      for (size_t i = 0; i < gpus.size(); ++i) msg += (i ? ", " : "") + gpus[i];
    } else {
      msg += "; it offers ";
      for (size_t i = 0; i < offered.size(); ++i) msg += (i ? ", " : "") + offered[i];
    }
  }
  return InvalidArgument(msg + "; set resources.instance_type to use another EC2 type as is");
}

}  // namespace herd::controller
