// The API server's HTTPS listener (`herd api`): HTTP/1.1 with keep-alive over TLS 1.2+ with a
// server certificate only (clients authenticate with bearer tokens, not certificates), or plain
// HTTP on a loopback address. Only http_server.cpp sees Beast.
//
// Threading: the listener and each connection run on strands of the io_context passed in; run
// that io_context on as many threads as wanted. The handler runs on its connection's strand and
// must not block: it hands slow work to another thread and answers through the Responder, whose
// methods may all be called from any thread, at any time (also after the connection closed: they
// then do nothing). One request of a connection is handled at a time (no pipelining): the next is
// read after the response to this one is complete.
// The listener answers by itself, and then closes the connection: 400 (not HTTP, or a bad request
// line, header or body framing), 408 (a request not received within request_read_timeout), 413
// (a body over max_body_bytes: refused by its Content-Length before it is read), 431 (headers
// over max_header_bytes) and 503 (over max_connections), each with herd's JSON error body
// (request_codec.hpp HttpError). "Expect: 100-continue" is answered. Every response is HTTP/1.1
// (HEAD is not special: route it nowhere).
// A kept-alive connection without a request in progress is closed after idle_timeout.
// Lifetime: Stop() (or destroying the HttpServer) closes the listener and every connection; the
// HttpServer may outlive the io_context once stopped. A Responder may outlive its connection (it
// keeps the connection's object, not its socket, which closes regardless).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "controller/server/http/http_message.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/status.hpp"

namespace herd::api_http {

// The answer to one request: either Respond once, or StartStream, any number of Write and End.
// A Responder released without an answer sends 500 (a handler that lost a request is a bug, not
// a hung client).
class Responder {
 public:
  virtual ~Responder() = default;
  // The whole response. Content-Length is set; the connection stays open for the next request
  // unless the request asked to close it. A status outside 200-599 (or a body with 204/304) is
  // sent as 500, and headers holding CR, LF or NUL are dropped (both logged as handler bugs).
  virtual void Respond(HttpResponse response) = 0;
  // A streamed response (chunked transfer encoding): the status line and headers now, the body in
  // Write calls, End() to finish it (the connection then serves the next request).
  virtual void StartStream(int status, std::string content_type, Headers headers = {}) = 0;
  // Queues one piece of the body (an empty one is skipped: it would end the stream). False when
  // the connection is closed (the client went away, or it was dropped for not reading: more than
  // HttpServerOptions::max_stream_queued_bytes queued).
  virtual bool Write(std::string chunk) = 0;
  virtual void End() = 0;
  // A whole streamed response at once: StartStream, a Write of each chunk and End, handed to the
  // connection together (a short answer goes out in one write). False as Write.
  virtual bool StreamWhole(int status, std::string content_type, std::vector<std::string> chunks) {
    StartStream(status, std::move(content_type));
    bool ok = true;
    for (auto& c : chunks) ok = Write(std::move(c)) && ok;
    End();
    return ok;
  }
  // Whether the connection is gone (the client closed it, an error, a drop, Stop()): nothing
  // written from now on reaches the client.
  virtual bool Closed() const = 0;
  // Runs `fn` once when the connection closes before this response is complete (a client that
  // stopped following a log); on the connection's strand, or at once on the caller's thread if it
  // is closed already. Not called once the response is complete.
  virtual void OnClose(std::function<void()> fn) = 0;
  // Bytes of this connection queued and not yet written.
  virtual std::size_t queued_bytes() const = 0;
};

using Handler = std::function<void(HttpRequest request, std::shared_ptr<Responder> responder)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";  // an IP address (v4 or v6) to bind
  uint16_t port = 0;               // 0: any free port (see HttpServer::port)
  // PEM files of the server certificate (its chain may follow it in the file) and its key.
  std::string cert_file;
  std::string key_file;
  // No TLS: allowed only when host is a loopback address (the API server behind a local proxy,
  // tests); the certificate files are then not used.
  bool plain_http = false;
  Handler handler;

  // Limits (limits.hpp; tests set them small).
  std::size_t max_header_bytes = limits::kApiMaxHeaderBytes;
  std::size_t max_body_bytes = limits::kApiMaxBodyBytes;
  std::size_t max_connections = limits::kApiMaxConnections;
  std::size_t max_stream_queued_bytes = limits::kApiMaxStreamQueuedBytes;
  limits::Duration handshake_timeout = limits::kApiHandshakeTimeout;
  limits::Duration request_read_timeout = limits::kApiRequestReadTimeout;
  limits::Duration idle_timeout = limits::kApiIdleTimeout;
  limits::Duration write_timeout = limits::kApiWriteTimeout;
  limits::Duration close_linger = limits::kApiCloseLinger;
};

class HttpServer {
 public:
  virtual ~HttpServer() = default;
  virtual uint16_t port() const = 0;  // the bound port
  // Connections open now (for tests and the server's status).
  virtual std::size_t connections() const = 0;
  // Stops accepting and closes every connection (their Responders see Closed()).
  virtual void Stop() = 0;
};

// Binds and starts accepting. InvalidArgument: a bad host, plain_http on a non-loopback host, no
// handler, unreadable or mismatched certificate and key. Unavailable: the address is in use.
Result<std::unique_ptr<HttpServer>> ListenHttp(boost::asio::io_context& io,
                                               HttpServerOptions options);

// Whether `host` is an IP literal of the loopback (127.0.0.0/8, ::1, ::ffff:127.x.y.z).
bool IsLoopbackAddress(std::string_view host);

}  // namespace herd::api_http
