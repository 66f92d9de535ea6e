// api_load: the HTTP clients of bench/api_bench.py's section (b) as one native process, so that
// the figures measure the server and not the clients' interpreter: the clients run on the
// server's own machine, so what they spend is taken from the server (bench/README.md has the
// figures). Same protocol as the Python SDK and the Python clients: one kept
// HTTPS connection per client (verified against the server's CA), POST /api/v1/run
// {"args": [...]} with the user's bearer token, the framed answer (`<tag> <len>\n<bytes>`) read to
// its exit frame.
//
// stdin: {"info": {"endpoint": "https://IP:PORT", "ca_cert": PATH}, "duration": SECONDS,
//         "clients": [[TOKEN, CLUSTER, SEED], ...]}
// stdout: {"lat": {"status": [ms, ...], "queue": [...], "logs": [...]},
//          "errors": [[OP, CODE or null, [LAST STDERR LINE]], ...]}
// Each client is a thread: it connects and reads each command once (untimed), then every client
// starts its timed loop at once and reads, until the deadline, one of `status`, `queue CLUSTER`,
// `logs CLUSTER 1 --no-follow` chosen at random (seeded), each timed from the request's first
// byte to the exit frame. A failed exchange closes the connection; the next read dials again.
#include <sys/socket.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/json.hpp>

#include <atomic>
#include <barrier>
#include <chrono>
#include <csignal>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
namespace json = boost::json;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr const char* kOps[] = {"status", "queue", "logs"};
// Bounds one exchange's socket reads and writes (the Python clients' COMMAND_TIMEOUT).
constexpr int kExchangeTimeoutSeconds = 120;

struct Answer {
  std::optional<int> code;  // the exit frame's code; empty: no answer (connection, HTTP error)
  std::string last_err;     // the last line of the command's stderr, or what failed
};

// What one read's framed body says: exit code and the last stderr line.
Answer ParseFrames(const std::string& body) {
  Answer a;
  std::string err;
  std::size_t i = 0;
  while (i < body.size()) {
    const std::size_t nl = body.find('\n', i);
    const std::size_t sp = body.find(' ', i);
    if (nl == std::string::npos || sp == std::string::npos || sp > nl) break;
    const std::string tag = body.substr(i, sp - i);
    const std::size_t n = std::stoul(body.substr(sp + 1, nl - sp - 1));
    const std::string payload = body.substr(nl + 1, n);
    i = nl + 1 + n;
    if (tag == "E") err += payload;
    if (tag == "X") a.code = std::stoi(payload);
  }
  while (!err.empty() && err.back() == '\n') err.pop_back();
  const std::size_t last = err.rfind('\n');
  a.last_err = last == std::string::npos ? err : err.substr(last + 1);
  if (!a.code && a.last_err.empty()) a.last_err = "answer without an exit frame";
  return a;
}

class Client {
 public:
  Client(ssl::context& tls, std::string host, std::string port, std::string token)
      : tls_(tls), host_(std::move(host)), port_(std::move(port)), token_(std::move(token)) {}

  Answer Run(const std::vector<std::string>& args) {
    json::object body;
    json::array a;
    for (const auto& s : args) a.emplace_back(s);
    body["args"] = std::move(a);
    try {
      if (!stream_) Connect();
      http::request<http::string_body> req{http::verb::post, "/api/v1/run", 11};
      req.set(http::field::host, host_);
      req.set(http::field::authorization, "Bearer " + token_);
      req.set(http::field::content_type, "application/json");
      req.keep_alive(true);
      req.body() = json::serialize(body);
      req.prepare_payload();
      SetTimeouts();
      http::write(*stream_, req);
      http::response_parser<http::string_body> parser;
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());
      http::read(*stream_, buffer_, parser);
      http::response<http::string_body> res = parser.release();
      if (!res.keep_alive()) Close();
      if (res.result_int() != 200) {
        Answer bad;
        bad.code = static_cast<int>(res.result_int());
        bad.last_err = res.body().substr(0, 200);
        return bad;
      }
      return ParseFrames(res.body());
    } catch (const std::exception& e) {
      Close();
      return Answer{std::nullopt, e.what()};
    }
  }

 private:
  void Connect() {
    tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(host_, port_);
    stream_ = std::make_unique<ssl::stream<tcp::socket>>(io_, tls_);
    SSL_set_tlsext_host_name(stream_->native_handle(), host_.c_str());
    // The server's certificate names its IP address (or host) in subjectAltName.
    stream_->set_verify_callback(ssl::host_name_verification(host_));
    net::connect(stream_->next_layer(), endpoints);
    stream_->next_layer().set_option(tcp::no_delay(true));
    SetTimeouts();
    stream_->handshake(ssl::stream_base::client);
    buffer_.clear();
  }

  void SetTimeouts() {
    timeval tv{kExchangeTimeoutSeconds, 0};
    const int fd = stream_->next_layer().native_handle();
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }

  void Close() {
    if (stream_) {
      beast::error_code ignored;
      stream_->next_layer().close(ignored);
    }
    stream_.reset();
    buffer_.clear();
  }

  net::io_context io_;
  ssl::context& tls_;
  std::string host_, port_, token_;
  std::unique_ptr<ssl::stream<tcp::socket>> stream_;
  beast::flat_buffer buffer_;
};

std::atomic<bool> g_stop{false};

}  // namespace

int main() {
  std::signal(SIGTERM, [](int) { g_stop = true; });
  std::signal(SIGPIPE, SIG_IGN);
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  json::object spec;
  std::string host, port;
  try {
    spec = json::parse(input).as_object();
    const std::string endpoint(spec.at("info").at("endpoint").as_string());
    // https://HOST:PORT (the bench's server listens on a loopback IP and port).
    const std::string rest = endpoint.substr(endpoint.find("://") + 3);
    const std::size_t colon = rest.rfind(':');
    if (endpoint.rfind("https://", 0) != 0 || colon == std::string::npos) {
      std::cerr << "api_load: the endpoint must be https://HOST:PORT, not " << endpoint << "\n";
      return 2;
    }
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    while (!port.empty() && port.back() == '/') port.pop_back();
  } catch (const std::exception& e) {
    std::cerr << "api_load: bad spec on stdin: " << e.what() << "\n";
    return 2;
  }
  ssl::context tls(ssl::context::tls_client);
  tls.set_verify_mode(ssl::verify_peer);
  try {
    tls.load_verify_file(std::string(spec.at("info").at("ca_cert").as_string()));
  } catch (const std::exception& e) {
    std::cerr << "api_load: cannot load the CA: " << e.what() << "\n";
    return 2;
  }
  const double duration = spec.at("duration").to_number<double>();
  const json::array& clients = spec.at("clients").as_array();

  std::mutex lock;
  std::vector<double> lat[3];
  json::array errors;
  Clock::time_point deadline;
  // Every client connected and read once (warmed), then the deadline is set and all start (go).
  std::barrier warmed(static_cast<std::ptrdiff_t>(clients.size() + 1));
  std::barrier go(static_cast<std::ptrdiff_t>(clients.size() + 1));
  std::vector<std::thread> threads;
  for (const auto& c : clients) {
    const auto& arr = c.as_array();
    std::string token(arr.at(0).as_string()), cluster(arr.at(1).as_string());
    const auto seed = static_cast<std::uint32_t>(arr.at(2).to_number<std::int64_t>());
    threads.emplace_back([&, token, cluster, seed] {
      Client client(tls, host, port, token);
      // Connect and read each command once, untimed: the timed loop starts with the user's warm
      // workers for all three already started (a worker's start is once per idle period).
      client.Run({"status"});
      client.Run({"queue", cluster});
      client.Run({"logs", cluster, "1", "--no-follow"});
      warmed.arrive_and_wait();
      go.arrive_and_wait();
      std::mt19937 rnd(seed);
      std::uniform_int_distribution<int> pick(0, 2);
      std::vector<double> mine[3];
      json::array my_errors;
      while (Clock::now() < deadline && !g_stop) {
        const int op = pick(rnd);
        std::vector<std::string> args =
            op == 0   ? std::vector<std::string>{"status"}
            : op == 1 ? std::vector<std::string>{"queue", cluster}
                      : std::vector<std::string>{"logs", cluster, "1", "--no-follow"};
        const auto t0 = Clock::now();
        Answer a = client.Run(args);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (a.code && *a.code == 0) {
          mine[op].push_back(ms);
        } else {
          json::array e;
          e.emplace_back(kOps[op]);
          if (a.code) {
            e.emplace_back(*a.code);
          } else {
            e.emplace_back(nullptr);
          }
          e.emplace_back(json::array{json::value(a.last_err)});
          my_errors.emplace_back(std::move(e));
        }
      }
      std::lock_guard<std::mutex> g(lock);
      for (int k = 0; k < 3; ++k) lat[k].insert(lat[k].end(), mine[k].begin(), mine[k].end());
      for (auto& e : my_errors) errors.emplace_back(std::move(e));
    });
  }
  warmed.arrive_and_wait();
  deadline = Clock::now() +
             std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration));
  go.arrive_and_wait();
  for (auto& t : threads) t.join();
  json::object out, by_op;
  for (int k = 0; k < 3; ++k) {
    json::array v;
    for (double ms : lat[k]) v.emplace_back(ms);
    by_op[kOps[k]] = std::move(v);
  }
  out["lat"] = std::move(by_op);
  out["errors"] = std::move(errors);
  std::cout << json::serialize(out);
  return 0;
}
