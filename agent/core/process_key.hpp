// Names of a job's processes that the head and the worker agree on.
#pragma once

#include <cstdint>
#include <string>

#include "herd/v1/common.pb.h"

namespace herd::agent {

// "job3.a1.run.r0": a stable name for a process key (map keys, log messages).
std::string ProcessKeyString(const herd::v1::ProcessKey& key);
// The kill group of every process of (job, attempt).
std::string JobGroupName(int64_t job_id, int32_t attempt);

}  // namespace herd::agent
