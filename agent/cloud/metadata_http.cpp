// The metadata service's HTTP client (spot_notice.hpp: MakeBeastMetadataHttp): plain HTTP/1.1
// with Boost.Beast, one connection per exchange, the whole exchange within
// limits::kSpotMetadataTimeout. The service is on the instance's link (169.254.169.254): no TLS.
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "agent/cloud/spot_notice.hpp"
#include "shared/common/limits.hpp"

namespace herd::agent {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using boost::asio::ip::tcp;

class BeastMetadataHttp final : public MetadataHttp {
 public:
  BeastMetadataHttp(std::string endpoint, std::string host, std::string port)
      : endpoint_(std::move(endpoint)), host_(std::move(host)), port_(std::move(port)) {}

  Result<MetadataReply> Send(const std::string& method, const std::string& path,
                             const std::map<std::string, std::string>& headers) override {
    boost::asio::io_context ioc;
    tcp::resolver resolver(ioc);
    boost::system::error_code ec;
    auto addrs = resolver.resolve(host_, port_, ec);
    if (ec) return Unavailable("cannot resolve " + endpoint_ + ": " + ec.message());
    beast::tcp_stream stream(ioc);
    http::request<http::string_body> req(http::string_to_verb(method), path, 11);
    req.set(http::field::host, host_);
    for (const auto& [k, v] : headers) req.set(k, v);
    req.prepare_payload();
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 * 1024);  // a notice or a token: a few hundred bytes
    std::string failed_at;
    // One deadline for the whole exchange: the timer of a beast stream cancels whatever of it
    // is still pending when it fires.
    stream.expires_after(limits::kSpotMetadataTimeout);
    stream.async_connect(addrs, [&](beast::error_code e, const tcp::endpoint&) {
      if (e) {
        ec = e;
        failed_at = "connect";
        return;
      }
      http::async_write(stream, req, [&](beast::error_code e2, std::size_t) {
        if (e2) {
          ec = e2;
          failed_at = "send";
          return;
        }
        http::async_read(stream, buffer, parser, [&](beast::error_code e3, std::size_t) {
          if (e3) {
            ec = e3;
            failed_at = "read";
          }
        });
      });
    });
    ioc.run();
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    if (ec) {
      return Unavailable(method + " " + endpoint_ + path + ": " + failed_at + ": " +
                         (ec == beast::error::timeout
                              ? std::string("no answer within ") +
                                    std::to_string(limits::kSpotMetadataTimeout.count()) + " ms"
                              : ec.message()));
    }
    MetadataReply r;
    r.status = static_cast<int>(parser.get().result_int());
    r.body = parser.get().body();
    return r;
  }

 private:
  std::string endpoint_, host_, port_;
};

}  // namespace

Result<std::unique_ptr<MetadataHttp>> MakeBeastMetadataHttp(const std::string& endpoint) {
  constexpr std::string_view kScheme = "http://";
  std::string rest = endpoint;
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.rfind(kScheme, 0) != 0 || rest.size() == kScheme.size() ||
      rest.find_first_of("/?# ", kScheme.size()) != std::string::npos) {
    return InvalidArgument("spot_metadata: expected http://HOST[:PORT], got '" + endpoint + "'");
  }
  rest = rest.substr(kScheme.size());
  std::string host = rest, port = "80";
  if (auto colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (host.empty() || port.empty() || port.find_first_not_of("0123456789") != std::string::npos ||
        port.size() > 5 || std::stoi(port) == 0 || std::stoi(port) > 65535) {
      return InvalidArgument("spot_metadata: bad port in '" + endpoint + "'");
    }
  }
  return std::unique_ptr<MetadataHttp>(
      std::make_unique<BeastMetadataHttp>(kScheme.data() + rest, host, port));
}

}  // namespace herd::agent
