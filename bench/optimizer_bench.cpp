// How long `herd launch` spends choosing where a task runs: parsing the built-in AWS catalog
// (every region) and planning tasks over all of it, as launch does on every new cluster.
// Target: limits::kPlanBudget (50 ms) for parse + plan; SkyPilot's optimizer takes seconds
// (skypilot#3159).
//
//   build/bench/optimizer_bench [REPS]
//
// Prints, per task, the median and worst of REPS runs and the median's ratio to the budget;
// exits 1 when a median is over it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "controller/optimizer/catalog.hpp"
#include "controller/optimizer/optimizer.hpp"
#include "controller/task/task.hpp"
#include "shared/common/limits.hpp"

using namespace herd;
using Clock = std::chrono::steady_clock;

namespace {

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Case {
  const char* what;
  const char* yaml;
};

}  // namespace

int main(int argc, char** argv) {
  int reps = argc > 1 ? std::atoi(argv[1]) : 200;
  if (reps < 1) {
    std::fprintf(stderr, "usage: optimizer_bench [REPS >= 1]\n");
    return 2;
  }
  optimizer::Environment env;
  env.local = {"local", true, "bench"};
  env.aws = {"aws", true, "bench"};
  env.aws_region = "us-east-1";
  const Case cases[] = {
      {"any_of {A100:8, H100:8, H200:8, B200:8}, 2 nodes",
       "num_nodes: 2\nresources:\n  accelerators: {A100:8, H100:8, H200:8, B200:8}\n"},
      {"cpus 8+, memory 32+ (CPU types, every region)",
       "resources:\n  infra: aws\n  cpus: 8+\n  memory: 32+\n"},
      {"ordered [L4:1, A10G:1, L40S:1], use_spot",
       "resources:\n  accelerators: [L4:1, A10G:1, L40S:1]\n  use_spot: true\n"},
  };
  const double budget = std::chrono::duration<double, std::milli>(limits::kPlanBudget).count();
  bool over = false;
  std::size_t rows = 0, regions = 0;
  std::printf("%-50s %10s %10s %10s %8s\n", "task (catalog parse + plan)", "median ms", "max ms",
              "cands", "/50ms");
  for (const Case& c : cases) {
    auto task = task::ParseTaskYaml(c.yaml, "bench.yaml");
    if (!task.ok()) {
      std::fprintf(stderr, "%s\n", task.status().message().c_str());
      return 2;
    }
    std::vector<double> times;
    std::size_t candidates = 0;
    for (int i = 0; i < reps; ++i) {
      auto t0 = Clock::now();
      auto catalog =
          optimizer::ParseCatalogCsv(optimizer::BuiltinAwsCatalogCsv(), "<built-in aws.csv>");
      if (!catalog.ok()) {
        std::fprintf(stderr, "%s\n", catalog.status().message().c_str());
        return 2;
      }
      auto plan = optimizer::PlanTask(*task, env, *catalog);
      std::string table = plan.ok() ? optimizer::RenderConsidered(*plan) : "";
      times.push_back(Ms(Clock::now() - t0));
      if (!plan.ok()) {
        std::fprintf(stderr, "%s\n", plan.status().message().c_str());
        return 2;
      }
      candidates = plan->candidates.size();
      rows = catalog->rows.size();
      regions = catalog->Regions().size();
    }
    std::sort(times.begin(), times.end());
    double median = times[times.size() / 2];
    over = over || median > budget;
    std::printf("%-50s %10.3f %10.3f %10zu %8.3f\n", c.what, median, times.back(), candidates,
                median / budget);
  }
  std::printf("catalog: %zu rows, %zu regions; %d runs per task; budget %.0f ms: %s\n", rows,
              regions, reps, budget, over ? "OVER" : "met");
  return over ? 1 : 0;
}
