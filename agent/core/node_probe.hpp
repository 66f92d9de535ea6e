// What a node tells the head about itself, and the agent's incarnation counter.
#pragma once

#include "agent/core/agent_config.hpp"
#include "agent/gpu/gpu_probe.hpp"
#include "herd/v1/common.pb.h"
#include "shared/common/status.hpp"

namespace herd::agent {

inline constexpr const char* kAgentVersion = "0.1.0";

// CPUs, memory, hostname and GPUs (declared capacity in the config wins over detection).
herd::v1::NodeInfo ProbeNode(const AgentConfig& config, GpuProbe& gpus, bool is_head);

// Reads state_dir/incarnation, adds one (at least the wall clock in ms, so a lost state dir does
// not go back) and writes it back atomically, so every agent start has a higher number than the
// last and the head (which persists it) can fence out a stale agent.
Result<uint64_t> NextIncarnation(const std::string& state_dir);

// A random id made on the node's first start and kept in state_dir/agent-id. Processes of all
// agents on one machine share /proc; the id keeps each agent's kill sweeps to its own jobs, even
// for two clusters of the same name.
Result<std::string> AgentInstanceId(const std::string& state_dir);

}  // namespace herd::agent
