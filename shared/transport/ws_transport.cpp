// Mutual-TLS websockets with Beast. The only translation unit that instantiates
// websocket::stream<ssl_stream<tcp_stream>>: keep everything else out of it, it compiles slowly.
//
// One Session per connection, on its own strand: every do_X starts one asynchronous step and its
// on_X handles the result; every failure goes through fail(), and finish() runs once, reporting the
// end to the user (on_close, or done() of a Dial that did not get through).
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"
#include "shared/tls/certs.hpp"
#include "shared/transport/transport.hpp"

namespace herd::transport {

namespace {
// Job processes are spawned by the agent: they must not inherit its sockets (a listening socket
// held by a job would keep a restarted head from binding its port). Asio does not set
// close-on-exec itself.
void SetCloseOnExec(int fd) {
  int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}
}  // namespace

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using WsStream = websocket::stream<beast::ssl_stream<beast::tcp_stream>>;
using OnOpen = std::function<void(const std::shared_ptr<Connection>&)>;
using DialDone = std::function<void(Result<std::shared_ptr<Connection>>)>;

// A peer that broke the websocket protocol: a message over read_message_max (or a bad frame).
// Beast then fails the websocket itself (close frame, TLS shutdown) and reports the error of that
// teardown if it has one instead of message_too_big: typically "application data after close
// notify", because the peer is still sending the oversized message.
bool PeerBrokeProtocol(const beast::error_code& ec) {
  if (ec == websocket::error::message_too_big || ec == websocket::error::buffer_overflow) {
    return true;
  }
  return ec.category() == net::error::get_ssl_category() &&
         ERR_GET_REASON(static_cast<unsigned long>(ec.value())) ==
             SSL_R_APPLICATION_DATA_AFTER_CLOSE_NOTIFY;
}

Status ErrorStatus(const beast::error_code& ec, const std::string& what) {
  std::string msg = what + ": " + ec.message();
  if (ec == beast::error::timeout || ec == net::error::timed_out) return DeadlineExceeded(msg);
  if (PeerBrokeProtocol(ec)) return InvalidArgument(msg);
  // TLS alerts and verification failures: a certificate the other side does not accept.
  if (ec.category() == net::error::get_ssl_category()) return PermissionDenied(msg);
  if (ec == net::error::operation_aborted) return Cancelled(msg);
  return Unavailable(msg);
}

// Server side: no TLS 1.3 session tickets for agents. Making a ticket copies the session (the
// peer certificate decoded again: a fifth of a head's CPU per registration with OpenSSL 3.0), and
// an agent never resumes: it dials once per (re)connection. Clients still get them.
int NoTicketsForAgents(int preverify_ok, X509_STORE_CTX* store) {
  if (preverify_ok == 1 && X509_STORE_CTX_get_error_depth(store) == 0) {
    auto* ssl =
        static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
    auto role = tls::RoleOf(X509_STORE_CTX_get_current_cert(store));
    if (ssl != nullptr && role.ok() && *role == Role::kAgent) SSL_set_num_tickets(ssl, 0);
  }
  return preverify_ok;
}

// TLS 1.3 only; the peer's certificate must chain to the cluster CA. An empty cert and key on the
// client side dial without a certificate (which the server refuses).
Result<std::shared_ptr<ssl::context>> MakeContext(const TlsFiles& files, bool server) {
  auto ctx =
      std::make_shared<ssl::context>(server ? ssl::context::tls_server : ssl::context::tls_client);
  SSL_CTX* native = ctx->native_handle();
  if (SSL_CTX_set_min_proto_version(native, TLS1_3_VERSION) != 1) {
    return Internal("cannot restrict TLS to 1.3");
  }
  // An idle connection gives its record buffers back (about 34 KiB each): a head holds one
  // connection per agent, and agents are idle between heartbeats.
  SSL_CTX_set_mode(native, SSL_MODE_RELEASE_BUFFERS);
  beast::error_code ec;
  if (files.ca_cert.empty()) return InvalidArgument("no CA certificate file given");
  ctx->load_verify_file(files.ca_cert, ec);
  if (ec) return InvalidArgument("CA certificate " + files.ca_cert + ": " + ec.message());
  if (server || !files.cert.empty() || !files.key.empty()) {
    ctx->use_certificate_chain_file(files.cert, ec);
    if (ec) return InvalidArgument("certificate '" + files.cert + "': " + ec.message());
    ctx->use_private_key_file(files.key, ssl::context::pem, ec);
    if (ec) return InvalidArgument("private key '" + files.key + "': " + ec.message());
    if (SSL_CTX_check_private_key(native) != 1) {
      return InvalidArgument("private key " + files.key + " does not belong to " + files.cert);
    }
  }
  ctx->set_verify_mode(
      server ? ssl::verify_peer | ssl::verify_fail_if_no_peer_cert : ssl::verify_peer, ec);
  if (ec) return Internal("set_verify_mode: " + ec.message());
  if (server) SSL_CTX_set_verify(native, SSL_CTX_get_verify_mode(native), NoTicketsForAgents);
  return ctx;
}

// The role and common name of the verified peer certificate.
Status ReadPeerCertificate(SSL* ssl, PeerIdentity& peer) {
  X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr) return PermissionDenied("the peer presented no certificate");
  HERD_ASSIGN_OR_RETURN(peer.role, tls::RoleOf(cert));
  HERD_ASSIGN_OR_RETURN(peer.common_name, tls::CommonNameOf(cert));
  if (peer.role == Role::kAgent) {
    Result<tls::NodeIdentity> node = tls::NodeIdentityOf(cert);
    if (node.ok()) {
      peer.node_cluster = std::move(node->cluster);
      peer.node_name = std::move(node->node);
    } else if (node.status().code() != Code::kNotFound) {
      return PermissionDenied("agent certificate of " + peer.common_name + ": " +
                              node.status().message());
    }
  }
  return Status::Ok();
}

std::string Describe(const PeerIdentity& peer) {
  std::string out = peer.remote_address + ":" + std::to_string(peer.remote_port);
  if (!peer.common_name.empty()) {
    out += " (" + std::string(RoleName(peer.role)) + " " + peer.common_name + ")";
  }
  return out;
}

class Session : public Connection, public std::enable_shared_from_this<Session> {
 public:
  // `socket` is open (accepted) on the server side, closed on the client side; its executor is
  // the connection's strand.
  Session(tcp::socket&& socket, std::shared_ptr<ssl::context> ctx, Handlers handlers)
      : ctx_(std::move(ctx)),
        ws_(std::move(socket), *ctx_),
        ex_(ws_.get_executor()),
        resolver_(ex_),
        timer_(ex_),
        handlers_(std::move(handlers)) {}

  // ---- Connection ----
  void Send(std::string message) override {
    queued_.fetch_add(message.size());
    net::post(ex_, [self = shared_from_this(), message = std::move(message)]() mutable {
      self->on_send(std::move(message));
    });
  }
  void Close() override {
    net::post(ex_, [self = shared_from_this()] { self->on_close_request(); });
  }
  const PeerIdentity& peer() const override { return peer_; }
  std::size_t queued_bytes() const override { return queued_.load(); }
  void set_max_queued_bytes(std::size_t n) { max_queued_ = n; }

  // ---- Server side: TLS accept, read the upgrade request, check the path, accept. ----
  void StartServer(OnOpen on_open) {
    net::dispatch(ex_, [self = shared_from_this(), on_open = std::move(on_open)]() mutable {
      self->on_open_ = std::move(on_open);
      self->do_tls_accept();
    });
  }

  // ---- Client side: resolve, connect, TLS handshake, check the server's role, upgrade. ----
  void StartDial(DialOptions options, DialDone done) {
    net::dispatch(ex_, [self = shared_from_this(), options = std::move(options),
                        done = std::move(done)]() mutable {
      self->dial_done_ = std::move(done);
      self->host_ = options.host;
      self->port_ = options.port;
      self->path_ = options.path_override.empty() ? std::string(PathForRole(options.role))
                                                  : options.path_override;
      self->target_ = options.host + ":" + std::to_string(options.port);
      self->expect_node_cluster_ = options.expect_node_cluster;
      self->expect_node_name_ = options.expect_node_name;
      if (!options.bind_address.empty()) {
        beast::error_code ec;
        self->bind_address_ = net::ip::make_address(options.bind_address, ec);
        if (ec) {
          self->finish(
              InvalidArgument("bind address '" + options.bind_address + "': " + ec.message()));
          return;
        }
      }
      self->do_resolve();
    });
  }

 private:
  void do_tls_accept() {
    beast::tcp_stream& stream = beast::get_lowest_layer(ws_);
    beast::error_code ec;
    tcp::endpoint remote = stream.socket().remote_endpoint(ec);
    if (!ec) {
      peer_.remote_address = remote.address().to_string();
      peer_.remote_port = remote.port();
    }
    stream.socket().set_option(tcp::no_delay(true), ec);
    target_ = peer_.remote_address + ":" + std::to_string(peer_.remote_port);
    stream.expires_after(limits::kHandshakeTimeout);
    ws_.next_layer().async_handshake(
        ssl::stream_base::server,
        beast::bind_front_handler(&Session::on_tls_accept, shared_from_this()));
  }

  void on_tls_accept(beast::error_code ec) {
    if (finished_) return;
    if (ec) return fail(ec, "TLS handshake with " + target_ + VerifyFailure());
    Status identity = ReadPeerCertificate(ws_.next_layer().native_handle(), peer_);
    if (!identity.ok()) return refuse(identity.WithContext("client " + target_));
    do_read_request();
  }

  void do_read_request() {
    http::async_read(ws_.next_layer(), read_buffer_, request_,
                     beast::bind_front_handler(&Session::on_read_request, shared_from_this()));
  }

  void on_read_request(beast::error_code ec, std::size_t) {
    if (finished_) return;
    if (ec) return fail(ec, "read the upgrade request of " + Describe(peer_));
    if (!websocket::is_upgrade(request_)) {
      return do_refuse(http::status::bad_request,
                       InvalidArgument(Describe(peer_) + " sent no websocket upgrade"));
    }
    std::string_view want = PathForRole(peer_.role);
    if (peer_.role == Role::kUnknown || request_.target() != want) {
      return do_refuse(
          http::status::forbidden,
          PermissionDenied(Describe(peer_) + " may not use path " + std::string(request_.target()) +
                           " (its role's is " + std::string(want) + ")"));
    }
    // From here Beast's websocket timeouts apply; tcp_stream's own must be off.
    beast::get_lowest_layer(ws_).expires_never();
    configure_websocket(beast::role_type::server);
    ws_.async_accept(request_,
                     beast::bind_front_handler(&Session::on_ws_accept, shared_from_this()));
  }

  // An HTTP error instead of the upgrade, then a TLS shutdown; still under the handshake timer.
  void do_refuse(http::status status, Status why) {
    HERD_LOG(kWarn) << "transport: refused " << why.ToString();
    refusal_ = std::move(why);
    response_ = {};
    response_.version(request_.version());
    response_.result(status);
    response_.set(http::field::server, "herd");
    response_.set(http::field::content_type, "text/plain");
    response_.keep_alive(false);
    response_.body() = refusal_.message() + "\n";
    response_.prepare_payload();
    http::async_write(ws_.next_layer(), response_,
                      beast::bind_front_handler(&Session::on_refuse_written, shared_from_this()));
  }

  void on_refuse_written(beast::error_code, std::size_t) {
    if (finished_) return;
    ws_.next_layer().async_shutdown(
        beast::bind_front_handler(&Session::on_refuse_shutdown, shared_from_this()));
  }

  void on_refuse_shutdown(beast::error_code) { finish(refusal_); }

  void on_ws_accept(beast::error_code ec) {
    if (finished_) return;
    if (ec) return fail(ec, "websocket accept of " + Describe(peer_));
    opened_ = true;
    HERD_LOG(kDebug) << "transport: accepted " << Describe(peer_);
    OnOpen on_open = std::move(on_open_);
    on_open_ = nullptr;
    if (on_open) on_open(shared_from_this());
    start_io();
  }

  void do_resolve() {
    deadline_ = std::chrono::steady_clock::now() + limits::kHandshakeTimeout;
    timer_.expires_at(deadline_);
    timer_.async_wait(beast::bind_front_handler(&Session::on_deadline, shared_from_this()));
    resolver_.async_resolve(host_, std::to_string(port_),
                            beast::bind_front_handler(&Session::on_resolve, shared_from_this()));
  }

  // The bound on the whole dial, resolution included (tcp_stream's expiry covers only sockets).
  void on_deadline(beast::error_code ec) {
    if (ec == net::error::operation_aborted || finished_ || opened_) return;
    fail(beast::error::timeout, "dial " + target_);
  }

  void on_resolve(beast::error_code ec, const tcp::resolver::results_type& results) {
    if (finished_) return;
    if (ec) return fail(ec, "resolve " + host_);
    for (const auto& entry : results) endpoints_.push_back(entry.endpoint());
    do_connect();
  }

  // Tries the resolved addresses in turn. Done by hand (not beast::async_connect over the range)
  // because that closes and reopens the socket, which would drop the bind to bind_address.
  void do_connect() {
    beast::tcp_stream& stream = beast::get_lowest_layer(ws_);
    while (next_endpoint_ < endpoints_.size()) {
      tcp::endpoint endpoint = endpoints_[next_endpoint_++];
      beast::error_code ec;
      stream.socket().close(ec);
      stream.socket().open(endpoint.protocol(), ec);
      if (!ec) SetCloseOnExec(stream.socket().native_handle());
      if (!ec && bind_address_) stream.socket().bind(tcp::endpoint(*bind_address_, 0), ec);
      if (ec) {
        last_error_ = ec;
        continue;
      }
      stream.expires_at(deadline_);
      stream.async_connect(endpoint,
                           beast::bind_front_handler(&Session::on_connect, shared_from_this()));
      return;
    }
    fail(last_error_ ? last_error_ : beast::error_code(net::error::host_not_found),
         "connect to " + target_);
  }

  void on_connect(beast::error_code ec) {
    if (finished_) return;
    if (ec == beast::error::timeout) return fail(ec, "connect to " + target_);
    if (ec) {
      last_error_ = ec;
      return do_connect();
    }
    beast::tcp_stream& stream = beast::get_lowest_layer(ws_);
    tcp::endpoint remote = stream.socket().remote_endpoint(ec);
    if (!ec) {
      peer_.remote_address = remote.address().to_string();
      peer_.remote_port = remote.port();
    }
    stream.socket().set_option(tcp::no_delay(true), ec);
    // SNI only for names; an IP literal in SNI is not allowed.
    net::ip::make_address(host_, ec);
    if (ec) SSL_set_tlsext_host_name(ws_.next_layer().native_handle(), host_.c_str());
    ws_.next_layer().async_handshake(
        ssl::stream_base::client,
        beast::bind_front_handler(&Session::on_tls_handshake, shared_from_this()));
  }

  void on_tls_handshake(beast::error_code ec) {
    if (finished_) return;
    if (ec) return fail(ec, "TLS handshake with " + target_ + VerifyFailure());
    Status identity = ReadPeerCertificate(ws_.next_layer().native_handle(), peer_);
    if (!identity.ok()) return refuse(identity.WithContext("server " + target_));
    if (peer_.role != Role::kAgent) {
      return refuse(
          PermissionDenied("server " + Describe(peer_) + " does not hold an agent certificate"));
    }
    if (!expect_node_name_.empty() &&
        (peer_.node_cluster != expect_node_cluster_ || peer_.node_name != expect_node_name_)) {
      return refuse(PermissionDenied("server " + Describe(peer_) + " is not node " +
                                     expect_node_name_ + " of cluster " + expect_node_cluster_ +
                                     (peer_.node_name.empty()
                                          ? std::string(": its certificate proves no node")
                                          : ": its certificate proves node " + peer_.node_name +
                                                " of cluster " + peer_.node_cluster)));
    }
    beast::get_lowest_layer(ws_).expires_never();
    configure_websocket(beast::role_type::client);
    std::string host = host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_;
    ws_.async_handshake(response_, host + ":" + std::to_string(port_), path_,
                        beast::bind_front_handler(&Session::on_ws_handshake, shared_from_this()));
  }

  void on_ws_handshake(beast::error_code ec) {
    if (finished_) return;
    if (ec == websocket::error::upgrade_declined) {
      std::string why = "server " + Describe(peer_) + " refused " + path_ + ": " +
                        std::to_string(response_.result_int()) + " " +
                        std::string(response_.reason());
      return refuse(response_.result() == http::status::forbidden ? PermissionDenied(why)
                                                                  : Unavailable(why));
    }
    if (ec) return fail(ec, "websocket handshake with " + Describe(peer_));
    opened_ = true;
    timer_.cancel();
    HERD_LOG(kDebug) << "transport: connected to " << Describe(peer_) << path_;
    DialDone done = std::move(dial_done_);
    dial_done_ = nullptr;
    done(std::shared_ptr<Connection>(shared_from_this()));
    start_io();
  }

  // Why the peer's certificate was not accepted ("certificate has expired", "certificate is not
  // yet valid", "unable to get local issuer certificate" for another cluster's CA), as " (...)";
  // empty when verification was not what failed.
  std::string VerifyFailure() {
    long verify = SSL_get_verify_result(ws_.next_layer().native_handle());
    if (verify == X509_V_OK) return "";
    return std::string(" (peer certificate: ") + X509_verify_cert_error_string(verify) + ")";
  }

  void configure_websocket(beast::role_type role) {
    websocket::stream_base::timeout timeout;
    timeout.handshake_timeout = limits::kHandshakeTimeout;
    timeout.idle_timeout = limits::kWebsocketIdleTimeout;
    timeout.keep_alive_pings = true;
    ws_.set_option(timeout);
    ws_.set_option(websocket::stream_base::decorator([role](auto& message) {
      message.set(role == beast::role_type::server ? http::field::server : http::field::user_agent,
                  "herd");
    }));
    ws_.read_message_max(limits::kMaxFrameBytes);
    ws_.write_buffer_bytes(limits::kWebsocketWriteBufferBytes);
    ws_.binary(true);
    // One frame per message: the receiver's limit is per message anyway.
    ws_.auto_fragment(false);
  }

  // ---- Open connection: one read always pending, one write at a time from the queue. ----
  void start_io() {
    if (finished_) return;
    do_read();
    if (!writing_ && !outbox_.empty()) do_write();
  }

  void do_read() {
    ws_.async_read(read_buffer_, beast::bind_front_handler(&Session::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, std::size_t) {
    if (finished_) return;
    if (ec == websocket::error::closed) {
      websocket::close_reason reason = ws_.reason();
      if (reason.code == websocket::close_code::normal ||
          reason.code == websocket::close_code::going_away || closing_) {
        return finish(Status::Ok());
      }
      return finish(Unavailable(Describe(peer_) + " closed the websocket with code " +
                                std::to_string(reason.code) + " " +
                                std::string(reason.reason.data(), reason.reason.size())));
    }
    if (ec) return fail(ec, "read from " + Describe(peer_));
    std::string message = beast::buffers_to_string(read_buffer_.data());
    read_buffer_.consume(read_buffer_.size());
    if (handlers_.on_message) handlers_.on_message(shared_from_this(), std::move(message));
    if (!finished_) do_read();
  }

  void on_send(std::string message) {
    if (finished_ || close_requested_) {
      queued_.fetch_sub(message.size());
      return;
    }
    if (queued_.load() > max_queued_) {
      queued_.fetch_sub(message.size());
      Status why = Unavailable(Describe(peer_) + " is not reading: over " +
                               std::to_string(max_queued_) + " bytes queued");
      HERD_LOG(kWarn) << "transport: dropping connection: " << why.ToString();
      return finish(std::move(why));
    }
    outbox_.push_back(std::move(message));
    if (opened_ && !writing_) do_write();
  }

  void do_write() {
    writing_ = true;
    ws_.async_write(net::buffer(outbox_.front()),
                    beast::bind_front_handler(&Session::on_write, shared_from_this()));
  }

  void on_write(beast::error_code ec, std::size_t) {
    writing_ = false;
    // The message written (or abandoned) is released only now: Beast may read it until here.
    queued_.fetch_sub(outbox_.front().size());
    outbox_.pop_front();
    if (finished_) return;
    if (ec) return fail(ec, "write to " + Describe(peer_));
    if (!outbox_.empty()) return do_write();
    if (close_requested_) do_close();
  }

  // Close() flushes what was queued before it, then does the websocket close handshake.
  void on_close_request() {
    if (finished_) return;
    if (!opened_) return finish(Cancelled("closed before the connection was established"));
    close_requested_ = true;
    if (!writing_) do_close();
  }

  void do_close() {
    if (closing_ || finished_) return;
    closing_ = true;
    ws_.async_close(websocket::close_code::normal,
                    beast::bind_front_handler(&Session::on_close_done, shared_from_this()));
  }

  void on_close_done(beast::error_code ec) {
    if (finished_) return;
    if (ec && ec != net::error::operation_aborted && ec != websocket::error::closed) {
      return fail(ec, "close " + Describe(peer_));
    }
    finish(Status::Ok());
  }

  // A refusal decided here (role, identity): already a Status.
  void refuse(Status why) {
    HERD_LOG(kWarn) << "transport: " << why.ToString();
    finish(std::move(why));
  }

  void fail(beast::error_code ec, const std::string& what) {
    if (finished_) return;
    // Our own close in progress: its completion reports the end.
    if (closing_ && (ec == net::error::operation_aborted || ec == websocket::error::closed)) return;
    Status why = ErrorStatus(ec, what);
    if (PeerBrokeProtocol(ec)) {
      HERD_LOG(kError) << "transport: dropping connection: " << why.ToString()
                       << " (a message over " << limits::kMaxFrameBytes << " bytes or a bad frame)";
    } else {
      HERD_LOG(kWarn) << "transport: " << why.ToString();
    }
    finish(std::move(why));
  }

  // Runs once: closes the socket (aborting whatever is pending), drops the queue and tells the
  // user. The handlers are released afterwards so that captures cannot keep this alive.
  void finish(Status why) {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    resolver_.cancel();
    beast::get_lowest_layer(ws_).close();
    std::size_t keep = writing_ ? 1 : 0;  // the message Beast is still writing
    while (outbox_.size() > keep) {
      queued_.fetch_sub(outbox_.back().size());
      outbox_.pop_back();
    }
    std::shared_ptr<Session> self = shared_from_this();
    if (opened_) {
      Handlers handlers = std::move(handlers_);
      handlers_ = {};
      if (handlers.on_close) handlers.on_close(self, why);
    } else if (dial_done_) {
      DialDone done = std::move(dial_done_);
      dial_done_ = nullptr;
      done(std::move(why));
    }
    on_open_ = nullptr;
    handlers_ = {};
  }

  std::shared_ptr<ssl::context> ctx_;  // outlives ws_
  WsStream ws_;
  net::any_io_executor ex_;  // the strand; copied so Send/Close never touch ws_ off it
  tcp::resolver resolver_;
  net::steady_timer timer_;
  Handlers handlers_;
  OnOpen on_open_;
  DialDone dial_done_;

  PeerIdentity peer_;
  std::string target_;  // host:port, for messages
  beast::flat_buffer read_buffer_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
  Status refusal_;

  std::string host_;
  uint16_t port_ = 0;
  std::string path_;
  std::string expect_node_cluster_;
  std::string expect_node_name_;
  std::optional<net::ip::address> bind_address_;
  std::vector<tcp::endpoint> endpoints_;
  std::size_t next_endpoint_ = 0;
  beast::error_code last_error_;
  std::chrono::steady_clock::time_point deadline_;

  std::deque<std::string> outbox_;
  std::atomic<std::size_t> queued_{0};
  std::size_t max_queued_ = limits::kMaxQueuedBytesPerPeer;
  bool writing_ = false;
  bool opened_ = false;
  bool close_requested_ = false;
  bool closing_ = false;
  bool finished_ = false;
};

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(net::io_context& io, std::shared_ptr<ssl::context> ctx, ServerOptions options)
      : io_(io),
        ctx_(std::move(ctx)),
        options_(std::move(options)),
        acceptor_(net::make_strand(io)),
        retry_timer_(acceptor_.get_executor()) {}

  Status Bind() {
    beast::error_code ec;
    net::ip::address address = net::ip::make_address(options_.host, ec);
    if (ec) return InvalidArgument("listen address '" + options_.host + "': " + ec.message());
    tcp::endpoint endpoint(address, options_.port);
    std::string where = options_.host + ":" + std::to_string(options_.port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) SetCloseOnExec(acceptor_.native_handle());
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (!ec) port_ = acceptor_.local_endpoint(ec).port();
    if (ec == net::error::address_in_use)
      return Unavailable("listen on " + where + ": " + ec.message());
    if (ec) return IoError("listen on " + where + ": " + ec.message());
    return Status::Ok();
  }

  void Start() {
    net::dispatch(acceptor_.get_executor(), [self = shared_from_this()] { self->do_accept(); });
  }

  void Stop() {
    std::vector<std::shared_ptr<Session>> live;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      for (const auto& weak : sessions_) {
        if (auto session = weak.lock()) live.push_back(std::move(session));
      }
      sessions_.clear();
    }
    net::post(acceptor_.get_executor(), [self = shared_from_this()] {
      beast::error_code ec;
      self->acceptor_.close(ec);
      self->retry_timer_.cancel();
    });
    for (const auto& session : live) session->Close();
  }

  uint16_t port() const { return port_; }

 private:
  void do_accept() {
    acceptor_.async_accept(net::make_strand(io_),
                           beast::bind_front_handler(&Listener::on_accept, shared_from_this()));
  }

  void on_accept(beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted) return;
    if (!ec) SetCloseOnExec(socket.native_handle());
    if (ec) {
      // E.g. out of file descriptors: wait instead of spinning.
      HERD_LOG(kWarn) << "transport: accept on port " << port_ << ": " << ec.message();
      retry_timer_.expires_after(limits::kAcceptRetryDelay);
      retry_timer_.async_wait([self = shared_from_this()](beast::error_code wait_ec) {
        if (!wait_ec) self->do_accept();
      });
      return;
    }
    auto session = std::make_shared<Session>(std::move(socket), ctx_, options_.handlers);
    session->set_max_queued_bytes(options_.max_queued_bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;  // the socket closes with the session
      std::erase_if(sessions_, [](const std::weak_ptr<Session>& w) { return w.expired(); });
      sessions_.push_back(session);
    }
    session->StartServer(options_.on_open);
    do_accept();
  }

  net::io_context& io_;
  std::shared_ptr<ssl::context> ctx_;
  ServerOptions options_;
  tcp::acceptor acceptor_;
  net::steady_timer retry_timer_;
  uint16_t port_ = 0;
  std::mutex mu_;
  bool stopped_ = false;
  std::vector<std::weak_ptr<Session>> sessions_;
};

// Stop hands the listener over to the io_context (its pending handlers own it), so that a Server
// may be destroyed after its io_context once stopped.
class WsServer : public Server {
 public:
  explicit WsServer(std::shared_ptr<Listener> listener)
      : port_(listener->port()), listener_(std::move(listener)) {}
  ~WsServer() override { Stop(); }
  uint16_t port() const override { return port_; }
  void Stop() override {
    std::shared_ptr<Listener> listener;
    {
      std::lock_guard<std::mutex> lock(mu_);
      listener = std::move(listener_);
    }
    if (listener) listener->Stop();
  }

 private:
  const uint16_t port_;
  std::mutex mu_;
  std::shared_ptr<Listener> listener_;
};

}  // namespace

class ClientTls {
 public:
  std::shared_ptr<ssl::context> ctx;
};

Result<std::shared_ptr<ClientTls>> LoadClientTls(const TlsFiles& files) {
  auto out = std::make_shared<ClientTls>();
  HERD_ASSIGN_OR_RETURN(out->ctx, MakeContext(files, false));
  return out;
}

Result<std::unique_ptr<Server>> Listen(boost::asio::io_context& io, ServerOptions options) {
  HERD_ASSIGN_OR_RETURN(std::shared_ptr<ssl::context> ctx, MakeContext(options.tls, true));
  auto listener = std::make_shared<Listener>(io, std::move(ctx), std::move(options));
  HERD_RETURN_IF_ERROR(listener->Bind());
  listener->Start();
  return std::unique_ptr<Server>(std::make_unique<WsServer>(std::move(listener)));
}

void Dial(boost::asio::io_context& io, DialOptions options,
          std::function<void(Result<std::shared_ptr<Connection>>)> done) {
  Result<std::shared_ptr<ssl::context>> ctx = std::shared_ptr<ssl::context>();
  if (options.loaded_tls) {
    ctx = options.loaded_tls->ctx;  // the Session keeps it alive
  } else {
    ctx = MakeContext(options.tls, false);
  }
  if (!ctx.ok()) {
    // done() never runs inside Dial: callers may hold locks that done() takes.
    net::post(io, [done = std::move(done), why = ctx.status()] { done(why); });
    return;
  }
  auto session = std::make_shared<Session>(tcp::socket(net::make_strand(io)),
                                           std::move(ctx).value(), std::move(options.handlers));
  session->StartDial(std::move(options), std::move(done));
}

}  // namespace herd::transport
