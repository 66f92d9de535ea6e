// The CLI's mux (controller/core/mux.hpp) and its framing (shared/transport/framed_socket.hpp):
// real unix sockets, the head replaced by fake connections whose dials the test completes.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "controller/core/mux.hpp"
#include "herd/v1/client.pb.h"
#include "shared/common/limits.hpp"
#include "shared/proto/frame.hpp"
#include "shared/transport/framed_socket.hpp"
#include "tests/fakes/fake_connection.hpp"

namespace herd::controller {
namespace {

namespace fs = std::filesystem;
namespace net = boost::asio;
using local = net::local::stream_protocol;
using namespace std::chrono_literals;

// Polls cond, running io (when given) meanwhile; false after 10 s.
template <typename F>
bool WaitFor(F cond, net::io_context* io = nullptr) {
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (io) {
      io->restart();
      io->run_for(5ms);
    } else {
      std::this_thread::sleep_for(2ms);
    }
  }
  return true;
}

// What one end of a framed connection received.
struct Inbox {
  std::mutex mu;
  std::vector<std::string> messages;
  bool closed = false;
  Status why;
  transport::Handlers Handlers() {
    transport::Handlers h;
    h.on_message = [this](const ConnPtr&, std::string m) {
      std::lock_guard<std::mutex> lock(mu);
      messages.push_back(std::move(m));
    };
    h.on_close = [this](const ConnPtr&, const Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      closed = true;
      why = s;
    };
    return h;
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return messages.size();
  }
  bool is_closed() {
    std::lock_guard<std::mutex> lock(mu);
    return closed;
  }
};

TEST_CASE("framed socket: messages in order, empty and large ones, clean close") {
  net::io_context io;
  local::socket a(io), b(io);
  net::local::connect_pair(a, b);
  Inbox in_a, in_b;
  auto ca = transport::StartFramed(std::move(a), in_a.Handlers(), "a");
  auto cb = transport::StartFramed(std::move(b), in_b.Handlers(), "b");
  std::string big(1 << 20, 'x');
  ca->Send("one");
  ca->Send("");
  ca->Send(big);
  cb->Send("back");
  REQUIRE(WaitFor([&] { return in_b.size() == 3 && in_a.size() == 1; }, &io));
  CHECK(in_b.messages[0] == "one");
  CHECK(in_b.messages[1].empty());
  CHECK(in_b.messages[2] == big);
  CHECK(in_a.messages[0] == "back");
  ca->Send("last");
  ca->Close();  // flushes "last" first
  REQUIRE(WaitFor([&] { return in_b.is_closed() && in_a.is_closed(); }, &io));
  CHECK(in_b.messages.back() == "last");
  CHECK(in_b.why.ok());
  CHECK(in_a.why.ok());
}

TEST_CASE("framed socket: an oversized length or a cut message ends the connection") {
  net::io_context io;
  {
    local::socket a(io), b(io);
    net::local::connect_pair(a, b);
    Inbox in_b;
    auto cb = transport::StartFramed(std::move(b), in_b.Handlers(), "b");
    std::size_t n = limits::kMaxFrameBytes + 1;
    unsigned char h[4] = {static_cast<unsigned char>(n >> 24), static_cast<unsigned char>(n >> 16),
                          static_cast<unsigned char>(n >> 8), static_cast<unsigned char>(n)};
    net::write(a, net::buffer(h, 4));
    REQUIRE(WaitFor([&] { return in_b.is_closed(); }, &io));
    CHECK(in_b.why.code() == Code::kInvalidArgument);
    CHECK(in_b.size() == 0);
  }
  {
    local::socket a(io), b(io);
    net::local::connect_pair(a, b);
    Inbox in_b;
    auto cb = transport::StartFramed(std::move(b), in_b.Handlers(), "b");
    std::string cut = transport::EncodeLengthPrefixed("hello").substr(0, 6);
    net::write(a, net::buffer(cut));
    a.close();
    REQUIRE(WaitFor([&] { return in_b.is_closed(); }, &io));
    CHECK(in_b.why.code() == Code::kUnavailable);
  }
  {
    local::socket a(io), b(io);
    net::local::connect_pair(a, b);
    CHECK(transport::WriteFrameSync(a, "sync", 1s).ok());
    auto got = transport::ReadFrameSync(b, 1s);
    REQUIRE(got.ok());
    CHECK(*got == "sync");
    auto none = transport::ReadFrameSync(b, 50ms);
    CHECK(none.status().code() == Code::kDeadlineExceeded);
  }
}

using testing::FakeHead;

// A mux on a real socket in a temp dir, run on its own thread, with dials the test completes.
class MuxFixture {
 public:
  explicit MuxFixture(std::chrono::milliseconds idle = 60s) {
    std::string tmpl = (fs::temp_directory_path() / "herd-mux-test-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    dir_ = tmpl;
    MuxOptions o;
    o.socket_path = socket();
    o.head = "127.0.0.1:4242";
    o.certs_dir = dir_ + "/certs";
    o.certs_stamp = CertsStamp(o.certs_dir);
    o.idle_exit = idle;
    o.dial = [this](transport::Handlers h, std::function<void(Result<ConnPtr>)> done) {
      std::lock_guard<std::mutex> lock(mu_);
      dials_.push_back({std::move(h), std::move(done)});
    };
    mux_ = std::make_unique<Mux>(io_, std::move(o));
    mux_->set_on_exit([this](const std::string& why) {
      std::lock_guard<std::mutex> lock(mu_);
      exit_why_ = why;
      exited_ = true;
    });
    REQUIRE(mux_->Start().ok());
    thread_ = std::thread([this] { io_.run(); });
  }
  ~MuxFixture() {
    net::post(io_, [this] {
      mux_->Shutdown("test over");
      guard_.reset();
    });
    thread_.join();
    mux_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string socket() const { return dir_ + "/mux.sock"; }
  std::size_t pending_dials() {
    std::lock_guard<std::mutex> lock(mu_);
    return dials_.size();
  }
  // Completes the oldest dial with a new fake head (or with an error).
  std::shared_ptr<FakeHead> CompleteDial(bool ok = true) {
    REQUIRE(WaitFor([&] { return pending_dials() > 0; }));
    std::pair<transport::Handlers, std::function<void(Result<ConnPtr>)>> d;
    {
      std::lock_guard<std::mutex> lock(mu_);
      d = std::move(dials_.front());
      dials_.erase(dials_.begin());
    }
    std::shared_ptr<FakeHead> head;
    if (ok) {
      head = std::make_shared<FakeHead>(io_, std::move(d.first));
      head->self_ = head;
    }
    net::post(io_, [head, done = std::move(d.second)] {
      if (head) {
        done(ConnPtr(head));
      } else {
        done(Unavailable("connection refused"));
      }
    });
    return head;
  }
  bool exited() {
    std::lock_guard<std::mutex> lock(mu_);
    return exited_;
  }
  // Commands the mux holds until its next dial completes (read on the mux's thread).
  std::size_t waiting() {
    std::promise<std::size_t> p;
    auto f = p.get_future();
    net::post(io_, [&] { p.set_value(exited() ? 0 : mux_->waiting()); });
    return f.get();
  }
  int reused() {
    std::promise<int> p;
    auto f = p.get_future();
    net::post(io_, [&] { p.set_value(mux_->reused()); });
    return f.get();
  }
  std::string exit_why() {
    std::lock_guard<std::mutex> lock(mu_);
    return exit_why_;
  }
  std::string dir_;

 private:
  net::io_context io_;
  net::executor_work_guard<net::io_context::executor_type> guard_{io_.get_executor()};
  std::unique_ptr<Mux> mux_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::pair<transport::Handlers, std::function<void(Result<ConnPtr>)>>> dials_;
  bool exited_ = false;
  std::string exit_why_;
};

TEST_CASE("mux: hands out the ready head connection and relays both ways; close ends it") {
  MuxFixture f;
  struct stat st {};
  REQUIRE(::stat(f.socket().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  int pid = 0;
  std::ifstream(f.socket() + ".pid") >> pid;
  CHECK(pid == ::getpid());
  auto first = f.CompleteDial();  // the spare dialled at start

  net::io_context cli;
  auto socket = ConnectMux(cli, f.socket(), "127.0.0.1:4242", f.dir_ + "/certs");
  REQUIRE(socket.ok());
  Inbox in;
  auto conn = transport::StartFramed(std::move(socket).value(), in.Handlers(), "cli");
  conn->Send("request 1");
  REQUIRE(WaitFor([&] { return first->sent().size() == 1; }, &cli));
  CHECK(first->sent()[0] == "request 1");
  first->Answer("reply 1", first);
  REQUIRE(WaitFor([&] { return in.size() == 1; }, &cli));
  CHECK(in.messages[0] == "reply 1");

  // No spare is dialled while a command is relayed (the head would do the handshake during its
  // requests); a second command meanwhile waits for a dial of its own.
  CHECK(f.pending_dials() == 0);
  std::shared_ptr<FakeHead> second;
  std::thread completer([&] { second = f.CompleteDial(); });
  auto socket2 = ConnectMux(cli, f.socket(), "127.0.0.1:4242", f.dir_ + "/certs");
  completer.join();
  REQUIRE(socket2.ok());
  Inbox in2;
  auto conn2 = transport::StartFramed(std::move(socket2).value(), in2.Handlers(), "cli2");
  conn2->Send("request 2");
  REQUIRE(WaitFor([&] { return second->sent().size() == 1; }, &cli));
  CHECK(first->sent().size() == 1);

  // The command closes: its head connection closes; the other stays.
  conn->Close();
  REQUIRE(WaitFor([&] { return first->closed(); }, &cli));
  CHECK_FALSE(second->closed());
  // The head closes: the command sees its connection end.
  second->End();
  REQUIRE(WaitFor([&] { return in2.is_closed(); }, &cli));
  CHECK_FALSE(f.exited());
  // No command relayed any more: the spare is dialled again.
  REQUIRE(WaitFor([&] { return f.pending_dials() == 1; }));
}

// A ClientToHead / HeadToClient as the CLI and the head send them.
std::string Request(uint64_t id, bool subscribe) {
  herd::v1::ClientToHead m;
  m.set_request_id(id);
  if (subscribe) {
    m.mutable_subscribe()->set_follow(true);
  } else {
    m.mutable_queue();
  }
  return proto::Encode(std::move(m));
}
std::string Reply(uint64_t id, bool end_of_stream) {
  herd::v1::HeadToClient m;
  m.set_request_id(id);
  if (end_of_stream) {
    m.mutable_job_status()->set_end_of_stream(true);
  } else {
    m.mutable_queue_reply();
  }
  return proto::Encode(std::move(m));
}

TEST_CASE("mux: a head connection with every request answered serves the next command") {
  MuxFixture f;
  auto head = f.CompleteDial();
  net::io_context cli;
  auto connect = [&](Inbox& in) {
    auto socket = ConnectMux(cli, f.socket(), "127.0.0.1:4242", f.dir_ + "/certs");
    REQUIRE(socket.ok());
    return transport::StartFramed(std::move(socket).value(), in.Handlers(), "cli");
  };
  // A queue, then a followed stream to its end: nothing of this command is left on the head.
  Inbox in1;
  auto c1 = connect(in1);
  c1->Send(Request(1, false));
  c1->Send(Request(2, true));
  REQUIRE(WaitFor([&] { return head->sent().size() == 2; }, &cli));
  head->Answer(Reply(1, false), head);
  head->Answer(Reply(2, true), head);
  REQUIRE(WaitFor([&] { return in1.size() == 2; }, &cli));
  c1->Close();
  REQUIRE(WaitFor([&] { return f.reused() == 1; }, &cli));
  // The next command gets the same connection, and no dial was made.
  Inbox in2;
  auto c2 = connect(in2);
  c2->Send(Request(1, true));
  REQUIRE(WaitFor([&] { return head->sent().size() == 3; }, &cli));
  CHECK_FALSE(head->closed());
  CHECK(f.pending_dials() == 0);
  // Closed while its stream is open (Ctrl-C): that head session must end with it.
  c2->Close();
  REQUIRE(WaitFor([&] { return head->closed(); }, &cli));
  REQUIRE(WaitFor([&] { return f.pending_dials() == 1; }));
}

TEST_CASE("mux: a command that arrives before a connection is ready waits for the dial") {
  MuxFixture f;
  f.CompleteDial();  // the spare, taken by a first command
  net::io_context cli;
  auto first = ConnectMux(cli, f.socket(), "127.0.0.1:4242", f.dir_ + "/certs");
  REQUIRE(first.ok());
  std::thread completer([&] {
    CHECK(WaitFor([&] { return f.waiting() == 1; }));  // the second command's hello is in
    f.CompleteDial();
  });
  auto socket = ConnectMux(cli, f.socket(), "127.0.0.1:4242", f.dir_ + "/certs");
  completer.join();
  CHECK(socket.ok());
}

TEST_CASE("mux: a stale endpoint or a failed dial refuses the command and ends the mux") {
  SUBCASE("stale") {
    MuxFixture f;
    f.CompleteDial();
    net::io_context cli;
    auto socket = ConnectMux(cli, f.socket(), "127.0.0.1:5555", f.dir_ + "/certs");
    REQUIRE_FALSE(socket.ok());
    CHECK(socket.status().message().find("stale mux") != std::string::npos);
    REQUIRE(WaitFor([&] { return f.exited(); }));
    CHECK_FALSE(fs::exists(f.socket()));
  }
  SUBCASE("certificates replaced since the mux loaded them") {
    MuxFixture f;
    f.CompleteDial();
    fs::create_directories(f.dir_ + "/certs");
    std::ofstream(f.dir_ + "/certs/client.crt") << "another certificate\n";
    net::io_context cli;
    auto socket = ConnectMux(cli, f.socket(), "127.0.0.1:4242", f.dir_ + "/certs");
    REQUIRE_FALSE(socket.ok());
    CHECK(socket.status().message().find("certificates replaced") != std::string::npos);
    REQUIRE(WaitFor([&] { return f.exited(); }));
  }
  SUBCASE("head unreachable") {
    MuxFixture f;
    std::thread completer([&] {
      CHECK(WaitFor([&] { return f.waiting() == 1; }));  // the command's hello is in
      f.CompleteDial(false);
    });
    net::io_context cli;
    auto socket = ConnectMux(cli, f.socket(), "127.0.0.1:4242", f.dir_ + "/certs");
    completer.join();
    REQUIRE_FALSE(socket.ok());
    CHECK(socket.status().message().find("cannot reach the head at 127.0.0.1:4242") !=
          std::string::npos);
    REQUIRE(WaitFor([&] { return f.exited(); }));
  }
}

TEST_CASE("mux: one per socket; idle exit; a dead mux's socket is refused, then replaced") {
  MuxFixture f(300ms);
  net::io_context io;
  MuxOptions o;
  o.socket_path = f.socket();
  o.head = "127.0.0.1:4242";
  o.dial = [](transport::Handlers, std::function<void(Result<ConnPtr>)>) {};
  Mux second(io, o);
  CHECK(second.Start().code() == Code::kAlreadyExists);
  REQUIRE(WaitFor([&] { return f.exited(); }));
  CHECK(f.exit_why().find("idle") != std::string::npos);
  CHECK_FALSE(fs::exists(f.socket()));
  // A socket file with nobody behind it (a SIGKILLed mux): connecting fails at once.
  {
    net::io_context cli;
    local::acceptor dead(cli, local::endpoint(f.socket()));
  }
  net::io_context cli;
  auto socket = ConnectMux(cli, f.socket(), "127.0.0.1:4242", "x");
  CHECK(socket.status().code() == Code::kUnavailable);
  Mux third(io, o);
  CHECK(third.Start().ok());  // takes the lock, replaces the dead socket
  third.Shutdown("done");
}

}  // namespace
}  // namespace herd::controller
