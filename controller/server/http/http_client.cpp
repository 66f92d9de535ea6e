// The API client with Beast: HTTP/1.1 over ssl_stream<tcp_stream> (or tcp_stream to loopback).
// One of the two translation units that instantiate Beast's ssl_stream (the other is
// http_server.cpp). Blocking calls made of asynchronous steps on a private io_context, so that
// every step (resolve included) is bounded by the call's deadline.
#include "controller/server/http/http_client.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <limits>
#include <optional>

#include "controller/server/http/http_server.hpp"
#include "controller/server/http/request_codec.hpp"
#include "shared/common/host_port.hpp"

namespace herd::api_http {
namespace {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;
using PlainStream = beast::tcp_stream;
using Clock = std::chrono::steady_clock;

// "60 s", "1500 ms": a timeout for a message.
std::string Seconds(limits::Duration d) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
}

// Runs the io_context until the operation started by `start` completes; returns its error.
template <class Start>
beast::error_code Await(net::io_context& io, Start&& start) {
  beast::error_code result;
  bool done = false;
  start([&](beast::error_code ec, auto&&...) {
    result = ec;
    done = true;
  });
  io.restart();
  while (!done && io.run_one() > 0) {
  }
  return result;
}

}  // namespace

struct ApiClient::Impl {
  ApiEndpoint endpoint;
  bool tls = true;
  std::string host;  // without brackets
  uint16_t port = 0;
  bool host_is_ip = false;
  std::shared_ptr<ssl::context> ctx;

  // One exchange: connect, (TLS,) write the request, read the response (streaming to on_chunk
  // when given).
  Result<ClientResponse> Exchange(std::string_view method, std::string_view path,
                                  std::string_view body, const ChunkFn* on_chunk,
                                  limits::Duration timeout);

  template <class S>
  Result<ClientResponse> Run(net::io_context& io, S& stream, Clock::time_point deadline,
                             std::string_view method, std::string_view path, std::string_view body,
                             const ChunkFn* on_chunk, limits::Duration timeout);

  Status ConnectError(const beast::error_code& ec, limits::Duration timeout) const {
    if (ec == beast::error::timeout) {
      return DeadlineExceeded("cannot connect to " + endpoint.url + ": no answer within " +
                              Seconds(timeout));
    }
    return Unavailable("cannot connect to " + endpoint.url + ": " + ec.message());
  }
};

namespace {

// Why the handshake failed: the certificate's verification result when that was it.
Status HandshakeError(SSL* ssl, const beast::error_code& ec, const std::string& url,
                      limits::Duration timeout) {
  long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) {
    return PermissionDenied("the TLS certificate of " + url +
                            " was not accepted: " + X509_verify_cert_error_string(verify));
  }
  if (ec == beast::error::timeout) {
    return DeadlineExceeded("TLS handshake with " + url + ": no answer within " + Seconds(timeout));
  }
  return Unavailable("TLS handshake with " + url + " failed: " + ec.message());
}

}  // namespace

template <class S>
Result<ClientResponse> ApiClient::Impl::Run(net::io_context& io, S& stream,
                                            Clock::time_point deadline, std::string_view method,
                                            std::string_view path, std::string_view body,
                                            const ChunkFn* on_chunk, limits::Duration timeout) {
  constexpr bool kTls = std::is_same_v<S, TlsStream>;
  beast::tcp_stream& tcp_layer = beast::get_lowest_layer(stream);
  const std::string& url = endpoint.url;

  // Resolve (a name only), bounded by the deadline through a timer.
  std::vector<tcp::endpoint> endpoints;
  if (host_is_ip) {
    endpoints.emplace_back(net::ip::make_address(host), port);
  } else {
    tcp::resolver resolver(io);
    net::steady_timer timer(io);
    timer.expires_at(deadline);
    timer.async_wait([&](beast::error_code ec) {
      if (!ec) resolver.cancel();
    });
    tcp::resolver::results_type results;
    beast::error_code ec = Await(io, [&](auto handler) {
      resolver.async_resolve(
          host, std::to_string(port),
          [&, handler](beast::error_code e, tcp::resolver::results_type r) mutable {
            results = std::move(r);
            handler(e);
          });
    });
    timer.cancel();
    if (ec == net::error::operation_aborted) {
      return DeadlineExceeded("cannot resolve " + host + " (" + url + "): no answer within " +
                              Seconds(timeout));
    }
    if (ec) return Unavailable("cannot resolve " + host + " (" + url + "): " + ec.message());
    for (const auto& entry : results) endpoints.push_back(entry.endpoint());
  }

  tcp_layer.expires_at(deadline);
  beast::error_code ec = Await(io, [&](auto handler) {
    tcp_layer.async_connect(
        endpoints, [handler](beast::error_code e, const tcp::endpoint&) mutable { handler(e); });
  });
  if (ec) return ConnectError(ec, timeout);
  tcp_layer.socket().set_option(tcp::no_delay(true), ec);

  if constexpr (kTls) {
    SSL* native = stream.native_handle();
    if (host_is_ip) {
      if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(native), host.c_str()) != 1) {
        return InvalidArgument("cannot check the server's certificate against " + host);
      }
    } else {
      // SNI, and the name the certificate must carry.
      if (SSL_set_tlsext_host_name(native, host.c_str()) != 1 ||
          SSL_set1_host(native, host.c_str()) != 1) {
        ERR_clear_error();
        return InvalidArgument("cannot check the server's certificate against " + host);
      }
    }
    ec =
        Await(io, [&](auto handler) { stream.async_handshake(ssl::stream_base::client, handler); });
    if (ec) return HandshakeError(native, ec, url, timeout);
  }

  bhttp::request<bhttp::string_body> request;
  bhttp::verb verb = bhttp::string_to_verb(method);
  if (verb == bhttp::verb::unknown) {
    request.method_string(method);
  } else {
    request.method(verb);
  }
  request.target(path);
  request.version(11);
  std::string host_header = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  request.set(bhttp::field::host, host_header + ":" + std::to_string(port));
  request.set(bhttp::field::user_agent, "herd");
  if (!endpoint.token.empty()) request.set(bhttp::field::authorization, "Bearer " + endpoint.token);
  if (!body.empty()) request.set(bhttp::field::content_type, "application/json");
  request.keep_alive(false);
  request.body() = std::string(body);
  request.prepare_payload();
  ec = Await(io, [&](auto handler) { bhttp::async_write(stream, request, handler); });
  if (ec == beast::error::timeout) {
    return DeadlineExceeded("sending to " + url + ": no answer within " + Seconds(timeout));
  }
  // A server that answered early (413) and closed: its answer may still be read.
  bool write_failed = static_cast<bool>(ec);
  beast::error_code write_error = ec;

  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(limits::kApiMaxResponseBytes);
  ec = Await(io, [&](auto handler) { bhttp::async_read_header(stream, buffer, parser, handler); });
  if (ec) {
    if (ec == beast::error::timeout) {
      return DeadlineExceeded(url + ": no answer within " + Seconds(timeout));
    }
    if (write_failed) return Unavailable("sending to " + url + ": " + write_error.message());
    return Unavailable("reading the answer of " + url + ": " + ec.message());
  }
  ClientResponse out;
  out.status = static_cast<int>(parser.get().result_int());
  for (const auto& field : parser.get()) {
    out.headers.Add(std::string(field.name_string()), std::string(field.value()));
  }

  bool stopped = false;
  std::function<std::size_t(std::uint64_t, beast::string_view, beast::error_code&)> chunk_cb;
  if (on_chunk != nullptr && out.ok()) {
    // A stream has no bound on its length or its duration.
    tcp_layer.expires_never();
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    chunk_cb = [&](std::uint64_t, beast::string_view data, beast::error_code& cb_ec) {
      if (!data.empty() && !(*on_chunk)(std::string_view(data.data(), data.size()))) {
        stopped = true;
        cb_ec = net::error::operation_aborted;
      }
      return data.size();
    };
    parser.on_chunk_body(chunk_cb);
  }
  if (!parser.is_done()) {
    ec = Await(io, [&](auto handler) { bhttp::async_read(stream, buffer, parser, handler); });
    if (stopped) return out;
    if (ec == beast::error::timeout) {
      return DeadlineExceeded(url + ": the answer did not arrive within " + Seconds(timeout));
    }
    if (ec == bhttp::error::body_limit) {
      return InvalidArgument(url + ": the answer is over " +
                             std::to_string(limits::kApiMaxResponseBytes) + " bytes");
    }
    if (ec) return Unavailable("reading the answer of " + url + ": " + ec.message());
  }
  out.body = std::move(parser.get().body());
  // A 2xx stream sent with a length rather than in chunks: its body in one piece.
  if (on_chunk != nullptr && out.ok() && !out.body.empty()) {
    (*on_chunk)(out.body);
    out.body.clear();
  }
  return out;
}

Result<ClientResponse> ApiClient::Impl::Exchange(std::string_view method, std::string_view path,
                                                 std::string_view body, const ChunkFn* on_chunk,
                                                 limits::Duration timeout) {
  if (path.empty() || path.front() != '/') {
    return InvalidArgument("request path '" + Printable(path) + "' does not start with '/'");
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  net::io_context io;
  try {
    if (tls) {
      TlsStream stream(io, *ctx);
      return Run(io, stream, deadline, method, path, body, on_chunk, timeout);
    }
    PlainStream stream(io);
    return Run(io, stream, deadline, method, path, body, on_chunk, timeout);
  } catch (const std::exception& e) {  // Beast/Asio throw only on allocation failures here
    return Internal(endpoint.url + ": " + e.what());
  }
}

Status ClientResponse::ToStatus() const {
  if (ok()) return Status::Ok();
  return StatusFromResponse(status, body);
}

ApiClient::ApiClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ApiClient::~ApiClient() = default;

const ApiEndpoint& ApiClient::endpoint() const { return impl_->endpoint; }

Result<std::unique_ptr<ApiClient>> ApiClient::Create(ApiEndpoint endpoint) {
  auto impl = std::make_unique<Impl>();
  std::string_view url = endpoint.url;
  if (url.starts_with("https://")) {
    impl->tls = true;
    url.remove_prefix(8);
  } else if (url.starts_with("http://")) {
    impl->tls = false;
    url.remove_prefix(7);
  } else {
    return InvalidArgument("API server URL '" + Printable(endpoint.url) +
                           "' must start with https:// (or http:// to a loopback address)");
  }
  if (!url.empty() && url.back() == '/') url.remove_suffix(1);
  if (url.find_first_of("/?#@") != std::string_view::npos) {
    return InvalidArgument("API server URL '" + Printable(endpoint.url) +
                           "' must be only a scheme, a host and a port");
  }
  // Without a port: the scheme's.
  bool has_port = url.starts_with("[") ? url.find("]:") != std::string_view::npos
                                       : url.find(':') != std::string_view::npos;
  std::string with_port(url);
  if (!has_port) with_port += impl->tls ? ":443" : ":80";
  HERD_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(with_port, "API server URL"));
  if (hp.host.empty() || hp.port == 0) {
    return InvalidArgument("API server URL '" + Printable(endpoint.url) + "' has no host or port");
  }
  impl->host = hp.host;
  impl->port = hp.port;
  beast::error_code ec;
  net::ip::make_address(impl->host, ec);
  impl->host_is_ip = !ec;
  if (!impl->tls && !IsLoopbackAddress(impl->host)) {
    return InvalidArgument(
        "plain http:// is only allowed to a loopback address (127.0.0.1, ::1), "
        "not " +
        impl->host + ": use https://");
  }
  if (impl->tls) {
    impl->ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
    SSL_CTX* native = impl->ctx->native_handle();
    if (SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1) {
      return Internal("cannot restrict TLS to 1.2 and later");
    }
    if (endpoint.ca_cert_file.empty()) {
      impl->ctx->set_default_verify_paths(ec);
      if (ec) return Internal("cannot load the system's trusted CAs: " + ec.message());
    } else {
      impl->ctx->load_verify_file(endpoint.ca_cert_file, ec);
      if (ec) {
        return InvalidArgument("CA certificate '" + endpoint.ca_cert_file + "': " + ec.message());
      }
    }
    impl->ctx->set_verify_mode(ssl::verify_peer, ec);
    if (ec) return Internal("set_verify_mode: " + ec.message());
  }
  impl->endpoint = std::move(endpoint);
  return std::unique_ptr<ApiClient>(new ApiClient(std::move(impl)));
}

Result<ClientResponse> ApiClient::Request(std::string_view method, std::string_view path,
                                          std::string_view json_body, limits::Duration timeout) {
  return impl_->Exchange(method, path, json_body, nullptr, timeout);
}

Result<ClientResponse> ApiClient::Stream(std::string_view method, std::string_view path,
                                         std::string_view json_body, const ChunkFn& on_chunk,
                                         limits::Duration timeout) {
  return impl_->Exchange(method, path, json_body, &on_chunk, timeout);
}

}  // namespace herd::api_http
