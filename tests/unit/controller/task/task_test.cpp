// herd_task: SkyPilot task YAML parsing, overrides, substitution, output forms and `herd check`.
#include "controller/task/task.hpp"

#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "controller/task/env_vars.hpp"
#include "shared/common/limits.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::task {
namespace {

namespace fs = std::filesystem;

const std::string kTestdata = HERD_TASK_TESTDATA;

// Options whose "local environment" is exactly `env`, so tests never depend on the real one.
ParseOptions WithEnv(std::map<std::string, std::string> env = {}) {
  ParseOptions options;
  options.getenv = [env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  return options;
}

Task Parse(std::string_view yaml, const ParseOptions& options = WithEnv()) {
  auto task = ParseTaskYaml(yaml, "t.yaml", options);
  INFO(task.status().message());
  REQUIRE(task.ok());
  return std::move(task).value();
}

std::string ErrorOf(std::string_view yaml, const ParseOptions& options = WithEnv()) {
  auto task = ParseTaskYaml(yaml, "t.yaml", options);
  REQUIRE_FALSE(task.ok());
  CHECK(task.status().code() == Code::kInvalidArgument);
  return task.status().message();
}

Task ParseFile(const std::string& name, const ParseOptions& options = WithEnv()) {
  auto task = ParseTaskFile(kTestdata + "/" + name, options);
  INFO(task.status().message());
  REQUIRE(task.ok());
  return std::move(task).value();
}

using herd::testing::TempDir;

const std::string kSeedSetup =
    "git clone --depth 1 https://github.com/pytorch/examples || true\n"
    "cd examples\n"
    "git filter-branch --prune-empty --subdirectory-filter distributed/minGPT-ddp\n"
    "uv pip install --system -r requirements.txt\n";

TEST_CASE("a task that is not UTF-8 text is refused at the first bad byte, by line and column") {
  // Found by tests/fuzz/task_fuzz: a Latin-1 byte in a comment or value made `herd check -o json`
  // print invalid JSON (the Python SDK's json.loads then failed).
  CHECK(ErrorOf("name: t\nrun: echo caf\xe9\n") ==
        "t.yaml:2:14: not UTF-8 text (byte 0xE9); a task file is UTF-8 text without control "
        "characters");
  CHECK(ErrorOf("# \xc3\x28\nname: t\n").rfind("t.yaml:1:3: ", 0) == 0);  // bad continuation
  CHECK(ErrorOf("name: \xed\xa0\x80\n").rfind("t.yaml:1:7: ", 0) == 0);   // a surrogate
  CHECK(ErrorOf("name: \xc0\xaf\n").rfind("t.yaml:1:7: ", 0) == 0);       // overlong '/'
  CHECK(ErrorOf("name: t\nrun: echo \xf0\x9f\x98").rfind("t.yaml:2:11: ", 0) == 0);  // cut short
  // Multi-byte characters are valid and count as one column each.
  CHECK(Parse("name: caf\xc3\xa9 \xf0\x9f\x9a\x80\nrun: echo \xe2\x82\xac\n").name ==
        "caf\xc3\xa9 \xf0\x9f\x9a\x80");
  CHECK(ErrorOf("name: \xc3\xa9\xff\n").rfind("t.yaml:1:8: ", 0) == 0);
  // Control characters YAML does not allow (a NUL in a key made the JSON form invalid).
  CHECK(ErrorOf(std::string_view("envs:\n  A\x01\0B: 1\n", 16))
            .rfind("t.yaml:2:4: control character U+0001", 0) == 0);
  CHECK(ErrorOf("run: echo \x7f\n").rfind("t.yaml:1:11: control character U+007F", 0) == 0);
  CHECK(ErrorOf("run: echo \xc2\x9b\n").rfind("t.yaml:1:11: control character U+009B", 0) == 0);
  CHECK(Parse("name: t\r\nrun: echo\ta\r\n").run == "echo\ta");
}

TEST_CASE("an escape yaml-cpp decodes to a byte that is not UTF-8 is refused at its string") {
  // Found by tests/fuzz/task_fuzz (`herd check -o json` printed invalid JSON): yaml-cpp 0.7 turns
  // "\_" and "\N" into the single bytes 0xA0 and 0x85.
  CHECK(ErrorOf("name: t\nrun: \"a\\_b\"\n") ==
        "t.yaml:2:6: a string that is not UTF-8 once its escapes are decoded (byte 0xA0); for "
        "U+0085 or U+00A0 write \\u0085 or \\u00A0 (or the character itself), not \\N or \\_");
  CHECK(ErrorOf("envs:\n  A: ok\n  \"B\\N\": 1\n")
            .rfind("t.yaml:3:3: a string that is not UTF-8", 0) == 0);  // a key
  CHECK(ErrorOf("resources:\n  any_of:\n    - infra: \" t\\_x/y\n")
            .rfind("t.yaml:3:14: a string that is not UTF-8", 0) == 0);  // the fuzzer's case
  // The escapes that give UTF-8 are fine.
  CHECK(Parse("name: t\nrun: \"a\\u00A0b\\x85c\\Ld\"\n").run ==
        "a\xc2\xa0"
        "b\xc2\x85"
        "c\xe2\x80\xa8"
        "d");
}

TEST_CASE("malformed YAML that makes yaml-cpp 0.7 loop is refused at its place, quickly") {
  // Found by tests/fuzz/task_fuzz: YAML::LoadAll ran out of memory on these (yaml-cpp#1040).
  CHECK(ErrorOf("- a\n, b\n").rfind("t.yaml:2:1: invalid YAML: cannot parse past", 0) == 0);
  CHECK(ErrorOf("# task\n- a\n, b\n").rfind("t.yaml:3:1: invalid YAML", 0) == 0);
  CHECK(ErrorOf(",").rfind("t.yaml:1:1: invalid YAML", 0) == 0);
  // Several real documents are still told apart from a stuck parser.
  CHECK(ErrorOf("name: a\nrun: x\n---\nname: b\n").find("a second task (YAML document)") !=
        std::string::npos);
  CHECK(Parse("---\n---\nname: a\n").name == "a");
}

TEST_CASE("the seed's train.yaml parses to the values it states") {
  Task t = ParseFile("train.yaml");
  CHECK(t.name == "minGPT-ddp");
  CHECK(t.num_nodes == 1);
  REQUIRE(t.resources.cpus.has_value());
  CHECK(*t.resources.cpus == 4);
  CHECK_FALSE(t.resources.cpus_at_least);
  CHECK(t.resources.accelerator == "L4");
  CHECK(t.resources.accelerator_count == 4);
  CHECK(t.resources.infra.empty());
  CHECK(t.workdir.empty());
  CHECK(t.file_mounts.empty());
  CHECK(t.envs.empty());
  CHECK(t.setup == kSeedSetup);
  CHECK(t.run ==
        "cd examples/mingpt\n"
        "export LOGLEVEL=INFO\n"
        "\n"
        "echo \"Starting minGPT-ddp training\"\n"
        "\n"
        "torchrun \\\n"
        "--nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE \\\n"
        "main.py\n");
  CHECK(t.notes.empty());
  CHECK(ResourcesSummary(t) == "1x(gpus=L4:4, cpus=4)");
}

TEST_CASE("the multi-node form keeps its run script byte for byte") {
  // Even with SKYPILOT_* in the local environment, setup/run are never substituted: bash on the
  // node expands them.
  Task t = ParseFile("train-multinode.yaml",
                     WithEnv({{"SKYPILOT_NODE_RANK", "7"}, {"SKYPILOT_NODE_IPS", "1.2.3.4"}}));
  CHECK(t.num_nodes == 2);
  CHECK(t.resources.accelerator == "L4");
  CHECK(t.resources.accelerator_count == 4);
  CHECK(t.setup == kSeedSetup);
  CHECK(t.run.find("MASTER_ADDR=$(echo \"$SKYPILOT_NODE_IPS\" | head -n1)\n") != std::string::npos);
  CHECK(t.run.find("--node_rank=${SKYPILOT_NODE_RANK} \\\n") != std::string::npos);
  CHECK(t.run.find("--nnodes=$SKYPILOT_NUM_NODES \\\n") != std::string::npos);
  CHECK(t.run.find("--master_port=8008 \\\n") != std::string::npos);
  CHECK(t.run.find("7") == std::string::npos);
  CHECK(ResourcesSummary(t) == "2x(gpus=L4:4, cpus=4)");
}

TEST_CASE("train-rdzv.yaml: cpus 4+ is 'at least 4'") {
  Task t = ParseFile("train-rdzv.yaml");
  CHECK(t.name == "minGPT-ddp-rdzv");
  CHECK(t.num_nodes == 2);
  CHECK(*t.resources.cpus == 4);
  CHECK(t.resources.cpus_at_least);
  CHECK(t.resources.accelerator_count == 2);
  CHECK(t.run.find("--rdzv_endpoint=$MASTER_ADDR:29500 \\\n") != std::string::npos);
  CHECK(t.run.find("--rdzv_id $SKYPILOT_TASK_ID \\\n") != std::string::npos);
  CHECK(t.run.find("--node_rank") == std::string::npos);
  CHECK(ResourcesSummary(t) == "2x(gpus=L4:2, cpus=4+)");
}

TEST_CASE("the SDK form's setup/run lists are joined with newlines") {
  Task sdk = ParseFile("train-sdk.yaml");
  Task yaml = ParseFile("train.yaml");
  CHECK(sdk.setup + "\n" == yaml.setup);  // a '|' block ends with a newline, a join does not
  CHECK(sdk.run ==
        "cd examples/mingpt\n"
        "export LOGLEVEL=INFO\n"
        "torchrun --nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE main.py");
  CHECK(sdk.resources.accelerator == "L4");
  CHECK(*sdk.resources.cpus == 4);
}

TEST_CASE("workdir and file_mounts of the seed, and ToSpec's remote workdir") {
  Task t = ParseFile("train-mounts.yaml");
  CHECK(t.workdir == ".");
  CHECK(t.file_mounts ==
        std::map<std::string, std::string>{{"~/.vimrc", "~/.vimrc"}, {"~/.netrc", "~/.netrc"}});
  herd::v1::TaskSpec spec = ToSpec(t);
  CHECK(spec.workdir() == "~/sky_workdir");
  CHECK(ToSpec(ParseFile("train.yaml")).workdir() == "");
}

TEST_CASE("env precedence: YAML < --env < --env-file") {
  TempDir dir{"herd-task-test"};
  std::string env_file = dir.Write("app.env",
                                   "# comment\n"
                                   "\n"
                                   "C=from-file\n"
                                   "export D='single # not a comment'\n"
                                   "E=\"line1\\nline2\"  # trailing comment\n"
                                   "F=bare value # comment\n");
  ParseOptions options = WithEnv({{"LOCAL", "from-local-env"}});
  options.env_overrides = {"B=from-flag", "C=from-flag", "LOCAL", "EMPTY="};
  options.env_files = {env_file};
  Task t = Parse(
      "envs:\n"
      "  A: from-yaml\n"
      "  B: from-yaml\n"
      "  C: from-yaml\n",
      options);
  CHECK(t.envs == std::map<std::string, std::string>{{"A", "from-yaml"},
                                                     {"B", "from-flag"},
                                                     {"C", "from-file"},
                                                     {"D", "single # not a comment"},
                                                     {"E", "line1\nline2"},
                                                     {"F", "bare value"},
                                                     {"LOCAL", "from-local-env"},
                                                     {"EMPTY", ""}});
}

TEST_CASE("without a getenv option the real environment is used") {
  REQUIRE(setenv("HERD_TASK_TEST_VALUE", "from-process", 1) == 0);
  ParseOptions options;  // getenv left empty: ::getenv
  options.env_overrides = {"HERD_TASK_TEST_VALUE"};
  auto t = ParseTaskYaml("file_mounts:\n  /r/${HERD_TASK_TEST_VALUE}: /l\n", "t.yaml", options);
  unsetenv("HERD_TASK_TEST_VALUE");
  REQUIRE(t.ok());
  CHECK(t->envs.at("HERD_TASK_TEST_VALUE") == "from-process");
  CHECK(t->file_mounts.count("/r/from-process") == 1);
}

TEST_CASE("later --env and --env-file entries win over earlier ones") {
  TempDir dir{"herd-task-test"};
  ParseOptions options = WithEnv();
  options.env_overrides = {"X=1", "X=2"};
  options.env_files = {dir.Write("a.env", "Y=a\n"), dir.Write("b.env", "Y=b\n")};
  Task t = Parse("envs: {X: 0, Y: 0}\n", options);
  CHECK(t.envs.at("X") == "2");
  CHECK(t.envs.at("Y") == "b");
}

TEST_CASE("required envs and secrets are filled by overrides") {
  TempDir dir{"herd-task-test"};
  ParseOptions options = WithEnv({{"HF_TOKEN", "hf_secret_value"}});
  options.env_files = {dir.Write("keys.env", "WANDB_API_KEY=abc\n")};
  options.secret_overrides = {"HF_TOKEN"};
  Task t = Parse(
      "envs:\n"
      "  WANDB_API_KEY:\n"
      "  MODEL: null\n"
      "secrets:\n"
      "  HF_TOKEN: null\n",
      [&] {
        ParseOptions o = options;
        o.env_overrides = {"MODEL=gpt2"};
        return o;
      }());
  CHECK(t.envs.at("WANDB_API_KEY") == "abc");
  CHECK(t.envs.at("MODEL") == "gpt2");
  CHECK(t.secrets.at("HF_TOKEN") == "hf_secret_value");
}

TEST_CASE("env values of any scalar type become their text, as SkyPilot renders it") {
  Task t = Parse(
      "envs:\n"
      "  PORT: 8080\n"
      "  DEBUG: true\n"
      "  LR: 1e-4\n"
      "  QUOTED: \"null\"\n"
      "  EMPTY: ''\n");
  CHECK(
      t.envs ==
      std::map<std::string, std::string>{
          {"PORT", "8080"}, {"DEBUG", "True"}, {"LR", "1e-4"}, {"QUOTED", "null"}, {"EMPTY", ""}});
}

TEST_CASE("${VAR} and $VAR are substituted in file_mounts and workdir only") {
  ParseOptions options = WithEnv({{"LOCAL_DIR", "ckpt"}, {"HOME", "/real/home"}, {"PROJ", "p"}});
  options.env_overrides = {"MODEL_SIZE=13b"};
  Task t = Parse(
      "envs:\n"
      "  MY_BUCKET: skypilot-temp\n"
      "  MODEL_SIZE: 7b\n"
      "  HOME: /yaml/home\n"
      "workdir: ~/${PROJ}/src\n"
      "file_mounts:\n"
      "  /checkpoint/${MODEL_SIZE}: ~/${LOCAL_DIR}\n"
      "  /data/$MY_BUCKET-2: $HOME/data\n"
      "  /cost$: /price$5\n"
      "setup: echo ${MY_BUCKET}\n"
      "run: ls /checkpoint/$MODEL_SIZE\n",
      options);
  CHECK(t.workdir == "/real/home/p/src");  // ~ is the local home, not the task's HOME
  // envs (after --env) win over the local environment; '$' without a name stays.
  CHECK(t.file_mounts ==
        std::map<std::string, std::string>{{"/checkpoint/13b", "/real/home/ckpt"},
                                           {"/data/skypilot-temp-2", "/yaml/home/data"},
                                           {"/cost$", "/price$5"}});
  CHECK(t.setup == "echo ${MY_BUCKET}");
  CHECK(t.run == "ls /checkpoint/$MODEL_SIZE");
}

TEST_CASE("secrets are not substituted into paths") {
  std::string msg = ErrorOf(
      "secrets:\n"
      "  TOKEN: abc\n"
      "file_mounts:\n"
      "  /x/${TOKEN}: /y\n");
  CHECK(msg ==
        "t.yaml:4:3: file_mounts./x/${TOKEN}: variable TOKEN is not set: define it in envs or "
        "pass --env TOKEN=VALUE");
}

TEST_CASE("accelerators: name, name:count, fractions, maps, lists and sets") {
  CHECK(Parse("resources: {accelerators: H100}\n").resources.accelerator_count == 1);
  Task frac = Parse("resources:\n  accelerators: T4:0.5\n");
  CHECK(frac.resources.accelerator == "T4");
  CHECK(frac.resources.accelerator_count == 0.5);
  CHECK(ResourcesSummary(frac) == "1x(gpus=T4:0.5)");
  CHECK(ToSpec(frac).resources().accelerator_count() == 0.5);

  Task map = Parse("resources:\n  accelerators: {A100-80GB: 8}\n");
  CHECK(map.resources.accelerator == "A100-80GB");
  CHECK(map.resources.accelerator_count == 8);
  CHECK(map.notes.empty());

  // Several accelerators are candidates for the optimizer (SkyPilot): a list in the user's order
  // (ordered), a set or mapping any of them (any_of); each inherits the fields around it.
  Task list = Parse("resources:\n  cpus: 8+\n  accelerators: [V100:2, A100:1]\n");
  CHECK(list.notes.empty());
  CHECK(list.resources.any_of.empty());
  REQUIRE(list.resources.ordered.size() == 2);
  CHECK(list.resources.ordered[0].accelerator == "V100");
  CHECK(list.resources.ordered[0].accelerator_count == 2);
  CHECK(list.resources.ordered[1].accelerator == "A100");
  CHECK(list.resources.ordered[1].accelerator_count == 1);
  CHECK(list.resources.ordered[1].cpus == 8);
  CHECK(list.resources.ordered[1].cpus_at_least);
  CHECK(PrimaryResources(list).accelerator == "V100");

  // {V100:1, A100:1} is a YAML set: keys carrying the counts, null values.
  Task set = Parse("resources:\n  accelerators: {V100:1, A100:1}\n");
  CHECK(set.resources.accelerator == "V100");
  CHECK(set.resources.accelerator_count == 1);
  CHECK(set.notes.empty());
  REQUIRE(set.resources.any_of.size() == 2);
  CHECK(set.resources.any_of[1].accelerator == "A100");
  Task counts = Parse("resources:\n  accelerators: {A100: 8, H100: 8}\n  use_spot: true\n");
  REQUIRE(counts.resources.any_of.size() == 2);
  CHECK(counts.resources.any_of[1].accelerator == "H100");
  CHECK(counts.resources.any_of[1].accelerator_count == 8);
  CHECK(counts.resources.any_of[1].use_spot);  // a field after accelerators is inherited too

  // Inside a candidate, the first is used, with a note.
  Task inner = Parse("resources:\n  any_of:\n    - accelerators: [V100:2, A100:1]\n");
  REQUIRE(inner.resources.any_of.size() == 1);
  CHECK(inner.resources.any_of[0].accelerator == "V100");
  REQUIRE(inner.notes.size() == 1);
  CHECK(inner.notes[0] ==
        "t.yaml:3:21: resources.any_of[0].accelerators: 2 alternatives given; "
        "herd uses the first, V100:2");
  auto both = ParseTaskYaml(
      "resources:\n  accelerators: [V100:2, A100:1]\n  ordered:\n    - cpus: 4\n", "t.yaml");
  REQUIRE_FALSE(both.ok());
  CHECK(both.status().message() ==
        "t.yaml:2:17: resources.accelerators: several accelerators and ordered together: give "
        "one accelerator per candidate of ordered");

  CHECK(Parse("resources: {accelerators: null}\n").resources.accelerator.empty());
}

TEST_CASE("cpus, memory, infra, ports, disk_size, use_spot") {
  Task t = Parse(
      "resources:\n"
      "  cpus: '8+'\n"
      "  memory: 32GB+\n"
      "  infra: AWS/us-east-1\n"
      "  ports: [8080, '10000-10100']\n"
      "  disk_size: 256\n"
      "  use_spot: yes\n");
  CHECK(*t.resources.cpus == 8);
  CHECK(t.resources.cpus_at_least);
  CHECK(*t.resources.memory_gb == 32);
  CHECK(t.resources.memory_at_least);
  CHECK(t.resources.infra == "aws/us-east-1");
  CHECK(t.resources.ports == std::vector<std::string>{"8080", "10000-10100"});
  CHECK(*t.resources.disk_size == 256);
  CHECK(t.resources.use_spot);
  CHECK(ResourcesSummary(t) == "1x(cpus=8+, mem=32GB+)");

  CHECK(Parse("resources: {ports: 22}\n").resources.ports == std::vector<std::string>{"22"});
  CHECK(Parse("resources: {infra: k8s/aws:eks:us-east-1:1234:cluster/my-cluster}\n")
            .resources.infra == "k8s/aws:eks:us-east-1:1234:cluster/my-cluster");
  CHECK(Parse("resources: {infra: ssh/my-pool}\n").resources.infra == "ssh/my-pool");
  CHECK(Parse("resources: {infra: local}\n").resources.infra == "local");
  CHECK(Parse("resources: {cloud: gcp, region: us-central1}\n").resources.infra ==
        "gcp/us-central1");
  CHECK(Parse("resources: {memory: 0.5}\n").resources.memory_gb == 0.5);
}

TEST_CASE("any_of candidates inherit the fields around them") {
  Task t = Parse(
      "num_nodes: 2\n"
      "resources:\n"
      "  any_of:\n"
      "    - accelerators: L4:4\n"
      "    - accelerators: A100:1\n"
      "      cpus: 16\n"
      "  cpus: 4+\n");
  REQUIRE(t.resources.any_of.size() == 2);
  CHECK(t.resources.any_of[0].accelerator == "L4");
  CHECK(*t.resources.any_of[0].cpus == 4);
  CHECK(t.resources.any_of[0].cpus_at_least);
  CHECK(*t.resources.any_of[1].cpus == 16);
  CHECK_FALSE(t.resources.any_of[1].cpus_at_least);
  CHECK(&PrimaryResources(t) == &t.resources.any_of[0]);
  CHECK(ResourcesSummary(t) == "2x(gpus=L4:4, cpus=4+)");
  CHECK(ToSpec(t).resources().accelerator() == "L4");

  Task o = Parse("resources:\n  ordered:\n    - {infra: aws}\n    - {infra: gcp}\n");
  CHECK(o.resources.ordered.size() == 2);
  CHECK(PrimaryResources(o).infra == "aws");
}

TEST_CASE("SkyPilot fields herd does not act on are accepted with a note") {
  Task t = Parse(
      "config:\n"
      "  kubernetes: {pod_config: {}}\n"
      "resources:\n"
      "  image_id: ami-123\n"
      "  instance_type: p4d.24xlarge\n"
      "  cpus: 2\n");
  REQUIRE(t.notes.size() == 2);
  CHECK(t.notes[0] ==
        "t.yaml:1:1: config: accepted for SkyPilot compatibility; herd does not act on it");
  CHECK(t.notes[1] ==
        "t.yaml:4:3: resources.image_id: accepted for SkyPilot compatibility; herd does not "
        "act on it");
  // instance_type is used by the aws provider as is.
  CHECK(t.resources.instance_type == "p4d.24xlarge");
}

TEST_CASE("image_id: docker:IMAGE runs the task in that container; --image-id overrides it") {
  Task t = Parse("resources:\n  image_id: docker:nvcr.io/nvidia/pytorch:24.01-py3\n");
  CHECK(t.notes.empty());
  CHECK(t.resources.container_image == "nvcr.io/nvidia/pytorch:24.01-py3");
  herd::v1::TaskSpec spec = ToSpec(t);
  CHECK(spec.container().image() == "nvcr.io/nvidia/pytorch:24.01-py3");
  REQUIRE(spec.container().mounts_size() == 1);
  CHECK(spec.container().mounts(0) == "~/sky_workdir");
  CHECK(!ToSpec(Parse("run: true\n")).has_container());

  REQUIRE(ApplyImageIdFlag("docker:localhost/herd-test:1", t.resources).ok());
  CHECK(t.resources.container_image == "localhost/herd-test:1");
  CHECK(ApplyImageIdFlag("ubuntu:22.04", t.resources).message() ==
        "--image-id 'ubuntu:22.04': expected docker:IMAGE (e.g. "
        "docker:nvcr.io/nvidia/pytorch:24.01-py3)");

  auto bad = ParseTaskYaml("resources:\n  image_id: 'docker:-rm x'\n", "t.yaml");
  REQUIRE(!bad.ok());
  CHECK(bad.status().message().find("t.yaml:2:13: resources.image_id: '-rm x' is not an image "
                                    "reference") == 0);
}

TEST_CASE("instance_type must be a plain name") {
  auto r = ParseTaskYaml("resources:\n  instance_type: [a, b]\n", "t.yaml");
  REQUIRE(!r.ok());
  CHECK(r.status().message().find("t.yaml:2:18: resources.instance_type: expected an instance "
                                  "type name") == 0);
}

TEST_CASE("an empty file is a valid task with defaults") {
  ParseOptions options = WithEnv();
  options.env_overrides = {"A=1"};
  Task t = Parse("# nothing here\n", options);
  CHECK(t.num_nodes == 1);
  CHECK(t.run.empty());
  CHECK(t.envs.at("A") == "1");
  CHECK(ResourcesSummary(t) == "1x(cpus=0.5)");
}

// Each bad input: the exact message, which starts with file:line:col (1-based), names the field
// path and says what to change.
struct BadCase {
  const char* yaml;
  const char* message;
};

TEST_CASE("bad input gives a located message that names the field and the fix") {
  const BadCase cases[] = {
      {"name: x\nnun_nodes: 2\n",
       "t.yaml:2:1: unknown field 'nun_nodes' (did you mean 'num_nodes'?)"},
      {"frobnicate: 1\n",
       "t.yaml:1:1: unknown field 'frobnicate' (known fields: name, workdir, num_nodes, resources, "
       "envs, secrets, file_mounts, setup, run)"},
      {"Run: echo\n", "t.yaml:1:1: unknown field 'Run' (did you mean 'run'?)"},
      {"resources:\n  cpu: 4\n",
       "t.yaml:2:3: resources: unknown field 'cpu' (did you mean 'cpus'?)"},
      {"resources:\n  cpus: four\n",
       "t.yaml:2:9: resources.cpus: expected a number or 'N+', got 'four'"},
      {"resources:\n  cpus: -2\n",
       "t.yaml:2:9: resources.cpus: expected a number or 'N+', got '-2'"},
      {"resources:\n  cpus: [4]\n",
       "t.yaml:2:9: resources.cpus: expected a number or 'N+', got a list"},
      {"resources:\n  memory: lots\n",
       "t.yaml:2:11: resources.memory: expected a size such as 256, 256GB, 1TB or 512Gi+, got "
       "'lots'"},
      {"resources:\n  accelerators: L4:x\n",
       "t.yaml:2:17: resources.accelerators: count 'x' must be a positive number (e.g. L4:4 or "
       "T4:0.5)"},
      {"resources:\n  accelerators: L4:0\n",
       "t.yaml:2:17: resources.accelerators: count '0' must be a positive number (e.g. L4:4 or "
       "T4:0.5)"},
      {"resources:\n  accelerators: 'L 4'\n",
       "t.yaml:2:17: resources.accelerators: expected NAME or NAME:COUNT (e.g. L4:4, H100, "
       "T4:0.5), "
       "got 'L 4'"},
      {"resources:\n  accelerators: {L4: four}\n",
       "t.yaml:2:22: resources.accelerators.L4: expected a positive count (e.g. L4: 4), got "
       "'four'"},
      {"resources:\n  accelerators: []\n",
       "t.yaml:2:17: resources.accelerators: expected an accelerator such as L4:4, got an empty "
       "list"},
      {"resources:\n  acelerators: L4\n",
       "t.yaml:2:3: resources: unknown field 'acelerators' (did you mean 'accelerators'?)"},
      {"num_nodes: 0\n", "t.yaml:1:12: num_nodes: expected a positive integer, got '0'"},
      {"num_nodes: two\n", "t.yaml:1:12: num_nodes: expected a positive integer, got 'two'"},
      {"num_nodes: 1.5\n", "t.yaml:1:12: num_nodes: expected a positive integer, got '1.5'"},
      {"num_nodes: \"2\"\n",
       "t.yaml:1:12: num_nodes: expected a positive integer, got '2' (remove the quotes)"},
      {"resources:\n  use_spot: maybe\n",
       "t.yaml:2:13: resources.use_spot: expected true or false, got 'maybe'"},
      {"resources:\n  disk_size: big\n",
       "t.yaml:2:14: resources.disk_size: expected a size such as 256, 256GB, 1TB or 512Gi+, got "
       "'big'"},
      {"resources:\n  ports: 70000\n",
       "t.yaml:2:10: resources.ports: expected a port 1-65535 or a range like '10000-10100', got "
       "'70000'"},
      {"resources:\n  ports: 200-100\n",
       "t.yaml:2:10: resources.ports: range '200-100' ends before it starts"},
      {"resources:\n  ports:\n    - 8080\n    - {a: 1}\n",
       "t.yaml:4:7: resources.ports[1]: expected a port (8080) or a range ('10000-10100'), got a "
       "mapping"},
      {"resources:\n  infra: aws//x\n",
       "t.yaml:2:10: resources.infra: expected CLOUD[/REGION[/ZONE]], k8s/CONTEXT, ssh/POOL or "
       "local, got 'aws//x'"},
      {"resources:\n  infra: aws\n  cloud: gcp\n",
       "t.yaml:3:3: resources.cloud: give either infra or cloud/region/zone, not both (e.g. infra: "
       "aws/us-east-1)"},
      {"resources:\n  any_of: [{cpus: 2}]\n  ordered: [{cpus: 4}]\n",
       "t.yaml:3:3: resources: give either any_of or ordered, not both"},
      {"resources:\n  any_of:\n    - cpus: 2\n    - cpus: x\n",
       "t.yaml:4:13: resources.any_of[1].cpus: expected a number or 'N+', got 'x'"},
      {"resources:\n  any_of:\n    - acelerators: L4\n",
       "t.yaml:3:7: resources.any_of[0]: unknown field 'acelerators' (did you mean "
       "'accelerators'?)"},
      {"resources:\n  any_of:\n    - ordered: [{cpus: 1}]\n",
       "t.yaml:3:7: resources.any_of[0].ordered: candidates cannot be nested: move them to "
       "resources.ordered"},
      {"resources: [cpus]\n",
       "t.yaml:1:12: resources: expected a mapping of resource fields (cpus, accelerators, ...), "
       "got a list"},
      {"envs: [A, B]\n", "t.yaml:1:7: envs: expected a mapping of NAME: value, got a list"},
      {"envs:\n  1X: a\n",
       "t.yaml:2:3: envs: invalid variable name '1X': use letters, digits and '_', not starting "
       "with a digit"},
      {"envs:\n  A: [1, 2]\n",
       "t.yaml:2:6: envs.A: expected a string, number or bool (null means required), got a list"},
      {"name: x\nenvs:\n  WANDB_API_KEY:\n",
       "t.yaml:3:3: envs.WANDB_API_KEY is required: pass --env WANDB_API_KEY=VALUE (or put it in "
       "an --env-file)"},
      {"secrets:\n  HF_TOKEN: null\n",
       "t.yaml:2:3: secrets.HF_TOKEN is required: pass --secret HF_TOKEN=VALUE"},
      {"setup:\n  a: b\n",
       "t.yaml:2:3: setup: expected a string or a list of strings, got a mapping"},
      {"run:\n  - echo hi\n  - {x: 1}\n",
       "t.yaml:3:5: run[1]: expected a string (one command line), got a mapping"},
      {"name: {a: 1}\n", "t.yaml:1:7: name: expected a string, got a mapping"},
      {"run: echo a\nname: x\nrun: echo b\n",
       "t.yaml:3:1: run: given twice (first on line 1): keep one"},
      {"echo hi\n",
       "t.yaml:1:1: expected a mapping of task fields (name, resources, setup, run, ...), got "
       "'echo "
       "hi'"},
      {"name: a\nrun: x\n---\nname: b\n",
       "t.yaml:4:1: a second task (YAML document): this command takes one task; `herd launch` "
       "runs a pipeline of 2 tasks one after another"},
      {"file_mounts:\n  /data:\n    nmae: bucket\n",
       "t.yaml:3:5: file_mounts./data: unknown field 'nmae' (known fields: name, source, store, "
       "mode, persistent)"},
      {"file_mounts:\n  /data/$UNSET_VAR: /x\n",
       "t.yaml:2:3: file_mounts./data/$UNSET_VAR: variable UNSET_VAR is not set: define it in envs "
       "or pass --env UNSET_VAR=VALUE"},
      {"file_mounts:\n  /data:\n",
       "t.yaml:2:3: file_mounts./data: expected a local path, a bucket URI (s3://bucket/prefix) or "
       "a bucket {name, source, mode}, got null"},
      {"workdir: ${UNCLOSED\n", "t.yaml:1:10: workdir: unterminated '${' in '${UNCLOSED'"},
      {"workdir:\n  ref: main\n",
       "t.yaml:2:3: workdir: a git workdir needs url: (and may give ref:)"},
      {"service:\n  replicas: 2\n",
       "t.yaml:1:1: service: SkyServe services are not supported by herd: run the server as a job "
       "instead"},
  };
  for (const BadCase& c : cases) {
    CAPTURE(std::string(c.yaml));
    CHECK(ErrorOf(c.yaml) == std::string(c.message));
  }
}

TEST_CASE("YAML syntax errors are located") {
  CHECK(ErrorOf("resources:\n  cpus: [4\nrun: x\n") ==
        "t.yaml:3:4: invalid YAML: end of sequence flow not found");
  CHECK(ErrorOf("name: a: b\n") == "t.yaml:1:8: invalid YAML: illegal map value");
  CHECK(ErrorOf("resources:\n  cpus: 4\n bad: indent\n") ==
        "t.yaml:3:2: invalid YAML: end of map not found");
}

TEST_CASE("bad overrides and env files name the flag or file and line") {
  ParseOptions bad_name = WithEnv();
  bad_name.env_overrides = {"1X=2"};
  CHECK(ErrorOf("run: x\n", bad_name) ==
        "--env '1X=2': expected NAME=VALUE or NAME, where NAME is letters, digits and '_' not "
        "starting with a digit");

  ParseOptions unset = WithEnv();
  unset.env_overrides = {"FOO"};
  CHECK(ErrorOf("run: x\n", unset) ==
        "--env FOO: FOO is not set in the local environment; pass --env FOO=VALUE");

  ParseOptions secret = WithEnv();
  secret.secret_overrides = {"=x"};
  CHECK(ErrorOf("run: x\n", secret).starts_with("--secret '=x': expected NAME=VALUE"));

  TempDir dir{"herd-task-test"};
  ParseOptions file = WithEnv();
  file.env_files = {dir.Write("bad.env", "A=1\ngarbage line\n")};
  CHECK(ErrorOf("run: x\n", file) ==
        file.env_files[0] + ":2: expected NAME=VALUE, got 'garbage line'");

  file.env_files = {dir.Write("quote.env", "A=\"open\n")};
  CHECK(ErrorOf("run: x\n", file) == file.env_files[0] + ":1: unterminated \" quote");

  ParseOptions missing = WithEnv();
  missing.env_files = {dir.path() + "/nope.env"};
  auto r = ParseTaskYaml("run: x\n", "t.yaml", missing);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        "cannot read " + dir.path() + "/nope.env: No such file or directory");
}

TEST_CASE("a missing or unreadable task file") {
  TempDir dir{"herd-task-test"};
  auto r = ParseTaskFile(dir.path() + "/missing.yaml");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kIo);
  CHECK(r.status().message() ==
        "cannot read " + dir.path() + "/missing.yaml: No such file or directory");
  auto d = ParseTaskFile(dir.path());
  REQUIRE_FALSE(d.ok());
  CHECK(d.status().message() == "cannot read " + dir.path() + ": Is a directory");
}

TEST_CASE("errors in a file are located by its path") {
  TempDir dir{"herd-task-test"};
  std::string path = dir.Write("train.yaml", "name: x\nresources:\n  cpus: four\n");
  auto r = ParseTaskFile(path);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        path + ":3:9: resources.cpus: expected a number or 'N+', got 'four'");
}

TEST_CASE("ToJson is normalised and redacts secrets") {
  ParseOptions options = WithEnv();
  options.secret_overrides = {"HF_TOKEN=hf_very_secret"};
  Task t = Parse(
      "name: j\n"
      "num_nodes: 2\n"
      "resources: {cpus: 4+, accelerators: T4:0.5, ports: 8080}\n"
      "envs: {A: 1}\n"
      "secrets: {WANDB: wandb_very_secret}\n"
      "run: [echo a, echo b]\n",
      options);
  std::string json = ToJson(t);
  CHECK(json.find("very_secret") == std::string::npos);
  boost::json::value v = boost::json::parse(json);
  CHECK(v.at("name") == "j");
  CHECK(v.at("num_nodes") == 2);
  CHECK(v.at("envs").at("A") == "1");
  CHECK(v.at("secrets").at("HF_TOKEN") == "<redacted>");
  CHECK(v.at("secrets").at("WANDB") == "<redacted>");
  CHECK(v.at("run") == "echo a\necho b");
  const auto& res = v.at("resources");
  CHECK(res.at("cpus") == 4);  // whole numbers are JSON integers
  CHECK(res.at("cpus_at_least") == true);
  CHECK(res.at("accelerator") == "T4");
  CHECK(res.at("accelerator_count").as_double() == 0.5);
  CHECK(res.at("memory_gb").is_null());
  CHECK(res.at("infra").is_null());
  CHECK(res.at("ports").as_array().size() == 1);
  CHECK(res.at("disk_size").is_null());
}

TEST_CASE("ResourcesSummary forms") {
  CHECK(ResourcesSummary(Parse("run: x\n")) == "1x(cpus=0.5)");
  CHECK(ResourcesSummary(Parse("resources: {cpus: 2}\n")) == "1x(cpus=2)");
  CHECK(ResourcesSummary(Parse("num_nodes: 3\nresources: {accelerators: H100:8}\n")) ==
        "3x(gpus=H100:8)");
  CHECK(ResourcesSummary(Parse("resources: {memory: 16}\n")) == "1x(cpus=0.5, mem=16GB)");
}

TEST_CASE("ToSpec carries what the head needs") {
  ParseOptions options = WithEnv();
  options.secret_overrides = {"TOKEN=t0k"};
  Task t = Parse(
      "name: train\n"
      "num_nodes: 2\n"
      "workdir: ./src\n"
      "resources: {cpus: 4+, memory: 32, accelerators: L4:4}\n"
      "envs: {A: x}\n"
      "setup: pip install -r r.txt\n"
      "run: torchrun main.py\n",
      options);
  herd::v1::TaskSpec spec = ToSpec(t);
  CHECK(spec.name() == "train");
  CHECK(spec.num_nodes() == 2);
  CHECK(spec.resources().cpus() == 4);
  CHECK(spec.resources().cpus_at_least());
  CHECK(spec.resources().memory_gb() == 32);
  CHECK_FALSE(spec.resources().memory_at_least());
  CHECK(spec.resources().accelerator() == "L4");
  CHECK(spec.resources().accelerator_count() == 4);
  CHECK(spec.envs().at("A") == "x");
  CHECK(spec.secrets().at("TOKEN") == "t0k");  // nodes need the value; only printing hides it
  CHECK(spec.setup() == "pip install -r r.txt");
  CHECK(spec.run() == "torchrun main.py");
  CHECK(spec.workdir() == "~/sky_workdir");
  CHECK(ToSpec(Parse("run: x\n")).resources().cpus() == 0);  // 0: the head's default demand
}

TEST_CASE("CLI resource flags override the task and every candidate") {
  Task t = Parse("resources:\n  any_of: [{accelerators: L4:1}, {accelerators: A100:1}]\n");
  REQUIRE(ApplyAcceleratorFlag("H100:8", t.resources).ok());
  REQUIRE(ApplyCpusFlag("8+", t.resources).ok());
  REQUIRE(ApplyMemoryFlag("64", t.resources).ok());
  for (const Resources* r : {&t.resources, &t.resources.any_of[0], &t.resources.any_of[1]}) {
    CHECK(r->accelerator == "H100");
    CHECK(r->accelerator_count == 8);
    CHECK(*r->cpus == 8);
    CHECK(r->cpus_at_least);
    CHECK(*r->memory_gb == 64);
    CHECK_FALSE(r->memory_at_least);
  }
  Resources r;
  REQUIRE(ApplyAcceleratorFlag("T4:0.5", r).ok());
  CHECK(r.accelerator_count == 0.5);
  REQUIRE(ApplyAcceleratorFlag("A100", r).ok());
  CHECK(r.accelerator_count == 1);

  CHECK(ApplyAcceleratorFlag("L4:", r).message() ==
        "--gpus 'L4:': count '' must be a positive number (e.g. L4:4 or T4:0.5)");
  CHECK(ApplyAcceleratorFlag("", r).message() ==
        "--gpus '': expected NAME or NAME:COUNT (e.g. L4:4, H100, T4:0.5), got ''");
  CHECK(ApplyCpusFlag("eight", r).message() ==
        "--cpus 'eight': expected a positive number or 'N+' (e.g. 8 or 8+)");
  CHECK(ApplyCpusFlag("0", r).message() ==
        "--cpus '0': expected a positive number or 'N+' (e.g. 8 or 8+)");
  CHECK(ApplyMemoryFlag("lots+", r).message() ==
        "--memory 'lots+': expected a positive number of GB or 'N+' (e.g. 32 or 32+)");
  CHECK(r.accelerator == "A100");  // a failed flag changes nothing
}

TEST_CASE("SkyPilot's launch flags: spot, instance type, disk, ports, region and zone, workdir") {
  Task t = Parse("resources:\n  ordered: [{accelerators: L4:1}, {accelerators: A100:1}]\n");
  ApplyUseSpotFlag(t.resources);
  REQUIRE(ApplyInstanceTypeFlag("g6.xlarge", t.resources).ok());
  REQUIRE(ApplyDiskSizeFlag("1TB", t.resources).ok());
  REQUIRE(ApplyPortsFlag({"8080", "10000-10100"}, t.resources).ok());
  REQUIRE(ApplyRegionZoneFlags("", "us-west-2b", t.resources).ok());
  for (const Resources* r : {&t.resources, &t.resources.ordered[0], &t.resources.ordered[1]}) {
    CHECK(r->use_spot);
    CHECK(r->instance_type == "g6.xlarge");
    CHECK(r->disk_size == 1024);
    CHECK(r->ports == std::vector<std::string>{"8080", "10000-10100"});
    CHECK(r->infra == "aws/us-west-2/us-west-2b");
  }
  Resources r;
  REQUIRE(ApplyRegionZoneFlags("eu-west-1", "", r).ok());
  CHECK(r.infra == "aws/eu-west-1");
  CHECK(ApplyRegionZoneFlags("us-east-1", "us-west-2a", r).message() ==
        "--zone us-west-2a is not in --region us-east-1");
  CHECK(ApplyRegionZoneFlags("US East", "", r).message() ==
        "--region 'US East': expected a region such as us-east-1");
  CHECK(ApplyRegionZoneFlags("", "us-east-1", r).message() ==
        "--zone 'us-east-1': expected a zone such as us-east-1a");
  Resources pool;
  pool.infra = "ssh/gpus";
  CHECK(ApplyRegionZoneFlags("us-east-1", "", pool).message() ==
        "--region: only aws has regions and zones; the task's infra is ssh/gpus");
  CHECK(ApplyInstanceTypeFlag("P5 large", r).message() ==
        "--instance-type 'P5 large': expected an instance type such as p5.48xlarge");
  CHECK(ApplyDiskSizeFlag("256+", r).message() ==
        "--disk-size '256+': a disk has one size: remove the '+'");
  CHECK(ApplyDiskSizeFlag("0.5", r).message().find("expected from 1 GB to") != std::string::npos);
  CHECK(ApplyPortsFlag({"8080", "http"}, r).message().rfind("--ports 'http': ", 0) == 0);
  CHECK(r.ports.empty());  // a failed flag changes nothing

  herd::testing::TempDir dir;
  Task w = Parse("run: x\n");
  REQUIRE(ApplyWorkdirFlag(dir.path(), w).ok());
  CHECK(w.workdir == std::filesystem::path(dir.path()).lexically_normal().string());
  CHECK(ApplyWorkdirFlag(dir.path() + "/missing", w).message() ==
        "--workdir '" + dir.path() + "/missing': not a directory");
}

TEST_CASE("RunCheck prints a summary, JSON or the error, and returns 0 or 2") {
  std::ostringstream out, err;
  CHECK(RunCheck(kTestdata + "/train-multinode.yaml", WithEnv(), false, out, err) == 0);
  CHECK(err.str().empty());
  std::string text = out.str();
  CHECK(text.starts_with(kTestdata + "/train-multinode.yaml: valid task\n"));
  CHECK(text.find("name:        minGPT-ddp\n") != std::string::npos);
  CHECK(text.find("num_nodes:   2\n") != std::string::npos);
  CHECK(text.find("resources:   2x(gpus=L4:4, cpus=4)\n") != std::string::npos);
  CHECK(text.find("setup: (4 lines)\n  git clone --depth 1") != std::string::npos);
  CHECK(text.find("  --node_rank=${SKYPILOT_NODE_RANK} \\\n") != std::string::npos);
  CHECK(text.find("envs:        (none)\n") != std::string::npos);
  CHECK(text.find("secrets:     (none)\n") != std::string::npos);
  CHECK(text.find("export LOGLEVEL=INFO\n\n  MASTER_ADDR") !=
        std::string::npos);  // no trailing blanks

  std::ostringstream wout, werr;
  CHECK(RunCheck(kTestdata + "/train-mounts.yaml", WithEnv(), false, wout, werr) == 0);
  CHECK(wout.str().find("workdir:     . (synced to ~/sky_workdir)\n") != std::string::npos);
  CHECK(wout.str().find("file_mounts:\n  ~/.netrc <- ~/.netrc\n  ~/.vimrc <- ~/.vimrc\n") !=
        std::string::npos);

  std::ostringstream jout, jerr;
  CHECK(RunCheck(kTestdata + "/train.yaml", WithEnv(), true, jout, jerr) == 0);
  boost::json::value v = boost::json::parse(jout.str());
  CHECK(v.at("resources").at("accelerator") == "L4");

  TempDir dir{"herd-task-test"};
  ParseOptions options = WithEnv();
  options.secret_overrides = {"HF_TOKEN=hf_abc"};
  std::string secret_task = dir.Write("s.yaml", "secrets: {HF_TOKEN: null}\nconfig: {}\n");
  std::ostringstream sout, serr;
  CHECK(RunCheck(secret_task, options, false, sout, serr) == 0);
  CHECK(sout.str().find("HF_TOKEN=<redacted>") != std::string::npos);
  CHECK(sout.str().find("hf_abc") == std::string::npos);
  CHECK(serr.str() == "note: " + secret_task +
                          ":2:1: config: accepted for SkyPilot compatibility; herd does not act "
                          "on it\nnote: " +
                          secret_task +
                          ": nothing will run: the task has no setup and no run, so its job does "
                          "nothing\n");

  std::string bad = dir.Write("bad.yaml", "nun_nodes: 2\n");
  std::ostringstream bout, berr;
  CHECK(RunCheck(bad, WithEnv(), false, bout, berr) == 2);
  CHECK(bout.str().empty());
  CHECK(berr.str() == bad + ":1:1: unknown field 'nun_nodes' (did you mean 'num_nodes'?)\n");

  std::ostringstream mout, merr;
  CHECK(RunCheck(dir.path() + "/none.yaml", WithEnv(), true, mout, merr) == 2);
  CHECK(mout.str().empty());
  CHECK(merr.str() == "cannot read " + dir.path() + "/none.yaml: No such file or directory\n");
}

TEST_CASE("env file parser and substitution helpers") {
  auto pairs = ParseEnvFileText("A=1\r\nexport B = two \n#C=3\nD=\n", "x.env");
  REQUIRE(pairs.ok());
  CHECK(*pairs == EnvPairs{{"A", "1"}, {"B", "two"}, {"D", ""}});
  EnvLookup lookup = [](const std::string& n) -> std::optional<std::string> {
    if (n == "A") return "1";
    return std::nullopt;
  };
  CHECK(SubstituteVars("$A${A}$ $-$", lookup).value() == "11$ $-$");
  CHECK(SubstituteVars("${}", lookup).status().message() ==
        "'${}' is not a valid variable reference");
}

TEST_CASE("resources.job_recovery: SkyPilot's string and mapping forms") {
  CHECK_FALSE(Parse("run: x\n").resources.job_recovery.has_value());
  Task plain = Parse("resources:\n  job_recovery: failover\n");
  REQUIRE(plain.resources.job_recovery.has_value());
  CHECK(plain.resources.job_recovery->strategy == "FAILOVER");
  CHECK(plain.resources.job_recovery->max_restarts_on_errors == 0);
  CHECK(plain.notes.empty());  // acted on by `herd jobs launch`, no "ignored" note

  Task full = Parse(
      "resources:\n  job_recovery:\n    strategy: EAGER_NEXT_REGION\n"
      "    max_restarts_on_errors: 3\n");
  REQUIRE(full.resources.job_recovery.has_value());
  CHECK(full.resources.job_recovery->strategy == "EAGER_NEXT_REGION");
  CHECK(full.resources.job_recovery->max_restarts_on_errors == 3);

  // The strategy may be left out (FAILOVER); candidates inherit the field around them.
  Task only_max =
      Parse("resources:\n  job_recovery: {max_restarts_on_errors: 2}\n  any_of:\n    - cpus: 1\n");
  CHECK(only_max.resources.job_recovery->strategy == "FAILOVER");
  REQUIRE(only_max.resources.any_of.size() == 1);
  CHECK(only_max.resources.any_of[0].job_recovery->max_restarts_on_errors == 2);
}

TEST_CASE("resources.job_recovery: bad values name file, line, column and field") {
  CHECK(ErrorOf("resources:\n  job_recovery: SOMETIMES\n") ==
        "t.yaml:2:17: resources.job_recovery: expected a recovery strategy (FAILOVER, "
        "EAGER_NEXT_REGION or none), got 'SOMETIMES'");
  CHECK(ErrorOf("resources:\n  job_recovery:\n    strategy: [a]\n") ==
        "t.yaml:3:15: resources.job_recovery.strategy: expected a recovery strategy (FAILOVER, "
        "EAGER_NEXT_REGION or none), got a list");
  CHECK(ErrorOf("resources:\n  job_recovery:\n    max_restarts_on_errors: -1\n") ==
        "t.yaml:3:29: resources.job_recovery.max_restarts_on_errors: expected an integer from 0 "
        "to 1000, got '-1'");
  CHECK(ErrorOf("resources:\n  job_recovery:\n    max_restarts_on_errors: \"2\"\n") ==
        "t.yaml:3:29: resources.job_recovery.max_restarts_on_errors: expected an integer from 0 "
        "to 1000, got '2'");
  CHECK(ErrorOf("resources:\n  job_recovery:\n    max_restarts_on_errors: 1.5\n") ==
        "t.yaml:3:29: resources.job_recovery.max_restarts_on_errors: expected an integer from 0 "
        "to 1000, got '1.5'");
  CHECK(ErrorOf("resources:\n  job_recovery:\n    max_restart_on_errors: 1\n") ==
        "t.yaml:3:5: resources.job_recovery: unknown field 'max_restart_on_errors' (did you mean "
        "'max_restarts_on_errors'?)");
  CHECK(ErrorOf("resources:\n  job_recovery: [FAILOVER]\n") ==
        "t.yaml:2:17: resources.job_recovery: expected a strategy name or a mapping {strategy, "
        "max_restarts_on_errors}, got a list");
}

// The time one call takes, for the limits that must refuse hostile input quickly.
template <typename F>
double SecondsOf(F&& f) {
  auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// setup: a list whose first item anchors a string of `size` bytes and whose other `aliases`
// items repeat it (the shape of a "billion laughs" that yaml-cpp shares but a task copies).
std::string AliasBomb(std::size_t size, int aliases) {
  std::string yaml = "setup:\n  - &big \"" + std::string(size, 'x') + "\"\n";
  for (int i = 0; i < aliases; ++i) yaml += "  - *big\n";
  return yaml;
}

TEST_CASE("an alias bomb is refused at the alias that crosses the expansion limit, fast") {
  // Expanded size as the parser counts it: the root mapping, the key "setup", the list, then the
  // anchored string and each alias, each its bytes plus one.
  const std::size_t size = 10000;
  const std::size_t before_aliases = 1 + (1 + 5) + 1 + (size + 1);
  const std::size_t crossing = (limits::kMaxTaskExpandedBytes - before_aliases) / (size + 1) + 1;
  const std::string yaml = AliasBomb(size, 5000);  // 50 KB that would expand to 50 MB
  std::string message;
  double seconds = SecondsOf([&] { message = ErrorOf(yaml); });
  CHECK(message ==
        "t.yaml:" + std::to_string(2 + crossing) + ":5: the task expands to more than " +
            std::to_string(limits::kMaxTaskExpandedBytes) +
            " bytes (512 KiB) here (scalars' bytes plus one per node, each alias counted "
            "as a copy of the node it names): repeat less");
  CHECK(seconds < 1.0);
  // One alias fewer than the crossing one is within the limit, and its setup is the copies.
  Task t = Parse(AliasBomb(size, static_cast<int>(crossing) - 1));
  CHECK(t.setup.size() == crossing * size + (crossing - 1));
}

TEST_CASE("nested anchors count with everything they contain") {
  // Each level is a list of ten aliases of the one before: 10^7 copies of a 10-byte string by
  // the seventh level, which the expansion limit stops. Under an ignored field (config), so that
  // nothing but the limit refuses it.
  std::string yaml = "config:\n  l0: &l0 \"0123456789\"\n";
  for (int level = 1; level <= 7; ++level) {
    yaml += "  l" + std::to_string(level) + ": &l" + std::to_string(level) + " [";
    for (int i = 0; i < 10; ++i)
      yaml += std::string(i ? ", " : "") + "*l" + std::to_string(level - 1);
    yaml += "]\n";
  }
  std::string message;
  double seconds = SecondsOf([&] { message = ErrorOf(yaml); });
  // Level 4 (10^4 copies of 11 units, about 120 KB in all) fits; level 5 crosses 512 KiB.
  CHECK(message.rfind("t.yaml:7:", 0) == 0);
  CHECK(message.find("the task expands to more than") != std::string::npos);
  CHECK(seconds < 1.0);
  // Four levels fit.
  CHECK(Parse(yaml.substr(0, yaml.find("  l5:"))).notes.size() == 1);  // config: not acted on
}

TEST_CASE("a task with a few aliases is accepted with the values they stand for") {
  Task t = Parse(
      "envs: {DATA: &data /mnt/data, COPY: *data}\n"
      "setup: &prep pip install -r requirements.txt\n"
      "run:\n"
      "  - *prep\n"
      "  - python train.py\n"
      "resources:\n"
      "  any_of:\n"
      "    - &gpu {accelerators: L4:1, cpus: 4}\n"
      "    - *gpu\n");
  CHECK(t.envs.at("COPY") == "/mnt/data");
  CHECK(t.run == "pip install -r requirements.txt\npython train.py");
  REQUIRE(t.resources.any_of.size() == 2);
  CHECK(t.resources.any_of[1].accelerator == "L4");
}

TEST_CASE("alias uses, recursion and nesting depth have limits named at their place") {
  std::string many = "config:\n  a: &a x\n  b: [";
  for (std::size_t i = 0; i <= limits::kMaxTaskAliasUses; ++i) many += (i ? ",*a" : "*a");
  many += "]\n";
  std::string message = ErrorOf(many);
  CHECK(message == "t.yaml:3:" + std::to_string(7 + 3 * limits::kMaxTaskAliasUses) +
                       ": more than " + std::to_string(limits::kMaxTaskAliasUses) +
                       " aliases (*name) in one task file");

  CHECK(ErrorOf("config: &a [1, *a]\n") ==
        "t.yaml:1:16: an alias inside the node it names (a node that contains itself): a task "
        "cannot be recursive");

  // yaml-cpp 0.7 itself stops a few hundred levels down and calls that "bad file".
  const std::string deep = "run: " + std::string(100000, '[') + std::string(100000, ']');
  double seconds = SecondsOf([&] { message = ErrorOf(deep); });
  CHECK(message == "t.yaml:1:" + std::to_string(5 + limits::kMaxTaskNestingDepth) +
                       ": the file nests lists and mappings more than " +
                       std::to_string(limits::kMaxTaskNestingDepth) + " levels deep here");
  CHECK(seconds < 1.0);
  // Unclosed, yaml-cpp reads each '[' after the first two as a list in a mapping: the limit
  // counts what yaml-cpp builds, so it is reached sooner.
  message = ErrorOf("run: " + std::string(100000, '['));
  CHECK(message.rfind("t.yaml:1:", 0) == 0);
  CHECK(message.ends_with(": the file nests lists and mappings more than " +
                          std::to_string(limits::kMaxTaskNestingDepth) + " levels deep here"));
  // As deep as the limit (the root mapping is the first level) is fine.
  const int inner = limits::kMaxTaskNestingDepth - 1;
  Task t = Parse("config: " + std::string(inner, '[') + std::string(inner, ']') + "\n");
  CHECK(t.notes.size() == 1);
}

TEST_CASE("num_nodes past the limit says what the limit is") {
  const std::string limit = std::to_string(limits::kMaxTaskNodes);
  CHECK(ErrorOf("num_nodes: 1000000000\n") ==
        "t.yaml:1:12: num_nodes: at most " + limit + " nodes, got 1000000000");
  CHECK(ErrorOf("num_nodes: 99999999999999999999999\n") ==
        "t.yaml:1:12: num_nodes: at most " + limit + " nodes, got 99999999999999999999999");
  CHECK(Parse("num_nodes: " + limit + "\n").num_nodes == limits::kMaxTaskNodes);
  CHECK(ErrorOf("num_nodes: -3\n") ==
        "t.yaml:1:12: num_nodes: expected a positive integer, got '-3'");
}

TEST_CASE("a task name past the limit is refused at its place, naming the limit") {
  const std::size_t limit = limits::kMaxTaskNameBytes;
  const std::string at_limit(limit, 'n');
  CHECK(Parse("name: " + at_limit + "\nrun: echo\n").name == at_limit);
  const std::string over = "at most " + std::to_string(limit) + " bytes, got ";
  CHECK(ErrorOf("run: echo\nname: " + at_limit + "x\n") ==
        "t.yaml:2:7: name: " + over + std::to_string(limit + 1));
  // A name of most of a task file's bytes (a queue listing two of them would not fit a frame).
  const std::size_t big = limits::kMaxTaskFileBytes - 100;
  CHECK(ErrorOf("name: " + std::string(big, 'n') + "\n") ==
        "t.yaml:1:7: name: " + over + std::to_string(big));
  // Bytes, not characters: 101 two-byte characters are 202 bytes.
  std::string wide;
  for (std::size_t i = 0; i < limit / 2 + 1; ++i) wide += "\xc3\xa9";
  CHECK(ErrorOf("name: " + wide + "\n") ==
        "t.yaml:1:7: name: " + over + std::to_string(wide.size()));
  // -n/--name: the same limit, naming the flag; the task keeps its name.
  Task t = Parse("name: mine\nrun: echo\n");
  Status s = ApplyNameFlag(at_limit + "x", t);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message() == "--name: " + over + std::to_string(limit + 1));
  CHECK(t.name == "mine");
  CHECK(ApplyNameFlag(at_limit, t).ok());
  CHECK(t.name == at_limit);
}

TEST_CASE("a task file or env file over the size limit is refused before it is read") {
  TempDir dir{"herd-task-test"};
  std::string big = dir / "big.yaml";
  {
    std::ofstream out(big, std::ios::binary);
    out << "run: echo\n";
  }
  // Sparse past the limit: a reader that read the file first would spend the time and memory.
  fs::resize_file(big, std::uintmax_t{8} << 30);
  std::string message;
  double seconds = SecondsOf([&] {
    auto r = ParseTaskFile(big);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    message = r.status().message();
  });
  CHECK(message == big + ": the file is 8589934592 bytes; a task file may be at most " +
                       std::to_string(limits::kMaxTaskFileBytes) +
                       " bytes (256 KiB): keep data in the files a task mounts (file_mounts, "
                       "workdir), not in the task file");
  CHECK(seconds < 1.0);
  // At the limit it is read and parsed.
  std::string at_limit = dir.Write(
      "ok.yaml", "run: echo\n#" + std::string(limits::kMaxTaskFileBytes - 12, 'c') + "\n");
  REQUIRE(fs::file_size(at_limit) == limits::kMaxTaskFileBytes);
  CHECK(ParseTaskFile(at_limit).ok());

  ParseOptions options = WithEnv();
  options.env_files = {dir.Write("big.env", "A=" + std::string(limits::kMaxTaskFileBytes, 'a'))};
  CHECK(ErrorOf("run: x\n", options) ==
        options.env_files[0] + ": the file is " + std::to_string(limits::kMaxTaskFileBytes + 2) +
            " bytes; an --env-file may be at most " + std::to_string(limits::kMaxTaskFileBytes) +
            " bytes (256 KiB)");
}

TEST_CASE("overrides that make a task too large to submit are refused, naming the limit") {
  ParseOptions options = WithEnv();
  options.env_overrides = {"BIG=" + std::string(limits::kMaxTaskSpecBytes, 'v')};
  std::string message = ErrorOf("run: echo\n", options);
  CHECK(message.rfind("t.yaml: the task is ", 0) == 0);
  CHECK(message.find(" bytes as submitted (its setup, run, envs and secrets, with the values of "
                     "--env, --env-file and --secret), over the limit of " +
                     std::to_string(limits::kMaxTaskSpecBytes) + " bytes") != std::string::npos);
  // A little less fits.
  options.env_overrides = {"BIG=" + std::string(limits::kMaxTaskSpecBytes - 100, 'v')};
  CHECK(ParseTaskYaml("run: echo\n", "t.yaml", options).ok());
  CHECK(CheckSpecSize(Parse("run: echo\n"), "x").ok());
}

TEST_CASE("check notes that a task without setup or run runs nothing, in both output forms") {
  TempDir dir{"herd-task-test"};
  const std::string note =
      ": nothing will run: the task has no setup and no run, so its job does "
      "nothing\n";
  for (const char* text : {"", "# only a comment\n", "run: null\n", "name: x\nsetup: ''\nrun:\n"}) {
    std::string path = dir.Write("empty.yaml", text);
    for (bool json : {false, true}) {
      INFO(text, " json=", json);
      std::ostringstream out, err;
      CHECK(RunCheck(path, WithEnv(), json, out, err) == 0);
      CHECK(err.str() == "note: " + path + note);
      if (json) CHECK(boost::json::parse(out.str()).at("run") == "");
    }
  }
  std::string setup_only = dir.Write("setup.yaml", "setup: pip install x\n");
  std::ostringstream out, err;
  CHECK(RunCheck(setup_only, WithEnv(), false, out, err) == 0);
  CHECK(err.str().empty());
}

}  // namespace
}  // namespace herd::task
