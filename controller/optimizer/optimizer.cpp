#include "controller/optimizer/optimizer.hpp"

#include <strings.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "controller/core/table.hpp"
#include "controller/provider/aws_provider.hpp"
#include "controller/provider/slurm_config.hpp"
#include "controller/task/resource_values.hpp"
#include "shared/common/limits.hpp"

namespace herd::optimizer {

namespace {

using task::FormatNumber;
using task::Resources;

bool SameName(std::string_view a, std::string_view b) {
  return a.size() == b.size() && ::strncasecmp(a.data(), b.data(), a.size()) == 0;
}

bool Fits(double have, std::optional<double> want, bool at_least) {
  if (!want) return true;
  return at_least ? have + 1e-9 >= *want : std::fabs(have - *want) < 1e-9;
}

std::string Amount(double v, bool at_least) { return FormatNumber(v) + (at_least ? "+" : ""); }

std::string Money(std::optional<double> v) {
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", *v);
  return buf;
}

std::string Gpus(const std::string& name, double count) {
  return name.empty() ? "-" : name + ":" + FormatNumber(count);
}

// What one alternative asks, in words: "A100:8, cpus=8+".
std::string Wants(const Resources& r) {
  std::vector<std::string> parts;
  if (!r.instance_type.empty()) parts.push_back(r.instance_type);
  if (!r.accelerator.empty()) parts.push_back(Gpus(r.accelerator, r.accelerator_count));
  if (r.cpus) parts.push_back("cpus=" + Amount(*r.cpus, r.cpus_at_least));
  if (r.memory_gb) parts.push_back("memory=" + Amount(*r.memory_gb, r.memory_at_least) + "GB");
  if (r.disk_size) parts.push_back("disk_size=" + std::to_string(*r.disk_size));
  if (r.use_spot) parts.push_back("use_spot");
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out.empty() ? "no particular resources" : out;
}

std::string Join(const std::vector<std::string>& v, const std::string& sep = ", ") {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

int GroupOrder(const std::string& group) {
  if (group == "local") return 0;
  if (group.rfind("ssh/", 0) == 0) return 1;
  return 2;
}

struct Enumerator {
  const Environment& env;
  const Catalog& aws;
  int nodes;
  std::vector<Candidate>& out;
  std::vector<std::string>& why_not;  // per alternative, why it has no candidate somewhere

  double PriceOf(const std::string& infra) const {
    auto it = env.prices.find(infra);
    return it == env.prices.end() ? 0.0 : it->second;
  }

  void Existing(const InfraState& s, const Resources& r, std::size_t alt, bool named) {
    Candidate c;
    c.infra = s.infra;
    c.group = s.infra;
    c.accelerator = r.accelerator;
    c.accelerator_count = r.accelerator_count;
    c.node_price = PriceOf(s.infra);
    c.cost = *c.node_price * nodes;
    c.alternative = alt;
    c.usable = s.usable;
    c.named = named;
    if (!s.usable) c.why_unusable = s.reason;
    out.push_back(std::move(c));
  }

  Status Aws(const Resources& r, std::size_t alt, const std::string& infra, bool named) {
    std::string region, zone;
    if (!infra.empty()) {
      HERD_ASSIGN_OR_RETURN(auto spec, controller::ParseAwsInfra(infra));
      region = spec.region;
      zone = spec.zone;
    }
    std::optional<double> cpus = r.cpus, mem = r.memory_gb;
    bool cpus_at_least = r.cpus_at_least, mem_at_least = r.memory_at_least;
    if (r.accelerator.empty() && r.instance_type.empty() && !cpus && !mem) {
      cpus = 8;  // SkyPilot's AWS default: m6i.2xlarge-sized
      cpus_at_least = true;
      mem = 32;
      mem_at_least = true;
    }
    if (r.disk_size && *r.disk_size > limits::kMaxAwsDiskGb) {
      why_not.push_back("aws: disk_size " + std::to_string(*r.disk_size) + " GB is over EBS's " +
                        std::to_string(limits::kMaxAwsDiskGb) + " GB volume limit");
      return Status::Ok();
    }
    bool type_known = false, acc_known = false;
    std::set<std::string> counts;  // "A100:8" offered, for the message
    std::size_t before = out.size();
    for (const CatalogRow& row : aws.rows) {
      if (!r.instance_type.empty()) {
        if (row.instance_type != r.instance_type) continue;
        type_known = true;
      }
      if (!r.accelerator.empty()) {
        if (!SameName(row.accelerator, r.accelerator)) continue;
        acc_known = true;
        counts.insert(Gpus(row.accelerator, row.accelerator_count));
        if (std::fabs(row.accelerator_count - r.accelerator_count) > 1e-9) continue;
      } else if (r.instance_type.empty() && !row.accelerator.empty()) {
        continue;
      }
      if (!region.empty() && row.region != region) continue;
      if (!zone.empty() && !row.zone.empty() && row.zone != zone) continue;
      if (!Fits(row.vcpus, cpus, cpus_at_least) || !Fits(row.memory_gib, mem, mem_at_least)) {
        continue;
      }
      Candidate c;
      std::string z = !row.zone.empty() ? row.zone : zone;
      c.infra = "aws/" + row.region + (z.empty() ? "" : "/" + z);
      c.group = "aws";
      c.instance_type = row.instance_type;
      c.vcpus = row.vcpus;
      c.memory_gib = row.memory_gib;
      c.accelerator = row.accelerator;
      c.accelerator_count = row.accelerator_count;
      c.spot = r.use_spot;
      c.node_price = r.use_spot ? row.spot_price : row.price;
      if (c.node_price) c.cost = *c.node_price * nodes;
      c.alternative = alt;
      c.usable = env.aws.usable;
      c.named = named;
      if (!c.usable) c.why_unusable = env.aws.reason;
      out.push_back(std::move(c));
    }
    if (out.size() > before) return Status::Ok();
    std::string where = region.empty() ? "" : " in " + region + (zone.empty() ? "" : "/" + zone);
    if (!r.instance_type.empty() && !type_known) {
      // A type the catalog does not list: used as is, unpriced; EC2 says whether it exists.
      Candidate c;
      std::string reg = !region.empty() ? region : env.aws_region;
      c.infra = reg.empty() ? "aws" : "aws/" + reg + (zone.empty() ? "" : "/" + zone);
      c.group = "aws";
      c.instance_type = r.instance_type;
      c.accelerator = r.accelerator;
      c.accelerator_count = r.accelerator_count;
      c.spot = r.use_spot;
      c.alternative = alt;
      c.usable = env.aws.usable;
      c.named = named;
      if (!c.usable) c.why_unusable = env.aws.reason;
      out.push_back(std::move(c));
      return Status::Ok();
    }
    if (!r.accelerator.empty() && !acc_known) {
      why_not.push_back("unknown accelerator '" + r.accelerator + "': the AWS catalog (" +
                        aws.source + ") has " + Join(aws.Accelerators()));
    } else if (!r.accelerator.empty() && !counts.count(Gpus(r.accelerator, r.accelerator_count))) {
      why_not.push_back("aws offers " + r.accelerator + " only as " +
                        Join({counts.begin(), counts.end()}));
    } else {
      why_not.push_back("no AWS instance type has " + Wants(r) + where);
    }
    return Status::Ok();
  }
};

bool IsAwsInfra(const std::string& infra) { return infra == "aws" || infra.rfind("aws/", 0) == 0; }

}  // namespace

Result<Plan> PlanTask(const task::Task& task, const Environment& env, const Catalog& aws,
                      const PlanOptions& o) {
  Plan plan;
  plan.num_nodes = o.num_nodes > 0 ? o.num_nodes : task.num_nodes;
  const Resources& top = task.resources;
  plan.ordered = !top.ordered.empty();
  if (!top.ordered.empty()) {
    plan.alternatives = top.ordered;
  } else if (!top.any_of.empty()) {
    plan.alternatives = top.any_of;
  } else {
    plan.alternatives = {top};
  }
  if (plan.alternatives.size() > limits::kMaxResourceAlternatives) {
    return InvalidArgument("the task gives " + std::to_string(plan.alternatives.size()) +
                           " resource alternatives; at most " +
                           std::to_string(limits::kMaxResourceAlternatives));
  }
  std::vector<std::string> problems;
  for (std::size_t alt = 0; alt < plan.alternatives.size(); ++alt) {
    const Resources& r = plan.alternatives[alt];
    std::vector<std::string> why_not;
    Enumerator e{env, aws, plan.num_nodes, plan.candidates, why_not};
    const std::string infra = !o.infra.empty() ? o.infra : r.infra;
    if (infra.empty()) {
      // Existing machines only for what herd cannot check there (the head refuses what no node
      // holds): tasks without accelerators or an instance type; this machine also for
      // accelerators when it has GPUs.
      bool plain = r.accelerator.empty() && r.instance_type.empty();
      if (plain || (env.local_gpus && r.instance_type.empty()))
        e.Existing(env.local, r, alt, false);
      if (plain) {
        for (const auto& p : env.ssh_pools) e.Existing(p, r, alt, false);
      }
      HERD_RETURN_IF_ERROR(e.Aws(r, alt, "", false));
    } else if (infra == "local") {
      e.Existing(env.local, r, alt, true);
    } else if (infra == "ssh" || (infra.rfind("ssh/", 0) == 0 && infra.size() > 4)) {
      bool any = false;
      for (const auto& p : env.ssh_pools) {
        if (infra == "ssh" || p.infra == infra) {
          e.Existing(p, r, alt, true);
          any = true;
        }
      }
      if (!any && infra != "ssh") {
        // Not in the pools file (or no file): the ssh provider says what is wrong at launch.
        e.Existing(
            InfraState{infra, false,
                       env.ssh_pools_note.empty() ? "no pool " + infra.substr(4) + " is configured"
                                                  : env.ssh_pools_note},
            r, alt, true);
      } else if (!any) {
        why_not.push_back("ssh: " + (env.ssh_pools_note.empty() ? std::string("no SSH node pools")
                                                                : env.ssh_pools_note));
      }
    } else if (IsAwsInfra(infra)) {
      HERD_RETURN_IF_ERROR(e.Aws(r, alt, infra, true));
    } else if (controller::IsSlurmInfra(infra)) {
      // A Slurm cluster of ~/.slurm/config (the first for plain `slurm`), its partition kept;
      // sinfo at launch says whether the partition has the GPUs.
      HERD_ASSIGN_OR_RETURN(auto where, controller::ParseSlurmInfra(infra));
      const InfraState* s = env.Find(infra);
      InfraState named = s ? *s : InfraState{infra, false, env.slurm_note};
      if (s == nullptr && !where.cluster.empty() && !env.slurm_clusters.empty()) {
        named.reason = "no Slurm cluster " + where.cluster + " in ~/.slurm/config";
      }
      if (s != nullptr && !where.partition.empty()) named.infra += "/" + where.partition;
      e.Existing(named, r, alt, true);
    } else {
      return InvalidArgument("infra '" + infra +
                             "' is not available: herd provides 'local', 'ssh/<pool>', "
                             "'aws[/REGION[/ZONE]]' and 'slurm[/CLUSTER[/PARTITION]]'");
    }
    for (const auto& w : why_not) {
      problems.push_back(plan.alternatives.size() > 1 ? Wants(r) + ": " + w : w);
    }
  }
  if (plan.candidates.empty()) {
    return InvalidArgument("no infra can run the task: " + Join(problems, "; "));
  }
  const std::string& home = env.aws_region;
  auto key = [&](const Candidate& c) {
    bool in_home =
        !home.empty() && (c.infra == "aws/" + home || c.infra.rfind("aws/" + home + "/", 0) == 0);
    return std::make_tuple(!c.usable, plan.ordered ? c.alternative : 0, !c.cost.has_value(),
                           c.cost.value_or(0), GroupOrder(c.group), !in_home, c.alternative,
                           c.instance_type, c.infra);
  };
  std::stable_sort(plan.candidates.begin(), plan.candidates.end(),
                   [&](const Candidate& a, const Candidate& b) { return key(a) < key(b); });
  const Candidate& best = plan.Chosen();
  if (!best.usable && !best.named) {
    std::vector<std::string> groups;
    for (const auto& c : plan.candidates) {
      if (std::find(groups.begin(), groups.end(), c.group) == groups.end()) {
        groups.push_back(c.group);
      }
    }
    return FailedPrecondition("the task can only run on " + Join(groups) +
                              ", not usable here: " + best.group + ": " + best.why_unusable +
                              " (`herd check` lists what is usable)" +
                              (problems.empty() ? "" : "; elsewhere: " + Join(problems, "; ")));
  }
  return plan;
}

task::Task ApplyPlan(const task::Task& task, const Plan& plan) {
  return ApplyCandidate(task, plan, plan.Chosen());
}

task::Task ApplyCandidate(const task::Task& task, const Plan& plan, const Candidate& c) {
  task::Task t = task;
  Resources r = plan.alternatives[c.alternative];
  r.any_of.clear();
  r.ordered.clear();
  r.infra = c.infra;
  if (c.group == "aws") r.instance_type = c.instance_type;
  t.resources = std::move(r);
  return t;
}

std::string WhyNotFits(const task::Task& later, const Candidate& c, int nodes) {
  if (later.num_nodes > nodes) {
    return "it asks for " + std::to_string(later.num_nodes) + " nodes and the cluster has " +
           std::to_string(nodes);
  }
  const Resources& top = later.resources;
  std::vector<Resources> alternatives = !top.ordered.empty()  ? top.ordered
                                        : !top.any_of.empty() ? top.any_of
                                                              : std::vector<Resources>{top};
  const bool cloud = c.group == "aws";
  std::vector<std::string> why;
  for (const Resources& r : alternatives) {
    if (!r.infra.empty() && r.infra != c.infra && c.infra.rfind(r.infra + "/", 0) != 0) {
      why.push_back("infra " + r.infra);
      continue;
    }
    if (!cloud) return "";
    if (!r.instance_type.empty() && r.instance_type != c.instance_type) {
      why.push_back(r.instance_type);
      continue;
    }
    if (!r.accelerator.empty() && (!SameName(r.accelerator, c.accelerator) ||
                                   r.accelerator_count > c.accelerator_count + 1e-9)) {
      why.push_back(Gpus(r.accelerator, r.accelerator_count));
      continue;
    }
    if (!Fits(c.vcpus.value_or(0), r.cpus, true) ||
        !Fits(c.memory_gib.value_or(0), r.memory_gb, true)) {
      why.push_back(Wants(r));
      continue;
    }
    return "";
  }
  std::string has = c.infra;
  if (cloud) has += " " + c.instance_type + " (" + Gpus(c.accelerator, c.accelerator_count) + ")";
  return "it asks for " + Join(why, " or ") + "; the cluster would be " + has;
}

Status KeepCandidatesFor(Plan& plan, const std::vector<const task::Task*>& later) {
  if (later.empty()) return Status::Ok();  // a single task's launch: nothing to narrow
  auto task_name = [&](std::size_t i) {
    return "task " + std::to_string(i + 2) +
           (later[i]->name.empty() ? "" : " (" + later[i]->name + ")");
  };
  const std::string prefix =
      "the pipeline runs every task on the cluster its first task gets, and ";
  // A task that fits none of them is named with the reason of the best one.
  for (std::size_t i = 0; i < later.size(); ++i) {
    bool fits_one = false;
    for (const Candidate& c : plan.candidates) {
      fits_one = fits_one || WhyNotFits(*later[i], c, plan.num_nodes).empty();
    }
    if (!fits_one) {
      return InvalidArgument(prefix + task_name(i) +
                             " can run on no cluster the first task could get: " +
                             WhyNotFits(*later[i], plan.candidates.front(), plan.num_nodes));
    }
  }
  std::vector<Candidate> kept;
  std::string first_refusal;
  for (const Candidate& c : plan.candidates) {
    std::string why;
    for (std::size_t i = 0; i < later.size() && why.empty(); ++i) {
      why = WhyNotFits(*later[i], c, plan.num_nodes);
      if (!why.empty()) why = task_name(i) + ": " + why;
    }
    if (why.empty()) {
      kept.push_back(c);
    } else if (first_refusal.empty()) {
      first_refusal = why;
    }
  }
  if (kept.empty()) {
    return InvalidArgument(prefix +
                           "no cluster the first task could get suits every task after it (the "
                           "cheapest, " +
                           first_refusal + ")");
  }
  plan.candidates = std::move(kept);
  return Status::Ok();
}

std::string RenderConsidered(const Plan& plan) {
  controller::Table table(
      {"INFRA", "INSTANCE", "vCPUs", "Mem(GB)", "GPUS", "COST ($/hr)", "CHOSEN"});
  std::set<std::pair<std::size_t, std::string>> shown;
  std::size_t rows = 0, hidden = 0;
  for (std::size_t i = 0; i < plan.candidates.size(); ++i) {
    const Candidate& c = plan.candidates[i];
    if (!shown.insert({c.alternative, c.group}).second) continue;
    if (rows == limits::kMaxConsideredRows) {
      ++hidden;
      continue;
    }
    ++rows;
    std::string instance = c.instance_type.empty() ? "-" : c.instance_type;
    if (c.spot) instance += "[Spot]";
    std::string infra = c.infra;
    if (!c.usable) infra += " (not usable)";
    table.AddRow({infra, instance, c.vcpus ? FormatNumber(*c.vcpus) : "-",
                  c.memory_gib ? FormatNumber(*c.memory_gib) : "-",
                  Gpus(c.accelerator, c.accelerator_count), Money(c.cost), i == 0 ? "\u2714" : ""});
  }
  std::string out = "Considered resources (" + std::to_string(plan.num_nodes) +
                    (plan.num_nodes == 1 ? " node" : " nodes") + "):\n" + table.Render();
  if (hidden > 0) out += "... and " + std::to_string(hidden) + " more\n";
  return out;
}

Result<std::vector<GpuOffer>> ListGpus(const Catalog& aws, const std::string& filter,
                                       const std::string& infra, bool all_regions) {
  std::string name = filter;
  std::optional<double> count;
  if (auto colon = filter.find(':'); colon != std::string::npos) {
    HERD_ASSIGN_OR_RETURN(auto acc, task::ParseAccelerator(filter));
    name = acc.name;
    count = acc.count;
  }
  std::string region;
  if (!infra.empty()) {
    if (!IsAwsInfra(infra)) {
      return InvalidArgument("--infra " + infra +
                             ": herd's catalogs cover aws; local and ssh pools list no GPUs "
                             "(their nodes report theirs: `herd nodes CLUSTER`)");
    }
    HERD_ASSIGN_OR_RETURN(auto spec, controller::ParseAwsInfra(infra));
    region = spec.region;
  }
  std::vector<GpuOffer> out;
  bool name_known = false;
  // The cheapest region of each instance type unless every region is asked for.
  std::map<std::string, std::size_t> best;
  for (const CatalogRow& row : aws.rows) {
    if (row.accelerator.empty()) continue;
    if (!name.empty()) {
      if (!SameName(row.accelerator, name)) continue;
      name_known = true;
      if (count && std::fabs(*count - row.accelerator_count) > 1e-9) continue;
    }
    if (!region.empty() && row.region != region) continue;
    GpuOffer g{row.accelerator, row.accelerator_count, row.instance_type, row.vcpus, row.memory_gib,
               row.price,       row.spot_price,        row.region,        row.zone};
    if (!all_regions) {
      auto [it, fresh] = best.emplace(row.instance_type, out.size());
      if (!fresh) {
        GpuOffer& have = out[it->second];
        if (g.price && (!have.price || *g.price < *have.price)) have = g;
        continue;
      }
    }
    out.push_back(std::move(g));
  }
  if (!name.empty() && !name_known) {
    return InvalidArgument("unknown accelerator '" + name + "': the AWS catalog (" + aws.source +
                           ") has " + Join(aws.Accelerators()));
  }
  std::stable_sort(out.begin(), out.end(), [](const GpuOffer& a, const GpuOffer& b) {
    return std::make_tuple(a.accelerator, a.count, a.price.value_or(1e18), a.instance_type,
                           a.region) < std::make_tuple(b.accelerator, b.count,
                                                       b.price.value_or(1e18), b.instance_type,
                                                       b.region);
  });
  return out;
}

std::string RenderGpus(const std::vector<GpuOffer>& offers, bool detailed) {
  if (!detailed) {
    controller::Table table({"GPU", "QTY", "INFRA"});
    std::vector<std::string> order;
    std::map<std::string, std::vector<double>> qty;
    for (const auto& g : offers) {
      auto& q = qty[g.accelerator];
      if (q.empty()) order.push_back(g.accelerator);
      if (std::find(q.begin(), q.end(), g.count) == q.end()) q.push_back(g.count);
    }
    for (const auto& name : order) {
      auto q = qty[name];
      std::sort(q.begin(), q.end());
      std::vector<std::string> words;
      for (double d : q) words.push_back(FormatNumber(d));
      table.AddRow({name, Join(words), "aws"});
    }
    return table.Render();
  }
  controller::Table table({"GPU", "QTY", "INFRA", "INSTANCE_TYPE", "vCPUs", "HOST_MEM",
                           "HOURLY_PRICE", "HOURLY_SPOT_PRICE", "REGION"});
  for (const auto& g : offers) {
    table.AddRow({g.accelerator, FormatNumber(g.count), "aws", g.instance_type,
                  FormatNumber(g.vcpus), FormatNumber(g.memory_gib) + "GB",
                  g.price ? "$ " + Money(g.price) : "-",
                  g.spot_price ? "$ " + Money(g.spot_price) : "-",
                  g.region + (g.zone.empty() ? "" : " (" + g.zone + ")")});
  }
  return table.Render();
}

}  // namespace herd::optimizer
