// A validated task as JSON and back, so a managed job's controller process runs exactly the task
// `herd jobs launch` parsed (its YAML may change or vanish later). Secrets are not part of it:
// they reach the controller in its environment (managed_controller.hpp), never a file.
#pragma once

#include <string>

#include "controller/task/task.hpp"
#include "shared/common/status.hpp"

namespace herd::jobs {

std::string EncodeTask(const task::Task& task);  // task.secrets and task.notes left out
Result<task::Task> DecodeTask(const std::string& json);

}  // namespace herd::jobs
