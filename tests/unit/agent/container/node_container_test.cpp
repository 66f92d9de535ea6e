#include "agent/container/node_container.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "agent/gpu/run_captured.hpp"
#include "agent/process/proc_scan.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::agent {
namespace {

using herd::testing::TempDir;

bool Has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Records what herd asked of the runtime; Start answers with `pid` (a live process by default:
// this test's own, so the record it leaves stays valid).
struct FakeRuntime : ContainerRuntime {
  Status check = Status::Ok();
  Status login_result = Status::Ok();
  Status start_error = Status::Ok();
  int pid = static_cast<int>(::getpid());
  std::vector<std::string> calls;
  std::vector<ContainerConfig> started;
  std::vector<RegistryLogin> logins;
  std::vector<std::string> removed;

  Status Check() override {
    calls.push_back("check");
    return check;
  }
  Status Login(const RegistryLogin& login) override {
    calls.push_back("login");
    logins.push_back(login);
    return login_result;
  }
  Result<RunningContainer> Start(const ContainerConfig& config) override {
    calls.push_back("start");
    started.push_back(config);
    if (!start_error.ok()) return start_error;
    return RunningContainer{"c0ffee", pid, 0, {"PATH=/opt/image/bin:/usr/bin", "IMAGE_VAR=1"}};
  }
  Result<int> RemoveLabelled(const std::string& label) override {
    removed.push_back(label);
    return 1;
  }
};

ContainerConfig Config(const std::string& image = "localhost/herd-test:1") {
  ContainerConfig c;
  c.image = image;
  c.name = ContainerName("/state", image, {});
  c.label = "/state";
  return c;
}

TEST_CASE("a node's container is started once and reused while its process runs") {
  TempDir dir("herd-container");
  FakeRuntime rt;
  auto first = EnsureContainer(rt, dir.path(), Config(), {});
  REQUIRE(first.ok());
  CHECK(rt.calls == std::vector<std::string>{"check", "start"});
  CHECK(first->id == "c0ffee");
  CHECK(first->start_time == procfs::ReadStat(::getpid())->start_time);

  auto again = EnsureContainer(rt, dir.path(), Config(), {});
  REQUIRE(again.ok());
  CHECK(rt.calls.size() == 2);  // no second start
  CHECK(again->env == first->env);

  // Another image: its own container.
  REQUIRE(EnsureContainer(rt, dir.path(), Config("docker.io/library/ubuntu:22.04"), {}).ok());
  CHECK(rt.started.size() == 2);
}

TEST_CASE("the warm path: the agent enters a running container without starting a herdlet") {
  TempDir dir("herd-container");
  herd::v1::ContainerSpec spec;
  spec.set_image("localhost/herd-test:1");
  spec.add_mounts("~/sky_workdir");
  const std::map<std::string, std::string> job = {{"SKYPILOT_NODE_RANK", "1"}};
  CHECK(!WarmEntry(dir.path(), spec, "/home/u", "/w", job, {"bash", "-c", "true"}));

  herd::testing::ScopedEnv host_only("HERD_TEST_HOST_ONLY", "1");
  FakeRuntime rt;
  ContainerConfig c = Config();
  c.name = ContainerName(std::filesystem::weakly_canonical(dir.path()).string(),
                         "localhost/herd-test:1", {"/home/u/sky_workdir"});
  REQUIRE(EnsureContainer(rt, dir.path(), c, {}).ok());
  auto warm = WarmEntry(dir.path(), spec, "/home/u", "/w", job, {"bash", "-c", "true"});
  REQUIRE(warm);
  CHECK(warm->argv[0] == "/usr/bin/nsenter");
  CHECK(warm->argv[2] == std::to_string(::getpid()));
  CHECK(warm->argv.back() == "true");
  CHECK(warm->env.at("SKYPILOT_NODE_RANK") == "1");
  CHECK(warm->env.at("PATH") == "/opt/image/bin:/usr/bin");
  CHECK(warm->env.at("IMAGE_VAR") == "1");
  CHECK(Has(warm->unset_env, "HERD_TEST_HOST_ONLY"));
  CHECK(!Has(warm->unset_env, "PATH"));
  CHECK(rt.started.size() == 1);
}

TEST_CASE("a container whose process is gone is started again") {
  TempDir dir("herd-container");
  FakeRuntime rt;
  rt.pid = 999999999;  // beyond pid_max: never a live process
  auto gone = EnsureContainer(rt, dir.path(), Config(), {});
  REQUIRE(!gone.ok());  // its process vanished at once
  CHECK(gone.status().message().find("is gone at once") != std::string::npos);
  rt.pid = static_cast<int>(::getpid());
  REQUIRE(EnsureContainer(rt, dir.path(), Config(), {}).ok());
  CHECK(rt.started.size() == 2);
}

TEST_CASE("errors are one line naming the node and the image") {
  TempDir dir("herd-container");
  FakeRuntime rt;
  rt.check = FailedPrecondition("podman is not installed (no container runtime)");
  auto none = EnsureContainer(rt, dir.path(), Config(), {});
  REQUIRE(!none.ok());
  const std::string m = none.status().message();
  CHECK(m.find("image localhost/herd-test:1: no container runtime: podman is not installed") !=
        std::string::npos);
  CHECK(m.find("node ") == 0);
  CHECK(m.find('\n') == std::string::npos);
  CHECK(rt.started.empty());

  rt.check = Status::Ok();
  rt.start_error = Unavailable("Error: localhost/nope:1: image not known (exit 125)");
  auto missing = EnsureContainer(rt, dir.path(), Config("localhost/nope:1"), {});
  REQUIRE(!missing.ok());
  CHECK(missing.status().message().find(
            "image localhost/nope:1: cannot start the container: Error: localhost/nope:1: image "
            "not known") != std::string::npos);
}

TEST_CASE("a registry login comes before the start, only with a username, and can refuse") {
  TempDir dir("herd-container");
  FakeRuntime rt;
  REQUIRE(EnsureContainer(rt, dir.path(), Config(), {}).ok());
  CHECK(rt.logins.empty());

  FakeRuntime private_rt;
  RegistryLogin login{"registry.example", "me", "s3cret"};
  REQUIRE(
      EnsureContainer(private_rt, dir.path(), Config("registry.example/team/img:1"), login).ok());
  CHECK(private_rt.calls == std::vector<std::string>{"check", "login", "start"});
  CHECK(private_rt.logins[0].password == "s3cret");

  FakeRuntime refused;
  refused.login_result = PermissionDenied("the registry registry.example refused the login of me");
  auto r = EnsureContainer(refused, dir.path(), Config("registry.example/team/img:2"), login);
  REQUIRE(!r.ok());
  CHECK(r.status().code() == Code::kPermissionDenied);
  CHECK(r.status().message().find("image registry.example/team/img:2: the registry") !=
        std::string::npos);
  CHECK(refused.started.empty());
}

TEST_CASE("launch's check of a node: the runtime, then the login only with a username") {
  FakeRuntime rt;
  CHECK(CheckRuntimeAndLogin(rt, LoginFor("localhost/herd-test:1", "", "pw", "")).ok());
  CHECK(rt.calls == std::vector<std::string>{"check"});

  FakeRuntime none;
  none.check = FailedPrecondition("podman is not installed (no container runtime)");
  Status s = CheckRuntimeAndLogin(none, LoginFor("127.0.235.1:5000/img:1", "me", "pw", ""));
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK(s.message() == "no container runtime: podman is not installed (no container runtime)");
  CHECK(none.logins.empty());

  FakeRuntime refused;
  refused.login_result = PermissionDenied("the registry 127.0.235.1:5000 refused the login of me");
  s = CheckRuntimeAndLogin(refused, LoginFor("127.0.235.1:5000/img:1", "me", "pw", ""));
  CHECK(s.code() == Code::kPermissionDenied);
  REQUIRE(refused.logins.size() == 1);
  // No server given: the image's registry; given: that one.
  CHECK(refused.logins[0].server == "127.0.235.1:5000");
  CHECK(refused.logins[0].password == "pw");
  CHECK(LoginFor("ubuntu:22.04", "me", "pw", "").server == "docker.io");
  CHECK(LoginFor("ubuntu:22.04", "me", "pw", "registry.example").server == "registry.example");
  CHECK(LoginFor("ubuntu:22.04", "", "pw", "registry.example").username.empty());
}

TEST_CASE("container names: per agent, image and set of mounts, in any order") {
  const std::string a = ContainerName("/s", "img:1", {"/a", "/b"});
  CHECK(a == ContainerName("/s", "img:1", {"/b", "/a"}));
  CHECK(a != ContainerName("/s", "img:2", {"/a", "/b"}));
  CHECK(a != ContainerName("/s", "img:1", {"/a"}));
  CHECK(a != ContainerName("/t", "img:1", {"/a", "/b"}));
  CHECK(a.starts_with("herd-"));
  CHECK(a.size() == 5 + 16);
}

TEST_CASE("the worker's argv: ~ is the agent's home, the job's variables are named, not valued") {
  herd::v1::ContainerSpec spec;
  spec.set_image("nvcr.io/nvidia/pytorch:24.01-py3");
  spec.add_mounts("~/sky_workdir");
  spec.add_mounts("/data");
  auto argv = ContainerRunArgv("/bin/herdlet", "/st", spec, "/home/u", "/home/u/sky_workdir",
                               {"SKYPILOT_NODE_RANK", "MODEL"}, {"/bin/bash", "-c", "echo hi"});
  CHECK(argv ==
        std::vector<std::string>{"/bin/herdlet", "--container-run", "--state", "/st", "--image",
                                 "nvcr.io/nvidia/pytorch:24.01-py3", "--cwd", "/home/u/sky_workdir",
                                 "--mount", "/home/u/sky_workdir", "--mount", "/data", "--keep-env",
                                 "SKYPILOT_NODE_RANK,MODEL", "--", "/bin/bash", "-c", "echo hi"});
}

TEST_CASE("inside: the image's PATH, the job's variables and the marker, never the password") {
  auto env = ContainerEnv(
      {"PATH=/opt/image/bin", "CUDA_HOME=/usr/local/cuda"},
      {"PATH=/root/.pyenv/shims:/usr/bin", "HOME=/root", "AWS_CA_BUNDLE=/x", "SKYPILOT_NODE_RANK=1",
       "CUDA_HOME=/job/cuda", "SKYPILOT_DOCKER_PASSWORD=s3cret", "HERD_PROCESS_GROUP=s/job1-a1"},
      {"SKYPILOT_NODE_RANK", "CUDA_HOME", "SKYPILOT_DOCKER_PASSWORD"});
  CHECK(Has(env, "PATH=/opt/image/bin"));
  CHECK(Has(env, "HOME=/root"));
  CHECK(Has(env, "SKYPILOT_NODE_RANK=1"));
  CHECK(Has(env, "CUDA_HOME=/job/cuda"));  // the job's value wins over the image's
  CHECK(Has(env, "HERD_PROCESS_GROUP=s/job1-a1"));
  CHECK(!Has(env, "AWS_CA_BUNDLE=/x"));
  for (const auto& e : env) CHECK(e.find("s3cret") == std::string::npos);
}

TEST_CASE("entering: nsenter into the container's namespaces and root, in the cwd") {
  RunningContainer c{"id", 4242, 1, {}};
  // The container's root as /proc shows it: /w is there, /gone is not.
  TempDir proc("herd-proc");
  proc.Write("4242/root/w/file", "");
  CHECK(EnterArgv(c, "/w", {"bash", "-c", "true"}, proc.path()) ==
        std::vector<std::string>{"nsenter", "--target", "4242", "--mount", "--uts", "--ipc",
                                 "--pid", "--root", "--wdns=/w", "--", "bash", "-c", "true"});
  // A cwd the container does not have: its sh goes to / instead.
  CHECK(EnterArgv(c, "/gone", {"bash", "-c", "true"}, proc.path()) ==
        std::vector<std::string>{"nsenter", "--target", "4242", "--mount", "--uts", "--ipc",
                                 "--pid", "--root", "--", "/bin/sh", "-c",
                                 "cd \"$1\" 2>/dev/null || cd /; shift; exec \"$@\"", "sh", "/gone",
                                 "bash", "-c", "true"});
}

TEST_CASE("GPUs: CDI when a spec names them, else the /dev/nvidia* files, else none") {
  TempDir cdi("herd-cdi"), dev("herd-dev"), empty("herd-empty");
  dev.Write("nvidia1", "");
  dev.Write("nvidia0", "");
  dev.Write("nvidiactl", "");
  dev.Write("null", "");
  CHECK(GpuDeviceArgs({empty.path()}, dev.path()) ==
        std::vector<std::string>{dev / "nvidia0", dev / "nvidia1", dev / "nvidiactl"});
  cdi.Write("nvidia.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n");
  CHECK(GpuDeviceArgs({empty.path(), cdi.path()}, dev.path()) ==
        std::vector<std::string>{"nvidia.com/gpu=all"});
  CHECK(GpuDeviceArgs({empty.path()}, empty.path()).empty());
}

TEST_CASE("registries of image references") {
  CHECK(RegistryOf("nvcr.io/nvidia/pytorch:24.01-py3") == "nvcr.io");
  CHECK(RegistryOf("localhost/herd-test:1") == "localhost");
  CHECK(RegistryOf("registry:5000/x") == "registry:5000");
  CHECK(RegistryOf("ubuntu:22.04") == "docker.io");
  CHECK(RegistryOf("pytorch/pytorch:latest") == "docker.io");
  CHECK(QualifiedImage("ubuntu:22.04") == "docker.io/library/ubuntu:22.04");
  CHECK(QualifiedImage("pytorch/pytorch:latest") == "docker.io/pytorch/pytorch:latest");
  CHECK(QualifiedImage("docker.io/x/y:1") == "docker.io/x/y:1");
  CHECK(QualifiedImage("localhost/herd-test:1") == "localhost/herd-test:1");
}

TEST_CASE("podman run: host network, IPC and hostname, mounts, devices, ulimits, kept alive") {
  PodmanRuntime podman;
  ContainerConfig c = Config();
  c.mounts = {"/root/sky_workdir"};
  c.devices = {"nvidia.com/gpu=all"};
  auto argv = podman.RunArgv(c);
  auto after = [&](const std::string& flag, const std::string& value) {
    for (std::size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == flag && argv[i + 1] == value) return true;
    return false;
  };
  CHECK(argv[0] == "podman");
  CHECK(after("--network", "host"));
  CHECK(after("--ipc", "host"));
  CHECK(after("--uts", "host"));
  CHECK(after("--volume", "/root/sky_workdir:/root/sky_workdir"));
  CHECK(after("--device", "nvidia.com/gpu=all"));
  CHECK(after("--name", c.name));
  CHECK(after("--label", "herd.agent=/state"));
  CHECK(after("--entrypoint", "/bin/sh"));
  int ulimits = 0;
  for (std::size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == "--ulimit") ++ulimits;
  CHECK(ulimits == 2);
}

TEST_CASE("removing the node's containers: by the agent's label, records gone") {
  TempDir dir("herd-container");
  FakeRuntime rt;
  auto none = RemoveContainers(rt, dir.path());
  REQUIRE(none.ok());
  CHECK(*none == 0);
  CHECK(rt.removed.empty());  // never started one: nothing asked of the runtime
  REQUIRE(EnsureContainer(rt, dir.path(), Config(), {}).ok());
  auto n = RemoveContainers(rt, dir.path());
  REQUIRE(n.ok());
  CHECK(rt.removed == std::vector<std::string>{ContainerLabel(dir.path())});
  CHECK(!std::filesystem::exists(dir / "containers"));
}

TEST_CASE("a secret reaches a helper on stdin") {
  CapturedRun run = RunCaptured({"cat"}, std::chrono::seconds(10), false, 1024, "s3cret\n");
  REQUIRE(run.ok());
  CHECK(run.output == "s3cret\n");
}

}  // namespace
}  // namespace herd::agent
