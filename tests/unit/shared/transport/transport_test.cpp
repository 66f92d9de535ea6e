// Mutual-TLS websocket transport over real sockets on 127.0.0.1, with real certificates.
#include <doctest/doctest.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "shared/common/limits.hpp"
#include "shared/tls/certs.hpp"
#include "shared/transport/transport.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::transport {
namespace {

namespace fs = std::filesystem;
namespace net = boost::asio;
using namespace std::chrono_literals;

constexpr auto kWait = 30s;  // generous bound for one step on a loaded 2-core machine

using herd::testing::TempDir;

// Certificates of two clusters: ours ("test") and another one with its own CA.
class Certs {
 public:
  Certs() {
    REQUIRE(tls::InitClusterCerts(dir_ / "cluster", "test").ok());
    REQUIRE(tls::IssueAgentCerts(dir_ / "cluster", "head", {"127.0.0.1"}, dir_ / "agent").ok());
    REQUIRE(tls::InitClusterCerts(dir_ / "other", "other").ok());
  }
  TlsFiles Agent() const {
    return {dir_ / "agent/ca.crt", dir_ / "agent/agent.crt", dir_ / "agent/agent.key"};
  }
  TlsFiles Client() const {
    return {dir_ / "cluster/ca.crt", dir_ / "cluster/client.crt", dir_ / "cluster/client.key"};
  }
  // Trusts our CA but holds a certificate of the other cluster.
  TlsFiles OtherCluster() const {
    return {dir_ / "cluster/ca.crt", dir_ / "other/client.crt", dir_ / "other/client.key"};
  }
  TlsFiles NoCertificate() const { return {dir_ / "cluster/ca.crt", "", ""}; }
  // An agent certificate of our cluster for `node`, valid for `days` from `not_before_seconds`.
  TlsFiles AgentValid(const std::string& node, int days, long not_before_seconds) const {
    std::string out = dir_ / ("agent-" + node);
    REQUIRE(tls::IssueAgentCerts(dir_ / "cluster", node, {}, out, days, not_before_seconds).ok());
    return {out + "/ca.crt", out + "/agent.crt", out + "/agent.key"};
  }
  std::string OtherCa() const { return dir_ / "other/ca.crt"; }

 private:
  TempDir dir_{"herd-transport-test"};
};

// What one side saw, filled from the io thread and awaited from the test thread.
class Recorder {
 public:
  Handlers handlers() {
    Handlers h;
    h.on_message = [this](const std::shared_ptr<Connection>& c, std::string message) {
      std::lock_guard<std::mutex> lock(mu_);
      messages_.push_back(std::move(message));
      senders_.push_back(c.get());
      cv_.notify_all();
    };
    h.on_close = [this](const std::shared_ptr<Connection>& c, const Status& why) {
      std::lock_guard<std::mutex> lock(mu_);
      closes_.push_back(why);
      closed_.push_back(c.get());
      cv_.notify_all();
    };
    return h;
  }
  std::function<void(const std::shared_ptr<Connection>&)> on_open() {
    return [this](const std::shared_ptr<Connection>& c) {
      std::lock_guard<std::mutex> lock(mu_);
      opened_.push_back(c);
      cv_.notify_all();
    };
  }
  bool WaitMessages(std::size_t n) {
    return Wait([&] { return messages_.size() >= n; });
  }
  bool WaitCloses(std::size_t n) {
    return Wait([&] { return closes_.size() >= n; });
  }
  bool WaitOpened(std::size_t n) {
    return Wait([&] { return opened_.size() >= n; });
  }

  std::vector<std::string> messages() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
  }
  std::vector<Status> closes() {
    std::lock_guard<std::mutex> lock(mu_);
    return closes_;
  }
  std::vector<Connection*> senders() {
    std::lock_guard<std::mutex> lock(mu_);
    return senders_;
  }
  std::vector<Connection*> closed() {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }
  // Null once the connection is gone: the recorder does not keep connections alive (they must
  // not outlive the io_context).
  std::shared_ptr<Connection> opened(std::size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return i < opened_.size() ? opened_[i].lock() : nullptr;
  }
  std::size_t opened_count() {
    std::lock_guard<std::mutex> lock(mu_);
    return opened_.size();
  }

 private:
  template <typename Pred>
  bool Wait(Pred pred) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kWait, pred);
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> messages_;
  std::vector<Status> closes_;
  std::vector<Connection*> closed_;
  std::vector<Connection*> senders_;
  std::vector<std::weak_ptr<Connection>> opened_;
};

// An io_context run by one thread for the test's lifetime. Declared after the Recorders and before
// the servers of a test, so it is destroyed after the servers and before what callbacks touch.
class IoThread {
 public:
  IoThread() : guard_(net::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~IoThread() {
    guard_.reset();
    io_.stop();
    thread_.join();
  }
  net::io_context& io() { return io_; }

 private:
  net::io_context io_;
  net::executor_work_guard<net::io_context::executor_type> guard_;
  std::thread thread_;
};

Result<std::shared_ptr<Connection>> DialSync(net::io_context& io, DialOptions options) {
  auto promise = std::make_shared<std::promise<Result<std::shared_ptr<Connection>>>>();
  auto calls = std::make_shared<std::atomic<int>>(0);
  std::future<Result<std::shared_ptr<Connection>>> future = promise->get_future();
  Dial(io, std::move(options), [promise, calls](Result<std::shared_ptr<Connection>> result) {
    if (calls->fetch_add(1) == 0) promise->set_value(std::move(result));
  });
  if (future.wait_for(kWait) != std::future_status::ready) {
    return DeadlineExceeded("Dial did not call done()");
  }
  Result<std::shared_ptr<Connection>> result = future.get();
  CHECK(calls->load() == 1);
  return result;
}

DialOptions ToServer(const Server& server, TlsFiles tls, Role role, Handlers handlers = {}) {
  DialOptions options;
  options.host = "127.0.0.1";
  options.port = server.port();
  options.tls = std::move(tls);
  options.role = role;
  options.handlers = std::move(handlers);
  return options;
}

std::unique_ptr<Server> MustListen(net::io_context& io, TlsFiles tls, Recorder& recorder) {
  ServerOptions options;
  options.tls = std::move(tls);
  options.on_open = recorder.on_open();
  options.handlers = recorder.handlers();
  Result<std::unique_ptr<Server>> server = Listen(io, std::move(options));
  REQUIRE_MESSAGE(server.ok(), server.status().ToString());
  CHECK(server.value()->port() != 0);
  return std::move(server).value();
}

TEST_CASE("roles map to their paths") {
  CHECK(PathForRole(Role::kAgent) == "/v1/agent");
  CHECK(PathForRole(Role::kClient) == "/v1/client");
  CHECK(PathForRole(Role::kUnknown) != PathForRole(Role::kAgent));
  CHECK(PathForRole(Role::kUnknown) != PathForRole(Role::kClient));
  CHECK(RoleName(Role::kAgent) == "agent");
  CHECK(RoleName(Role::kClient) == "client");
}

TEST_CASE("messages flow both ways in order, with identities, and Close flushes") {
  Certs certs;
  Recorder server_side, client_side;
  IoThread io;
  auto server = MustListen(io.io(), certs.Agent(), server_side);

  auto conn =
      DialSync(io.io(), ToServer(*server, certs.Client(), Role::kClient, client_side.handlers()));
  REQUIRE_MESSAGE(conn.ok(), conn.status().ToString());
  REQUIRE(server_side.WaitOpened(1));
  std::shared_ptr<Connection> accepted = server_side.opened(0);

  // Each side knows who the other is from its certificate.
  CHECK(conn.value()->peer().role == Role::kAgent);
  CHECK(conn.value()->peer().common_name == "head");
  CHECK(conn.value()->peer().remote_address == "127.0.0.1");
  CHECK(conn.value()->peer().remote_port == server->port());
  CHECK(accepted->peer().role == Role::kClient);
  CHECK(accepted->peer().common_name == "herd-client");
  CHECK(accepted->peer().remote_address == "127.0.0.1");
  CHECK(accepted->peer().remote_port != 0);

  const std::string big(1u << 20, 'x');
  std::string big_patterned = big;
  for (std::size_t i = 0; i < big_patterned.size(); i += 4093) big_patterned[i] = char(i % 251);
  constexpr int kSmall = 10000;
  // Client to server: 10 000 small messages, then 1 MiB, then an empty one.
  for (int i = 0; i < kSmall; ++i) conn.value()->Send("c" + std::to_string(i));
  conn.value()->Send(big_patterned);
  conn.value()->Send("");
  // Server to client, at the same time.
  for (int i = 0; i < kSmall; ++i) accepted->Send("s" + std::to_string(i));
  accepted->Send(big_patterned);

  REQUIRE(server_side.WaitMessages(kSmall + 2));
  REQUIRE(client_side.WaitMessages(kSmall + 1));
  std::vector<std::string> at_server = server_side.messages();
  std::vector<std::string> at_client = client_side.messages();
  REQUIRE(at_server.size() == kSmall + 2);
  REQUIRE(at_client.size() == kSmall + 1);
  for (int i = 0; i < kSmall; ++i) {
    REQUIRE(at_server[i] == "c" + std::to_string(i));
    REQUIRE(at_client[i] == "s" + std::to_string(i));
  }
  CHECK(at_server[kSmall] == big_patterned);
  CHECK(at_server[kSmall + 1].empty());
  CHECK(at_client[kSmall] == big_patterned);
  CHECK(conn.value()->queued_bytes() == 0);
  CHECK(accepted->queued_bytes() == 0);

  // Close() sends what was queued before it, then closes cleanly; on_close once on each side.
  for (int i = 0; i < 100; ++i) conn.value()->Send("last" + std::to_string(i));
  conn.value()->Close();
  conn.value()->Close();
  REQUIRE(client_side.WaitCloses(1));
  REQUIRE(server_side.WaitCloses(1));
  at_server = server_side.messages();
  REQUIRE(at_server.size() == kSmall + 2 + 100);
  CHECK(at_server.back() == "last99");
  CHECK_MESSAGE(client_side.closes()[0].ok(), client_side.closes()[0].ToString());
  CHECK_MESSAGE(server_side.closes()[0].ok(), server_side.closes()[0].ToString());
  CHECK(client_side.closed()[0] == conn.value().get());
  CHECK(server_side.closed()[0] == accepted.get());
  std::this_thread::sleep_for(200ms);
  CHECK(client_side.closes().size() == 1);
  CHECK(server_side.closes().size() == 1);
  // Sending on a closed connection is dropped, not queued forever.
  conn.value()->Send("after close");
  std::this_thread::sleep_for(100ms);
  CHECK(conn.value()->queued_bytes() == 0);
}

TEST_CASE("Send from several threads keeps each thread's order") {
  Certs certs;
  Recorder server_side, client_side;
  IoThread io;
  auto server = MustListen(io.io(), certs.Agent(), server_side);
  auto conn =
      DialSync(io.io(), ToServer(*server, certs.Client(), Role::kClient, client_side.handlers()));
  REQUIRE_MESSAGE(conn.ok(), conn.status().ToString());
  constexpr int kThreads = 4, kEach = 500;
  std::vector<std::thread> senders;
  for (int t = 0; t < kThreads; ++t) {
    senders.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i)
        conn.value()->Send(std::to_string(t) + ":" + std::to_string(i));
    });
  }
  for (auto& s : senders) s.join();
  REQUIRE(server_side.WaitMessages(kThreads * kEach));
  std::vector<int> next(kThreads, 0);
  for (const std::string& m : server_side.messages()) {
    int t = std::stoi(m.substr(0, m.find(':')));
    int i = std::stoi(m.substr(m.find(':') + 1));
    REQUIRE(i == next[t]);
    ++next[t];
  }
}

TEST_CASE("an agent certificate dials /v1/agent") {
  Certs certs;
  Recorder server_side;
  IoThread io;
  auto server = MustListen(io.io(), certs.Agent(), server_side);
  auto conn = DialSync(io.io(), ToServer(*server, certs.Agent(), Role::kAgent));
  REQUIRE_MESSAGE(conn.ok(), conn.status().ToString());
  REQUIRE(server_side.WaitOpened(1));
  CHECK(server_side.opened(0)->peer().role == Role::kAgent);
  CHECK(server_side.opened(0)->peer().common_name == "head");
  CHECK(server_side.opened(0)->peer().node_cluster == "test");
  CHECK(server_side.opened(0)->peer().node_name == "head");
}

TEST_CASE("a dialer that expects a node refuses a server whose certificate proves another") {
  Certs certs;
  Recorder server_side;
  IoThread io;
  auto server = MustListen(io.io(), certs.Agent(), server_side);  // proves node "head" of "test"
  DialOptions ok = ToServer(*server, certs.Client(), Role::kClient);
  ok.expect_node_cluster = "test";
  ok.expect_node_name = "head";
  auto conn = DialSync(io.io(), ok);
  CHECK_MESSAGE(conn.ok(), conn.status().ToString());
  for (auto [cluster, node] : {std::pair{"test", "worker1"}, std::pair{"other", "head"}}) {
    CAPTURE(cluster);
    CAPTURE(node);
    DialOptions wrong = ToServer(*server, certs.Client(), Role::kClient);
    wrong.expect_node_cluster = cluster;
    wrong.expect_node_name = node;
    auto refused = DialSync(io.io(), wrong);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == Code::kPermissionDenied);
    CHECK_MESSAGE(refused.status().message().find("its certificate proves node head of cluster "
                                                  "test") != std::string::npos,
                  refused.status().ToString());
  }
}

TEST_CASE("expired and not yet valid agent certificates are refused") {
  Certs certs;
  Recorder server_side;
  IoThread io;
  auto server = MustListen(io.io(), certs.Agent(), server_side);
  SUBCASE("expired") {
    auto conn =
        DialSync(io.io(), ToServer(*server, certs.AgentValid("old", 1, -10 * 86400), Role::kAgent));
    REQUIRE_FALSE(conn.ok());
    CHECK_MESSAGE(conn.status().code() == Code::kPermissionDenied, conn.status().ToString());
    CHECK_MESSAGE(conn.status().message().find("expired") != std::string::npos,
                  conn.status().ToString());
  }
  SUBCASE("not yet valid") {
    auto conn =
        DialSync(io.io(), ToServer(*server, certs.AgentValid("new", 30, 2 * 86400), Role::kAgent));
    REQUIRE_FALSE(conn.ok());
    CHECK_MESSAGE(conn.status().code() == Code::kPermissionDenied, conn.status().ToString());
  }
  std::this_thread::sleep_for(100ms);
  CHECK(server_side.opened_count() == 0);
  auto good = DialSync(io.io(), ToServer(*server, certs.AgentValid("ok", 30, -3600), Role::kAgent));
  CHECK_MESSAGE(good.ok(), good.status().ToString());
}

TEST_CASE("clients without a valid certificate of the cluster are refused") {
  Certs certs;
  Recorder server_side;
  IoThread io;
  auto server = MustListen(io.io(), certs.Agent(), server_side);

  SUBCASE("no certificate") {
    auto conn = DialSync(io.io(), ToServer(*server, certs.NoCertificate(), Role::kClient));
    REQUIRE_FALSE(conn.ok());
    CHECK_MESSAGE(conn.status().code() == Code::kPermissionDenied, conn.status().ToString());
  }
  SUBCASE("a certificate from another cluster's CA") {
    auto conn = DialSync(io.io(), ToServer(*server, certs.OtherCluster(), Role::kClient));
    REQUIRE_FALSE(conn.ok());
    CHECK_MESSAGE(conn.status().code() == Code::kPermissionDenied, conn.status().ToString());
  }
  SUBCASE("a server from another cluster is refused by the client") {
    TlsFiles trusting_other = certs.Client();
    trusting_other.ca_cert = certs.OtherCa();
    auto conn = DialSync(io.io(), ToServer(*server, trusting_other, Role::kClient));
    REQUIRE_FALSE(conn.ok());
  }
  std::this_thread::sleep_for(100ms);
  CHECK(server_side.opened_count() == 0);
  // The server still serves a good client afterwards.
  auto good = DialSync(io.io(), ToServer(*server, certs.Client(), Role::kClient));
  CHECK_MESSAGE(good.ok(), good.status().ToString());
}

TEST_CASE("a certificate's role must match the path it dials") {
  Certs certs;
  Recorder server_side;
  IoThread io;
  auto server = MustListen(io.io(), certs.Agent(), server_side);

  DialOptions agent_to_client = ToServer(*server, certs.Agent(), Role::kAgent);
  agent_to_client.path_override = "/v1/client";
  auto a = DialSync(io.io(), agent_to_client);
  REQUIRE_FALSE(a.ok());
  CHECK(a.status().code() == Code::kPermissionDenied);
  CHECK_MESSAGE(a.status().message().find("403") != std::string::npos, a.status().ToString());

  // A client certificate pretending to be an agent.
  auto c = DialSync(io.io(), ToServer(*server, certs.Client(), Role::kAgent));
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == Code::kPermissionDenied);
  CHECK_MESSAGE(c.status().message().find("403") != std::string::npos, c.status().ToString());

  std::this_thread::sleep_for(100ms);
  CHECK(server_side.opened_count() == 0);
}

TEST_CASE("Dial refuses a server whose certificate is not agent-role") {
  Certs certs;
  Recorder server_side;
  IoThread io;
  auto server = MustListen(io.io(), certs.Client(), server_side);  // a client cert serving
  auto conn = DialSync(io.io(), ToServer(*server, certs.Client(), Role::kClient));
  REQUIRE_FALSE(conn.ok());
  CHECK_MESSAGE(conn.status().code() == Code::kPermissionDenied, conn.status().ToString());
  std::this_thread::sleep_for(100ms);
  CHECK(server_side.opened_count() == 0);
}

TEST_CASE("an oversized message drops only its connection") {
  Certs certs;
  Recorder server_side, a_side, b_side;
  IoThread io;
  auto server = MustListen(io.io(), certs.Agent(), server_side);
  auto a = DialSync(io.io(), ToServer(*server, certs.Client(), Role::kClient, a_side.handlers()));
  auto b = DialSync(io.io(), ToServer(*server, certs.Client(), Role::kClient, b_side.handlers()));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(server_side.WaitOpened(2));

  // Exactly the limit is fine.
  b.value()->Send(std::string(limits::kMaxFrameBytes, 'b'));
  REQUIRE(server_side.WaitMessages(1));
  CHECK(server_side.messages()[0].size() == limits::kMaxFrameBytes);

  a.value()->Send(std::string(limits::kMaxFrameBytes + 1, 'a'));
  REQUIRE(a_side.WaitCloses(1));
  CHECK_FALSE(a_side.closes()[0].ok());
  REQUIRE(server_side.WaitCloses(1));
  CHECK(server_side.closes()[0].code() == Code::kInvalidArgument);
  CHECK(server_side.closed()[0] != server_side.senders()[0]);  // a's, not b's

  b.value()->Send("still here");
  REQUIRE(server_side.WaitMessages(2));
  CHECK(server_side.messages()[1] == "still here");
  auto c = DialSync(io.io(), ToServer(*server, certs.Client(), Role::kClient));
  CHECK(c.ok());
  CHECK(b_side.closes().empty());
}

TEST_CASE("a peer that does not read is dropped once its queue is over the limit") {
  Certs certs;
  Recorder client_side;
  std::atomic<int> server_messages{0};
  IoThread server_io, client_io;
  // Destroyed before the io threads: wakes the blocked server even when a check fails.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();

  ServerOptions options;
  options.tls = certs.Agent();
  // The server takes the first message and then stops reading (its only io thread blocks).
  options.handlers.on_message = [released, &server_messages](const std::shared_ptr<Connection>&,
                                                             std::string) {
    if (server_messages.fetch_add(1) == 0) released.wait_for(kWait);
  };
  auto server = Listen(server_io.io(), std::move(options));
  REQUIRE(server.ok());
  auto conn = DialSync(client_io.io(), ToServer(*server.value(), certs.Client(), Role::kClient,
                                                client_side.handlers()));
  REQUIRE_MESSAGE(conn.ok(), conn.status().ToString());

  const std::string chunk(limits::kMaxFrameBytes, 'q');
  const std::size_t max_sends = 2 * limits::kMaxQueuedBytesPerPeer / chunk.size();
  std::size_t sent = 0;
  while (client_side.closes().empty() && sent < max_sends) {
    conn.value()->Send(chunk);
    ++sent;
    std::this_thread::sleep_for(1ms);
  }
  REQUIRE(client_side.WaitCloses(1));
  CHECK_MESSAGE(client_side.closes()[0].code() == Code::kUnavailable,
                client_side.closes()[0].ToString());
  CHECK(sent * chunk.size() > limits::kMaxQueuedBytesPerPeer);  // not dropped before the limit
  // The queue is released with the connection.
  for (int i = 0; i < 500 && conn.value()->queued_bytes() != 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  CHECK(conn.value()->queued_bytes() == 0);
  release.set_value();
}

TEST_CASE("Server::Stop closes every connection and stops accepting") {
  Certs certs;
  Recorder server_side, a_side, b_side;
  IoThread io;
  auto server = MustListen(io.io(), certs.Agent(), server_side);
  auto a = DialSync(io.io(), ToServer(*server, certs.Client(), Role::kClient, a_side.handlers()));
  auto b = DialSync(io.io(), ToServer(*server, certs.Agent(), Role::kAgent, b_side.handlers()));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(server_side.WaitOpened(2));
  server->Stop();
  REQUIRE(a_side.WaitCloses(1));
  REQUIRE(b_side.WaitCloses(1));
  REQUIRE(server_side.WaitCloses(2));
  auto late = DialSync(io.io(), ToServer(*server, certs.Client(), Role::kClient));
  CHECK_FALSE(late.ok());
  server->Stop();  // twice is harmless
}

TEST_CASE("tearing down with open connections and a pending dial is safe") {
  Certs certs;
  Recorder server_side, client_side;
  std::unique_ptr<Server> server;
  {
    IoThread io;
    server = MustListen(io.io(), certs.Agent(), server_side);
    auto conn =
        DialSync(io.io(), ToServer(*server, certs.Client(), Role::kClient, client_side.handlers()));
    REQUIRE(conn.ok());
    conn.value()->Send(std::string(1u << 20, 'z'));
    Dial(io.io(), ToServer(*server, certs.Client(), Role::kClient), [](auto) {});
    server->Stop();
  }  // the io_context goes away with handlers still queued
  server.reset();
}

TEST_CASE("Listen and Dial report bad input and unreachable peers") {
  Certs certs;
  Recorder server_side;
  IoThread io;

  ServerOptions bad;
  bad.tls = certs.Agent();
  bad.tls.cert = "/nonexistent/agent.crt";
  CHECK(Listen(io.io(), bad).status().code() == Code::kInvalidArgument);
  ServerOptions mismatched;
  mismatched.tls = certs.Agent();
  mismatched.tls.key = certs.Client().key;  // not the key of agent.crt
  CHECK(Listen(io.io(), mismatched).status().code() == Code::kInvalidArgument);

  auto server = MustListen(io.io(), certs.Agent(), server_side);
  ServerOptions taken;
  taken.tls = certs.Agent();
  taken.port = server->port();
  CHECK_FALSE(Listen(io.io(), taken).ok());

  // A port nobody listens on: take one and release it.
  uint16_t free_port = 0;
  {
    net::io_context tmp;
    net::ip::tcp::acceptor probe(tmp, {net::ip::make_address("127.0.0.1"), 0});
    free_port = probe.local_endpoint().port();
  }
  DialOptions nowhere = ToServer(*server, certs.Client(), Role::kClient);
  nowhere.port = free_port;
  auto refused = DialSync(io.io(), nowhere);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == Code::kUnavailable);

  DialOptions bad_bind = ToServer(*server, certs.Client(), Role::kClient);
  bad_bind.bind_address = "not-an-address";
  CHECK(DialSync(io.io(), bad_bind).status().code() == Code::kInvalidArgument);

  DialOptions bound = ToServer(*server, certs.Client(), Role::kClient);
  bound.bind_address = "127.0.0.2";
  REQUIRE(DialSync(io.io(), bound).ok());
  REQUIRE(server_side.WaitOpened(1));
  CHECK(server_side.opened(0)->peer().remote_address == "127.0.0.2");

  DialOptions bad_ca = ToServer(*server, certs.Client(), Role::kClient);
  bad_ca.tls.ca_cert = "/nonexistent/ca.crt";
  CHECK(DialSync(io.io(), bad_ca).status().code() == Code::kInvalidArgument);
}

TEST_CASE("a dial to a peer that never answers the TLS handshake is bounded") {
  Certs certs;
  IoThread io;
  // Accepts TCP (the kernel backlog does) but never speaks TLS.
  net::io_context silent_io;
  net::ip::tcp::acceptor silent(silent_io, {net::ip::make_address("127.0.0.1"), 0});
  DialOptions options;
  options.host = "127.0.0.1";
  options.port = silent.local_endpoint().port();
  options.tls = certs.Client();
  auto start = std::chrono::steady_clock::now();
  auto conn = DialSync(io.io(), options);
  auto took = std::chrono::steady_clock::now() - start;
  REQUIRE_FALSE(conn.ok());
  CHECK_MESSAGE(conn.status().code() == Code::kDeadlineExceeded, conn.status().ToString());
  CHECK(took >= limits::kHandshakeTimeout - 500ms);
  CHECK(took < limits::kHandshakeTimeout + 5s);
}

TEST_CASE("a loaded client context dials again and again, with the identities checked each time") {
  Certs certs;
  Recorder server_side, client_side;
  IoThread io;
  auto server = MustListen(io.io(), certs.Agent(), server_side);
  {
    auto loaded = LoadClientTls(certs.Client());
    REQUIRE_MESSAGE(loaded.ok(), loaded.status().ToString());
    for (int i = 0; i < 3; ++i) {
      std::size_t opened = server_side.opened_count() + 1;
      DialOptions o = ToServer(*server, {}, Role::kClient, client_side.handlers());
      o.loaded_tls = *loaded;
      auto conn = DialSync(io.io(), std::move(o));
      REQUIRE_MESSAGE(conn.ok(), conn.status().ToString());
      CHECK((*conn)->peer().role == Role::kAgent);
      CHECK((*conn)->peer().common_name == "head");
      REQUIRE(server_side.WaitOpened(opened));
      auto accepted = server_side.opened(opened - 1);
      REQUIRE(accepted != nullptr);
      CHECK(accepted->peer().role == Role::kClient);
      CHECK(accepted->peer().common_name == "herd-client");
      std::size_t before = server_side.messages().size();
      (*conn)->Send("hello " + std::to_string(i));
      REQUIRE(server_side.WaitMessages(before + 1));
      (*conn)->Close();
    }
  }
  auto bad = LoadClientTls({certs.OtherCa(), "/nonexistent.crt", "/nonexistent.key"});
  CHECK(bad.status().code() == Code::kInvalidArgument);
}

}  // namespace
}  // namespace herd::transport
