#include "shared/proto/resources_summary.hpp"

#include <doctest/doctest.h>

namespace herd::proto {
namespace {

herd::v1::TaskSpec Spec(int nodes) {
  herd::v1::TaskSpec spec;
  spec.set_num_nodes(nodes);
  return spec;
}

TEST_CASE("ResourcesSummary of a spec: what was asked for, in SkyPilot's form") {
  auto spec = Spec(2);
  auto* r = spec.mutable_resources();
  r->set_accelerator("L4");
  r->set_accelerator_count(4);
  r->set_cpus(4);
  CHECK(ResourcesSummary(spec) == "2x(gpus=L4:4, cpus=4)");
  r->set_cpus_at_least(true);
  r->set_memory_gb(32);
  r->set_memory_at_least(true);
  CHECK(ResourcesSummary(spec) == "2x(gpus=L4:4, cpus=4+, mem=32GB+)");
  r->set_accelerator_count(0.5);
  r->clear_cpus();
  r->clear_memory_gb();
  CHECK(ResourcesSummary(spec) == "2x(gpus=L4:0.5)");
  r->clear_accelerator_count();  // "--gpus L4": one, as the scheduler reads it
  CHECK(ResourcesSummary(spec) == "2x(gpus=L4:1)");
}

TEST_CASE("ResourcesSummary of a spec without requests shows the default CPU demand") {
  CHECK(ResourcesSummary(Spec(1)) == "1x(cpus=0.5)");
  CHECK(ResourcesSummary(Spec(0)) == "1x(cpus=0.5)");  // unset: one node
  auto spec = Spec(3);
  spec.mutable_resources()->set_memory_gb(16);
  CHECK(ResourcesSummary(spec) == "3x(cpus=0.5, mem=16GB)");
}

}  // namespace
}  // namespace herd::proto
