// The CLI's task flags (--gpus, --cpus, --memory, --name). A resource flag overrides the YAML for
// the task and for every any_of/ordered candidate, as SkyPilot's overrides do.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>

#include "controller/task/resource_values.hpp"
#include "controller/task/task.hpp"
#include "shared/common/limits.hpp"

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

void ApplyUseSpotFlag(Resources& r) {
  ForAll(r, [](Resources& x) { x.use_spot = true; });
}

Status ApplyInstanceTypeFlag(std::string_view value, Resources& r) {
  // EC2's names: a family, a dot, a size ("p5.48xlarge", "g6e.xlarge", "u-6tb1.metal").
  const bool ok = !value.empty() && value.size() <= 64 &&
                  value.find('.') != std::string_view::npos &&
                  std::all_of(value.begin(), value.end(), [](char c) {
                    return std::islower(static_cast<unsigned char>(c)) ||
                           std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-';
                  });
  if (!ok) {
    return InvalidArgument("--instance-type '" + std::string(value) +
                           "': expected an instance type such as p5.48xlarge");
  }
  ForAll(r, [&](Resources& x) { x.instance_type = std::string(value); });
  return Status::Ok();
}

Status ApplyImageIdFlag(std::string_view value, Resources& r) {
  Result<std::string> image = ParseContainerImage(value);
  if (!image.ok()) {
    return InvalidArgument("--image-id '" + std::string(value) + "': " + image.status().message());
  }
  ForAll(r, [&](Resources& x) { x.container_image = *image; });
  return Status::Ok();
}

Status ApplyDiskSizeFlag(std::string_view value, Resources& r) {
  auto size = ParseSize(value);
  const std::string flag = "--disk-size '" + std::string(value) + "': ";
  if (!size.ok()) return InvalidArgument(flag + size.status().message());
  if (size->at_least) return InvalidArgument(flag + "a disk has one size: remove the '+'");
  const double gb = std::floor(size->value);  // SkyPilot floors a size with a unit to whole GB
  if (gb < 1 || gb > limits::kMaxTaskDiskSizeGb) {
    return InvalidArgument(flag + "expected from 1 GB to " +
                           std::to_string(limits::kMaxTaskDiskSizeGb) + " GB");
  }
  ForAll(r, [&](Resources& x) { x.disk_size = static_cast<int>(gb); });
  return Status::Ok();
}

Status ApplyPortsFlag(const std::vector<std::string>& values, Resources& r) {
  std::vector<std::string> ports;
  for (const auto& v : values) {
    auto port = ParsePortRange(v);
    if (!port.ok()) return InvalidArgument("--ports '" + v + "': " + port.status().message());
    ports.push_back(*port);
  }
  ForAll(r, [&](Resources& x) { x.ports = ports; });
  return Status::Ok();
}

Status ApplyRegionZoneFlags(std::string_view region, std::string_view zone, Resources& r) {
  if (region.empty() && zone.empty()) return Status::Ok();
  auto name_ok = [](std::string_view s) {
    return !s.empty() && s.size() <= 32 && std::all_of(s.begin(), s.end(), [](char c) {
      return std::islower(static_cast<unsigned char>(c)) ||
             std::isdigit(static_cast<unsigned char>(c)) || c == '-';
    });
  };
  if (!region.empty() && !name_ok(region)) {
    return InvalidArgument("--region '" + std::string(region) +
                           "': expected a region such as "
                           "us-east-1");
  }
  std::string reg(region);
  if (!zone.empty()) {
    // An AWS zone is its region and a letter: us-east-1a.
    const bool zone_ok = name_ok(zone) && zone.size() >= 2 &&
                         std::isalpha(static_cast<unsigned char>(zone.back())) &&
                         std::isdigit(static_cast<unsigned char>(zone[zone.size() - 2]));
    if (!zone_ok) {
      return InvalidArgument("--zone '" + std::string(zone) +
                             "': expected a zone such as "
                             "us-east-1a");
    }
    const std::string_view of = zone.substr(0, zone.size() - 1);
    if (!reg.empty() && of != reg) {
      return InvalidArgument("--zone " + std::string(zone) + " is not in --region " + reg);
    }
    reg = std::string(of);
  }
  Status bad = Status::Ok();
  ForAll(r, [&](Resources& x) {
    const std::string cloud = x.infra.substr(0, x.infra.find('/'));
    if (!cloud.empty() && cloud != "aws" && bad.ok()) {
      bad = InvalidArgument(std::string(zone.empty() ? "--region" : "--zone") +
                            ": only aws has regions and zones; the task's infra is " + x.infra);
      return;
    }
    x.infra = "aws/" + reg + (zone.empty() ? "" : "/" + std::string(zone));
  });
  return bad;
}

Status ApplyWorkdirFlag(std::string_view value, Task& task) {
  std::string dir(value);
  if (dir == "~" || dir.starts_with("~/")) {
    const char* home = std::getenv("HOME");
    dir = std::string(home ? home : "") + dir.substr(1);
  }
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) {
    return InvalidArgument("--workdir '" + std::string(value) + "': not a directory");
  }
  task.workdir = std::filesystem::absolute(dir, ec).lexically_normal().string();
  task.git_workdir.reset();
  return Status::Ok();
}

Status ApplyNameFlag(std::string_view value, Task& task) {
  if (Status s = CheckNameSize(value); !s.ok()) return InvalidArgument("--name: " + s.message());
  task.name = std::string(value);
  return Status::Ok();
}

}  // namespace herd::task
