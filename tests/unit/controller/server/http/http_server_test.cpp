// The API server's listener and client against each other on 127.0.0.1, with a CA and server
// certificates made in a temporary directory; raw sockets for what the client never sends.
#include "controller/server/http/http_server.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "controller/server/http/http_client.hpp"
#include "controller/server/http/request_codec.hpp"
#include "shared/common/file_util.hpp"
#include "shared/tls/certs.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::api_http {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;
using herd::testing::TempDir;

// A bound on waits for something that happens at once when the code works (never a timing
// assertion: a broken build hangs here instead of forever).
constexpr auto kWait = 20s;

struct Certs {
  TempDir dir{"herd-api-http"};
  tls::Pem ca;
  std::string ca_file, cert_file, key_file;

  // A CA and a server certificate for 127.0.0.1 and localhost (or `ips`), valid `days` from
  // `not_before` seconds ago.
  explicit Certs(std::vector<std::string> ips = {"127.0.0.1"}, int days = 30,
                 long not_before = -3600) {
    ca = tls::CreateCa("api").value();
    tls::Pem server =
        tls::IssueServerCertificate(ca, "herd-api", {"localhost"}, ips, days, not_before).value();
    ca_file = dir.Write("ca.crt", ca.cert);
    cert_file = dir.Write("server.crt", server.cert);
    key_file = dir.Write("server.key", server.key);
  }
};

// An io_context on two threads (as the API server runs it) and a listener on it.
class Running {
 public:
  explicit Running(HttpServerOptions options) {
    auto server = ListenHttp(io_, std::move(options));
    REQUIRE_MESSAGE(server.ok(), server.status().ToString());
    server_ = std::move(server).value();
    for (int i = 0; i < 2; ++i) threads_.emplace_back([this] { io_.run(); });
  }
  ~Running() {
    server_->Stop();
    guard_.reset();
    io_.stop();
    for (auto& t : threads_) t.join();
  }
  HttpServer& server() { return *server_; }
  uint16_t port() const { return server_->port(); }

 private:
  net::io_context io_;
  net::executor_work_guard<net::io_context::executor_type> guard_{io_.get_executor()};
  std::unique_ptr<HttpServer> server_;
  std::vector<std::thread> threads_;
};

HttpServerOptions TlsOptions(const Certs& certs, Handler handler) {
  HttpServerOptions o;
  o.host = "127.0.0.1";
  o.cert_file = certs.cert_file;
  o.key_file = certs.key_file;
  o.handler = std::move(handler);
  return o;
}

std::unique_ptr<ApiClient> Client(const std::string& url, const std::string& ca_file,
                                  std::string token = "tok-123") {
  auto client = ApiClient::Create({url, ca_file, std::move(token)});
  REQUIRE_MESSAGE(client.ok(), client.status().ToString());
  return std::move(client).value();
}

std::string Url(uint16_t port, std::string_view scheme = "https",
                std::string_view host = "127.0.0.1") {
  return std::string(scheme) + "://" + std::string(host) + ":" + std::to_string(port);
}

// What the handler saw, for the test to check.
struct Seen {
  std::mutex mu;
  std::vector<HttpRequest> requests;
  void Add(const HttpRequest& r) {
    std::lock_guard<std::mutex> lock(mu);
    requests.push_back(r);
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return requests.size();
  }
};

// Sends `bytes` over a plain TCP connection to 127.0.0.1:port and returns everything the server
// sends back until it closes the connection.
std::string RawExchange(uint16_t port, const std::string& bytes) {
  net::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  net::write(socket, net::buffer(bytes));
  std::string out;
  boost::system::error_code ec;
  net::read(socket, net::dynamic_buffer(out), ec);
  return out;
}

// Whatever the process writes to stderr (the log) while it lives.
class StderrCapture {
 public:
  explicit StderrCapture(const std::string& path) : path_(path) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~StderrCapture() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
  }
  std::string Text() const { return ReadFile(path_).value(); }
  // Waits (bounded) until the log holds `needle`.
  bool WaitFor(std::string_view needle) const {
    auto until = std::chrono::steady_clock::now() + kWait;
    while (std::chrono::steady_clock::now() < until) {
      if (Text().find(needle) != std::string::npos) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

 private:
  std::string path_;
  int saved_ = -1;
};

TEST_CASE("GET and POST round trips over TLS, with the bearer token and headers seen") {
  Certs certs;
  Seen seen;
  Running running(TlsOptions(certs, [&](HttpRequest request, std::shared_ptr<Responder> r) {
    seen.Add(request);
    HttpResponse response;
    response.body = "{\"method\":\"" + request.method +
                    "\",\"body\":" + (request.body.empty() ? std::string("null") : request.body) +
                    "}";
    response.headers.Add("X-Herd-Test", "yes");
    r->Respond(std::move(response));
  }));
  auto client = Client(Url(running.port()), certs.ca_file);

  auto got = client->Request("GET", "/api/v1/clusters?all=1");
  REQUIRE_MESSAGE(got.ok(), got.status().ToString());
  CHECK(got->status == 200);
  CHECK(got->body == "{\"method\":\"GET\",\"body\":null}");
  CHECK(got->headers.Get("x-herd-test") == "yes");
  CHECK(got->headers.Get("Content-Type") == "application/json");
  CHECK(got->ToStatus().ok());

  got = client->Request("POST", "/api/v1/clusters", R"({"name":"demo"})");
  REQUIRE(got.ok());
  CHECK(got->body == R"({"method":"POST","body":{"name":"demo"}})");

  REQUIRE(seen.size() == 2);
  const HttpRequest& get = seen.requests[0];
  CHECK(get.target == "/api/v1/clusters?all=1");
  CHECK(get.remote_address == "127.0.0.1");
  CHECK(get.remote_port != 0);
  CHECK(BearerToken(get.headers) == "tok-123");
  CHECK(get.headers.Get("AUTHORIZATION") == "Bearer tok-123");
  const HttpRequest& post = seen.requests[1];
  CHECK(post.method == "POST");
  CHECK(post.headers.Get("content-type") == "application/json");
  CHECK(post.body == R"({"name":"demo"})");

  // The name a certificate was issued for works as well as its IP address.
  auto by_name = Client(Url(running.port(), "https", "localhost"), certs.ca_file);
  got = by_name->Request("GET", "/x");
  REQUIRE_MESSAGE(got.ok(), got.status().ToString());
  CHECK(got->status == 200);
}

TEST_CASE("a handler answers later from another thread; errors map to HTTP and back") {
  Certs certs;
  std::vector<std::thread> workers;
  std::mutex mu;
  Running running(TlsOptions(certs, [&](HttpRequest request, std::shared_ptr<Responder> r) {
    std::lock_guard<std::mutex> lock(mu);
    workers.emplace_back([request = std::move(request), r] {
      std::this_thread::sleep_for(20ms);
      if (request.target == "/missing") {
        r->Respond(HttpError(NotFound("cluster 'x' does not exist")));
      } else if (request.target == "/nobody") {
        r->Respond(HttpError(Unauthenticated("no such token")));
      } else if (request.target == "/drop") {
        // Released without an answer: the listener answers 500.
      } else {
        r->Respond({200, "text/plain", "later", {}});
      }
    });
  }));
  auto client = Client(Url(running.port()), certs.ca_file);
  auto got = client->Request("GET", "/fine");
  REQUIRE(got.ok());
  CHECK(got->body == "later");
  CHECK(got->headers.Get("content-type") == "text/plain");

  got = client->Request("GET", "/missing");
  REQUIRE(got.ok());
  CHECK(got->status == 404);
  Status status = got->ToStatus();
  CHECK(status.code() == Code::kNotFound);
  CHECK(status.message() == "cluster 'x' does not exist");

  got = client->Request("GET", "/nobody");
  REQUIRE(got.ok());
  CHECK(got->status == 401);
  CHECK(got->headers.Get("www-authenticate") == "Bearer");
  CHECK(got->ToStatus().code() == Code::kPermissionDenied);

  got = client->Request("GET", "/drop");
  REQUIRE(got.ok());
  CHECK(got->status == 500);
  CHECK(got->ToStatus().code() == Code::kInternal);

  std::lock_guard<std::mutex> lock(mu);
  for (auto& t : workers) t.join();
}

TEST_CASE("an oversized body gets 413 and never reaches the handler") {
  Certs certs;
  Seen seen;
  HttpServerOptions o = TlsOptions(certs, [&](HttpRequest request, std::shared_ptr<Responder> r) {
    seen.Add(request);
    r->Respond({});
  });
  o.max_body_bytes = 4096;
  Running running(std::move(o));
  auto client = Client(Url(running.port()), certs.ca_file);
  std::string big = "\"" + std::string(2 << 20, 'x') + "\"";
  auto got = client->Request("POST", "/api/v1/jobs", big);
  REQUIRE_MESSAGE(got.ok(), got.status().ToString());
  CHECK(got->status == 413);
  CHECK(got->ToStatus().code() == Code::kInvalidArgument);
  CHECK(got->body.find("over the limit of 4096 bytes") != std::string::npos);
  // A body at the limit passes.
  got = client->Request("POST", "/api/v1/jobs", std::string(4096, ' '));
  REQUIRE(got.ok());
  CHECK(got->status == 200);
  CHECK(seen.size() == 1);
}

TEST_CASE("bad HTTP gets 400 and a closed connection; oversized headers 431; keep-alive works") {
  Seen seen;
  HttpServerOptions o;
  o.plain_http = true;
  o.max_header_bytes = 2048;
  o.handler = [&](HttpRequest request, std::shared_ptr<Responder> r) {
    seen.Add(request);
    r->Respond({200, "text/plain", "ok " + request.target, {}});
  };
  Running running(std::move(o));

  std::string garbage =
      RawExchange(running.port(), std::string("\x16\x03\x01\x02\x00garbage\r\n\r\n", 17));
  CHECK(garbage.rfind("HTTP/1.1 400", 0) == 0);
  CHECK(garbage.find("Connection: close") != std::string::npos);

  std::string no_version = RawExchange(running.port(), "GET /x\r\n\r\n");
  CHECK(no_version.rfind("HTTP/1.1 400", 0) == 0);

  std::string bad_length =
      RawExchange(running.port(), "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: -5\r\n\r\n");
  CHECK(bad_length.rfind("HTTP/1.1 400", 0) == 0);

  std::string huge =
      RawExchange(running.port(),
                  "GET /x HTTP/1.1\r\nHost: h\r\nX-Big: " + std::string(4096, 'a') + "\r\n\r\n");
  CHECK(huge.rfind("HTTP/1.1 431", 0) == 0);
  CHECK(seen.size() == 0);

  // Two requests on one connection, the second sent before the first was answered.
  std::string two = RawExchange(running.port(),
                                "GET /one HTTP/1.1\r\nHost: h\r\n\r\n"
                                "GET /two HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  CHECK(two.find("ok /one") != std::string::npos);
  CHECK(two.find("ok /two") != std::string::npos);
  CHECK(two.find("ok /one") < two.find("ok /two"));
  CHECK(seen.size() == 2);

  // The next request after a pipelined pair is read as itself. The pair's second request was
  // parsed while a read was already waiting for more bytes; the bytes that read brought must not
  // be mistaken for the first request's (a stale region of the parse buffer would answer "/one"
  // again here, or, for a request of another length, wait out the read timeout and say 408).
  {
    net::io_context io;
    tcp::socket socket(io);
    socket.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), running.port()));
    const std::string one = "GET /one HTTP/1.1\r\nHost: h\r\nX-Pad: 1234567890\r\n\r\n";
    const std::string six = "GET /six HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
    REQUIRE(one.size() == six.size());
    net::write(socket, net::buffer(one + "GET /two HTTP/1.1\r\nHost: h\r\n\r\n"));
    std::string answers;
    net::read_until(socket, net::dynamic_buffer(answers), "ok /two");
    net::write(socket, net::buffer(six));
    std::string last;
    boost::system::error_code ec;
    net::read(socket, net::dynamic_buffer(last), ec);  // to the close that /six asked for
    CHECK(last.find("ok /six") != std::string::npos);
    CHECK(last.find("ok /one") == std::string::npos);
    CHECK(seen.size() == 5);
  }

  // A client that waits for "100 Continue" before its body gets it.
  net::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), running.port()));
  net::write(socket, net::buffer(std::string("POST /upload HTTP/1.1\r\nHost: h\r\n"
                                             "Content-Length: 4\r\nExpect: 100-continue\r\n\r\n")));
  std::string interim;
  net::read_until(socket, net::dynamic_buffer(interim), "\r\n\r\n");
  CHECK(interim.rfind("HTTP/1.1 100 Continue\r\n", 0) == 0);
  CHECK(seen.size() == 5);
  net::write(socket, net::buffer(std::string("body")));
  std::string rest;
  net::read_until(socket, net::dynamic_buffer(rest), "ok /upload");
  CHECK(rest.find("HTTP/1.1 200 OK") != std::string::npos);
  CHECK(seen.size() == 6);
  CHECK(seen.requests[5].body == "body");
}

TEST_CASE("a stream of many chunks: read whole, or stopped early by the client (on_close fires)") {
  Certs certs;
  std::mutex mu;
  std::vector<std::thread> writers;
  std::promise<void> closed_seen;
  std::atomic<bool> stopped_by_close{false};
  Running running(TlsOptions(certs, [&](HttpRequest request, std::shared_ptr<Responder> r) {
    r->StartStream(200, "text/plain");
    bool endless = request.target == "/follow";
    if (endless) {
      r->OnClose([&] { closed_seen.set_value(); });
    }
    std::lock_guard<std::mutex> lock(mu);
    writers.emplace_back([r, endless, &stopped_by_close] {
      for (int i = 0; endless || i < 500; ++i) {
        if (!r->Write("line " + std::to_string(i) + "\n")) {
          stopped_by_close = r->Closed();
          return;
        }
        if (endless) std::this_thread::sleep_for(1ms);
        if (endless && i > 1000000) return;  // the client never stopped: the test fails below
      }
      r->End();
    });
  }));
  auto client = Client(Url(running.port()), certs.ca_file);

  std::string all;
  int pieces = 0;
  auto got = client->Stream("GET", "/logs", "", [&](std::string_view chunk) {
    all += chunk;
    ++pieces;
    return true;
  });
  REQUIRE_MESSAGE(got.ok(), got.status().ToString());
  CHECK(got->status == 200);
  CHECK(got->headers.Get("transfer-encoding") == "chunked");
  std::string want;
  for (int i = 0; i < 500; ++i) want += "line " + std::to_string(i) + "\n";
  CHECK(all == want);
  CHECK(pieces >= 1);

  std::string seen;
  got = client->Stream("GET", "/follow", "", [&](std::string_view chunk) {
    seen += chunk;
    return seen.size() < 200;
  });
  REQUIRE_MESSAGE(got.ok(), got.status().ToString());
  CHECK(seen.rfind("line 0\nline 1\n", 0) == 0);
  auto closed = closed_seen.get_future();
  REQUIRE(closed.wait_for(kWait) == std::future_status::ready);
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& t : writers) t.join();
    writers.clear();
  }
  CHECK(stopped_by_close.load());

  // The connection count went back down.
  auto until = std::chrono::steady_clock::now() + kWait;
  while (running.server().connections() != 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  CHECK(running.server().connections() == 0);
}

TEST_CASE("a whole stream handed over at once is read whole, request after request") {
  Certs certs;
  std::atomic<bool> again_refused{false};
  Running running(TlsOptions(certs, [&](HttpRequest request, std::shared_ptr<Responder> r) {
    const std::string n = request.target.substr(1);
    CHECK(r->StreamWhole(200, "text/plain", {"head " + n + "\n", "", "tail " + n + "\n"}));
    // The response is complete: neither a second whole stream nor a stream's start goes out.
    again_refused = !r->StreamWhole(200, "text/plain", {"again\n"});
    r->StartStream(500, "text/plain");
    CHECK_FALSE(r->Write("more\n"));
  }));
  auto client = Client(Url(running.port()), certs.ca_file);
  for (int i = 0; i < 3; ++i) {
    std::string all;
    auto got = client->Stream("GET", "/" + std::to_string(i), "", [&](std::string_view chunk) {
      all += chunk;
      return true;
    });
    REQUIRE_MESSAGE(got.ok(), got.status().ToString());
    CHECK(got->status == 200);
    CHECK(got->headers.Get("transfer-encoding") == "chunked");
    CHECK(got->headers.Get("content-type") == "text/plain");
    CHECK(all == "head " + std::to_string(i) + "\ntail " + std::to_string(i) + "\n");
    CHECK(again_refused.load());
  }
  // Each request was its own connection (the client asks to close): all are closed again.
  auto until = std::chrono::steady_clock::now() + kWait;
  while (running.server().connections() != 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  CHECK(running.server().connections() == 0);
}

TEST_CASE("a client that does not read a stream is dropped past the queue limit") {
  std::promise<void> closed_seen;
  std::thread writer;
  std::atomic<bool> write_refused{false};
  HttpServerOptions o;
  o.plain_http = true;
  o.max_stream_queued_bytes = 64 << 10;
  o.handler = [&](HttpRequest, std::shared_ptr<Responder> r) {
    r->StartStream(200, "application/octet-stream");
    r->OnClose([&] { closed_seen.set_value(); });
    writer = std::thread([r, &write_refused] {
      std::string chunk(16 << 10, 'x');
      // Far more than the socket buffers hold: 1 GiB at most.
      for (int i = 0; i < 65536; ++i) {
        if (!r->Write(chunk)) {
          write_refused = true;
          return;
        }
        while (r->queued_bytes() > (256 << 10) && !r->Closed()) std::this_thread::sleep_for(1ms);
      }
    });
  };
  Running running(std::move(o));
  net::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), running.port()));
  net::write(socket, net::buffer(std::string("GET /flood HTTP/1.1\r\nHost: h\r\n\r\n")));
  auto closed = closed_seen.get_future();
  bool dropped = closed.wait_for(60s) == std::future_status::ready;
  socket.close();
  if (writer.joinable()) writer.join();
  CHECK(dropped);
  CHECK(write_refused.load());
}

TEST_CASE("a slow request gets 408, a throwing handler 500, and Stop closes open streams") {
  std::promise<std::shared_ptr<Responder>> streaming;
  std::promise<void> closed_seen;
  std::mutex held_mu;
  std::vector<std::shared_ptr<Responder>> held;
  HttpServerOptions o;
  o.plain_http = true;
  o.request_read_timeout = 100ms;
  o.handler = [&](HttpRequest request, std::shared_ptr<Responder> r) {
    if (request.target == "/throw") throw std::runtime_error("boom");
    if (request.target == "/hang") {
      std::lock_guard<std::mutex> lock(held_mu);
      held.push_back(r);  // answered never: the client gives up
      return;
    }
    if (request.target == "/plain") return r->Respond({200, "text/plain", "plain ok", {}});
    if (request.target == "/badstatus") return r->Respond({1000, "text/plain", "x", {}});
    if (request.target == "/badheader") {
      return r->Respond(
          {200, "text/plain", "x", {{"X-Evil", "a\r\nSet-Cookie: s=1"}, {"X-Ok", "1"}}});
    }
    r->StartStream(200, "text/plain");
    r->OnClose([&] { closed_seen.set_value(); });
    streaming.set_value(r);
  };
  Running running(std::move(o));

  // Half a request, then nothing: the server gives up and says so.
  std::string slow = RawExchange(running.port(), "GET /x HTTP/1.1\r\nHost:");
  CHECK(slow.rfind("HTTP/1.1 408", 0) == 0);
  CHECK(slow.find("DEADLINE_EXCEEDED") != std::string::npos);

  std::string thrown =
      RawExchange(running.port(), "GET /throw HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  CHECK(thrown.rfind("HTTP/1.1 500", 0) == 0);
  // The client over plain HTTP to loopback, and its deadline.
  auto client = Client(Url(running.port(), "http"), "");
  auto plain = client->Request("GET", "/plain");
  REQUIRE_MESSAGE(plain.ok(), plain.status().ToString());
  CHECK(plain->body == "plain ok");
  auto hung = client->Request("GET", "/hang", "", 300ms);
  REQUIRE_FALSE(hung.ok());
  CHECK(hung.status().code() == Code::kDeadlineExceeded);
  CHECK(hung.status().message().find("no answer within 300 ms") != std::string::npos);
  {
    std::lock_guard<std::mutex> lock(held_mu);
    REQUIRE(held.size() == 1);
    held.clear();  // a late 500 to a closed connection goes nowhere
  }

  // A handler's invalid status is a 500; a header that would split the response is dropped.
  std::string bad_status = RawExchange(
      running.port(), "GET /badstatus HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  CHECK(bad_status.rfind("HTTP/1.1 500", 0) == 0);
  std::string bad_header = RawExchange(
      running.port(), "GET /badheader HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  CHECK(bad_header.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(bad_header.find("X-Ok: 1") != std::string::npos);
  CHECK(bad_header.find("Set-Cookie") == std::string::npos);

  net::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), running.port()));
  net::write(socket, net::buffer(std::string("GET /follow HTTP/1.1\r\nHost: h\r\n\r\n")));
  auto responder_future = streaming.get_future();
  REQUIRE(responder_future.wait_for(kWait) == std::future_status::ready);
  std::shared_ptr<Responder> responder = responder_future.get();
  CHECK(responder->Write("first\n"));
  // The client has the head and the first chunk before the server stops (Stop drops what is
  // still queued).
  std::string got;
  net::read_until(socket, net::dynamic_buffer(got), "first\n");
  CHECK_FALSE(responder->Closed());
  running.server().Stop();
  auto closed = closed_seen.get_future();
  REQUIRE(closed.wait_for(kWait) == std::future_status::ready);
  CHECK(responder->Closed());
  CHECK_FALSE(responder->Write("after\n"));
  // Then the end of the connection, without the last chunk of a complete stream.
  boost::system::error_code ec;
  net::read(socket, net::dynamic_buffer(got), ec);
  CHECK(got.find("200 OK") != std::string::npos);
  CHECK(got.find("after") == std::string::npos);
  CHECK(got.find("\r\n0\r\n\r\n") == std::string::npos);  // not ended as if complete
}

TEST_CASE("over max_connections a connection gets 503") {
  Certs certs;
  HttpServerOptions o = TlsOptions(certs, [](HttpRequest, std::shared_ptr<Responder> r) {
    r->Respond({200, "text/plain", "ok", {}});
  });
  o.max_connections = 1;
  Running running(std::move(o));
  net::io_context io;
  tcp::socket idle(io);
  idle.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), running.port()));
  auto until = std::chrono::steady_clock::now() + kWait;
  while (running.server().connections() < 1 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(5ms);
  }
  REQUIRE(running.server().connections() == 1);
  auto client = Client(Url(running.port()), certs.ca_file);
  auto got = client->Request("GET", "/x");
  REQUIRE_MESSAGE(got.ok(), got.status().ToString());
  CHECK(got->status == 503);
  CHECK(got->ToStatus().code() == Code::kUnavailable);
  idle.close();
  // Once the first is gone, a new one is served.
  until = std::chrono::steady_clock::now() + kWait;
  while (running.server().connections() != 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(5ms);
  }
  got = client->Request("GET", "/x");
  REQUIRE(got.ok());
  CHECK(got->status == 200);
}

TEST_CASE("the client refuses a server its CA did not sign, an expired one and another host") {
  Certs certs;
  auto ok_handler = [](HttpRequest, std::shared_ptr<Responder> r) { r->Respond({}); };
  Running running(TlsOptions(certs, ok_handler));

  Certs other;  // another CA
  TempDir logdir("herd-api-log");
  {
    StderrCapture log(logdir / "stderr");
    auto got = Client(Url(running.port()), other.ca_file)->Request("GET", "/x");
    REQUIRE_FALSE(got.ok());
    CHECK(got.status().code() == Code::kPermissionDenied);
    CHECK(got.status().message().find("certificate of " + Url(running.port()) +
                                      " was not accepted") != std::string::npos);
    CHECK(got.status().message().find("issuer certificate") != std::string::npos);
    // The server logs why the handshake failed.
    CHECK(log.WaitFor("unknown ca"));
    CHECK(log.Text().find("TLS handshake with 127.0.0.1:") != std::string::npos);
  }

  Certs expired({"127.0.0.1"}, 1, -3 * 86400);
  Running old(TlsOptions(expired, ok_handler));
  auto got = Client(Url(old.port()), expired.ca_file)->Request("GET", "/x");
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kPermissionDenied);
  CHECK(got.status().message().find("expired") != std::string::npos);

  Certs elsewhere({"127.0.0.2"});
  Running wrong_host(TlsOptions(elsewhere, ok_handler));
  got = Client(Url(wrong_host.port()), elsewhere.ca_file)->Request("GET", "/x");
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kPermissionDenied);
  CHECK(got.status().message().find("IP address mismatch") != std::string::npos);

  // Plain HTTP to a TLS port: a handshake failure, not a hang.
  got = Client(Url(running.port(), "http"), "")->Request("GET", "/x", "", 5s);
  REQUIRE_FALSE(got.ok());
}

TEST_CASE("connection refused names the endpoint") {
  uint16_t port = 0;
  {
    HttpServerOptions o;
    o.plain_http = true;
    o.handler = [](HttpRequest, std::shared_ptr<Responder> r) { r->Respond({}); };
    Running running(std::move(o));
    port = running.port();
  }
  auto got = Client(Url(port), "")->Request("GET", "/x");
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kUnavailable);
  CHECK(got.status().message().find("cannot connect to https://127.0.0.1:" +
                                    std::to_string(port)) != std::string::npos);
  CHECK(got.status().message().find("refused") != std::string::npos);
}

TEST_CASE("plain HTTP only on loopback; bad options are refused") {
  net::io_context io;
  auto handler = [](HttpRequest, std::shared_ptr<Responder> r) { r->Respond({}); };
  HttpServerOptions o;
  o.plain_http = true;
  o.handler = handler;
  for (const char* host : {"0.0.0.0", "10.1.2.3", "::", "192.168.0.1"}) {
    o.host = host;
    auto server = ListenHttp(io, o);
    REQUIRE_FALSE(server.ok());
    CHECK(server.status().code() == Code::kInvalidArgument);
    CHECK(server.status().message().find("loopback") != std::string::npos);
  }
  CHECK(IsLoopbackAddress("127.0.0.1"));
  CHECK(IsLoopbackAddress("127.1.2.3"));
  CHECK(IsLoopbackAddress("::1"));
  CHECK(IsLoopbackAddress("::ffff:127.0.0.1"));
  CHECK_FALSE(IsLoopbackAddress("localhost"));
  CHECK_FALSE(IsLoopbackAddress("128.0.0.1"));
  CHECK_FALSE(IsLoopbackAddress("::ffff:10.0.0.1"));

  HttpServerOptions tls;
  tls.handler = handler;
  CHECK(ListenHttp(io, tls).status().code() == Code::kInvalidArgument);  // no certificate
  Certs certs;
  tls.cert_file = certs.cert_file;
  tls.key_file = certs.dir.Write("other.key", tls::CreateCa("x").value().key);
  CHECK(ListenHttp(io, tls).status().code() == Code::kInvalidArgument);  // key of another
  tls.key_file = certs.key_file;
  tls.handler = nullptr;
  CHECK(ListenHttp(io, tls).status().code() == Code::kInvalidArgument);  // no handler

  for (const char* url : {"http://10.0.0.1:80", "http://localhost:8080", "ftp://127.0.0.1:1",
                          "https://h:1/api", "https://", "127.0.0.1:443"}) {
    auto client = ApiClient::Create({url, "", ""});
    CHECK_MESSAGE(client.status().code() == Code::kInvalidArgument, url);
  }
  CHECK(ApiClient::Create({"https://127.0.0.1:1", "/nonexistent/ca.crt", ""}).status().code() ==
        Code::kInvalidArgument);
  CHECK(ApiClient::Create({"https://[::1]:8443/", "", ""}).ok());
  CHECK(ApiClient::Create({"https://api.example.com", "", ""}).ok());
  CHECK(ApiClient::Create({"http://127.0.0.1", "", ""}).ok());
}

}  // namespace
}  // namespace herd::api_http
