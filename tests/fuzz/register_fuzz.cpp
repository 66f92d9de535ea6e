// Fuzz target: what the head does with frames from agents (Register first of all). An agent's
// certificate proves it belongs to the cluster, not that its bytes are sane: a buggy or upgraded
// agent can send anything. The input is a sequence of frames, each sent on one of two agent
// connections; the target checks that
//   - the head never crashes (run under ASan/UBSan in the fuzzing build);
//   - a frame that does not decode closes its connection and changes no node;
//   - a Register without node id or address, or as another node than the one the connection's
//     certificate proves, is refused (RegisterAck{accepted=false}), its connection closed, and the
//     head's node list is unchanged;
//   - a refused or closed connection gets no further messages delivered (as a real websocket).
// Input format: records of [selector byte: connection % 3][length: 2 bytes, little endian][frame
// bytes].
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/core/head.hpp"
#include "shared/common/log.hpp"
#include "shared/proto/frame.hpp"
#include "shared/tls/certs.hpp"
#include "tests/fakes/fake_connection.hpp"

namespace {

namespace fs = std::filesystem;
using herd::v1::AgentToHead;
using herd::v1::HeadToAgent;
using herd::v1::HeadToClient;

// The head keeps every connection and node it saw; start a fresh one after this many inputs so
// memory stays flat over millions of runs. Kept small: the checks list and sort the head's nodes
// twice per frame, and with thousands of fuzzed node ids that was 60 % of the run time.
constexpr int kInputsPerHead = 500;

using herd::testing::FakeConnection;

struct Harness {
  boost::asio::io_context io;
  fs::path dir;
  std::unique_ptr<herd::agent::Head> head;
  int inputs = 0;

  Harness() {
    herd::log::SetLevel(herd::log::Level::kOff);  // each refused frame is an error line
    // tmpfs where there is one: the head's SQLite writes are the slow part of each run.
    fs::path base = fs::exists("/dev/shm") ? "/dev/shm" : fs::temp_directory_path();
    std::string tmpl = (base / "herd-register-fuzz-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    dir = tmpl;
    if (!herd::tls::InitClusterCerts((dir / "certs").string(), "fuzz").ok()) std::abort();
    if (!herd::tls::IssueAgentCerts((dir / "certs").string(), "fuzz-head", {"127.0.0.1"},
                                    (dir / "n0").string())
             .ok()) {
      std::abort();
    }
    NewHead();
  }
  ~Harness() {
    head.reset();
    io.poll();
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  void NewHead() {
    head.reset();
    io.restart();
    io.poll();
    std::error_code ec;
    fs::remove_all(dir / "state", ec);
    herd::agent::Head::Options o;
    o.cluster = "fuzz";
    o.state_dir = (dir / "state").string();
    o.tls = {(dir / "n0/ca.crt").string(), (dir / "n0/agent.crt").string(),
             (dir / "n0/agent.key").string()};
    o.expected_nodes = 2;
    head = std::make_unique<herd::agent::Head>(io, o);
    if (!head->Start().ok()) std::abort();
  }

  // The head's node list as a client sees it (NodesRequest), serialised for comparison.
  std::string NodeList() {
    auto client =
        std::make_shared<FakeConnection>(herd::transport::Role::kClient, "fuzz-client", "fuzz");
    herd::v1::ClientToHead req;
    req.set_request_id(1);
    req.mutable_nodes();
    head->InjectMessage(client, herd::proto::Encode(req));
    if (client->sent.size() != 1) std::abort();
    auto reply = herd::proto::Decode<HeadToClient>(client->sent[0]);
    if (!reply.ok() || !reply->has_nodes_reply()) std::abort();
    return reply->nodes_reply().SerializeAsString();
  }
};

Harness& TheHarness() {
  static Harness harness;  // one head for the process; its files go at exit
  return harness;
}

bool RefusedRegister(const FakeConnection& conn, std::size_t sent_before) {
  for (std::size_t i = sent_before; i < conn.sent.size(); ++i) {
    auto msg = herd::proto::Decode<HeadToAgent>(conn.sent[i]);
    if (msg.ok() && msg->has_register_ack() && !msg->register_ack().accepted()) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Harness& h = TheHarness();
  if (++h.inputs % kInputsPerHead == 0) h.NewHead();
  // Two connections of node fuzz-worker1 (an agent and its restarted successor) and one of
  // fuzz-worker2 (another node's certificate, which must not register as fuzz-worker1).
  std::shared_ptr<FakeConnection> agents[3] = {
      std::make_shared<FakeConnection>(herd::transport::Role::kAgent, "fuzz-worker1", "fuzz"),
      std::make_shared<FakeConnection>(herd::transport::Role::kAgent, "fuzz-worker1", "fuzz"),
      std::make_shared<FakeConnection>(herd::transport::Role::kAgent, "fuzz-worker2", "fuzz")};

  std::size_t pos = 0;
  while (pos + 3 <= size) {
    const std::shared_ptr<FakeConnection>& target = agents[data[pos] % 3];
    FakeConnection& conn = *target;
    std::size_t len = data[pos + 1] | (static_cast<std::size_t>(data[pos + 2]) << 8);
    pos += 3;
    len = std::min(len, size - pos);
    std::string frame(reinterpret_cast<const char*>(data + pos), len);
    pos += len;
    if (conn.closed()) continue;  // a closed websocket delivers nothing more

    auto decoded = herd::proto::Decode<AgentToHead>(frame);
    bool bad_register = decoded.ok() && decoded->has_register_() &&
                        (decoded->register_().node().node_id().empty() ||
                         decoded->register_().node().addresses_size() == 0 ||
                         decoded->register_().node().node_id() != conn.peer().node_name);
    bool must_not_change = !decoded.ok() || bad_register;
    std::string nodes_before = must_not_change ? h.NodeList() : std::string();
    std::size_t sent_before = conn.sent.size();

    h.head->InjectMessage(target, std::move(frame));
    h.io.poll();

    if (!decoded.ok() && !conn.closed()) std::abort();  // undecodable frame: connection dropped
    if (bad_register && (!conn.closed() || !RefusedRegister(conn, sent_before))) std::abort();
    if (must_not_change && h.NodeList() != nodes_before) std::abort();
  }
  for (auto& a : agents) a->Close();
  return 0;
}
