#include "agent/core/process_key.hpp"

namespace herd::agent {

std::string ProcessKeyString(const herd::v1::ProcessKey& key) {
  return "job" + std::to_string(key.job_id()) + ".a" + std::to_string(key.attempt()) +
         (key.kind() == herd::v1::PROCESS_KIND_SETUP ? ".setup.r" : ".run.r") +
         std::to_string(key.rank());
}

std::string JobGroupName(int64_t job_id, int32_t attempt) {
  return "job" + std::to_string(job_id) + "-a" + std::to_string(attempt);
}

}  // namespace herd::agent
