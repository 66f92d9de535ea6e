#include "shared/proto/resources_summary.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <vector>

#include "shared/common/limits.hpp"

namespace herd::proto {
namespace {

// The shortest text that reads back as the same double: "4", "0.5", "2.25".
std::string Number(double value) {
  std::array<char, 64> buf{};
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  if (ec != std::errc()) return "?";
  return std::string(buf.data(), end);
}

}  // namespace

std::string ResourcesSummary(const herd::v1::ResourceRequest& r, int num_nodes) {
  std::vector<std::string> parts;
  if (!r.accelerator().empty()) {
    const double count = r.accelerator_count() > 0 ? r.accelerator_count() : 1;
    parts.push_back("gpus=" + r.accelerator() + ":" + Number(count));
  }
  if (r.cpus() > 0) {
    parts.push_back("cpus=" + Number(r.cpus()) + (r.cpus_at_least() ? "+" : ""));
  } else if (r.accelerator().empty()) {
    parts.push_back("cpus=" + Number(limits::kDefaultTaskCpus));
  }
  if (r.memory_gb() > 0) {
    parts.push_back("mem=" + Number(r.memory_gb()) + "GB" + (r.memory_at_least() ? "+" : ""));
  }
  std::string out = std::to_string(std::max(1, num_nodes)) + "x(";
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
  return out + ")";
}

std::string ResourcesSummary(const herd::v1::TaskSpec& spec) {
  return ResourcesSummary(spec.resources(), spec.num_nodes());
}

}  // namespace herd::proto
