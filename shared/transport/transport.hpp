// The plain interface over mutual-TLS websockets. Only ws_transport.cpp instantiates Beast's
// websocket::stream<ssl_stream<tcp_stream>> (it costs ~40-90 s to compile); everything else sees
// this header.
//
// Threading: every callback runs on the io_context passed in. Connection::Send and Close may be
// called from any thread.
// Lifetime: drop every Connection before the io_context is destroyed; a Server may outlive it
// once Stop() was called (or it was destroyed first).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "shared/common/limits.hpp"
#include "shared/common/status.hpp"
#include "shared/tls/roles.hpp"

namespace herd::transport {

// The role a certificate carries and the files an endpoint reads (shared/tls/roles.hpp).
using tls::Role;
using tls::RoleName;
using tls::TlsFiles;

struct PeerIdentity {
  Role role = Role::kUnknown;
  std::string common_name;
  // The node an agent's certificate proves (shared/tls/certs.hpp NodeIdentity); both empty for a
  // certificate that proves none (a client's, or an agent's issued by an older herd).
  std::string node_cluster;
  std::string node_name;
  std::string remote_address;  // IP of the peer's socket
  uint16_t remote_port = 0;
};

class Connection {
 public:
  virtual ~Connection() = default;
  // Queues one binary websocket message; messages go out in the order of the calls.
  virtual void Send(std::string message) = 0;
  // Closes the websocket; on_close follows once.
  virtual void Close() = 0;
  virtual const PeerIdentity& peer() const = 0;
  // Bytes queued and not yet written (for back-pressure decisions).
  virtual std::size_t queued_bytes() const = 0;
};

struct Handlers {
  // One complete websocket message.
  std::function<void(const std::shared_ptr<Connection>&, std::string message)> on_message;
  // The connection ended (peer closed, error, timeout, Close()). Called once per connection.
  // `why` is OK for a clean websocket close from either side, the error otherwise.
  std::function<void(const std::shared_ptr<Connection>&, const Status& why)> on_close;
};

// The websocket path a role must use: "/v1/agent" or "/v1/client". The server refuses a handshake
// whose certificate role does not match its path (403) and one without a valid client certificate
// from the cluster CA (TLS alert).
std::string_view PathForRole(Role role);

class Server {
 public:
  virtual ~Server() = default;
  virtual uint16_t port() const = 0;  // the bound port (useful with port 0)
  virtual void Stop() = 0;            // stops accepting and closes every connection
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  TlsFiles tls;
  // Called for each accepted and authenticated connection, before any message.
  std::function<void(const std::shared_ptr<Connection>&)> on_open;
  Handlers handlers;
  // A connection with more than this queued and not yet written is dropped (its peer is not
  // reading); limits::kMaxQueuedBytesPerPeer, tests set it small.
  std::size_t max_queued_bytes = limits::kMaxQueuedBytesPerPeer;
};

// Binds and starts accepting. Errors (bad certificate files, address in use) are returned.
Result<std::unique_ptr<Server>> Listen(boost::asio::io_context& io, ServerOptions options);

// A client TLS context with its certificate files read once, for a process that dials the same
// head again and again (the CLI's mux, controller/core/mux.hpp): a Dial with it skips reading and
// decoding the CA, certificate and key and OpenSSL 3.0's per-context fetch of every cipher.
class ClientTls;
Result<std::shared_ptr<ClientTls>> LoadClientTls(const TlsFiles& files);

struct DialOptions {
  std::string host;
  uint16_t port = 0;
  std::string bind_address;  // optional local source address
  TlsFiles tls;
  std::shared_ptr<ClientTls> loaded_tls;  // when set, used instead of tls
  Role role = Role::kClient;              // the role of this side's certificate: selects the path
  Handlers handlers;
  // When set, the server's certificate must prove this node of this cluster (PeerIdentity's
  // node_cluster and node_name): an agent dials its cluster's head node, not any holder of an
  // agent certificate of the cluster.
  std::string expect_node_cluster;
  std::string expect_node_name;
  // Tests only: dial this path instead of PathForRole(role) (to check that the server refuses a
  // mismatch). An empty tls.cert and tls.key dial without a client certificate (also refused).
  std::string path_override;
};

// Connects, does TLS 1.3 with both certificates checked against the CA (the server must present a
// certificate with the agent role), and upgrades to a websocket. done() runs once, with the
// connection or why it failed; the whole attempt is bounded by limits::kHandshakeTimeout.
void Dial(boost::asio::io_context& io, DialOptions options,
          std::function<void(Result<std::shared_ptr<Connection>>)> done);

}  // namespace herd::transport
