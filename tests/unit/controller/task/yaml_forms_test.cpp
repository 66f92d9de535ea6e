// herd_task: SkyPilot YAML taken as written (issue 23 item 6): the gpus alias, sizes with units,
// job_recovery none and recover_on_exit_codes, secrets given as references, api_server_access,
// git workdirs (parsed here, cloned from a local repository), pipelines and job groups, ~ in
// local paths, env values as SkyPilot renders them, bucket URIs in file_mounts; and `herd check`
// over the tests/data/skypilot_forms corpus.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <algorithm>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "controller/ssh/subprocess.hpp"
#include "controller/task/resource_values.hpp"
#include "controller/task/task.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::task {
namespace {

namespace fs = std::filesystem;
using herd::testing::TempDir;

const std::string kForms = HERD_SKYPILOT_FORMS;

ParseOptions WithEnv(std::map<std::string, std::string> env = {{"HOME", "/home/u"}}) {
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
  std::string m = task.status().message();
  CHECK(m.find('\n') == std::string::npos);  // one line
  return m;
}

TEST_CASE("gpus is another name of accelerators, in the task and in candidates") {
  Task t = Parse("resources:\n  gpus: H100:8\n");
  CHECK(t.resources.accelerator == "H100");
  CHECK(t.resources.accelerator_count == 8);
  Task c = Parse("resources:\n  any_of:\n    - gpus: L4:2\n    - accelerators: A10G:1\n");
  REQUIRE(c.resources.any_of.size() == 2);
  CHECK(c.resources.any_of[0].accelerator == "L4");
  CHECK(c.resources.any_of[1].accelerator == "A10G");
  CHECK(ErrorOf("resources:\n  accelerators: L4\n  gpus: L4\n") ==
        "t.yaml:3:3: resources.gpus: gpus is another name of accelerators: give one of them");
  CHECK(ErrorOf("resources:\n  gpus: L4\n  accelerators: L4\n") ==
        "t.yaml:3:3: resources.accelerators: gpus is another name of accelerators: give one of "
        "them");
  CHECK(ErrorOf("resources:\n  gpus: L4:x\n") ==
        "t.yaml:2:9: resources.gpus: count 'x' must be a positive number (e.g. L4:4 or T4:0.5)");
}

TEST_CASE("sizes: units on memory and disk_size, plain numbers stay GB") {
  auto mem = [](std::string_view v) {
    Task t = Parse("resources:\n  memory: " + std::string(v) + "\n");
    return std::make_pair(*t.resources.memory_gb, t.resources.memory_at_least);
  };
  CHECK(mem("32") == std::make_pair(32.0, false));
  CHECK(mem("32+") == std::make_pair(32.0, true));
  CHECK(mem("1024GB") == std::make_pair(1024.0, false));
  CHECK(mem("1TB") == std::make_pair(1024.0, false));
  CHECK(mem("1tb") == std::make_pair(1024.0, false));
  CHECK(mem("512Gi+") == std::make_pair(512.0, true));
  CHECK(mem("64GiB") == std::make_pair(64.0, false));
  CHECK(mem("2048MB") == std::make_pair(2.0, false));
  CHECK(mem("512M") == std::make_pair(0.5, false));
  CHECK(mem("1PB") == std::make_pair(1048576.0, false));
  CHECK(mem("0.5T+") == std::make_pair(512.0, true));
  auto disk = [](std::string_view v) {
    return *Parse("resources:\n  disk_size: " + std::string(v) + "\n").resources.disk_size;
  };
  CHECK(disk("256") == 256);
  CHECK(disk("256GB") == 256);
  CHECK(disk("1024GB") == 1024);
  CHECK(disk("1TB") == 1024);
  CHECK(disk("2Ti") == 2048);
  CHECK(disk("1500MB") == 1);  // floored to whole GB, as SkyPilot does
  CHECK(disk("100.9") == 100);
}

TEST_CASE("sizes: a bad unit, a negative size or a disk under 1 GB is one line at its place") {
  CHECK(ErrorOf("resources:\n  disk_size: 10XB\n") ==
        "t.yaml:2:14: resources.disk_size: unknown unit 'XB' in '10XB' (use KB, MB, GB, TB or "
        "PB, or Ki, Mi, Gi, Ti, Pi)");
  CHECK(ErrorOf("resources:\n  memory: 10XB+\n") ==
        "t.yaml:2:11: resources.memory: unknown unit 'XB' in '10XB+' (use KB, MB, GB, TB or PB, "
        "or Ki, Mi, Gi, Ti, Pi)");
  CHECK(ErrorOf("resources:\n  disk_size: -5\n") ==
        "t.yaml:2:14: resources.disk_size: '-5' must be a positive size");
  CHECK(ErrorOf("resources:\n  memory: -16GB\n") ==
        "t.yaml:2:11: resources.memory: '-16GB' must be a positive size");
  CHECK(ErrorOf("resources:\n  memory: 0\n") ==
        "t.yaml:2:11: resources.memory: '0' must be a positive size");
  CHECK(ErrorOf("resources:\n  disk_size: 512MB\n") ==
        "t.yaml:2:14: resources.disk_size: expected from 1 GB to 2097152 GB, got '512MB' (0.5 "
        "GB)");
  CHECK(ErrorOf("resources:\n  disk_size: 4PB\n") ==
        "t.yaml:2:14: resources.disk_size: expected from 1 GB to 2097152 GB, got '4PB' (4194304 "
        "GB)");
  CHECK(ErrorOf("resources:\n  disk_size: 100+\n") ==
        "t.yaml:2:14: resources.disk_size: a disk has one size: remove the '+'");
  CHECK(ErrorOf("resources:\n  disk_size: GB\n") ==
        "t.yaml:2:14: resources.disk_size: expected a size such as 256, 256GB, 1TB or 512Gi+, "
        "got 'GB'");
  CHECK(ErrorOf("resources:\n  memory: [1]\n") ==
        "t.yaml:2:11: resources.memory: expected a number of GB, a size (64GB, 1TB) or either "
        "with '+' (32+), got a list");
  // The flag takes what the YAML takes.
  Resources r;
  CHECK(ApplyMemoryFlag("1TB", r).ok());
  // The value parser alone.
  CHECK(ParseSize("1e3").value().value == 1000);
  CHECK(ParseSize(" 8 GB ").value().value == 8);
  CHECK_FALSE(ParseSize("").ok());
  CHECK_FALSE(ParseSize("1e999TB").ok());
}

TEST_CASE("job_recovery: none, and recover_on_exit_codes as one code or a list") {
  CHECK(Parse("resources:\n  job_recovery: none\n").resources.job_recovery->strategy == "NONE");
  CHECK(Parse("resources:\n  job_recovery: {strategy: None}\n").resources.job_recovery->strategy ==
        "NONE");
  Task list = Parse(
      "resources:\n  job_recovery:\n    max_restarts_on_errors: 3\n"
      "    recover_on_exit_codes: [33, 34]\n");
  CHECK(list.resources.job_recovery->recover_on_exit_codes == std::vector<int>{33, 34});
  CHECK(list.resources.job_recovery->max_restarts_on_errors == 3);
  CHECK(Parse("resources:\n  job_recovery: {recover_on_exit_codes: 0}\n")
            .resources.job_recovery->recover_on_exit_codes == std::vector<int>{0});
  auto json = boost::json::parse(ToJson(list)).as_object();
  CHECK(json.at("resources").at("job_recovery").at("recover_on_exit_codes") ==
        boost::json::array{33, 34});
}

TEST_CASE("recover_on_exit_codes: bad codes are one line at their place") {
  CHECK(ErrorOf("resources:\n  job_recovery:\n    recover_on_exit_codes: 256\n") ==
        "t.yaml:3:28: resources.job_recovery.recover_on_exit_codes: expected an exit code, an "
        "integer from 0 to 255, got '256'");
  CHECK(ErrorOf("resources:\n  job_recovery:\n    recover_on_exit_codes: [33, -1]\n") ==
        "t.yaml:3:33: resources.job_recovery.recover_on_exit_codes[1]: expected an exit code, an "
        "integer from 0 to 255, got '-1'");
  // A code of another type: text, a fraction, a quoted number, a list inside the list.
  CHECK(ErrorOf("resources:\n  job_recovery:\n    recover_on_exit_codes: nccl\n") ==
        "t.yaml:3:28: resources.job_recovery.recover_on_exit_codes: expected an exit code, an "
        "integer from 0 to 255, got 'nccl'");
  CHECK(
      ErrorOf("resources:\n  job_recovery:\n    recover_on_exit_codes: 3.5\n").find("got '3.5'") !=
      std::string::npos);
  CHECK(ErrorOf("resources:\n  job_recovery:\n    recover_on_exit_codes: ['33']\n") ==
        "t.yaml:3:29: resources.job_recovery.recover_on_exit_codes[0]: expected an exit code, an "
        "integer from 0 to 255, got '33' (remove the quotes)");
  CHECK(ErrorOf("resources:\n  job_recovery:\n    recover_on_exit_codes: [[33]]\n")
            .find("got a list") != std::string::npos);
  CHECK(ErrorOf("resources:\n  job_recovery:\n    recover_on_exit_codes: {a: 1}\n") ==
        "t.yaml:3:28: resources.job_recovery.recover_on_exit_codes: expected an exit code or a "
        "list of them (e.g. [33, 34]), got a mapping");
  CHECK(ErrorOf("resources:\n  job_recovery:\n    recover_on_exit_codes: [33, 33]\n") ==
        "t.yaml:3:33: resources.job_recovery.recover_on_exit_codes[1]: exit code 33 is given "
        "twice: keep one");
}

TEST_CASE("secrets as references to a team server's secrets: refused unless --secret gives them") {
  const std::string yaml = "secrets:\n  - secrets:HF_TOKEN\n  - secrets:WANDB_API_KEY\nrun: x\n";
  CHECK(ErrorOf(yaml) ==
        "t.yaml:2:5: secrets: 'secrets:HF_TOKEN' refers to a secret kept by a team server, and "
        "no team server is configured (herd api login): pass --secret HF_TOKEN=VALUE, or write "
        "secrets: {HF_TOKEN: null} and pass --secret HF_TOKEN");
  ParseOptions server = WithEnv();
  server.team_server = true;
  CHECK(ErrorOf(yaml, server) ==
        "t.yaml:2:5: secrets: 'secrets:HF_TOKEN': the team server does not hand its stored "
        "secrets to tasks: pass --secret HF_TOKEN=VALUE (it travels to the server over TLS with "
        "the task)");
  ParseOptions given = WithEnv();
  given.secret_overrides = {"HF_TOKEN=hf", "WANDB_API_KEY=wb"};
  Task t = Parse(yaml, given);
  CHECK(t.secrets ==
        std::map<std::string, std::string>{{"HF_TOKEN", "hf"}, {"WANDB_API_KEY", "wb"}});
  CHECK(ErrorOf("secrets:\n  - HF_TOKEN\n") ==
        "t.yaml:2:5: secrets[0]: expected a reference to a stored secret, 'secrets:NAME' (e.g. "
        "secrets:HF_TOKEN), got 'HF_TOKEN'; for values write a mapping, secrets: {NAME: VALUE}");
  CHECK(ErrorOf("secrets:\n  - secrets:1X\n") ==
        "t.yaml:2:5: secrets[0]: invalid secret name '1X': use letters, digits and '_', not "
        "starting with a digit");
  CHECK(ErrorOf("secrets:\n  - secrets:A\n  - secrets:A\n", given) ==
        "t.yaml:3:5: secrets[1]: 'secrets:A' is given twice: keep one");
  CHECK(
      ErrorOf("secrets:\n  - {a: 1}\n").rfind("t.yaml:2:5: secrets[0]: expected a reference", 0) ==
      0);
}

TEST_CASE("api_server_access: accepted with a note of what herd does not give the task") {
  Task t = Parse("api_server_access: true\nrun: x\n");
  REQUIRE(t.notes.size() == 1);
  CHECK(t.notes[0].rfind("t.yaml:1:1: api_server_access: accepted; herd does not give", 0) == 0);
  CHECK(Parse("api_server_access: false\n").notes.empty());
  CHECK(ErrorOf("api_server_access: sometimes\n") ==
        "t.yaml:1:20: api_server_access: expected true or false, got 'sometimes'");
}

TEST_CASE("~ in local paths is the local home; a URI is never a local path") {
  Task t = Parse("workdir: ~/code\nfile_mounts:\n  /d: ~/data\n  /e: '~'\n  /f: ~other/x\n");
  CHECK(t.workdir == "/home/u/code");
  CHECK(t.file_mounts.at("/d") == "/home/u/data");
  CHECK(t.file_mounts.at("/e") == "/home/u");
  CHECK(t.file_mounts.at("/f") == "~other/x");
  // Without HOME the path stays as written (and fails later where it is used).
  CHECK(Parse("workdir: ~/code\n", WithEnv({})).workdir == "~/code");
  // A bucket URI is a bucket copied to the node (SkyPilot's COPY), not a local path.
  Task s3 = Parse("file_mounts:\n  /data: s3://bucket/prefix/\n");
  CHECK(s3.file_mounts.empty());
  CHECK(s3.storage_mounts.at("/data").bucket == "bucket");
  CHECK(s3.storage_mounts.at("/data").prefix == "prefix");
  CHECK(s3.storage_mounts.at("/data").mode == "COPY");
  CHECK(ErrorOf("envs:\n  B: gs://b\nfile_mounts:\n  /data: ${B}/x\n")
            .rfind("t.yaml:4:10: file_mounts./data: 'gs://b/x': gs:// buckets are not supported "
                   "by herd",
                   0) == 0);
  CHECK(ErrorOf("workdir: s3://bucket/code\n") ==
        "t.yaml:1:10: workdir: 's3://bucket/code' is a URI, not a local directory: for a git "
        "repository write workdir: {url: URL, ref: BRANCH}");
  // A colon in a plain local path is not a URI.
  CHECK(Parse("file_mounts:\n  /d: ./a:b\n").file_mounts.at("/d") == "./a:b");
}

TEST_CASE("env values are rendered as SkyPilot renders them (PyYAML, then str())") {
  Task t = Parse(
      "envs:\n"
      "  A: true\n  B: False\n  C: yes\n  D: 0.10\n  E: 010\n  F: 0x1F\n  G: 1_000\n"
      "  H: 1e3\n  I: 1.0e+3\n  J: 'true'\n  K: \"0.10\"\n  L: 1:30\n  M: 1.5e-5\n"
      "  N: 12345678901234567.0\n  O: .inf\n  P: -0\n  Q: 0b101\n  R: 3.\n  S: llama-3\n"
      "  T: 1.0\n  U: 100.0\n  V: 0.0001\n  W: .5\n  X: 09\n  Y: 1:60\n  Z: '.'\n"
      "  AA: 1.5e5\n  AB: -.INF\n  AC: .NaN\n  AD: 0o17\n  AE: 99999999999999999999\n");
  const std::map<std::string, std::string> want = {{"A", "True"},
                                                   {"B", "False"},
                                                   {"C", "True"},
                                                   {"D", "0.1"},
                                                   {"E", "8"},
                                                   {"F", "31"},
                                                   {"G", "1000"},
                                                   {"H", "1e3"},
                                                   {"I", "1000.0"},
                                                   {"J", "true"},
                                                   {"K", "0.10"},
                                                   {"L", "90"},
                                                   {"M", "1.5e-05"},
                                                   {"N", "1.2345678901234568e+16"},
                                                   {"O", "inf"},
                                                   {"P", "0"},
                                                   {"Q", "5"},
                                                   {"R", "3.0"},
                                                   {"S", "llama-3"},
                                                   {"T", "1.0"},
                                                   {"U", "100.0"},
                                                   {"V", "0.0001"},
                                                   {"W", "0.5"},
                                                   {"X", "09"},
                                                   {"Y", "1:60"},
                                                   {"Z", "."},
                                                   {"AA", "1.5e5"},
                                                   {"AB", "-inf"},
                                                   {"AC", "nan"},
                                                   {"AD", "0o17"},
                                                   {"AE", "99999999999999999999"}};
  for (const auto& [k, v] : want) {
    CAPTURE(k);
    CHECK(t.envs.at(k) == v);
  }
  CHECK(Parse("secrets:\n  S: 0.50\n").secrets.at("S") == "0.5");
  // A long value is scanned without recursion (std::regex would overflow the stack here).
  const std::string digits(200000, '7');
  CHECK(Parse("envs:\n  BIG: " + digits + "\n  BIGF: " + digits + ".5\n").envs.at("BIG") == digits);
  // An --env value is taken as typed.
  ParseOptions flag = WithEnv();
  flag.env_overrides = {"A=true"};
  CHECK(Parse("envs:\n  A: 1\n", flag).envs.at("A") == "true");
}

TEST_CASE("workdir: {url, ref}: parsed, printed, and refused clearly when malformed") {
  Task t = Parse("envs:\n  TAG: v2\nworkdir:\n  url: https://example.com/r.git\n  ref: ${TAG}\n");
  REQUIRE(t.git_workdir.has_value());
  CHECK(t.git_workdir->url == "https://example.com/r.git");
  CHECK(t.git_workdir->ref == "v2");
  CHECK(t.workdir.empty());
  auto json = boost::json::parse(ToJson(t)).as_object();
  CHECK(json.at("git_workdir").at("url") == "https://example.com/r.git");
  CHECK(Parse("workdir:\n  url: git@example.com:org/r.git\n").git_workdir->ref.empty());
  CHECK(ErrorOf("workdir:\n  url: --upload-pack=touch /tmp/x\n") ==
        "t.yaml:2:8: workdir.url: expected a git URL (https://..., git@host:repo, file:///path or "
        "a local path), got '--upload-pack=touch /tmp/x'");
  CHECK(ErrorOf("workdir:\n  url: https://x/r.git\n  ref: --orphan\n") ==
        "t.yaml:3:8: workdir.ref: expected a branch, tag or commit name, got '--orphan'");
  CHECK(ErrorOf("workdir:\n  url: https://x/r.git\n  ref: a..b\n").find("workdir.ref") !=
        std::string::npos);
  CHECK(ErrorOf("workdir:\n  url: https://x/r.git\n  branch: main\n") ==
        "t.yaml:3:3: workdir: unknown field 'branch' (known fields: url, ref)");
  CHECK(ErrorOf("workdir:\n  url: [a]\n") ==
        "t.yaml:2:8: workdir.url: expected a string, got a list");
}

// A local repository made with the system git: main with a.txt "one", branch feature with
// a.txt "two", tag v1 on main's first commit.
struct LocalRepo {
  TempDir dir{"herd-git-src"};
  std::string commit;

  static void Git(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {
        "git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = controller::RunProcess(argv, "", std::chrono::seconds(30));
    REQUIRE(r.ok());
    INFO(r->err);
    REQUIRE(r->exit_code == 0);
  }
  LocalRepo() {
    const std::string p = dir.path();
    Git({"init", "-q", p});
    std::ofstream(p + "/a.txt") << "one";
    Git({"-C", p, "add", "a.txt"});
    Git({"-C", p, "commit", "-q", "-m", "one"});
    Git({"-C", p, "tag", "v1"});
    auto r =
        controller::RunProcess({"git", "-C", p, "rev-parse", "HEAD"}, "", std::chrono::seconds(30));
    REQUIRE(r.ok());
    commit = r->out.substr(0, 40);
    Git({"-C", p, "checkout", "-q", "-b", "feature"});
    std::ofstream(p + "/a.txt") << "two";
    Git({"-C", p, "commit", "-q", "-am", "two"});
    Git({"-C", p, "checkout", "-q", "main"});
  }
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_CASE("a git workdir is cloned at its ref into a new directory, and removed after") {
  LocalRepo repo;
  TempDir parent("herd-git-clones");
  auto clone = [&](const std::string& ref) {
    Task t = Parse("workdir:\n  url: file://" + repo.dir.path() + "\n" +
                   (ref.empty() ? "" : "  ref: " + ref + "\n"));
    Status s = ResolveGitWorkdir(t, parent.path() + "/clones");
    INFO(s.message());
    REQUIRE(s.ok());
    REQUIRE(t.workdir.rfind(parent.path() + "/clones/git-workdir-", 0) == 0);
    std::string text = Slurp(t.workdir + "/a.txt");
    RemoveGitWorkdir(t);
    CHECK_FALSE(fs::exists(t.workdir));
    return text;
  };
  CHECK(clone("") == "one");  // the default branch
  CHECK(clone("main") == "one");
  CHECK(clone("feature") == "two");  // a branch other than the default
  CHECK(clone("v1") == "one");       // a tag
  CHECK(clone(repo.commit) == "one");
  struct stat st {};
  REQUIRE(::stat((parent.path() + "/clones").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  // Nothing is left of a clone that failed; the error names the URL, the ref and git's words.
  Task bad = Parse("workdir:\n  url: file://" + repo.dir.path() + "\n  ref: nosuch\n");
  Status s = ResolveGitWorkdir(bad, parent.path() + "/clones");
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().rfind("workdir: cannot clone file://" + repo.dir.path() +
                              " at nosuch: git "
                              "exited with",
                          0) == 0);
  CHECK(bad.workdir.empty());
  CHECK(fs::is_empty(parent.path() + "/clones"));
  Task missing = Parse("workdir:\n  url: " + parent.path() + "/no-repo\n");
  CHECK_FALSE(ResolveGitWorkdir(missing, parent.path() + "/clones").ok());
  CHECK(fs::is_empty(parent.path() + "/clones"));
  // A task without a git workdir is left alone.
  Task plain = Parse("workdir: /src\n");
  CHECK(ResolveGitWorkdir(plain, parent.path() + "/clones").ok());
  CHECK(plain.workdir == "/src");
}

TEST_CASE("pipelines: a header, then tasks in order; job group headers") {
  auto p = ParsePipelineYaml(
      "name: pipe\n---\nname: a\nrun: echo a\n---\n\n---\nname: b\nenvs: {X: null}\nrun: echo b\n",
      "p.yaml", [] {
        ParseOptions o = WithEnv();
        o.env_overrides = {"X=1"};
        return o;
      }());
  INFO(p.status().message());
  REQUIRE(p.ok());
  CHECK(p->name == "pipe");
  REQUIRE(p->tasks.size() == 2);
  CHECK(p->tasks[0].name == "a");
  CHECK(p->tasks[1].name == "b");
  CHECK(p->tasks[1].envs.at("X") == "1");  // --env applies to every task
  CHECK(p->tasks[0].envs.at("X") == "1");
  // Without a header every document is a task.
  auto plain = ParsePipelineYaml("run: echo 1\n---\nrun: echo 2\n", "p.yaml", WithEnv());
  REQUIRE(plain.ok());
  CHECK(plain->tasks.size() == 2);
  CHECK(plain->name.empty());
  // A one-document file is a pipeline of one task, and a header with one task is that task.
  CHECK(ParsePipelineYaml("run: x\n", "p.yaml", WithEnv())->tasks.size() == 1);
  CHECK(Parse("name: pipe\n---\nname: only\nrun: x\n").name == "only");
  // A job group's header.
  auto group = ParsePipelineYaml(
      "---\nname: g\nplacement: SAME_INFRA\nexecution: serial\n---\nrun: a\n---\nrun: b\n",
      "p.yaml", WithEnv());
  REQUIRE(group.ok());
  CHECK(group->tasks.size() == 2);
  REQUIRE(group->notes.size() == 1);
  CHECK(group->notes[0].rfind("p.yaml:3:1: placement: accepted", 0) == 0);
  auto parallel = ParsePipelineYaml("---\nname: g\nexecution: parallel\n---\nrun: a\n---\nrun: b\n",
                                    "p.yaml", WithEnv());
  REQUIRE_FALSE(parallel.ok());
  CHECK(parallel.status().message().rfind(
            "p.yaml:3:12: execution: herd runs a pipeline's tasks one after another", 0) == 0);
  auto odd = ParsePipelineYaml("---\nname: g\nexecution: sometimes\n---\nrun: a\n---\nrun: b\n",
                               "p.yaml", WithEnv());
  REQUIRE_FALSE(odd.ok());
  CHECK(odd.status().message() ==
        "p.yaml:3:12: execution: expected serial (the tasks one after another), got 'sometimes'");
  // An error in a later task names its own line.
  auto bad =
      ParsePipelineYaml("name: p\n---\nrun: a\n---\nresources: {cpus: x}\n", "p.yaml", WithEnv());
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "p.yaml:5:19: resources.cpus: expected a number or 'N+', got 'x'");
  // One task commands refuse a pipeline at its second task.
  CHECK(ErrorOf("name: p\n---\nrun: a\n---\nrun: b\n") ==
        "t.yaml:5:1: a second task (YAML document): this command takes one task; `herd launch` "
        "runs a pipeline of 2 tasks one after another");
}

TEST_CASE("herd check prints every task of a pipeline") {
  std::ostringstream out, err;
  CHECK(RunCheck(kForms + "/pipeline.yaml", WithEnv(), false, out, err) == 0);
  CHECK(out.str().find("a pipeline 'train-then-eval' of 2 tasks") != std::string::npos);
  CHECK(out.str().find("task 2 of 2") != std::string::npos);
  std::ostringstream jout, jerr;
  CHECK(RunCheck(kForms + "/pipeline.yaml", WithEnv(), true, jout, jerr) == 0);
  std::istringstream lines(jout.str());
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    CHECK(boost::json::parse(line).as_object().contains("run"));
    ++n;
  }
  CHECK(n == 2);
}

// Every file of the corpus, through `herd check`: accepted, or refused with one line at the place
// and with the words its first line names.
TEST_CASE("herd check over the SkyPilot forms corpus") {
  static const std::regex kExpect("# expect: (ok|error ([0-9]+):([0-9]+) (.+))");
  int files = 0;
  for (const auto& entry : fs::directory_iterator(kForms)) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    const std::string path = entry.path().string();
    CAPTURE(path);
    std::ifstream in(path);
    std::string first;
    std::getline(in, first);
    std::smatch m;
    REQUIRE(std::regex_match(first, m, kExpect));
    std::ostringstream out, err;
    int code = RunCheck(path, WithEnv(), false, out, err);
    CAPTURE(err.str());
    if (m[1] == "ok") {
      CHECK(code == 0);
      CHECK(out.str().find(": valid task") != std::string::npos);
      continue;
    }
    CHECK(code == 2);
    CHECK(out.str().empty());
    const std::string e = err.str();
    CHECK(std::count(e.begin(), e.end(), '\n') == 1);
    CHECK(e.rfind(path + ":" + m[2].str() + ":" + m[3].str() + ": ", 0) == 0);
    CHECK(e.find(m[4].str()) != std::string::npos);
  }
  CHECK(files >= 20);
}

}  // namespace
}  // namespace herd::task
