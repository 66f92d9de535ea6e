// The optimizer (controller/optimizer): catalog parsing and its errors, the built-in AWS catalog,
// candidates across infra, the cpus/memory/disk filters, any_of vs ordered, spot, the table,
// `gpus list`, and the prices section of config.yaml.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "controller/optimizer/catalog.hpp"
#include "controller/optimizer/infra.hpp"
#include "controller/optimizer/optimizer.hpp"
#include "controller/task/task.hpp"

using namespace herd;
using namespace herd::optimizer;

namespace {

// Two regions, zones in one, a spot price on some rows.
constexpr const char* kCsv =
    "# a comment\n"
    "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,"
    "AvailabilityZone\n"
    "m6i.large,,,2,8,0.096,0.04,us-east-1,\n"
    "m6i.2xlarge,,,8,32,0.384,0.15,us-east-1,\n"
    "m6i.2xlarge,,,8,32,0.40,,eu-west-1,\n"
    "c6i.4xlarge,,,16,32,0.68,0.30,us-east-1,\n"
    "r6i.4xlarge,,,16,128,1.008,,us-east-1,\n"
    "p4d.24xlarge,A100,8,96,1152,21.96,9.5,us-east-1,us-east-1a\n"
    "p4d.24xlarge,A100,8,96,1152,21.96,8.7,us-east-1,us-east-1b\n"
    "p4d.24xlarge,A100,8,96,1152,23.00,,eu-west-1,\n"
    "p5.48xlarge,H100,8,192,2048,55.04,20.1,us-east-1,us-east-1a\n"
    "g6.xlarge,L4,1,4,16,0.8048,0.3,us-east-1,\n"
    "g6.12xlarge,L4,4,48,192,4.6016,,us-east-1,\n";

Catalog TestCatalog() {
  auto c = ParseCatalogCsv(kCsv, "test.csv");
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  return *c;
}

Environment Env(bool local = true, bool aws = true) {
  Environment e;
  e.local = {"local", local, local ? "root with ip netns" : "needs sshd"};
  e.aws = {"aws", aws, aws ? "credentials from environment" : "no AWS credentials"};
  e.ssh_pools.push_back({"ssh/lab", true, "2 host(s)"});
  e.aws_region = "us-east-1";
  return e;
}

task::Task Task(const std::string& yaml) {
  auto t = task::ParseTaskYaml(yaml, "t.yaml");
  REQUIRE_MESSAGE(t.ok(), t.status().message());
  return *t;
}

Plan MustPlan(const std::string& yaml, const Environment& env = Env(), PlanOptions o = {}) {
  auto p = PlanTask(Task(yaml), env, TestCatalog(), o);
  REQUIRE_MESSAGE(p.ok(), p.status().message());
  return *p;
}

std::string PlanError(const std::string& yaml, const Environment& env = Env(), PlanOptions o = {}) {
  auto p = PlanTask(Task(yaml), env, TestCatalog(), o);
  REQUIRE_FALSE(p.ok());
  return p.status().message();
}

}  // namespace

TEST_CASE("catalog: SkyPilot's columns, comments, empty prices and zones") {
  Catalog c = TestCatalog();
  REQUIRE(c.rows.size() == 11);
  CHECK(c.rows[0].instance_type == "m6i.large");
  CHECK(c.rows[0].accelerator.empty());
  CHECK(c.rows[0].line == 3);
  CHECK(*c.rows[0].price == doctest::Approx(0.096));
  CHECK_FALSE(c.rows[2].spot_price.has_value());
  CHECK(c.rows[5].zone == "us-east-1a");
  CHECK(c.rows[5].accelerator_count == 8);
  CHECK(c.Accelerators() == std::vector<std::string>{"A100", "H100", "L4"});
  CHECK(c.Regions() == std::vector<std::string>{"us-east-1", "eu-west-1"});

  // Columns in another order and an extra one are fine.
  auto o = ParseCatalogCsv(
      "Region,InstanceType,Extra,AcceleratorName,AcceleratorCount,vCPUs,"
      "MemoryGiB,Price,SpotPrice,AvailabilityZone\n"
      "us-east-1,m6i.large,x,,,2,8,0.096,,\n",
      "o.csv");
  REQUIRE(o.ok());
  CHECK(o->rows[0].region == "us-east-1");
}

TEST_CASE("catalog: a bad row is one line naming file:line and the column") {
  std::string head =
      "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,"
      "AvailabilityZone\n";
  auto bad = ParseCatalogCsv(head +
                                 "m6i.large,,,2,8,0.096,,us-east-1,\n"
                                 "m6i.xlarge,,,4,16,$0.19,,us-east-1,\n",
                             "aws.csv");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "aws.csv:3: Price: '$0.19' is not a price in USD per hour");
  CHECK(bad.status().message().find('\n') == std::string::npos);

  auto neg = ParseCatalogCsv(head + "m6i.large,,,2,8,-1,,us-east-1,\n", "aws.csv");
  REQUIRE_FALSE(neg.ok());
  CHECK(neg.status().message() == "aws.csv:2: Price: '-1' is not a price in USD per hour");
  auto spot = ParseCatalogCsv(head + "m6i.large,,,2,8,1,nan,us-east-1,\n", "aws.csv");
  REQUIRE_FALSE(spot.ok());
  CHECK(spot.status().message() ==
        "aws.csv:2: SpotPrice: 'nan' is not a spot price in USD per hour");
  auto count = ParseCatalogCsv(head + "p4d.24xlarge,A100,,96,1152,1,,us-east-1,\n", "aws.csv");
  REQUIRE_FALSE(count.ok());
  CHECK(count.status().message() ==
        "aws.csv:2: AcceleratorCount is empty; expected a positive accelerator count");
  auto vcpus = ParseCatalogCsv(head + "m6i.large,,,two,8,1,,us-east-1,\n", "aws.csv");
  REQUIRE_FALSE(vcpus.ok());
  CHECK(vcpus.status().message() == "aws.csv:2: vCPUs: 'two' is not a positive number of vCPUs");
  auto header = ParseCatalogCsv("InstanceType,vCPUs\n", "aws.csv");
  REQUIRE_FALSE(header.ok());
  CHECK(header.status().message().rfind("aws.csv:1: the header has no column AcceleratorName", 0) ==
        0);
  auto quote = ParseCatalogCsv(head + "\"m6i.large,,,2,8,1,,us-east-1,\n", "aws.csv");
  REQUIRE_FALSE(quote.ok());
  CHECK(quote.status().message() == "aws.csv:2: unterminated quote");
}

TEST_CASE("what scripts/aws_catalog.py makes from AWS's formats is what herd reads") {
  // expected.csv is the script's output for the sample offer, spot and offerings files
  // (scripts/aws_catalog_test.py checks that it still is).
  auto c = LoadCatalogFile(std::string(HERD_CATALOG_TESTDATA) + "/expected.csv");
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  REQUIRE(c->rows.size() == 8);
  const CatalogRow& b = c->rows[5];
  CHECK(b.instance_type == "p4d.24xlarge");
  CHECK(b.zone == "us-east-1b");
  CHECK(*b.spot_price == doctest::Approx(8.7));
  auto p = PlanTask(Task("resources:\n  accelerators: A100:8\n  use_spot: true\n"), Env(), *c);
  REQUIRE(p.ok());
  CHECK(p->Chosen().infra == "aws/us-east-1/us-east-1b");
  CHECK(LoadCatalogFile("/nonexistent/aws.csv").status().code() == Code::kNotFound);
}

TEST_CASE("the built-in AWS catalog parses and covers the current GPU families") {
  auto c = ParseCatalogCsv(BuiltinAwsCatalogCsv(), "<built-in aws.csv>");
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  CHECK(c->rows.size() > 1000);
  auto accs = c->Accelerators();
  for (const char* a : {"B200", "H100", "H200", "A100", "A100-80GB", "L40S", "L4", "A10G",
                        "Trainium", "Inferentia2"}) {
    CHECK_MESSAGE(std::find(accs.begin(), accs.end(), a) != accs.end(), a);
  }
  std::set<std::string> families;
  for (const auto& r : c->rows) {
    families.insert(r.instance_type.substr(0, r.instance_type.find('.')));
    CHECK(r.price.has_value());
  }
  for (const char* f : {"p6-b200", "p5", "p5e", "p5en", "p4d", "p4de", "g6e", "g6", "g5", "trn1",
                        "inf2", "m6i", "m7i", "c6i", "c7i", "r6i", "r7i"}) {
    CHECK_MESSAGE(families.count(f) == 1, f);
  }
  CHECK(c->Regions().size() >= 10);
}

TEST_CASE("candidates: a CPU task with no infra goes to local at $0; AWS is listed too") {
  Plan p = MustPlan("run: echo hi\n");
  CHECK(p.Chosen().infra == "local");
  CHECK(*p.Chosen().cost == 0);
  // local, the pool, and every fitting AWS row (8+ vCPUs, 32+ GiB by default).
  std::set<std::string> infras;
  for (const auto& c : p.candidates) infras.insert(c.infra + " " + c.instance_type);
  CHECK(infras == std::set<std::string>{"local ", "ssh/lab ", "aws/us-east-1 m6i.2xlarge",
                                        "aws/eu-west-1 m6i.2xlarge", "aws/us-east-1 c6i.4xlarge",
                                        "aws/us-east-1 r6i.4xlarge"});
  // A priced local machine loses to a cheaper pool.
  Environment e = Env();
  e.prices["local"] = 0.5;
  CHECK(MustPlan("run: echo hi\n", e).Chosen().infra == "ssh/lab");
  // Without local and the pool, the cheapest AWS type in the cheapest region.
  e.local.usable = false;
  e.ssh_pools.clear();
  Plan aws = MustPlan("run: echo hi\n", e);
  CHECK(aws.Chosen().infra == "aws/us-east-1");
  CHECK(aws.Chosen().instance_type == "m6i.2xlarge");
}

TEST_CASE("candidates: accelerators go to AWS, cheapest zone and region; named infra is kept") {
  Plan p = MustPlan("resources:\n  accelerators: A100:8\nnum_nodes: 2\n");
  CHECK(p.Chosen().infra == "aws/us-east-1/us-east-1a");  // equal prices: zone order
  CHECK(p.Chosen().instance_type == "p4d.24xlarge");
  CHECK(*p.Chosen().cost == doctest::Approx(2 * 21.96));
  CHECK(p.candidates.size() == 3);  // two zones of us-east-1, eu-west-1

  // --infra and resources.infra restrict: a region, a zone, local as is (the head checks GPUs).
  PlanOptions eu{"aws/eu-west-1", 0};
  CHECK(MustPlan("resources:\n  accelerators: A100:8\n", Env(), eu).Chosen().infra ==
        "aws/eu-west-1");
  CHECK(MustPlan("resources:\n  infra: aws/us-east-1/us-east-1b\n  accelerators: A100:8\n")
            .Chosen()
            .infra == "aws/us-east-1/us-east-1b");
  // A machine with GPUs: local stands for accelerator tasks too, at $0.
  Environment gpus = Env();
  gpus.local_gpus = true;
  Plan here = MustPlan("resources:\n  accelerators: A100:8\n", gpus);
  CHECK(here.Chosen().infra == "local");
  CHECK(here.candidates.size() == 4);  // local and the three AWS rows; the pool is not inventoried
  Plan local = MustPlan("resources:\n  infra: local\n  accelerators: H100:8\n");
  CHECK(local.candidates.size() == 1);
  CHECK(local.Chosen().infra == "local");
  CHECK(local.Chosen().accelerator == "H100");
  CHECK(MustPlan("resources:\n  accelerators: H100:8\n", Env(), {"ssh/lab", 0}).Chosen().infra ==
        "ssh/lab");

  // An instance type as is, and one the catalog does not list (unpriced, kept for EC2 to judge).
  Plan it = MustPlan("resources:\n  instance_type: r6i.4xlarge\n");
  CHECK(it.Chosen().infra == "aws/us-east-1");
  CHECK(it.Chosen().vcpus == 16);
  Plan odd = MustPlan("resources:\n  instance_type: x2iedn.xlarge\n");
  CHECK(odd.Chosen().infra == "aws/us-east-1");
  CHECK_FALSE(odd.Chosen().cost.has_value());
}

TEST_CASE("filters: cpus N+ and N, memory, disk_size") {
  Environment e = Env(false, true);
  e.ssh_pools.clear();
  CHECK(MustPlan("resources:\n  cpus: 8+\n", e).Chosen().instance_type == "m6i.2xlarge");
  CHECK(MustPlan("resources:\n  cpus: 16\n", e).Chosen().instance_type == "c6i.4xlarge");
  CHECK(MustPlan("resources:\n  cpus: 16+\n  memory: 64+\n", e).Chosen().instance_type ==
        "r6i.4xlarge");
  CHECK(MustPlan("resources:\n  memory: 8\n", e).Chosen().instance_type == "m6i.large");
  CHECK(MustPlan("resources:\n  accelerators: L4:1\n  cpus: 4+\n", e).Chosen().instance_type ==
        "g6.xlarge");
  CHECK(PlanError("resources:\n  cpus: 512+\n", e, {"aws", 0}) ==
        "no infra can run the task: no AWS instance type has cpus=512+");
  // Where the only fit is not usable, both are said.
  CHECK(PlanError("resources:\n  cpus: 512+\n", e) ==
        "the task can only run on local, not usable here: local: needs sshd (`herd check` lists "
        "what is usable); elsewhere: no AWS instance type has cpus=512+");
  CHECK(PlanError("resources:\n  accelerators: A100:8\n  disk_size: 20000\n", e) ==
        "no infra can run the task: aws: disk_size 20000 GB is over EBS's 16384 GB volume limit");
  CHECK(
      PlanError("resources:\n  accelerators: A100:8\n  memory: 2000+\n", e, {"aws/eu-west-1", 0}) ==
      "no infra can run the task: no AWS instance type has A100:8, memory=2000+GB in "
      "eu-west-1");
}

TEST_CASE("any_of picks the cheapest; ordered keeps the user's order") {
  // {H100:8, A100:8}: any of them, A100 is cheaper.
  Plan any = MustPlan("resources:\n  accelerators: {H100:8, A100:8}\n");
  CHECK_FALSE(any.ordered);
  CHECK(any.alternatives.size() == 2);
  CHECK(any.Chosen().accelerator == "A100");
  // [H100:8, A100:8]: H100 first because the user said so, though dearer.
  Plan ordered = MustPlan("resources:\n  accelerators: [H100:8, A100:8]\n");
  CHECK(ordered.ordered);
  CHECK(ordered.Chosen().accelerator == "H100");
  CHECK(ordered.Chosen().instance_type == "p5.48xlarge");
  // The same with any_of/ordered lists, each candidate with its own fields.
  CHECK(MustPlan("resources:\n  ordered:\n    - accelerators: L4:4\n    - accelerators: L4:1\n")
            .Chosen()
            .instance_type == "g6.12xlarge");
  CHECK(MustPlan("resources:\n  any_of:\n    - accelerators: L4:4\n    - accelerators: L4:1\n")
            .Chosen()
            .instance_type == "g6.xlarge");
  // ApplyPlan: the task launches the chosen alternative, on the chosen infra and type.
  task::Task t = ApplyPlan(Task("resources:\n  accelerators: [H100:8, A100:8]\n"), ordered);
  CHECK(t.resources.ordered.empty());
  CHECK(t.resources.any_of.empty());
  CHECK(t.resources.accelerator == "H100");
  CHECK(t.resources.infra == "aws/us-east-1/us-east-1a");
  CHECK(t.resources.instance_type == "p5.48xlarge");
  // An alternative nothing offers is skipped when another one fits.
  CHECK(MustPlan("resources:\n  accelerators: [TPU-V5:8, A100:8]\n").Chosen().accelerator ==
        "A100");
}

TEST_CASE("a pipeline's later tasks keep only the clusters they can run on") {
  Plan any = MustPlan("num_nodes: 2\nresources:\n  accelerators: {H100:8, A100:8}\n");
  REQUIRE(any.Chosen().accelerator == "A100");
  const Candidate& a100 = any.Chosen();
  // What fits a p4d: nothing asked, fewer GPUs of its kind, its infra's prefix, fewer cpus.
  CHECK(WhyNotFits(Task("run: echo\n"), a100, 2) == "");
  CHECK(WhyNotFits(Task("resources:\n  accelerators: a100:2\n"), a100, 2) == "");
  CHECK(WhyNotFits(Task("resources:\n  infra: aws\n  cpus: 64+\n"), a100, 2) == "");
  CHECK(WhyNotFits(Task("num_nodes: 2\nresources:\n  accelerators: [L4:1, A100:8]\n"), a100, 2) ==
        "");
  // What does not: more nodes, another accelerator, another infra, more memory.
  CHECK(WhyNotFits(Task("num_nodes: 3\n"), a100, 2) == "it asks for 3 nodes and the cluster has 2");
  CHECK(WhyNotFits(Task("resources:\n  accelerators: H100:1\n"), a100, 2) ==
        "it asks for H100:1; the cluster would be " + a100.infra + " p4d.24xlarge (A100:8)");
  CHECK(WhyNotFits(Task("resources:\n  infra: local\n"), a100, 2) ==
        "it asks for infra local; the cluster would be " + a100.infra + " p4d.24xlarge (A100:8)");
  CHECK(WhyNotFits(Task("resources:\n  memory: 2000+\n"), a100, 2)
            .rfind("it asks for memory=2000+GB", 0) == 0);
  // On machines that exist only the infra and the nodes count: the head judges the rest.
  Plan local = MustPlan("num_nodes: 2\nresources:\n  infra: local\n");
  CHECK(WhyNotFits(Task("resources:\n  accelerators: H100:1\n"), local.Chosen(), 2) == "");
  CHECK(WhyNotFits(Task("resources:\n  infra: ssh/lab\n"), local.Chosen(), 2) != "");

  // KeepCandidatesFor: an H100 eval moves the choice to p5; the order of the rest is kept.
  task::Task eval = Task("name: eval\nresources:\n  accelerators: H100:4\n");
  Plan moved = any;
  REQUIRE(KeepCandidatesFor(moved, {&eval}).ok());
  CHECK(moved.Chosen().instance_type == "p5.48xlarge");
  for (const Candidate& c : moved.candidates) CHECK(c.accelerator == "H100");
  // None left: the first task that fits none, named with its number and why.
  task::Task big = Task("name: big\nnum_nodes: 4\n");
  Plan none = any;
  Status s = KeepCandidatesFor(none, {&eval, &big});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message() ==
        "the pipeline runs every task on the cluster its first task gets, and task 3 (big) can run "
        "on no cluster the first task could get: it asks for 4 nodes and the cluster has 2");
  // Each fits some cluster, none fits both: the cheapest one's refusal.
  task::Task a100_eval = Task("resources:\n  accelerators: A100:1\n");
  s = KeepCandidatesFor(none, {&eval, &a100_eval});
  CHECK(s.message() ==
        "the pipeline runs every task on the cluster its first task gets, and no cluster the "
        "first task could get suits every task after it (the cheapest, task 2 (eval): it asks for "
        "H100:4; the cluster would be " +
            a100.infra + " p4d.24xlarge (A100:8))");
  CHECK(none.candidates.size() == any.candidates.size());  // unchanged on error
  // Nothing after the first task: every candidate stays.
  Plan all = any;
  CHECK(KeepCandidatesFor(all, {}).ok());
  CHECK(all.candidates.size() == any.candidates.size());
}

TEST_CASE("spot: priced at SpotPrice, cheapest zone; unpriced spot rows rank last") {
  Plan p = MustPlan("resources:\n  accelerators: A100:8\n  use_spot: true\n");
  CHECK(p.Chosen().spot);
  CHECK(p.Chosen().infra == "aws/us-east-1/us-east-1b");
  CHECK(*p.Chosen().cost == doctest::Approx(8.7));
  CHECK_FALSE(p.candidates.back().cost.has_value());  // eu-west-1 has no spot price
  CHECK(RenderConsidered(p).find("p4d.24xlarge[Spot]") != std::string::npos);
}

TEST_CASE("unknown accelerator and unusable infra are named clearly") {
  CHECK(PlanError("resources:\n  accelerators: A1000:8\n") ==
        "no infra can run the task: unknown accelerator 'A1000': the AWS catalog (test.csv) has "
        "A100, H100, L4");
  CHECK(PlanError("resources:\n  accelerators: H100:4\n") ==
        "no infra can run the task: aws offers H100 only as H100:8");
  CHECK(PlanError("resources:\n  accelerators: {A1000:8, H100:4}\n") ==
        "no infra can run the task: A1000:8: unknown accelerator 'A1000': the AWS catalog "
        "(test.csv) has A100, H100, L4; H100:4: aws offers H100 only as H100:8");
  // GPUs with no AWS credentials: the only infra that has them is not usable.
  CHECK(PlanError("resources:\n  accelerators: A100:8\n", Env(true, false)) ==
        "the task can only run on aws, not usable here: aws: no AWS credentials (`herd check` "
        "lists what is usable)");
  // Named explicitly, an unusable infra is still the plan (its provider says what is wrong).
  Plan named = MustPlan("resources:\n  accelerators: A100:8\n", Env(true, false), {"aws", 0});
  CHECK_FALSE(named.Chosen().usable);
  CHECK(PlanError("resources:\n  infra: k8s/ctx\n") ==
        "infra 'k8s/ctx' is not available: herd provides 'local', 'ssh/<pool>', "
        "'aws[/REGION[/ZONE]]' and 'slurm[/CLUSTER[/PARTITION]]'");
}

TEST_CASE("slurm: a cluster of ~/.slurm/config, its partition kept; an unknown one named") {
  Environment e = Env();
  e.slurm_clusters = {{"slurm/lab", true, "login node"}, {"slurm/big", true, "login node"}};
  Plan p = MustPlan("resources:\n  accelerators: L4:2\n", e, {"slurm/big/gpu", 0});
  CHECK(p.Chosen().infra == "slurm/big/gpu");
  CHECK(p.Chosen().usable);
  CHECK(*p.Chosen().cost == 0);
  CHECK(MustPlan("resources:\n  infra: slurm\n", e).Chosen().infra == "slurm/lab");
  Plan unknown = MustPlan("resources:\n  infra: slurm/nope\n", e);
  CHECK_FALSE(unknown.Chosen().usable);
  CHECK(unknown.Chosen().why_unusable == "no Slurm cluster nope in ~/.slurm/config");
  CHECK(e.Find("slurm/big/gpu") == &e.slurm_clusters[1]);
}

TEST_CASE("the Considered resources table: SkyPilot's columns, the chosen row marked") {
  Plan p = MustPlan("resources:\n  accelerators: {H100:8, A100:8}\nnum_nodes: 2\n");
  std::string table = RenderConsidered(p);
  CHECK(table ==
        "Considered resources (2 nodes):\n"
        "INFRA                     INSTANCE      vCPUs  Mem(GB)  GPUS    COST ($/hr)  CHOSEN\n"
        "aws/us-east-1/us-east-1a  p4d.24xlarge  96     1152     A100:8  43.92        \u2714\n"
        "aws/us-east-1/us-east-1a  p5.48xlarge   192    2048     H100:8  110.08\n");
  Plan cpu = MustPlan("run: echo\n", Env(true, false));
  std::string t2 = RenderConsidered(cpu);
  CHECK(t2.rfind(
            "Considered resources (1 node):\n"
            "INFRA                       INSTANCE     vCPUs  Mem(GB)  GPUS  COST ($/hr)  CHOSEN\n"
            "local                       -            -      -        -     0.00         \u2714\n"
            "ssh/lab                     -            -      -        -     0.00\n"
            "aws/us-east-1 (not usable)  m6i.2xlarge  8      32       -     0.38\n",
            0) == 0);
  CHECK(t2.find("aws/us-east-1 (not usable)") != std::string::npos);
}

TEST_CASE("gpus list: counts per accelerator, details per instance type, filters") {
  Catalog c = TestCatalog();
  auto all = ListGpus(c, "", "", false);
  REQUIRE(all.ok());
  std::string table = RenderGpus(*all, false);
  CHECK(table ==
        "GPU   QTY   INFRA\n"
        "A100  8     aws\n"
        "H100  8     aws\n"
        "L4    1, 4  aws\n");
  auto a100 = ListGpus(c, "a100:8", "", false);  // case-insensitive, cheapest region per type
  REQUIRE(a100.ok());
  REQUIRE(a100->size() == 1);
  CHECK((*a100)[0].region == "us-east-1");
  auto every = ListGpus(c, "A100", "", true);
  REQUIRE(every.ok());
  CHECK(every->size() == 3);
  auto eu = ListGpus(c, "A100", "aws/eu-west-1", true);
  REQUIRE(eu.ok());
  REQUIRE(eu->size() == 1);
  CHECK(RenderGpus(*eu, true) ==
        "GPU   QTY  INFRA  INSTANCE_TYPE  vCPUs  HOST_MEM  HOURLY_PRICE  HOURLY_SPOT_PRICE  "
        "REGION\n"
        "A100  8    aws    p4d.24xlarge   96     1152GB    $ 23.00       -                  "
        "eu-west-1\n");
  auto unknown = ListGpus(c, "A1000", "", false);
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message() ==
        "unknown accelerator 'A1000': the AWS catalog (test.csv) has A100, H100, L4");
  CHECK_FALSE(ListGpus(c, "", "local", false).ok());
}

TEST_CASE("prices: section of config.yaml; mistakes named at file:line:col") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("herd_opt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path d;
    ~Cleanup() { fs::remove_all(d); }
  } cleanup{dir};
  std::string file = (dir / "config.yaml").string();
  CHECK(LoadInfraPrices(file)->empty());  // no file: nothing priced
  std::ofstream(file) << "aws:\n  ssh_user: ubuntu\nprices:\n  local: 0.25\n  ssh/lab: 2.5\n";
  auto p = LoadInfraPrices(file);
  REQUIRE(p.ok());
  CHECK(p->at("local") == 0.25);
  CHECK(p->at("ssh/lab") == 2.5);
  std::ofstream(file) << "prices:\n  aws: 1\n";
  CHECK(LoadInfraPrices(file).status().message() ==
        file +
            ":2:3: prices.aws: only local, ssh/<pool> and slurm/<cluster> are priced here "
            "(clouds are priced "
            "by their catalogs)");
  std::ofstream(file) << "prices:\n  local: cheap\n";
  CHECK(LoadInfraPrices(file).status().message() ==
        file + ":2:10: prices.local: expected a price in USD per node per hour (e.g. 2.5)");
}

TEST_CASE("the environment names a mistake in config.yaml's local: section at file:line:col") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("herd_opt_local_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path d;
    ~Cleanup() { fs::remove_all(d); }
  } cleanup{dir};
  const std::string file = (dir / "config.yaml").string();
  auto no_env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  std::ofstream(file) << "local:\n  host_routes: [10.213.0.0/24]\n";
  CHECK(ProbeEnvironment(no_env, file).ok());
  std::ofstream(file) << "prices:\n  local: 0.5\nlocal:\n  host_routes:\n    - 127.0.0.1\n";
  auto env = ProbeEnvironment(no_env, file);
  REQUIRE(!env.ok());
  CHECK(env.status().message().starts_with(file + ":5:7: local.host_routes[0]: 127.0.0.1 is or "
                                                  "covers loopback"));
  std::ofstream(file) << "local:\n  hosts_routes: []\n";
  CHECK(ProbeEnvironment(no_env, file).status().message() ==
        file + ":2:3: local.hosts_routes: unknown field (known: host_routes)");
}
