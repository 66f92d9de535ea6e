// Bootstrap: the node scripts run locally through /bin/sh (a "node" is a home directory, the agent
// a small fake), then the real herdlet on two LocalProvider namespace nodes over real ssh, checked
// with the real `herd nodes` (root only; it says why it skips otherwise).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <doctest/doctest.h>
#include <boost/json.hpp>

#include "controller/bootstrap/agent_bootstrap.hpp"
#include "controller/bootstrap/packaged_files.hpp"
#include "controller/bootstrap/remote_scripts.hpp"
#include "controller/bootstrap/sha256.hpp"
#include "controller/provider/local_provider.hpp"
#include "controller/provider/netns.hpp"
#include "controller/ssh/ssh_runner.hpp"
#include "controller/ssh/subprocess.hpp"
#include "shared/tls/certs.hpp"
#include "tests/fakes/fake_ssh_runner.hpp"
#include "tests/unit/netns_fixture.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::controller {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using herd::testing::ReadAll;

void WriteAll(const std::string& path, const std::string& data, fs::perms perms) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
  fs::permissions(path, perms);
}

std::string MakeTempDir(const char* prefix) {
  std::string tmpl = std::string("/tmp/") + prefix + "-XXXXXX";
  REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
  return tmpl;
}

// Live processes whose command line mentions `needle`, and killing them: tests leave none behind.
std::vector<pid_t> ProcessesMentioning(const std::string& needle) {
  std::vector<pid_t> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    std::string n = e.path().filename().string();
    if (n.empty() || !std::isdigit(static_cast<unsigned char>(n[0]))) continue;
    pid_t pid = std::stoi(n);
    if (pid == ::getpid()) continue;
    if (ReadAll("/proc/" + n + "/cmdline").find(needle) != std::string::npos &&
        netns::IsAlive(pid)) {
      found.push_back(pid);
    }
  }
  return found;
}

void KillMentioning(const std::string& needle) {
  for (int round = 0; round < 20; ++round) {
    auto pids = ProcessesMentioning(needle);
    if (pids.empty()) return;
    for (pid_t p : pids) ::kill(p, SIGKILL);
    std::this_thread::sleep_for(50ms);
  }
}

template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds timeout) {
  for (auto until = Clock::now() + timeout; Clock::now() < until;
       std::this_thread::sleep_for(100ms)) {
    if (pred()) return true;
  }
  return pred();
}

TEST_CASE("sha256 matches sha256sum") {
  CHECK(Sha256Hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(Sha256Hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  struct TempDir {
    std::string path = MakeTempDir("herd-sha");
    ~TempDir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } tmp;
  const std::string& dir = tmp.path;
  std::string big(3 << 20, 'x');  // more than one read buffer
  big += "tail";
  WriteAll(dir + "/f", big, fs::perms::owner_read | fs::perms::owner_write);
  auto file = Sha256FileHex(dir + "/f");
  REQUIRE(file.ok());
  CHECK(*file == Sha256Hex(big));
  auto sum = RunProcess({"sha256sum", dir + "/f"}, {}, 10s);
  REQUIRE(sum.ok());
  CHECK(sum->out.substr(0, 64) == *file);
  CHECK(Sha256FileHex(dir + "/missing").status().code() == Code::kNotFound);
}

TEST_CASE("unit templates are rendered with the node's paths") {
  UnitPaths p{"/home/u/.herd/agent/bin/herdlet", "/home/u/.herd/agent/herdlet.yaml",
              "/home/u/.herd/agent", "/home/u"};
  auto system = RenderUnit(SystemUnitTemplate(), p);
  REQUIRE(system.ok());
  CHECK(system->find("ExecStart=/home/u/.herd/agent/bin/herdlet --config "
                     "/home/u/.herd/agent/herdlet.yaml\n") != std::string::npos);
  CHECK(system->find("WorkingDirectory=/home/u/.herd/agent\n") != std::string::npos);
  CHECK(system->find("Environment=HOME=/home/u\n") != std::string::npos);
  CHECK(system->find("KillMode=process\n") != std::string::npos);
  CHECK(system->find("Restart=on-failure\n") != std::string::npos);
  CHECK(system->find("RestartSec=1\n") != std::string::npos);
  CHECK(system->find("LimitNOFILE=1048576\n") != std::string::npos);
  CHECK(system->find('@') == std::string::npos);
  auto user = RenderUnit(UserUnitTemplate(), p);
  REQUIRE(user.ok());
  CHECK(user->find("WantedBy=default.target") != std::string::npos);
  CHECK(user->find('@') == std::string::npos);
  // '%' starts a systemd specifier; blanks would split ExecStart.
  UnitPaths pct = p;
  pct.home = "/home/50%";
  CHECK(RenderUnit(SystemUnitTemplate(), pct)->find("HOME=/home/50%%\n") != std::string::npos);
  UnitPaths blank = p;
  blank.workdir = "/home/a b";
  CHECK(RenderUnit(SystemUnitTemplate(), blank).status().code() == Code::kInvalidArgument);
  UnitPaths relative = p;
  relative.config = "herdlet.yaml";
  CHECK(RenderUnit(SystemUnitTemplate(), relative).status().code() == Code::kInvalidArgument);
  // The supervisor shipped is packaging/herdlet-supervise.
  CHECK(SuperviseScript().starts_with("#!/bin/sh\n"));
  CHECK(SuperviseScript().find("herdlet.pid") != std::string::npos);
}

TEST_CASE("shell quoting and probe parsing") {
  CHECK(ShellQuote("a b") == "'a b'");
  CHECK(ShellQuote("it's") == "'it'\\''s'");
  auto r = RunProcess({"/bin/sh", "-c", "printf %s " + ShellQuote("x'y \"$HOME\" `z`")}, {}, 10s);
  REQUIRE(r.ok());
  CHECK(r->out == "x'y \"$HOME\" `z`");
  CHECK(ParseProbe("garbage\n").status().code() == Code::kInternal);
  CHECK(ParsePid("x\npid 42\n").value() == 42);
  CHECK_FALSE(ParsePid("nothing").ok());
}

using testing::LocalShellRunner;

// Stands in for herdlet: records how it was started, exits 3 when its config says so, else reports
// itself running (ready file, --ready-fd) and runs until SIGTERM.
constexpr char kFakeHerdlet[] = R"sh(#!/bin/sh
echo "$$|$HOME|$(pwd -P)|$*" >>"$HOME/fake-herdlet.runs"
if grep -q 'fail: now' "$2"; then echo "fake herdlet: refusing config $2" >&2; exit 3; fi
ready=$(sed -n 's/^ready_file: //p' "$2")
if [ -n "$ready" ]; then echo $$ >"$ready.tmp" && mv "$ready.tmp" "$ready"; fi
if [ "${3:-}" = --ready-fd ]; then eval "echo \$\$ >&$4; exec $4>&-"; fi
trap 'exit 0' TERM
while :; do sleep 0.2 & wait $!; done
)sh";

struct LocalNodes {
  std::string tmp = MakeTempDir("herd-bs");
  LocalShellRunner ssh;
  BootstrapOptions options;
  std::vector<AgentInstall> nodes;

  explicit LocalNodes(int n) {
    options.herdlet_path = tmp + "/herdlet";
    WriteAll(options.herdlet_path, kFakeHerdlet, fs::perms::owner_all);
    std::string certs = tmp + "/certs";
    fs::create_directories(certs);
    for (const char* f : {"ca.crt", "agent.crt", "agent.key"}) {
      WriteAll(certs + "/" + f, std::string("pem of ") + f + "\n",
               fs::perms::owner_read | fs::perms::owner_write);
    }
    for (int i = 0; i < n; ++i) {
      std::string host = "10.9.9." + std::to_string(i + 1);
      std::string home = tmp + "/home" + std::to_string(i);
      fs::create_directories(home);
      ssh.homes[host] = home;
      AgentInstall a;
      a.target.host = host;
      a.node_name = "n" + std::to_string(i);
      a.agent_config_yaml = "node_id: n" + std::to_string(i) +
                            "\nready_file: " + std::string(kRemoteReadyFile) + "\n";
      a.certs_dir = certs;
      nodes.push_back(a);
    }
  }
  ~LocalNodes() {
    (void)StopAgents(ssh, Targets(), options);
    KillMentioning(tmp);
    std::error_code ec;
    fs::remove_all(tmp, ec);
  }
  std::vector<SshTarget> Targets() const {
    std::vector<SshTarget> t;
    for (const auto& n : nodes) t.push_back(n.target);
    return t;
  }
  std::string Home(size_t i) const { return ssh.homes.at(nodes[i].target.host); }
  std::string AgentDir(size_t i) const { return Home(i) + "/.herd/agent"; }
  std::vector<int> Pids() {
    auto p = AgentPids(ssh, Targets(), options);
    REQUIRE_MESSAGE(p.ok(), p.status().ToString());
    return *p;
  }
};

TEST_CASE("bootstrap without systemd: install, idempotent rerun, config change, crash, stop") {
  LocalNodes c(2);
  auto first = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_MESSAGE(first.ok(), first.status().ToString());
  CHECK(first->uploaded == 2);
  CHECK(first->restarted == 2);
  CHECK(first->unchanged == 0);
  REQUIRE(first->agent_pids.size() == 2);
  CHECK(first->agent_pids[0] > 0);
  CHECK(first->agent_pids[1] > 0);
  CHECK(c.Pids() == first->agent_pids);

  // The layout on the node, with the key private, and herdlet started with the node's HOME, in
  // the agent directory, on the installed config.
  for (size_t i = 0; i < 2; ++i) {
    std::string d = c.AgentDir(i);
    CHECK(ReadAll(d + "/bin/herdlet") == kFakeHerdlet);
    CHECK(ReadAll(d + "/bin/herdlet-supervise") == SuperviseScript());
    CHECK(ReadAll(d + "/herdlet.yaml") == c.nodes[i].agent_config_yaml);
    CHECK(ReadAll(d + "/certs/agent.key") == "pem of agent.key\n");
    CHECK((fs::status(d + "/certs/agent.key").permissions() & fs::perms::all) ==
          (fs::perms::owner_read | fs::perms::owner_write));
    CHECK((fs::status(d + "/bin/herdlet").permissions() & fs::perms::owner_exec) !=
          fs::perms::none);
    CHECK(fs::is_directory(d + "/state"));
    CHECK(std::stoi(ReadAll(d + "/herdlet.pid")) == first->agent_pids[i]);
    CHECK(netns::IsAlive(std::stoi(ReadAll(d + "/supervise.pid"))));
    CHECK(ReadAll(c.Home(i) + "/fake-herdlet.runs") == std::to_string(first->agent_pids[i]) + "|" +
                                                           c.Home(i) + "|" + d + "|--config " + d +
                                                           "/herdlet.yaml --ready-fd 3\n");
  }

  // Nothing changed: nothing sent, nothing restarted.
  auto again = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_MESSAGE(again.ok(), again.status().ToString());
  CHECK(again->uploaded == 0);
  CHECK(again->restarted == 0);
  CHECK(again->unchanged == 2);
  CHECK(again->agent_pids == first->agent_pids);

  // A new config for node 1 restarts node 1 only.
  c.nodes[1].agent_config_yaml += "cpus: 3\n";
  auto changed = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_MESSAGE(changed.ok(), changed.status().ToString());
  CHECK(changed->uploaded == 1);
  CHECK(changed->restarted == 1);
  CHECK(changed->unchanged == 1);
  CHECK(changed->agent_pids[0] == first->agent_pids[0]);
  CHECK(changed->agent_pids[1] != first->agent_pids[1]);
  CHECK_FALSE(netns::IsAlive(first->agent_pids[1]));
  CHECK(ReadAll(c.AgentDir(1) + "/herdlet.yaml").ends_with("cpus: 3\n"));

  // herdlet killed -9: the supervisor starts a new one after its first backoff (1 s).
  int killed = changed->agent_pids[0];
  REQUIRE(::kill(killed, SIGKILL) == 0);
  int replacement = 0;
  CHECK(WaitFor(
      [&] {
        replacement = c.Pids()[0];
        return replacement > 0 && replacement != killed;
      },
      5s));
  CHECK(ReadAll(c.AgentDir(0) + "/herdlet.log").find("restarting in 1s") != std::string::npos);

  // The supervisor itself killed -9: its herdlet runs unsupervised, so bootstrap replaces both.
  int supervisor = std::stoi(ReadAll(c.AgentDir(0) + "/supervise.pid"));
  REQUIRE(::kill(supervisor, SIGKILL) == 0);
  REQUIRE(WaitFor([&] { return !netns::IsAlive(supervisor); }, 3s));
  auto repaired = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_MESSAGE(repaired.ok(), repaired.status().ToString());
  CHECK(repaired->uploaded == 0);
  CHECK(repaired->restarted == 1);
  CHECK(repaired->unchanged == 1);
  CHECK(repaired->agent_pids[0] != replacement);
  CHECK_FALSE(netns::IsAlive(replacement));

  // Stop: supervisors and agents gone, pid files removed; a second stop is fine.
  Status stopped = StopAgents(c.ssh, c.Targets(), c.options);
  REQUIRE_MESSAGE(stopped.ok(), stopped.ToString());
  CHECK(c.Pids() == std::vector<int>{0, 0});
  CHECK(ProcessesMentioning(c.tmp).empty());
  CHECK_FALSE(fs::exists(c.AgentDir(0) + "/supervise.pid"));
  CHECK(StopAgents(c.ssh, c.Targets(), c.options).ok());

  // A stopped agent with unchanged files is started again.
  auto restarted = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_MESSAGE(restarted.ok(), restarted.status().ToString());
  CHECK(restarted->uploaded == 0);
  CHECK(restarted->restarted == 2);
  CHECK(c.Pids() == restarted->agent_pids);
}

TEST_CASE(
    "the agent binary travels as gzip where the build's copy names it and the node has gzip") {
  LocalNodes c(2);
  // A gzip on the nodes' PATH that records each use and runs the real one.
  const std::string real_gzip = fs::exists("/usr/bin/gzip") ? "/usr/bin/gzip" : "/bin/gzip";
  const std::string shims = c.tmp + "/shims", calls = c.tmp + "/gzip.calls";
  fs::create_directories(shims);
  WriteAll(shims + "/gzip",
           "#!/bin/sh\necho \"$*\" >>" + calls + "\nexec " + real_gzip + " \"$@\"\n",
           fs::perms::owner_all);
  c.ssh.path_prefix = shims;
  const std::string bin = c.options.herdlet_path;
  auto pack = [&](const std::string& sidecar_sha) {
    auto r =
        RunProcess({"/bin/sh", "-c", real_gzip + " -n -c " + bin + " >" + bin + ".gz"}, {}, 10s);
    REQUIRE(r.ok());
    REQUIRE(r->exit_code == 0);
    WriteAll(bin + ".gz.sha256", sidecar_sha + "\n",
             fs::perms::owner_read | fs::perms::owner_write);
  };
  pack(Sha256Hex(kFakeHerdlet));

  auto first = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_MESSAGE(first.ok(), first.status().ToString());
  CHECK(first->uploaded == 2);
  CHECK(ReadAll(calls) == "-dc\n-dc\n");  // each node unpacked what it got
  for (size_t i = 0; i < 2; ++i) {
    CHECK(ReadAll(c.AgentDir(i) + "/bin/herdlet") == kFakeHerdlet);
    CHECK((fs::status(c.AgentDir(i) + "/bin/herdlet").permissions() & fs::perms::owner_exec) !=
          fs::perms::none);
  }

  // A new binary beside an old .gz (its sidecar names the old one): the plain file goes.
  const std::string v2 = std::string(kFakeHerdlet) + "# v2\n";
  WriteAll(bin, v2, fs::perms::owner_all);
  auto second = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_MESSAGE(second.ok(), second.status().ToString());
  CHECK(second->uploaded == 2);
  CHECK(ReadAll(calls) == "-dc\n-dc\n");
  CHECK(ReadAll(c.AgentDir(0) + "/bin/herdlet") == v2);

  // gzip data that does not unpack to the binary its sidecar names: the node keeps what it had.
  const std::string v3 = std::string(kFakeHerdlet) + "# v3\n";
  pack(Sha256Hex(v2));  // the .gz holds v2
  WriteAll(bin, v3, fs::perms::owner_all);
  WriteAll(bin + ".gz.sha256", Sha256Hex(v3) + "\n",
           fs::perms::owner_read | fs::perms::owner_write);
  auto third = BootstrapAgents(c.ssh, {c.nodes[0]}, c.options);
  REQUIRE_FALSE(third.ok());
  CHECK_MESSAGE(third.status().message().find("cannot write bin/herdlet (unpacking its gzip data "
                                              "failed or did not give sha256 " +
                                              Sha256Hex(v3) + ")") != std::string::npos,
                third.status().message());
  CHECK(ReadAll(c.AgentDir(0) + "/bin/herdlet") == v2);
  CHECK(ReadAll(calls) == "-dc\n-dc\n-dc\n");  // it was unpacked, then refused
  for (const auto& e : fs::directory_iterator(c.AgentDir(0) + "/bin")) {
    CHECK_MESSAGE(e.path().filename().string().find(".tmp.") == std::string::npos, e.path());
  }
}

TEST_CASE("a node whose home is on this machine gets the binary copied there, not through ssh") {
  LocalNodes c(2);
  for (size_t i = 0; i < 2; ++i) c.nodes[i].host_home = c.Home(i);
  auto first = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_MESSAGE(first.ok(), first.status().ToString());
  CHECK(first->uploaded == 2);
  CHECK(first->restarted == 2);
  CHECK(c.ssh.stdin_bytes == 0);  // the small files travel inside the scripts
  for (size_t i = 0; i < 2; ++i) {
    CHECK(ReadAll(c.AgentDir(i) + "/bin/herdlet") == kFakeHerdlet);
    CHECK((fs::status(c.AgentDir(i) + "/bin/herdlet").permissions() & fs::perms::all) ==
          (fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
           fs::perms::others_read | fs::perms::others_exec));
  }
  CHECK(c.Pids() == first->agent_pids);

  // Nothing changed: nothing copied, nothing restarted.
  auto again = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_MESSAGE(again.ok(), again.status().ToString());
  CHECK(again->unchanged == 2);
  CHECK(again->agent_pids == first->agent_pids);

  // A new binary: copied, and the agents restart on it as after an upload.
  const std::string v2 = std::string(kFakeHerdlet) + "# v2\n";
  WriteAll(c.options.herdlet_path, v2, fs::perms::owner_all);
  auto changed = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_MESSAGE(changed.ok(), changed.status().ToString());
  CHECK(changed->uploaded == 2);
  CHECK(changed->restarted == 2);
  CHECK(c.ssh.stdin_bytes == 0);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(ReadAll(c.AgentDir(i) + "/bin/herdlet") == v2);
    CHECK(changed->agent_pids[i] != first->agent_pids[i]);
    CHECK_FALSE(netns::IsAlive(first->agent_pids[i]));
  }

  // Without host_home (a remote node) the binary goes through the session as before.
  c.nodes[0].host_home.clear();
  WriteAll(c.options.herdlet_path, kFakeHerdlet, fs::perms::owner_all);
  REQUIRE(BootstrapAgents(c.ssh, {c.nodes[0]}, c.options).ok());
  CHECK(c.ssh.stdin_bytes == std::string(kFakeHerdlet).size());
}

TEST_CASE("nodes whose homes are on this machine get hard links to one kept copy of the binary") {
  LocalNodes c(2);
  for (size_t i = 0; i < 2; ++i) c.nodes[i].host_home = c.Home(i);
  auto ino = [](const std::string& path) {
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    return std::pair{st.st_ino, st.st_nlink};
  };
  // Copies first (no cache directory: what an older herd left on the nodes).
  auto first = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_MESSAGE(first.ok(), first.status().ToString());
  CHECK(ino(c.AgentDir(0) + "/bin/herdlet").second == 1);

  // With a cache directory: the same bytes become links to its copy, and nothing restarts.
  c.options.host_cache_dir = c.tmp + "/cache";
  fs::create_directories(c.options.host_cache_dir);
  auto linked = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_MESSAGE(linked.ok(), linked.status().ToString());
  CHECK(linked->unchanged == 2);
  CHECK(linked->agent_pids == first->agent_pids);
  const std::string kept =
      c.options.host_cache_dir + "/herdlet-" + Sha256Hex(std::string(kFakeHerdlet)).substr(0, 16);
  CHECK(ReadAll(kept) == kFakeHerdlet);
  CHECK(ino(kept).second == 3);
  for (size_t i = 0; i < 2; ++i) CHECK(ino(c.AgentDir(i) + "/bin/herdlet") == ino(kept));

  // A new binary: kept once (the old copy goes), linked to both nodes, agents restarted.
  const std::string v2 = std::string(kFakeHerdlet) + "# v2\n";
  WriteAll(c.options.herdlet_path, v2, fs::perms::owner_all);
  auto changed = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_MESSAGE(changed.ok(), changed.status().ToString());
  CHECK(changed->restarted == 2);
  CHECK(c.ssh.stdin_bytes == 0);
  CHECK_FALSE(fs::exists(kept));
  const std::string kept2 = c.options.host_cache_dir + "/herdlet-" + Sha256Hex(v2).substr(0, 16);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(ReadAll(c.AgentDir(i) + "/bin/herdlet") == v2);
    CHECK(ino(c.AgentDir(i) + "/bin/herdlet") == ino(kept2));
    CHECK(changed->agent_pids[i] != first->agent_pids[i]);
  }
  CHECK(BootstrapAgents(c.ssh, c.nodes, c.options)->unchanged == 2);

  // The small files are put there too: a changed config restarts that node's agent only.
  c.nodes[1].agent_config_yaml += "cpus: 3\n";
  auto config = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_MESSAGE(config.ok(), config.status().ToString());
  CHECK(config->unchanged == 1);
  CHECK(config->restarted == 1);
  CHECK(config->agent_pids[0] == changed->agent_pids[0]);
  CHECK(ReadAll(c.AgentDir(1) + "/herdlet.yaml") == c.nodes[1].agent_config_yaml);
  CHECK((fs::status(c.AgentDir(1) + "/certs/agent.key").permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write));
  CHECK((fs::status(c.AgentDir(1) + "/certs").permissions() & fs::perms::all) ==
        fs::perms::owner_all);

  // An agent that is down with nothing changed is started by the probe's own session.
  REQUIRE(StopAgents(c.ssh, {c.nodes[0].target}, c.options).ok());
  auto revived = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_MESSAGE(revived.ok(), revived.status().ToString());
  CHECK(revived->restarted == 1);
  CHECK(revived->uploaded == 0);
  CHECK(revived->agent_pids[1] == config->agent_pids[1]);
  CHECK(c.Pids() == revived->agent_pids);

  // A config herdlet refuses: reported with its log, nothing left running.
  c.nodes[0].agent_config_yaml = "fail: now\n";
  auto refused = BootstrapAgents(c.ssh, {c.nodes[0]}, c.options);
  REQUIRE_FALSE(refused.ok());
  CHECK_MESSAGE(refused.status().message().find(
                    "probing the node and starting herdlet failed (exit 3): herdlet exited right "
                    "after it started (or was not running within 20 s); the end of its log:\n") !=
                    std::string::npos,
                refused.status().message());
  CHECK(c.Pids()[0] == 0);
}

TEST_CASE("bootstrap errors name the node; a herdlet that dies at start is reported, not left") {
  LocalNodes c(2);
  c.nodes[1].agent_config_yaml = "fail: now\n";
  auto r = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_FALSE(r.ok());
  std::string m = r.status().message();
  // A fresh node gets its files and the start in one ssh session.
  CHECK_MESSAGE(m.starts_with("n1 (10.9.9.2:22): cannot install herdlet: uploading bin/herdlet, "),
                m);
  CHECK_MESSAGE(m.find(" and starting herdlet failed (exit 3): herdlet exited right after it "
                       "started (or was not running within 20 s); the end of its log:\n") !=
                    std::string::npos,
                m);
  CHECK(m.find("fake herdlet: refusing config") != std::string::npos);
  // The good node runs; the bad one has nothing left running.
  auto pids = c.Pids();
  CHECK(pids[0] > 0);
  CHECK(pids[1] == 0);
  CHECK(ProcessesMentioning(c.AgentDir(1)).empty());

  // Unreachable nodes: each named, counted.
  AgentInstall lost = c.nodes[0];
  lost.target.host = "10.9.9.77";
  lost.node_name = "n7";
  AgentInstall lost2 = lost;
  lost2.target.host = "10.9.9.78";
  lost2.target.name = "n8";
  auto two = BootstrapAgents(c.ssh, {c.nodes[0], lost, lost2}, c.options);
  REQUIRE_FALSE(two.ok());
  CHECK(two.status().code() == Code::kUnavailable);
  CHECK(two.status().message() ==
        "2 of 3 nodes failed: n7 (10.9.9.77:22): cannot install herdlet: no route to host; "
        "n8 (10.9.9.78:22): cannot install herdlet: no route to host");

  // Missing local files.
  AgentInstall nocerts = c.nodes[0];
  nocerts.certs_dir = c.tmp + "/nowhere";
  auto nc = BootstrapAgents(c.ssh, {nocerts}, c.options);
  CHECK(nc.status().code() == Code::kNotFound);
  CHECK(nc.status().message().starts_with("n0 (10.9.9.1:22): cannot install herdlet: "));
  BootstrapOptions nobin = c.options;
  nobin.herdlet_path = c.tmp + "/no-herdlet";
  CHECK(BootstrapAgents(c.ssh, c.nodes, nobin).status().code() == Code::kNotFound);
  CHECK(AgentPids(c.ssh, {lost.target}, c.options).status().code() == Code::kUnavailable);
}

// A user on a systemd machine: /run/systemd/system exists, `id -u` is not 0, and `systemctl`
// is a small stand-in that runs the unit's ExecStart the way systemd would (in WorkingDirectory,
// with its Environment=).
constexpr char kFakeSystemctl[] = R"sh(#!/bin/sh
# fake systemctl --user for bootstrap_test
[ "$1" = --user ] || { echo "fake systemctl: only --user" >&2; exit 1; }
shift
echo "$*" >>"$HOME/systemctl.calls"
unit="$HOME/.config/systemd/user/herdlet.service"
pidf="$HOME/fake-unit.pid"
running() { [ -f "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; }
stop() { if running; then kill -TERM "$(cat "$pidf")"; sleep 0.3; fi; rm -f "$pidf"; }
case "$1" in
  show-environment|daemon-reload|enable) exit 0 ;;
  stop) stop ;;
  restart)
    stop
    wd=$(sed -n 's/^WorkingDirectory=//p' "$unit")
    home=$(sed -n 's/^Environment=HOME=//p' "$unit")
    exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
    # exec: $! is herdlet itself under any sh (bash forks for a backgrounded `cd && cmd`).
    (cd "$wd" && HOME="$home" exec setsid $exec_start </dev/null >/dev/null 2>&1) &
    echo $! >"$pidf"
    ;;
  show) if running; then cat "$pidf"; else echo 0; fi ;;
  *) echo "fake systemctl: $*" >&2; exit 1 ;;
esac
)sh";

TEST_CASE("bootstrap where systemd is PID 1: a user unit, restarted only on change" *
          doctest::test_suite("root")) {
  if (::geteuid() != 0) {
    return testing::Skip("making a mount namespace with systemd's /run needs root");
  }
  LocalNodes c(1);
  std::string shims = c.tmp + "/shims";
  fs::create_directories(shims);
  WriteAll(shims + "/systemctl", kFakeSystemctl, fs::perms::owner_all);
  // PID 1 being systemd is not enough: a local provider's node shares this machine's PID 1 but
  // has its own /run, and no systemd it could reach.
  WriteAll(shims + "/ps", "#!/bin/sh\necho systemd\n", fs::perms::owner_all);
  WriteAll(shims + "/id", "#!/bin/sh\n[ \"$1\" = -u ] && echo 1000 || echo someone\n",
           fs::perms::owner_all);
  WriteAll(shims + "/loginctl", "#!/bin/sh\necho \"$*\" >>\"$HOME/loginctl.calls\"\n",
           fs::perms::owner_all);
  WriteAll(shims + "/journalctl", "#!/bin/sh\necho fake journal\n", fs::perms::owner_all);
  c.ssh.path_prefix = shims;
  {
    auto probe = c.ssh.Run(c.nodes[0].target,
                           "/bin/sh -c " + ShellQuote(ProbeScript(".herd/agent")), 10s, {});
    REQUIRE(probe.ok());
    auto parsed = ParseProbe(probe->out);
    REQUIRE_MESSAGE(parsed.ok(), parsed.status().ToString());
    CHECK(parsed->mode == AgentMode::kSupervise);
  }
  c.ssh.systemd_booted = true;

  auto first = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_MESSAGE(first.ok(), first.status().ToString());
  CHECK(first->restarted == 1);
  REQUIRE(first->agent_pids[0] > 0);
  std::string home = c.Home(0), dir = c.AgentDir(0);
  std::string unit = ReadAll(home + "/.config/systemd/user/herdlet.service");
  CHECK(unit ==
        RenderUnit(UserUnitTemplate(), {dir + "/bin/herdlet", dir + "/herdlet.yaml", dir, home})
            .value());
  CHECK_FALSE(fs::exists(dir + "/bin/herdlet-supervise"));  // systemd supervises
  CHECK_FALSE(fs::exists(dir + "/supervise.pid"));
  std::string calls = ReadAll(home + "/systemctl.calls");
  CHECK(calls.find("daemon-reload\nenable herdlet.service\nrestart herdlet.service\n") !=
        std::string::npos);
  CHECK(ReadAll(home + "/loginctl.calls") == "enable-linger someone\n");
  CHECK(ReadAll(home + "/fake-herdlet.runs").find("|" + home + "|" + dir + "|--config ") !=
        std::string::npos);

  auto again = BootstrapAgents(c.ssh, c.nodes, c.options);
  REQUIRE_MESSAGE(again.ok(), again.status().ToString());
  CHECK(again->unchanged == 1);
  CHECK(again->agent_pids == first->agent_pids);

  Status stopped = StopAgents(c.ssh, c.Targets(), c.options);
  REQUIRE_MESSAGE(stopped.ok(), stopped.ToString());
  CHECK(ReadAll(home + "/systemctl.calls").ends_with("stop herdlet.service\n"));
  CHECK(c.Pids() == std::vector<int>{0});
  CHECK(WaitFor([&] { return !netns::IsAlive(first->agent_pids[0]); }, 3s));
}

// ---- Real nodes --------------------------------------------------------------------------------

// Why the namespace test cannot run here, or "" when it can: namespace nodes, and the built
// binaries it installs and runs.
std::string SkipReason() {
  std::string why = testing::NetnsSkipReason();
  if (!why.empty()) return why;
  const char* herd = std::getenv("HERD");
  const char* herdlet = std::getenv("HERDLET");
  if (!herd || !herdlet || ::access(herd, X_OK) != 0 || ::access(herdlet, X_OK) != 0) {
    return "HERD and HERDLET must name the built binaries";
  }
  return "";
}

// A namespace cluster (netns_fixture.hpp) that the real herdlet is installed on, its certificates
// in ca_dir.
struct NetnsCluster : testing::NetnsCluster {
  std::string ca_dir = tmp + "/ca";

  NetnsCluster() : testing::NetnsCluster("herd-bsn", "hb") {}
  std::vector<SshTarget> Targets() const { return {Target(0), Target(1)}; }
  std::string Endpoint() const { return nodes[0].ip + ":46590"; }
  // `herd nodes -o json` through the real CLI; an empty array while the head is not up.
  boost::json::array HerdNodes() {
    auto r = RunProcess(
        {std::getenv("HERD"), "nodes", "--endpoint", Endpoint(), "--certs", ca_dir, "-o", "json"},
        {}, 20s);
    if (!r.ok() || r->exit_code != 0) return {};
    boost::system::error_code ec;
    auto v = boost::json::parse(r->out, ec);
    return ec || !v.is_array() ? boost::json::array{} : v.as_array();
  }
  int AliveNodes() {
    int n = 0;
    for (const auto& x : HerdNodes()) n += x.as_object().at("alive").as_bool();
    return n;
  }
};

std::string AgentConfig(const NetnsCluster& c, size_t i, const std::string& extra = "") {
  std::string cfg =
      "cluster: " + c.name + "\nnode_id: " + c.nodes[i].name + "\naddress: " + c.nodes[i].ip +
      "\ncerts: certs\nstate_dir: state\nready_file: " + std::string(kRemoteReadyFile) + "\n";
  cfg += i == 0 ? "role: head\nlisten: " + c.Endpoint() + "\n"
                : "role: worker\nhead: " + c.Endpoint() + "\n";
  return cfg + extra;
}

TEST_CASE("bootstrap the real herdlet on two namespace nodes over ssh" *
          doctest::test_suite("root")) {
  std::string why = SkipReason();
  if (!why.empty()) return testing::Skip("the namespace bootstrap test: " + why);
  auto t0 = Clock::now();
  NetnsCluster c;
  auto provisioned = c.provider.Provision({c.name, 2, c.state_dir, ReadAll(c.key + ".pub")});
  REQUIRE_MESSAGE(provisioned.ok(), provisioned.status().ToString());
  c.nodes = *provisioned;
  for (size_t i = 0; i < 2; ++i) {
    Status ready = c.ssh.WaitReady(c.Target(i), 20s);
    REQUIRE_MESSAGE(ready.ok(), ready.ToString());
  }
  REQUIRE(tls::InitClusterCerts(c.ca_dir, c.name).ok());
  std::vector<AgentInstall> installs;
  for (size_t i = 0; i < 2; ++i) {
    std::string certs = c.tmp + "/certs-" + c.nodes[i].name;
    REQUIRE(tls::IssueAgentCerts(c.ca_dir, c.nodes[i].name, {c.nodes[i].ip}, certs).ok());
    installs.push_back({c.Target(i), c.nodes[i].name, AgentConfig(c, i), certs});
  }
  BootstrapOptions options;
  options.herdlet_path = std::getenv("HERDLET");

  auto first = BootstrapAgents(c.ssh, installs, options);
  REQUIRE_MESSAGE(first.ok(), first.status().ToString());
  CHECK(first->uploaded == 2);
  CHECK(first->restarted == 2);
  auto pids = AgentPids(c.ssh, c.Targets(), options);
  REQUIRE(pids.ok());
  CHECK((*pids)[0] > 0);
  CHECK((*pids)[1] > 0);
  CHECK(*pids == first->agent_pids);
  // Each herdlet told the start script it runs, in its ready file.
  for (size_t i = 0; i < 2; ++i) {
    CHECK(ReadAll(c.nodes[i].host_home + "/.herd/agent/herdlet.ready") ==
          std::to_string((*pids)[i]) + "\n");
  }
  // The agent runs inside its node, as the node's user, from the node's home.
  CHECK(netns::ProcessesIn(c.nodes[1].netns).size() >= 2);  // sshd, supervisor, herdlet
  auto environ = c.ssh.Run(c.Target(1),
                           "echo \"HOME=$HOME\"; tr '\\0' '\\n' </proc/" +
                               std::to_string((*pids)[1]) + "/environ | grep '^HOME='",
                           10s);
  REQUIRE(environ.ok());
  auto nl = environ->out.find('\n');
  REQUIRE(nl != std::string::npos);
  CHECK(environ->out.substr(nl + 1) == environ->out.substr(0, nl + 1));  // the login's HOME
  CHECK(WaitFor([&] { return c.AliveNodes() == 2; }, 20s));

  auto again = BootstrapAgents(c.ssh, installs, options);
  REQUIRE_MESSAGE(again.ok(), again.status().ToString());
  CHECK(again->uploaded == 0);
  CHECK(again->restarted == 0);
  CHECK(again->unchanged == 2);
  CHECK(again->agent_pids == first->agent_pids);

  // A changed worker config restarts the worker only, and the head sees the new declaration.
  installs[1].agent_config_yaml = AgentConfig(c, 1, "cpus: 3\n");
  auto changed = BootstrapAgents(c.ssh, installs, options);
  REQUIRE_MESSAGE(changed.ok(), changed.status().ToString());
  CHECK(changed->restarted == 1);
  CHECK(changed->unchanged == 1);
  CHECK(changed->agent_pids[0] == first->agent_pids[0]);
  CHECK(changed->agent_pids[1] != first->agent_pids[1]);
  CHECK(WaitFor(
      [&] {
        for (const auto& x : c.HerdNodes()) {
          const auto& o = x.as_object();
          if (o.at("node_id").as_string() == c.nodes[1].name && o.at("alive").as_bool() &&
              o.at("cpus").to_number<double>() == 3) {
            return true;
          }
        }
        return false;
      },
      20s));

  // herdlet killed -9 on the worker: the supervisor restarts it and it registers again.
  std::string worker_log = c.nodes[1].host_home + "/.herd/agent/herdlet.log";
  auto registrations = [&] {
    std::string log = ReadAll(worker_log);
    int n = 0;
    for (size_t at = log.find("registered with head"); at != std::string::npos;
         at = log.find("registered with head", at + 1)) {
      ++n;
    }
    return n;
  };
  REQUIRE(WaitFor([&] { return registrations() == 2; }, 10s));  // first start, config change
  int killed = changed->agent_pids[1];
  auto kill = c.ssh.Run(c.Target(1), "kill -9 " + std::to_string(killed), 10s);
  REQUIRE(kill.ok());
  int replacement = 0;
  CHECK(WaitFor(
      [&] {
        auto p = AgentPids(c.ssh, c.Targets(), options);
        replacement = p.ok() ? (*p)[1] : 0;
        return replacement > 0 && replacement != killed;
      },
      8s));
  CHECK(WaitFor([&] { return registrations() == 3; }, 20s));
  CHECK(ReadAll(worker_log).find("herdlet-supervise") != std::string::npos);
  CHECK(WaitFor([&] { return c.AliveNodes() == 2; }, 20s));

  Status stopped = StopAgents(c.ssh, c.Targets(), options);
  REQUIRE_MESSAGE(stopped.ok(), stopped.ToString());
  auto after = AgentPids(c.ssh, c.Targets(), options);
  REQUIRE(after.ok());
  CHECK(*after == std::vector<int>{0, 0});
  for (size_t i = 0; i < 2; ++i) {
    for (pid_t p : netns::ProcessesIn(c.nodes[i].netns)) {
      CHECK_MESSAGE(
          ReadAll("/proc/" + std::to_string(p) + "/cmdline").find("herdlet") == std::string::npos,
          "left running on " << c.nodes[i].name << ": pid " << p);
    }
  }
  CHECK(c.HerdNodes().empty());  // the head is gone too

  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  MESSAGE("namespace bootstrap test took " << took.count() << " ms");
  CHECK(took < 60s);
}

}  // namespace
}  // namespace herd::controller
