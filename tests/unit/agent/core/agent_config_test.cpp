#include "agent/core/agent_config.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace herd::agent {
namespace {

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text) {
    char tmpl[] = "/tmp/herd-agent-config-XXXXXX";
    int fd = ::mkstemp(tmpl);
    ::close(fd);
    path = tmpl;
    std::ofstream(path) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
};

TEST_CASE("a worker config loads") {
  TempFile f(
      "role: worker\ncluster: c\nnode_id: c-worker1\naddress: 127.0.0.3\n"
      "head: 127.0.0.2:7443\ncerts: /x\nstate_dir: /y\ngpus: 2\ngpu_name: L4\n");
  auto c = LoadAgentConfig(f.path);
  REQUIRE(c.ok());
  CHECK(c->role == AgentConfig::Role::kWorker);
  CHECK(c->head.host == "127.0.0.2");
  CHECK(c->head.port == 7443);
  CHECK(c->gpus == 2);
  CHECK(c->gpu_name == "L4");
  CHECK(c->certs_dir == "/x");
  CHECK(c->head_node.empty());  // a config of an older herd: the head's identity is not checked
}

TEST_CASE("a worker names its head node; a head is its own") {
  TempFile w(
      "role: worker\ncluster: c\nnode_id: c-worker1\naddress: 127.0.0.3\n"
      "head: 127.0.0.2:7443\nhead_node: c-head\ncerts: /x\nstate_dir: /y\n");
  auto worker = LoadAgentConfig(w.path);
  REQUIRE(worker.ok());
  CHECK(worker->head_node == "c-head");
  TempFile h(
      "role: head\ncluster: c\nnode_id: c-head\naddress: 10.0.0.1\nlisten: 10.0.0.1:46590\n"
      "certs: /x\nstate_dir: /y\n");
  auto head = LoadAgentConfig(h.path);
  REQUIRE(head.ok());
  CHECK(head->head_node == "c-head");
}

TEST_CASE("relative paths are relative to the config file") {
  TempFile f(
      "role: head\ncluster: c\nnode_id: c-head\naddress: 10.0.0.1\nlisten: 10.0.0.1:46590\n"
      "certs: certs\nstate_dir: state\nexpected_nodes: 3\nready_file: herdlet.ready\n");
  auto c = LoadAgentConfig(f.path);
  REQUIRE(c.ok());
  CHECK(c->certs_dir == "/tmp/certs");
  CHECK(c->state_dir == "/tmp/state");
  CHECK(c->ready_file == "/tmp/herdlet.ready");
  CHECK(c->expected_nodes == 3);
}

TEST_CASE("bad configs name the place") {
  TempFile unknown("role: head\nlisten: 1.2.3.4:0\nnode: x\n");
  auto r = LoadAgentConfig(unknown.path);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() == unknown.path + ":3:1: unknown setting 'node'");

  TempFile port(
      "role: worker\ncluster: c\nnode_id: n\naddress: a\ncerts: c\nstate_dir: s\n"
      "head: host:99999\n");
  r = LoadAgentConfig(port.path);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("head: bad port '99999'") != std::string::npos);

  TempFile missing("role: worker\nhead: h:1\n");
  r = LoadAgentConfig(missing.path);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() == missing.path + ": cluster is required");

  CHECK(LoadAgentConfig("/nonexistent/herdlet.yaml").status().code() == Code::kNotFound);
}

TEST_CASE("health_check: a command and its interval; bad ones name the place") {
  const std::string base =
      "role: worker\ncluster: c\nnode_id: c-worker1\naddress: 127.0.0.3\n"
      "head: 127.0.0.2:7443\ncerts: /x\nstate_dir: /y\n";
  {
    TempFile f(base + "health_check:\n  command: /usr/bin/check --gpu\n  interval: 2.5\n");
    auto c = LoadAgentConfig(f.path);
    REQUIRE(c.ok());
    CHECK(c->health_check_command == "/usr/bin/check --gpu");
    CHECK(c->health_check_interval == std::chrono::milliseconds(2500));
  }
  {
    TempFile f(base);
    auto c = LoadAgentConfig(f.path);
    REQUIRE(c.ok());
    CHECK(c->health_check_command.empty());
    CHECK(c->health_check_interval == limits::kHealthCheckDefaultInterval);
  }
  auto error = [&](const std::string& tail) {
    TempFile f(base + tail);
    auto c = LoadAgentConfig(f.path);
    REQUIRE_FALSE(c.ok());
    return c.status().message().substr(f.path.size());
  };
  CHECK(error("health_check:\n  interval: 5\n") ==
        ":9:3: health_check.command: give the command to run");
  CHECK(error("health_check:\n  command: x\n  interval: 0.5\n") ==
        ":10:13: health_check.interval: at least 1 s, got 0.5");
  CHECK(error("health_check:\n  command: x\n  every: 5\n") ==
        ":10:3: health_check: unknown setting 'every'");
  CHECK(error("health_check: /bin/check\n") == ":8:15: health_check: expected {command, interval}");
}

TEST_CASE("spot_metadata: a spot node's metadata service; absent on others") {
  const std::string base =
      "role: worker\ncluster: c\nnode_id: c-worker1\naddress: 127.0.0.3\n"
      "head: 127.0.0.2:7443\ncerts: /x\nstate_dir: /y\n";
  {
    TempFile f(base + "spot_metadata: http://169.254.169.254\n");
    auto c = LoadAgentConfig(f.path);
    REQUIRE(c.ok());
    CHECK(c->spot_metadata == "http://169.254.169.254");
  }
  TempFile f(base);
  auto c = LoadAgentConfig(f.path);
  REQUIRE(c.ok());
  CHECK(c->spot_metadata.empty());
}

TEST_CASE("host:port parsing") {
  CHECK(ParseHostPort("[::1]:80", "f")->host == "::1");
  CHECK_FALSE(ParseHostPort("nocolon", "--endpoint").ok());
  CHECK(ParseHostPort("nocolon", "--endpoint").status().message() ==
        "--endpoint: expected HOST:PORT, got 'nocolon'");
}

}  // namespace
}  // namespace herd::agent
