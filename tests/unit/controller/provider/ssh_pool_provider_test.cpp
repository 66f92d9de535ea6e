// The ssh pool provider: the pools file (every form and every error), alias resolution through a
// test ssh config, picking/skipping/recording hosts, and a real run against two network-namespace
// machines made by the local provider (test suite root: root only; says why and reports itself
// skipped otherwise).
#include "controller/provider/ssh_pool_provider.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include <doctest/doctest.h>

#include "controller/provider/local_provider.hpp"
#include "controller/provider/netns.hpp"
#include "controller/ssh/ssh_runner.hpp"
#include "controller/ssh/subprocess.hpp"
#include "tests/unit/netns_fixture.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::controller {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using herd::testing::ReadAll;

void WriteAll(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

using herd::testing::ScopedEnv;
using herd::testing::TempDir;

std::string ParseError(const std::string& yaml) {
  auto r = ParseSshNodePools(yaml, "pools.yaml");
  REQUIRE_MESSAGE(!r.ok(), "accepted: " << yaml);
  CHECK(r.status().code() == Code::kInvalidArgument);
  return r.status().message();
}

TEST_CASE("ssh node pools: every host form, pool defaults and positions") {
  ScopedEnv home("HOME", "/home/tester");
  auto pools = ParseSshNodePools(
      "my-pool:\n"
      "  user: ubuntu\n"
      "  identity_file: ~/.ssh/id_rsa\n"
      "  hosts:\n"
      "    - 1.2.3.4\n"
      "    - my-alias\n"
      "    - ip: 5.6.7.8\n"
      "      user: root\n"
      "      identity_file: ~/.ssh/other\n"
      "      port: 2222\n"
      "    - fd00::7\n"
      "other:\n"
      "  hosts: [10.0.0.1, {ip: 10.0.0.2}]\n",
      "pools.yaml");
  REQUIRE_MESSAGE(pools.ok(), pools.status().ToString());
  REQUIRE(pools->size() == 2);
  const SshPool& p = (*pools)[0];
  CHECK(p.name == "my-pool");
  CHECK(p.location == "pools.yaml:1:1");
  CHECK(p.user == "ubuntu");
  CHECK(p.identity_file == "/home/tester/.ssh/id_rsa");
  REQUIRE(p.hosts.size() == 4);
  CHECK(p.hosts[0].address == "1.2.3.4");
  CHECK(p.hosts[0].user.empty());
  CHECK(p.hosts[0].identity_file.empty());
  CHECK(p.hosts[0].port == 0);
  CHECK(p.hosts[0].location == "pools.yaml:5:7");
  CHECK(p.hosts[1].address == "my-alias");
  CHECK(p.hosts[2].address == "5.6.7.8");
  CHECK(p.hosts[2].user == "root");
  CHECK(p.hosts[2].identity_file == "/home/tester/.ssh/other");
  CHECK(p.hosts[2].port == 2222);
  CHECK(p.hosts[2].location == "pools.yaml:7:7");
  CHECK(p.hosts[3].address == "fd00::7");
  const SshPool& o = (*pools)[1];
  CHECK(o.name == "other");
  CHECK(o.user.empty());
  CHECK(o.identity_file.empty());
  REQUIRE(o.hosts.size() == 2);
  CHECK(o.hosts[1].address == "10.0.0.2");

  auto empty = ParseSshNodePools("", "pools.yaml");
  REQUIRE(empty.ok());
  CHECK(empty->empty());
  auto comments = ParseSshNodePools("# nothing yet\n", "pools.yaml");
  REQUIRE(comments.ok());
  CHECK(comments->empty());
}

TEST_CASE("ssh node pools: every mistake names file:line:col and the field") {
  CHECK(ParseError("- a\n- b\n") == "pools.yaml:1:1: expected a map of pool names to pools");
  CHECK(ParseError("my-pool: 3\n") == "pools.yaml:1:10: my-pool: expected a map with hosts");
  CHECK(ParseError("my-pool:\n") == "pools.yaml:1:1: my-pool: expected a map with hosts");
  CHECK(ParseError("my-pool:\n  user: a\n") == "pools.yaml:1:1: my-pool: missing hosts");
  CHECK(ParseError("my-pool:\n  users: a\n  hosts: [1.2.3.4]\n") ==
        "pools.yaml:2:3: my-pool.users: unknown field (known: user, identity_file, hosts)");
  CHECK(ParseError("my-pool:\n  password: hunter2\n  hosts: [1.2.3.4]\n") ==
        "pools.yaml:2:3: my-pool.password: password authentication is not supported; herd only "
        "uses SSH keys (set identity_file)");
  CHECK(ParseError("my-pool:\n  user:\n  hosts: [1.2.3.4]\n") ==
        "pools.yaml:2:3: my-pool.user: expected a user name");
  CHECK(ParseError("my-pool:\n  user: [a, b]\n  hosts: [1.2.3.4]\n") ==
        "pools.yaml:2:9: my-pool.user: expected a user name");
  CHECK(ParseError("my-pool:\n  identity_file: ''\n  hosts: [1.2.3.4]\n") ==
        "pools.yaml:2:18: my-pool.identity_file: expected a path to a private key");
  CHECK(ParseError("my-pool:\n  hosts: 1.2.3.4\n") ==
        "pools.yaml:2:10: my-pool.hosts: expected a list of hosts");
  CHECK(ParseError("my-pool:\n  hosts:\n") ==
        "pools.yaml:2:3: my-pool.hosts: expected a list of hosts");
  CHECK(ParseError("my-pool:\n  hosts: []\n") ==
        "pools.yaml:2:10: my-pool.hosts: the list is empty");
  // The brief's own example: a nested list where a host belongs.
  CHECK(ParseError("my-pool:\n  hosts:\n    - 1.2.3.4\n    - [a, b]\n") ==
        "pools.yaml:4:7: my-pool.hosts[1]: expected an IP, an ssh-config alias or a map with ip");
  // Something ssh would take as an option, or that is no host name at all.
  CHECK(ParseError("my-pool:\n  hosts:\n    - -oProxyCommand=sh\n") ==
        "pools.yaml:3:7: my-pool.hosts[0]: expected an IP, an ssh-config alias or a map with ip");
  CHECK(ParseError("my-pool:\n  hosts:\n    - two words\n") ==
        "pools.yaml:3:7: my-pool.hosts[0]: expected an IP, an ssh-config alias or a map with ip");
  CHECK(ParseError("my-pool:\n  hosts:\n    - 1.2.3.4\n    -\n") ==
        "pools.yaml:2:3: my-pool.hosts[1]: expected an IP, an ssh-config alias or a map with ip");
  CHECK(ParseError("my-pool:\n  hosts:\n    - user: root\n") ==
        "pools.yaml:3:7: my-pool.hosts[0]: missing ip");
  CHECK(ParseError("my-pool:\n  hosts:\n    - ip: 1.2.3.4\n      hostname: x\n") ==
        "pools.yaml:4:7: my-pool.hosts[0].hostname: unknown field (known: ip, user, "
        "identity_file, port)");
  CHECK(ParseError("my-pool:\n  hosts:\n    - ip: 1.2.3.4\n      password: x\n") ==
        "pools.yaml:4:7: my-pool.hosts[0].password: password authentication is not supported; "
        "herd only uses SSH keys (set identity_file)");
  CHECK(ParseError("my-pool:\n  hosts:\n    - ip: 1.2.3.4\n      port: 70000\n") ==
        "pools.yaml:4:13: my-pool.hosts[0].port: expected a port number 1-65535");
  CHECK(ParseError("my-pool:\n  hosts:\n    - ip: 1.2.3.4\n      port: 22x\n") ==
        "pools.yaml:4:13: my-pool.hosts[0].port: expected a port number 1-65535");
  CHECK(ParseError("my-pool:\n  hosts:\n    - ip: 'a b'\n") ==
        "pools.yaml:3:11: my-pool.hosts[0].ip: expected an IP, an ssh-config alias or a host name");
  CHECK(ParseError("my-pool:\n  hosts:\n    - {ip: 1.2.3.4, user: ''}\n") ==
        "pools.yaml:3:27: my-pool.hosts[0].user: expected a user name");
  CHECK(ParseError("my-pool:\n  hosts:\n    - 1.2.3.4\n    - 1.2.3.4\n") ==
        "pools.yaml:4:7: my-pool.hosts[1]: 1.2.3.4 is listed twice (first as hosts[0])");
  CHECK(ParseError("a:\n  hosts: [1.2.3.4]\na:\n  hosts: [1.2.3.5]\n") ==
        "pools.yaml:3:1: a: defined twice (first at pools.yaml:1:1)");
  CHECK(ParseError("my-pool:\n  hosts: [1.2.3.4\n").starts_with("pools.yaml:"));
}

TEST_CASE("ssh node pools file: where it is, a missing file, a missing pool") {
  TempDir tmp{"herd-sp"};
  {
    ScopedEnv herd_home("HERD_HOME", (tmp.path() + "/hh").c_str());
    CHECK(DefaultSshNodePoolsFile() == tmp.path() + "/hh/ssh_node_pools.yaml");
    CHECK(SshPoolProvider("p").pools_file() == tmp.path() + "/hh/ssh_node_pools.yaml");
  }
  {
    ScopedEnv herd_home("HERD_HOME", "rel/hh");
    CHECK(DefaultSshNodePoolsFile() ==
          (fs::current_path() / "rel/hh/ssh_node_pools.yaml").lexically_normal().string());
  }
  {
    ScopedEnv herd_home("HERD_HOME", nullptr);
    ScopedEnv home("HOME", "/home/tester");
    CHECK(DefaultSshNodePoolsFile() == "/home/tester/.herd/ssh_node_pools.yaml");
  }
  const std::string missing = tmp.path() + "/none.yaml";
  auto r = LoadSshNodePool(missing, "p");
  CHECK(r.status().code() == Code::kNotFound);
  CHECK(r.status().message() == "no ssh node pools file at " + missing +
                                    " (write the pools there; HERD_HOME sets its directory)");

  const std::string file = tmp.path() + "/pools.yaml";
  WriteAll(file, "gpus:\n  hosts: [1.2.3.4]\ncpus:\n  hosts: [1.2.3.5]\n");
  auto none = LoadSshNodePool(file, "tpu");
  CHECK(none.status().code() == Code::kNotFound);
  CHECK(none.status().message() == "no pool tpu in " + file + "; its pools: gpus, cpus");
  auto found = LoadSshNodePool(file, "cpus");
  REQUIRE(found.ok());
  CHECK(found->hosts[0].address == "1.2.3.5");
  WriteAll(file, "");
  CHECK(LoadSshNodePool(file, "tpu").status().message() ==
        "no pool tpu in " + file + ": it defines no pools");
  WriteAll(file, "p:\n  hosts: [1.2.3.4, [x]]\n");
  CHECK(LoadSshNodePool(file, "p").status().message() ==
        file + ":2:20: p.hosts[1]: expected an IP, an ssh-config alias or a map with ip");

  SshPoolProvider provider("p", missing);
  CHECK(provider.name() == "ssh");
  auto p = provider.Provision({"c1", 1, tmp.path() + "/clusters/c1", ""});
  CHECK(p.status().code() == Code::kNotFound);
  CHECK(p.status().message().starts_with("no ssh node pools file at " + missing));
}

TEST_CASE(
    "ssh pool hosts: aliases resolve through the ssh config, with the documented precedence") {
  TempDir tmp{"herd-sp"};
  const std::string config = tmp.path() + "/ssh_config";
  WriteAll(config,
           "Host gpu-box\n"
           "  HostName 10.1.2.3\n"
           "  Port 2201\n"
           "  User alice\n"
           "  IdentityFile " +
               tmp.path() +
               "/alias_key\n"
               "Host bare\n"
               "  HostName 10.1.2.4\n"
               "Host loopy\n"
               "  HostName localhost\n"
               "Host 10.1.2.9\n"
               "  User config-user\n"
               "  Port 2209\n");
  auto pools = ParseSshNodePools(
      "p:\n"
      "  user: ubuntu\n"
      "  identity_file: /keys/pool\n"
      "  hosts:\n"
      "    - gpu-box\n"
      "    - bare\n"
      "    - {ip: gpu-box, user: carol, identity_file: /keys/carol, port: 2300}\n"
      "    - 10.1.2.9\n"
      "    - loopy\n"
      "    - 10.1.2.10\n"
      "q:\n"
      "  hosts: [10.1.2.11]\n",
      "pools.yaml");
  REQUIRE_MESSAGE(pools.ok(), pools.status().ToString());
  const SshPool& p = (*pools)[0];
  auto resolve = [&](size_t i) {
    auto r = ResolveSshPoolHost(p, i, config);
    REQUIRE_MESSAGE(r.ok(), r.status().ToString());
    return *r;
  };
  // An alias: what its config entry sets beats the pool's defaults.
  ResolvedSshHost a = resolve(0);
  CHECK(a.ip == "10.1.2.3");
  CHECK(a.port == 2201);
  CHECK(a.user == "alice");
  CHECK(a.identity_file == tmp.path() + "/alias_key");
  // An alias whose entry sets only HostName: the pool fills the rest.
  ResolvedSshHost b = resolve(1);
  CHECK(b.ip == "10.1.2.4");
  CHECK(b.port == 22);
  CHECK(b.user == "ubuntu");
  CHECK(b.identity_file == "/keys/pool");
  // The map beats everything.
  ResolvedSshHost c = resolve(2);
  CHECK(c.ip == "10.1.2.3");
  CHECK(c.port == 2300);
  CHECK(c.user == "carol");
  CHECK(c.identity_file == "/keys/carol");
  // A plain IP: the pool's user wins over a config entry for that IP; the port comes from ssh.
  ResolvedSshHost d = resolve(3);
  CHECK(d.ip == "10.1.2.9");
  CHECK(d.port == 2209);
  CHECK(d.user == "ubuntu");
  CHECK(d.identity_file == "/keys/pool");
  // A HostName that is a name is resolved to its address.
  CHECK(resolve(4).ip == "127.0.0.1");
  CHECK(resolve(5).ip == "10.1.2.10");
  // No pool defaults and no config: ssh's own user and no key (ssh's default keys).
  auto q = ResolveSshPoolHost((*pools)[1], 0, config);
  REQUIRE(q.ok());
  CHECK(q->ip == "10.1.2.11");
  CHECK(q->port == 22);
  CHECK_FALSE(q->user.empty());
  CHECK(q->identity_file.empty());
}

// A pools file and identity files for picking tests; nothing is contacted.
struct PickFixture {
  TempDir tmp{"herd-sp"};
  std::string file, key, clusters;
  PickFixture() {
    file = tmp.path() + "/ssh_node_pools.yaml";
    key = tmp.path() + "/id_pool";
    clusters = tmp.path() + "/clusters";
    WriteAll(key, "not really a key; only its existence is checked before connecting\n");
    WriteAll(file,
             "p:\n"
             "  user: ubuntu\n"
             "  identity_file: " +
                 key +
                 "\n"
                 "  hosts:\n"
                 "    - 10.99.0.1\n"
                 "    - 10.99.0.2\n"
                 "    - {ip: 10.99.0.3, port: 2222, user: root}\n"
                 "other:\n"
                 "  identity_file: " +
                 key +
                 "\n"
                 "  hosts: [10.99.0.1]\n"
                 "twice:\n"
                 "  identity_file: " +
                 key +
                 "\n"
                 "  hosts: [10.99.0.5, {ip: 10.99.0.5, port: 22}]\n"
                 "nokey:\n"
                 "  identity_file: " +
                 tmp.path() +
                 "/missing_key\n"
                 "  hosts: [10.99.0.6]\n");
  }
  std::string Dir(const std::string& cluster) const { return clusters + "/" + cluster; }
  ProvisionRequest Req(const std::string& cluster, int n) const {
    return {cluster, n, Dir(cluster), "ssh-ed25519 AAAA-ignored"};
  }
};

TEST_CASE("ssh pool provider: picks the first free hosts, records them, skips other clusters'") {
  PickFixture f;
  SshPoolProvider provider("p", f.file, "/dev/null");

  auto a = provider.Provision(f.Req("a", 2));
  REQUIRE_MESSAGE(a.ok(), a.status().ToString());
  REQUIRE(a->size() == 2);
  CHECK((*a)[0].name == "a-head");
  CHECK((*a)[0].ip == "10.99.0.1");
  CHECK((*a)[0].ssh_port == 22);
  CHECK((*a)[0].ssh_user == "ubuntu");
  CHECK((*a)[0].identity_file == f.key);
  CHECK((*a)[0].netns.empty());
  CHECK((*a)[0].host_home.empty());
  CHECK((*a)[1].name == "a-worker1");
  CHECK((*a)[1].ip == "10.99.0.2");
  std::string record = ReadAll(f.Dir("a") + "/ssh_pool.state");
  CHECK(record.find("10.99.0.1") != std::string::npos);
  CHECK(record.find("10.99.0.2") != std::string::npos);
  CHECK(record.find("10.99.0.3") == std::string::npos);

  // Idempotent, also from a fresh provider object (the record is what counts).
  auto again = SshPoolProvider("p", f.file, "/dev/null").Provision(f.Req("a", 2));
  REQUIRE(again.ok());
  CHECK((*again)[1].ip == "10.99.0.2");
  auto bigger = provider.Provision(f.Req("a", 3));
  CHECK(bigger.status().code() == Code::kFailedPrecondition);
  CHECK(bigger.status().message() ==
        "cluster a uses 2 host(s) of pool p, not 3; tear it down first");
  auto wrong_pool = SshPoolProvider("other", f.file, "/dev/null").Provision(f.Req("a", 2));
  CHECK(wrong_pool.status().code() == Code::kFailedPrecondition);
  CHECK(wrong_pool.status().message() ==
        f.Dir("a") + " records cluster a on pool p, not a on pool other");

  // Another cluster skips a's hosts; when too few are free, it says who holds them.
  auto b2 = provider.Provision(f.Req("b", 2));
  CHECK(b2.status().code() == Code::kFailedPrecondition);
  CHECK(b2.status().message() ==
        "pool p has 3 host(s) and 2 of them are in use by cluster(s) a; the task needs 2");
  CHECK_FALSE(fs::exists(f.Dir("b") + "/ssh_pool.state"));
  auto b = provider.Provision(f.Req("b", 1));
  REQUIRE_MESSAGE(b.ok(), b.status().ToString());
  CHECK((*b)[0].name == "b-head");
  CHECK((*b)[0].ip == "10.99.0.3");
  CHECK((*b)[0].ssh_port == 2222);
  CHECK((*b)[0].ssh_user == "root");
  auto c = provider.Provision(f.Req("c", 4));
  CHECK(c.status().code() == Code::kFailedPrecondition);
  CHECK(c.status().message() == "pool p has 3 host(s); the task needs 4");
  // A different pool listing the same machine does not count as a conflict of pool p ...
  auto o = SshPoolProvider("other", f.file, "/dev/null").Provision(f.Req("o", 1));
  REQUIRE_MESSAGE(o.ok(), o.status().ToString());
  CHECK((*o)[0].ip == "10.99.0.1");

  // Stop does nothing to machines; Start gives the recorded nodes back in order.
  CHECK(provider.Stop("a", f.Dir("a")).ok());
  auto started = provider.Start("a", f.Dir("a"));
  REQUIRE(started.ok());
  REQUIRE(started->size() == 2);
  CHECK((*started)[0].ip == "10.99.0.1");
  CHECK((*started)[1].name == "a-worker1");
  CHECK(provider.Stop("nope", f.Dir("nope")).code() == Code::kNotFound);
  auto not_started = provider.Start("nope", f.Dir("nope"));
  CHECK(not_started.status().code() == Code::kNotFound);
  CHECK(not_started.status().message() ==
        "ssh cluster nope has no hosts (no record in " + f.Dir("nope") + ")");
  CHECK(provider.Teardown("b", f.Dir("a")).code() == Code::kFailedPrecondition);

  // Teardown forgets a's hosts: the next cluster gets them.
  REQUIRE(provider.Teardown("a", f.Dir("a")).ok());
  CHECK_FALSE(fs::exists(f.Dir("a")));
  CHECK(provider.Teardown("a", f.Dir("a")).ok());
  CHECK(provider.Start("a", f.Dir("a")).status().code() == Code::kNotFound);
  auto d = provider.Provision(f.Req("d", 2));
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  CHECK((*d)[0].ip == "10.99.0.1");
  CHECK((*d)[1].ip == "10.99.0.2");

  // One machine listed twice under different spellings; a key that is not there.
  auto twice = SshPoolProvider("twice", f.file, "/dev/null").Provision(f.Req("t", 2));
  CHECK(twice.status().code() == Code::kInvalidArgument);
  CHECK(twice.status().message() == f.file +
                                        ":13:22: twice.hosts[1] (10.99.0.5) is the same machine "
                                        "(10.99.0.5:22) as hosts[0]");
  auto nokey = SshPoolProvider("nokey", f.file, "/dev/null").Provision(f.Req("k", 1));
  CHECK(nokey.status().code() == Code::kFailedPrecondition);
  CHECK(nokey.status().message() == f.file + ":16:11: nokey.hosts[0] (10.99.0.6): identity_file " +
                                        f.tmp.path() + "/missing_key: No such file or directory");
  CHECK_FALSE(fs::exists(f.Dir("k") + "/ssh_pool.state"));

  // A damaged record blocks picking (its hosts are unknown) and says which file; Teardown clears
  // it.
  fs::create_directories(f.Dir("x"));
  WriteAll(f.Dir("x") + "/ssh_pool.state", "cluster: [\n");
  auto blocked = provider.Provision(f.Req("e", 1));
  CHECK(blocked.status().code() == Code::kIo);
  CHECK(blocked.status().message().starts_with(f.Dir("x") + "/ssh_pool.state: damaged"));
  CHECK(provider.Teardown("x", f.Dir("x")).ok());
  CHECK(provider.Provision(f.Req("e", 1)).status().message() ==
        "pool p has 3 host(s) and 3 of them are in use by cluster(s) b, d; the task needs 1");
}

// ---- Real machines: two namespace nodes made by the local provider ------------------------------

// Machines that exist before herd's ssh provider sees them: a local-provider cluster of namespace
// nodes (netns_fixture.hpp), torn down (and swept) however the test ends.
struct Machines : testing::NetnsCluster {
  Machines() : NetnsCluster("herd-sp", "hs", "", "machines") {}
  // How the cluster reaches a node the ssh provider returned: only what the handle says.
  SshTarget Target(const NodeHandle& n) {
    SshTarget t;
    t.host = n.ip;
    t.port = n.ssh_port;
    t.user = n.ssh_user;
    t.identity_file = n.identity_file;
    t.known_hosts_file = known_hosts;
    t.control_dir = control_dir;
    t.name = n.name;
    opened.push_back(t);
    return t;
  }
};

TEST_CASE("ssh pool provider: existing machines reached with the pool's keys" *
          doctest::test_suite("root")) {
  std::string why = testing::NetnsSkipReason();
  if (!why.empty()) return testing::Skip("the ssh pool machines test: " + why);
  Machines m;
  auto made = m.provider.Provision({m.name, 2, m.state_dir, ReadAll(m.key + ".pub")});
  REQUIRE_MESSAGE(made.ok(), made.status().ToString());
  m.nodes = *made;
  // Machine 1 also accepts a second key, which only its own pool entry names.
  const std::string key2 = m.tmp + "/id_second";
  testing::Keygen(key2);
  {
    std::ofstream auth(m.state_dir + "/nodes/" + m.nodes[1].name + "/authorized_keys",
                       std::ios::app);
    auth << ReadAll(key2 + ".pub");
    REQUIRE(auth.good());
  }
  std::string subnet = m.nodes[0].ip.substr(0, m.nodes[0].ip.rfind('.') + 1);
  const std::string dead_ip = subnet + "200";  // inside the machines' subnet; nothing there

  const std::string pools = m.tmp + "/ssh_node_pools.yaml";
  WriteAll(pools,
           "lab:\n"
           "  user: root\n"
           "  identity_file: " +
               m.key +
               "\n"
               "  hosts:\n"
               "    - " +
               m.nodes[0].ip +
               "\n"
               "    - ip: " +
               m.nodes[1].ip +
               "\n"
               "      port: 22\n"
               "      identity_file: " +
               key2 +
               "\n"
               "dead:\n"
               "  user: root\n"
               "  identity_file: " +
               m.key + "\n  hosts: [" + dead_ip + "]\n");
  const std::string clusters = m.tmp + "/clusters";
  SshPoolProvider provider("lab", pools, "/dev/null");
  auto nodes = provider.Provision({"job", 2, clusters + "/job", ""});
  REQUIRE_MESSAGE(nodes.ok(), nodes.status().ToString());
  REQUIRE(nodes->size() == 2);
  CHECK((*nodes)[0].name == "job-head");
  CHECK((*nodes)[0].ip == m.nodes[0].ip);
  CHECK((*nodes)[0].identity_file == m.key);
  CHECK((*nodes)[1].name == "job-worker1");
  CHECK((*nodes)[1].ip == m.nodes[1].ip);
  CHECK((*nodes)[1].identity_file == key2);
  for (size_t i = 0; i < 2; ++i) {
    SshTarget t = m.Target((*nodes)[i]);
    Status ready = m.ssh.WaitReady(t, 20s);
    REQUIRE_MESSAGE(ready.ok(), ready.ToString());
    auto r = m.ssh.Run(t, "hostname", 20s);
    REQUIRE_MESSAGE(r.ok(), r.status().ToString());
    CHECK(r->exit_code == 0);
    // The machine's own name (what it was made as), not the cluster's node name.
    CHECK(r->out == m.nodes[i].name + "\n");
  }
  {
    // The per-host key really is the one used: machine 0 refuses it.
    NodeHandle swapped = (*nodes)[0];
    swapped.identity_file = key2;
    SshTarget t = m.Target(swapped);
    t.control_dir.clear();
    auto r = m.ssh.Run(t, "true", 20s);
    CHECK(r.status().code() == Code::kPermissionDenied);
  }

  // A pool host where nothing listens: Provision succeeds (it contacts nothing), and waiting for
  // it fails naming the host, within the bound.
  auto dead =
      SshPoolProvider("dead", pools, "/dev/null").Provision({"gone", 1, clusters + "/gone", ""});
  REQUIRE_MESSAGE(dead.ok(), dead.status().ToString());
  auto start = Clock::now();
  Status w = m.ssh.WaitReady(m.Target((*dead)[0]), 2s);
  auto took = Clock::now() - start;
  CHECK_FALSE(w.ok());
  CHECK(w.message().starts_with("gone-head (" + dead_ip + ":22): "));
  MESSAGE("unreachable pool host: "
          << w.ToString() << " after "
          << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
  CHECK(took < 8s);

  CHECK(provider.Teardown("job", clusters + "/job").ok());
  CHECK(SshPoolProvider("dead", pools, "/dev/null").Teardown("gone", clusters + "/gone").ok());
  CHECK_FALSE(fs::exists(clusters + "/job"));
}

}  // namespace
}  // namespace herd::controller
