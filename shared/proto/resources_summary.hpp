// The one-line summary of a task's resources that users see, in SkyPilot's form.
#pragma once

#include <string>

#include "herd/v1/common.pb.h"

namespace herd::proto {

// "2x(gpus=L4:4, cpus=4+, mem=32GB)": the node count, then the accelerator (NAME:COUNT, a
// count of 0 meaning one, as the scheduler reads it), the CPUs ("+" for at least) and the memory,
// each only when requested. A task that asks for neither accelerators nor CPUs shows the default
// CPU demand (limits::kDefaultTaskCpus), which is what it gets. The same text in `herd status`,
// `herd queue`, `herd jobs queue` and `herd check`, so that one task reads the same everywhere.
std::string ResourcesSummary(const herd::v1::ResourceRequest& resources, int num_nodes);
std::string ResourcesSummary(const herd::v1::TaskSpec& spec);

}  // namespace herd::proto
