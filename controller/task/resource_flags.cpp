// The CLI's task flags (--gpus, --cpus, --memory, --name). A resource flag overrides the YAML for
// the task and for every any_of/ordered candidate, as SkyPilot's overrides do.
#include <functional>

#include "controller/task/resource_values.hpp"
#include "controller/task/task.hpp"

namespace herd::task {
namespace {

void ForAll(Resources& r, const std::function<void(Resources&)>& set) {
  set(r);
  for (Resources& c : r.any_of) set(c);
  for (Resources& c : r.ordered) set(c);
}

}  // namespace

Status ApplyAcceleratorFlag(std::string_view value, Resources& r) {
  auto acc = ParseAccelerator(value);
  if (!acc.ok()) {
    return InvalidArgument("--gpus '" + std::string(value) + "': " + acc.status().message());
  }
  ForAll(r, [&](Resources& x) {
    x.accelerator = acc->name;
    x.accelerator_count = acc->count;
  });
  return Status::Ok();
}

Status ApplyCpusFlag(std::string_view value, Resources& r) {
  auto amount = ParseAmount(value, false);
  if (!amount) {
    return InvalidArgument("--cpus '" + std::string(value) +
                           "': expected a positive number or 'N+' (e.g. 8 or 8+)");
  }
  ForAll(r, [&](Resources& x) {
    x.cpus = amount->value;
    x.cpus_at_least = amount->at_least;
  });
  return Status::Ok();
}

Status ApplyMemoryFlag(std::string_view value, Resources& r) {
  auto amount = ParseSize(value);  // the forms resources.memory takes: 32, 32+, 64GB, 1TB
  if (!amount.ok()) {
    return InvalidArgument("--memory '" + std::string(value) +
                           "': expected a positive number of GB or 'N+' (e.g. 32 or 32+)");
  }
  ForAll(r, [&](Resources& x) {
    x.memory_gb = amount->value;
    x.memory_at_least = amount->at_least;
  });
  return Status::Ok();
}

Status ApplyNameFlag(std::string_view value, Task& task) {
  if (Status s = CheckNameSize(value); !s.ok()) return InvalidArgument("--name: " + s.message());
  task.name = std::string(value);
  return Status::Ok();
}

}  // namespace herd::task
