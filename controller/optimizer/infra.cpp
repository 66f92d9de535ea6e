#include "controller/optimizer/infra.hpp"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>

#include "controller/provider/aws_provider.hpp"
#include "controller/provider/herd_config.hpp"
#include "controller/provider/local_provider.hpp"
#include "controller/provider/slurm_config.hpp"
#include "controller/provider/ssh_pool_provider.hpp"
#include "shared/common/file_util.hpp"

namespace herd::optimizer {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSshd = "/usr/sbin/sshd";

bool Executable(const char* path) { return ::access(path, X_OK) == 0; }

InfraState ProbeLocal() {
  InfraState s{"local", false, ""};
  if (!Executable(kSshd)) {
    s.reason = std::string("needs sshd at ") + kSshd + " (package openssh-server)";
    return s;
  }
  if (::geteuid() != 0) {
    s.usable = true;
    s.reason = "user mode: nodes are sshd processes on loopback addresses (not root)";
    return s;
  }
  for (const char* ip : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (Executable(ip)) {
      s.usable = true;
      s.reason = "root with ip netns: nodes are network namespaces";
      return s;
    }
  }
  s.reason = "root without `ip` (package iproute2): namespace nodes cannot be made";
  return s;
}

}  // namespace

std::vector<InfraState> Environment::All() const {
  std::vector<InfraState> out{local};
  out.insert(out.end(), ssh_pools.begin(), ssh_pools.end());
  out.push_back(aws);
  if (slurm_clusters.empty()) {
    out.push_back({"slurm", false, slurm_note});
  } else {
    out.insert(out.end(), slurm_clusters.begin(), slurm_clusters.end());
  }
  return out;
}

const InfraState* Environment::Find(const std::string& infra) const {
  if (infra == "local") return &local;
  if (infra == "aws" || infra.rfind("aws/", 0) == 0) return &aws;
  for (const auto& p : ssh_pools) {
    if (p.infra == infra) return &p;
  }
  if (controller::IsSlurmInfra(infra)) {
    auto where = controller::ParseSlurmInfra(infra);
    if (!where.ok()) return nullptr;
    for (const auto& c : slurm_clusters) {
      if (where->cluster.empty() || c.infra == "slurm/" + where->cluster) return &c;
    }
  }
  return nullptr;
}

Result<std::map<std::string, double>> LoadInfraPrices(const std::string& file) {
  std::map<std::string, double> out;
  auto where = [&](const YAML::Mark& m) {
    return file + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1) + ": ";
  };
  HERD_ASSIGN_OR_RETURN(YAML::Node root, controller::LoadHerdConfigYaml(file));
  if (!root || !root.IsMap()) return out;
  YAML::Node prices = root["prices"];
  if (!prices || prices.IsNull()) return out;
  if (!prices.IsMap()) {
    return InvalidArgument(where(prices.Mark()) +
                           "prices: expected a mapping of infra: USD per node per hour");
  }
  for (const auto& kv : prices) {
    std::string key = kv.first.Scalar();
    bool known = key == "local" || (key.rfind("ssh/", 0) == 0 && key.size() > 4) ||
                 (key.rfind("slurm/", 0) == 0 && key.size() > 6);
    if (!known) {
      return InvalidArgument(
          where(kv.first.Mark()) + "prices." + key +
          ": only local, ssh/<pool> and slurm/<cluster> are priced here (clouds are priced by "
          "their catalogs)");
    }
    double v = -1;
    try {
      v = kv.second.IsScalar() ? kv.second.as<double>() : -1;
    } catch (const YAML::Exception&) {
      v = -1;
    }
    if (!(v >= 0) || !std::isfinite(v)) {
      return InvalidArgument(where(kv.second.Mark()) + "prices." + key +
                             ": expected a price in USD per node per hour (e.g. 2.5)");
    }
    out[key] = v;
  }
  return out;
}

Result<Environment> ProbeEnvironment(const controller::GetenvFn& getenv,
                                     const std::string& config_file) {
  Environment env;
  env.local = ProbeLocal();
  std::error_code ec;
  env.local_gpus =
      fs::exists("/dev/nvidia0", ec) || (fs::is_directory("/proc/driver/nvidia/gpus", ec) &&
                                         !fs::is_empty("/proc/driver/nvidia/gpus", ec));
  if (env.local_gpus && env.local.usable) env.local.reason += "; NVIDIA GPUs present";

  std::string pools_file = controller::DefaultSshNodePoolsFile();
  auto text = ReadFileIfExists(pools_file);
  if (!text.ok()) {
    env.ssh_pools_note = text.status().message();
  } else if (!*text) {
    env.ssh_pools_note = "no SSH node pools: " + pools_file + " does not exist";
  } else {
    auto pools = controller::ParseSshNodePools(**text, pools_file);
    if (!pools.ok()) {
      env.ssh_pools_note = pools.status().message();
    } else {
      for (const auto& p : *pools) {
        InfraState s{"ssh/" + p.name, !p.hosts.empty(), ""};
        s.reason = p.hosts.empty() ? "pool has no hosts in " + pools_file
                                   : std::to_string(p.hosts.size()) + " host(s) in " + pools_file;
        env.ssh_pools.push_back(std::move(s));
      }
      if (pools->empty()) env.ssh_pools_note = "no SSH node pools in " + pools_file;
    }
  }

  const std::string slurm_file = controller::DefaultSlurmConfigFile();
  auto slurm = controller::LoadSlurmConfig(slurm_file);
  if (!slurm.ok()) {
    env.slurm_note = slurm.status().message();
  } else {
    for (const auto& c : *slurm) {
      env.slurm_clusters.push_back({"slurm/" + c.name, true,
                                    "login node " + (c.user.empty() ? "" : c.user + "@") +
                                        c.hostname + ":" + std::to_string(c.port) + " in " +
                                        slurm_file});
    }
    if (slurm->empty()) env.slurm_note = "no Slurm clusters (no Host line) in " + slurm_file;
  }

  env.aws.infra = "aws";
  auto creds = controller::LoadAwsCredentials(getenv);
  if (creds.ok()) {
    env.aws.usable = true;
    env.aws.reason = "credentials from " + creds->source;
  } else {
    env.aws.reason = creds.status().message();
  }
  auto region = controller::LoadAwsRegion(getenv);
  if (region.ok()) env.aws_region = *region;

  std::string cfg = config_file.empty() ? controller::DefaultHerdConfigFile() : config_file;
  HERD_ASSIGN_OR_RETURN(env.prices, LoadInfraPrices(cfg));
  // The local provider reads its section at provisioning: its mistakes are named here already
  // (`herd check`, and a launch before anything is made), at file:line:col.
  HERD_RETURN_IF_ERROR(controller::LoadLocalConfig(cfg).status());
  return env;
}

}  // namespace herd::optimizer
