#include "agent/core/node_probe.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/gpu/system_gpu_probe.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/unix_time.hpp"

namespace herd::agent {

herd::v1::NodeInfo ProbeNode(const AgentConfig& config, GpuProbe& gpus, bool is_head) {
  herd::v1::NodeInfo n;
  n.set_node_id(config.node_id);
  n.add_addresses(config.address);
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) == 0) n.set_hostname(host);
  n.set_cpus(config.cpus ? *config.cpus : static_cast<int>(std::thread::hardware_concurrency()));
  n.set_memory_bytes(static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE));
  GpuInventory inv = config.gpus ? DeclaredGpus(*config.gpus, config.gpu_name) : gpus.Probe();
  n.set_gpu_count(inv.count());
  for (const auto& name : inv.names) n.add_gpu_names(name);
  n.set_gpu_source(inv.source);
  n.set_is_head(is_head);
  n.set_agent_version(kAgentVersion);
  return n;
}

Result<uint64_t> NextIncarnation(const std::string& state_dir) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) return IoError("cannot create state dir " + state_dir + ": " + ec.message());
  std::string path = state_dir + "/incarnation";
  uint64_t n = 0;
  {
    std::ifstream in(path);
    if (in) in >> n;
  }
  // At least the wall clock in ms: a node whose state dir was lost (a replaced machine) still
  // comes back newer than the incarnation the head persisted for it.
  n = std::max(n + 1, static_cast<uint64_t>(NowUnixMs()));
  // Synced, with its directory: the incarnation fences off an older agent process, so a power
  // failure must not bring back a smaller one.
  HERD_RETURN_IF_ERROR(WriteFileAtomic(path, std::to_string(n) + "\n", 0644));
  return n;
}

Result<std::string> AgentInstanceId(const std::string& state_dir) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  std::string path = state_dir + "/agent-id";
  {
    std::ifstream in(path);
    std::string id;
    if (in >> id && !id.empty()) return id;
  }
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  unsigned char bytes[6] = {0};
  urandom.read(reinterpret_cast<char*>(bytes), sizeof bytes);
  if (!urandom) return IoError("cannot read /dev/urandom");
  static const char* kHex = "0123456789abcdef";
  std::string id;
  for (unsigned char b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  HERD_RETURN_IF_ERROR(WriteFileAtomic(path, id + "\n", 0644));
  return id;
}

}  // namespace herd::agent
